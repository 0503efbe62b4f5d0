/**
 * Drift detection for the nftables mode, pure part. A cheap fingerprint of table `kube-proxy` instead of
 * listing it (which at 10k Services means tens of MB): the rule count of the `services` chain and of one
 * other fixed chain the last full sync wrote (base chains, the checks, masquerading; rotating), plus one
 * element of each dispatch map that should hold any, rotating through their keys. A deleted table, `nft flush ruleset`, a flushed
 * `services` chain or a flushed map all change it.
 */
import type { NftFamily } from "./render/transaction.ts";
import type { NftElementState } from "./render/elements.ts";
import {
  isServiceChainName,
  KUBE_PROXY_TABLE,
  SERVICE_IPS_MAP,
  SERVICE_NODEPORTS_MAP,
  SERVICES_CHAIN,
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

/** One drift check's reads: the fixed chains it looks at and the `nft -a -f -` batches to run. */
export interface DriftReads {
  readonly chains: readonly string[];
  /** Run each as its own nft process (they may run in parallel). */
  readonly batches: readonly string[];
}

/**
 * The reads of the `cursor`-th drift check: `services` every time, one other fixed chain in rotation, and
 * the sampled element lookups. One `list chain` per nft process: nft 1.0.6 fails a batch holding two
 * (`No such file or directory` on the first), and in one batch with lookups it reads the table twice.
 */
export function driftReads(
  family: NftFamily,
  expected: FixedChainRules,
  samples: readonly { map: string; key: string }[],
  cursor: number,
): DriftReads {
  const others = [...expected.keys()].filter((c) => c !== SERVICES_CHAIN).sort();
  const chains = [
    ...(expected.has(SERVICES_CHAIN) ? [SERVICES_CHAIN] : []),
    ...(others.length > 0 ? [others[cursor % others.length]] : []),
  ];
  const batches = chains.map((c) => `list chain ${family} ${KUBE_PROXY_TABLE} ${c}\n`);
  if (samples.length > 0) {
    batches.push(
      samples.map((s) => `get element ${family} ${KUBE_PROXY_TABLE} ${s.map} { ${s.key} }\n`).join(""),
    );
  }
  return { chains, batches };
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
