/**
 * Drift detection for the nftables mode, pure part. A cheap fingerprint of table `kube-proxy` instead of
 * listing it (which at 10k Services means tens of MB): the rule count of every fixed chain the last full
 * sync wrote (base chains, `services`, the checks, masquerading), plus one element of each dispatch map
 * that should hold any, rotating through their keys. A deleted table, `nft flush ruleset`, a flushed
 * `services` chain or a flushed map all change it.
 */
import type { NftFamily } from "./render/transaction.ts";
import type { NftElementState } from "./render/elements.ts";
import {
  isServiceChainName,
  KUBE_PROXY_TABLE,
  SERVICE_IPS_MAP,
  SERVICE_NODEPORTS_MAP,
} from "./render/names.ts";

/** Rule counts per fixed (non per-service) chain. */
export type FixedChainRules = ReadonlyMap<string, number>;

/** Maps whose elements are sampled: the ones every Service with endpoints goes through. */
export const SAMPLED_MAPS: readonly string[] = [SERVICE_IPS_MAP, SERVICE_NODEPORTS_MAP];

/**
 * Rule counts of the fixed chains after applying `transaction` (a full sync, which flushes and refills
 * each of them), by replaying its chain and rule commands.
 */
export function fixedChainRules(transaction: string | readonly string[]): Map<string, number> {
  const counts = new Map<string, number>();
  const re = /^(add|flush|delete) (chain|rule) \S+ \S+ (\S+)/gm;
  for (const chunk of typeof transaction === "string" ? [transaction] : transaction) {
    for (const m of chunk.matchAll(re)) {
      const [, verb, what, chain] = m;
      if (isServiceChainName(chain)) continue;
      if (what === "rule") counts.set(chain, (counts.get(chain) ?? 0) + 1);
      else if (verb === "delete") counts.delete(chain);
      else if (verb === "flush") counts.set(chain, 0);
      else if (!counts.has(chain)) counts.set(chain, 0);
    }
  }
  return counts;
}

/** One element key to look up per sampled map that has any, the `cursor`-th (modulo its size). */
export function sampleElements(elements: NftElementState, cursor: number): { map: string; key: string }[] {
  const out: { map: string; key: string }[] = [];
  for (const map of SAMPLED_MAPS) {
    const keys = elements.get(map);
    if (keys === undefined || keys.size === 0) continue;
    const i = cursor % keys.size;
    let n = 0;
    for (const k of keys.keys()) {
      if (n++ === i) {
        out.push({ map, key: k });
        break;
      }
    }
  }
  return out;
}

/** The read-only commands of one drift check (for `nft -a -f -`). */
export function driftCommands(
  family: NftFamily,
  expected: FixedChainRules,
  samples: readonly { map: string; key: string }[],
): string {
  const lines: string[] = [];
  for (const chain of [...expected.keys()].sort()) {
    lines.push(`list chain ${family} ${KUBE_PROXY_TABLE} ${chain}`);
  }
  for (const s of samples) lines.push(`get element ${family} ${KUBE_PROXY_TABLE} ${s.map} { ${s.key} }`);
  return lines.join("\n") + "\n";
}

/**
 * Rule counts per chain in `nft -a list chain ...` output: a rule is a line indented twice that ends in
 * a handle (chain headers have one tab; hook and comment lines carry no handle).
 */
export function parseChainRuleCounts(output: string): Map<string, number> {
  const counts = new Map<string, number>();
  let chain: string | null = null;
  for (const line of output.split("\n")) {
    const h = /^\tchain (\S+) \{/.exec(line);
    if (h !== null) {
      chain = h[1];
      if (!counts.has(chain)) counts.set(chain, 0);
      continue;
    }
    if (chain !== null && /^\t\t.*# handle \d+$/.test(line)) counts.set(chain, counts.get(chain)! + 1);
    if (/^\t\}/.test(line)) chain = null;
  }
  return counts;
}

/** Differences between expected and listed rule counts, one phrase each; empty when they agree. */
export function compareRuleCounts(expected: FixedChainRules, listed: ReadonlyMap<string, number>): string[] {
  const out: string[] = [];
  for (const [chain, want] of [...expected].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const got = listed.get(chain);
    if (got === undefined) out.push(`chain ${chain} is missing`);
    else if (got !== want) out.push(`chain ${chain} has ${got} rules, expected ${want}`);
  }
  return out;
}
