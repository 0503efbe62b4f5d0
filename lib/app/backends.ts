/**
 * The mode → backend factory: `config.mode` names the proxy backend the agent runs. A new mode is a
 * folder lib/proxy/<mode>/ implementing the Provider contract (lib/proxy/provider.ts) plus one line here.
 */
import type { ProxyBackend } from "../proxy/provider.ts";
import { createIptablesBackend } from "../proxy/iptables/mode.ts";
import { createIpvsBackend } from "../proxy/ipvs/mode.ts";
import { createNftablesBackend } from "../proxy/nftables/mode.ts";
import { createUserspaceBackend } from "../proxy/userspace/mode.ts";

/** Every proxy mode edgeproxy implements, by its `mode` value. */
export const PROXY_BACKENDS: Readonly<Record<string, () => ProxyBackend>> = Object.freeze({
  iptables: createIptablesBackend,
  nftables: () => createNftablesBackend(),
  userspace: createUserspaceBackend,
  ipvs: () => createIpvsBackend(),
});

/**
 * A fresh backend for `mode` (after platform defaults, "" is already "iptables").
 * @throws Error naming the mode when edgeproxy has no such backend (validation rejects it earlier).
 */
export function backendFor(mode: string): ProxyBackend {
  const create = Object.hasOwn(PROXY_BACKENDS, mode) ? PROXY_BACKENDS[mode] : undefined;
  if (!create) {
    throw new Error(
      `mode: unsupported proxy mode ${JSON.stringify(mode)} (supported: ${
        Object.keys(PROXY_BACKENDS).join(", ")
      })`,
    );
  }
  return create();
}
