/**
 * iptables version probing, pure part: parse `iptables --version` output and derive the features and
 * command-line flags upstream kube-proxy chooses by version (pkg/util/iptables/iptables.go).
 */

/** Which kernel interface the iptables binaries drive. */
export type IptablesBackend = "nf_tables" | "legacy" | "unknown";

/** A parsed `iptables --version` line. */
export interface IptablesVersion {
  /** Numeric components, e.g. [1, 8, 9]. */
  readonly parts: readonly number[];
  /** "1.8.9". */
  readonly text: string;
  /** From the "(nf_tables)" / "(legacy)" suffix; "unknown" for old builds that print none. */
  readonly backend: IptablesBackend;
}

/** What this iptables can do, and the flags to pass, as upstream decides by version. */
export interface IptablesFeatures {
  /** `-C` (check rule) exists: ≥ 1.4.11. Below that upstream parses iptables-save instead. */
  readonly hasCheck: boolean;
  /** `--random-fully` on MASQUERADE: ≥ 1.6.2. */
  readonly hasRandomFully: boolean;
  /** Lock-wait flags for `iptables`: ≥1.6.1 `-w 5 -W 100000`, ≥1.4.22 `-w 5`, ≥1.4.20 `-w`, else none. */
  readonly waitFlags: readonly string[];
  /**
   * Lock-wait flags for `iptables-restore`: ≥1.6.2 `-w 5 -W 100000`; otherwise `-w` when
   * `iptables-restore --version` answers (a backport), else none (upstream then takes /run/xtables.lock
   * itself; edgeproxy does not, see runner.ts).
   */
  readonly restoreWaitFlags: readonly string[];
}

/** Oldest iptables upstream kube-proxy supports (also the first with `-C`). */
export const MIN_CHECK_VERSION = [1, 4, 11] as const;
/** First iptables with `--random-fully`. */
export const RANDOM_FULLY_MIN_VERSION = [1, 6, 2] as const;
/** First iptables with `-w`. */
export const WAIT_MIN_VERSION = [1, 4, 20] as const;
/** First iptables with `-w <seconds>`. */
export const WAIT_SECONDS_MIN_VERSION = [1, 4, 22] as const;
/** First iptables with `-W <usec>`. */
export const WAIT_INTERVAL_MIN_VERSION = [1, 6, 1] as const;
/** First iptables-restore with `-w <seconds> -W <usec>`. */
export const WAIT_RESTORE_MIN_VERSION = [1, 6, 2] as const;

const WAIT_SECONDS = "5";
const WAIT_INTERVAL_USEC = "100000";

/**
 * Parses the output of `iptables --version` / `iptables-restore --version`, e.g.
 * "iptables v1.8.9 (nf_tables)". Returns null when no "vX.Y[.Z]" is present (upstream's pattern
 * `v([0-9]+(\.[0-9]+)+)`).
 */
export function parseIptablesVersion(output: string): IptablesVersion | null {
  const m = /v([0-9]+(?:\.[0-9]+)+)/.exec(output);
  if (m === null) return null;
  const text = m[1];
  const parts = text.split(".").map((p) => Number(p));
  let backend: IptablesBackend = "unknown";
  const rest = output.slice(m.index + m[0].length);
  if (/\(nf_tables\)/.test(rest)) backend = "nf_tables";
  else if (/\(legacy\)/.test(rest)) backend = "legacy";
  return { parts, text, backend };
}

/** Compares dotted versions component-wise; missing components count as 0. */
export function compareVersions(a: readonly number[], b: readonly number[]): number {
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d < 0 ? -1 : 1;
  }
  return 0;
}

/** True when `v` ≥ `min`. */
export function versionAtLeast(v: readonly number[], min: readonly number[]): boolean {
  return compareVersions(v, min) >= 0;
}

/** Upstream getIPTablesWaitFlag. */
export function iptablesWaitFlags(v: readonly number[]): string[] {
  if (versionAtLeast(v, WAIT_INTERVAL_MIN_VERSION)) return ["-w", WAIT_SECONDS, "-W", WAIT_INTERVAL_USEC];
  if (versionAtLeast(v, WAIT_SECONDS_MIN_VERSION)) return ["-w", WAIT_SECONDS];
  if (versionAtLeast(v, WAIT_MIN_VERSION)) return ["-w"];
  return [];
}

/**
 * Upstream getIPTablesRestoreWaitFlag. `restoreAnswersVersion` says whether `iptables-restore --version`
 * printed a parsable version (only consulted below 1.6.2, where it marks a distro backport of `--wait`).
 */
export function iptablesRestoreWaitFlags(v: readonly number[], restoreAnswersVersion: boolean): string[] {
  if (versionAtLeast(v, WAIT_RESTORE_MIN_VERSION)) return ["-w", WAIT_SECONDS, "-W", WAIT_INTERVAL_USEC];
  return restoreAnswersVersion ? ["-w"] : [];
}

/** All version-derived features at once. */
export function iptablesFeatures(v: IptablesVersion, restoreAnswersVersion: boolean): IptablesFeatures {
  return {
    hasCheck: versionAtLeast(v.parts, MIN_CHECK_VERSION),
    hasRandomFully: versionAtLeast(v.parts, RANDOM_FULLY_MIN_VERSION),
    waitFlags: iptablesWaitFlags(v.parts),
    restoreWaitFlags: iptablesRestoreWaitFlags(v.parts, restoreAnswersVersion),
  };
}
