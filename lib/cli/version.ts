/**
 * edgeproxy's version, taken from package.json at build time: the JSON import is bundled into the
 * compiled executable, so the binary knows its version without reading any file.
 */
import pkg from "../../package.json" with { type: "json" };

/** The package version, e.g. "0.1.0". */
export const VERSION: string = pkg.version;

/**
 * The upstream kube-proxy release whose behaviour (rules, flags, config, health, metrics) edgeproxy
 * matches. Tests that compare against upstream's tables and goldens are written against this release.
 */
export const UPSTREAM_KUBE_PROXY_VERSION = "v1.34";

/** The line `--version` prints (and `--help` starts with): ours and the upstream release we match. */
export function versionLine(): string {
  return `edgeproxy ${VERSION} (matches kube-proxy ${UPSTREAM_KUBE_PROXY_VERSION}; iptables, nftables, userspace and ipvs modes)`;
}
