/**
 * nft version check, pure part: parse `nft --version` ("nftables v1.0.6 (Lester Gooch #5)") and compare
 * with the oldest nft upstream's nftables mode accepts (knftables requires 1.0.1, the first with the
 * JSON and transaction features kube-proxy relies on).
 */

/** Oldest nft the nftables mode runs with. */
export const MIN_NFT_VERSION = [1, 0, 1] as const;

/** A parsed `nft --version` line. */
export interface NftVersion {
  /** Numeric components, e.g. [1, 0, 6]. */
  readonly parts: readonly number[];
  /** "1.0.6". */
  readonly text: string;
}

/** Parses `nft --version` output; null when it holds no "vX.Y[.Z]". */
export function parseNftVersion(output: string): NftVersion | null {
  const m = /v([0-9]+(?:\.[0-9]+)+)/.exec(output);
  if (m === null) return null;
  return { text: m[1], parts: m[1].split(".").map(Number) };
}

/** True when `v` ≥ `min`, component by component (missing components count as 0). */
export function versionAtLeast(v: readonly number[], min: readonly number[]): boolean {
  for (let i = 0; i < Math.max(v.length, min.length); i++) {
    const a = v[i] ?? 0;
    const b = min[i] ?? 0;
    if (a !== b) return a > b;
  }
  return true;
}

/**
 * The one-line problem with `nft --version` output `output`, or null when this nft is new enough.
 */
export function nftVersionProblem(output: string): string | null {
  const v = parseNftVersion(output);
  if (v === null) return `nft --version: cannot parse ${JSON.stringify(output.trim().slice(0, 80))}`;
  if (!versionAtLeast(v.parts, MIN_NFT_VERSION)) {
    return `nft v${v.text} is too old: nftables mode needs nft v${MIN_NFT_VERSION.join(".")} or later`;
  }
  return null;
}
