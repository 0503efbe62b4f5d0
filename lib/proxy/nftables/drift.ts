/**
 * Drift detection for the nftables mode, pure part. A cheap fingerprint of table `kube-proxy` instead of
 * listing it (which at 10k Services means tens of MB): the rule count of the `services` chain the last full
 * sync wrote and the element counts of the dispatch maps. A deleted table, `nft flush ruleset`, a flushed
 * `services` chain or a flushed map all change it. Cost with nft 1.0.6 (measured, 5k Services):
 * `list chain` reads every chain of the table (~0.5 s), `list map` only its map (~0.1 s); `get element`
 * reads far more than either (~1.3 s), so it is not used.
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

/** Maps whose elements are counted: the ones every Service with endpoints goes through. */
export const SAMPLED_MAPS: readonly string[] = [SERVICE_IPS_MAP, SERVICE_NODEPORTS_MAP];

/**
 * Rule counts of the fixed chains after applying `transaction` (a full sync, which flushes and refills
 * each of them), by replaying its chain and rule commands. Scans with indexOf and cuts out only fixed
 * chain names: a regexp match per line of a 5k-Service full sync (~200k lines) was a large share of the
 * sync's peak memory.
 */
export function fixedChainRules(transaction: string | readonly string[]): Map<string, number> {
  const counts = new Map<string, number>();
  for (const chunk of typeof transaction === "string" ? [transaction] : transaction) {
    for (let at = 0; at < chunk.length;) {
      let nl = chunk.indexOf("\n", at);
      if (nl < 0) nl = chunk.length;
      countLine(chunk, at, nl, counts);
      at = nl + 1;
    }
  }
  return counts;
}

/** Ends of the space-separated words of s[start, end), up to `n` of them. */
function wordEnds(s: string, start: number, end: number, n: number): number[] {
  const ends: number[] = [];
  let at = start;
  while (ends.length < n && at < end) {
    let sp = s.indexOf(" ", at);
    if (sp < 0 || sp > end) sp = end;
    ends.push(sp);
    at = sp + 1;
  }
  return ends;
}

/** Replays one line "<add|flush|delete> <chain|rule> <family> <table> <chain> ..." into `counts`. */
function countLine(s: string, start: number, end: number, counts: Map<string, number>): void {
  const w = wordEnds(s, start, end, 5);
  if (w.length < 5) return;
  const verb = s.slice(start, w[0]);
  if (verb !== "add" && verb !== "flush" && verb !== "delete") return;
  const what = s.slice(w[0] + 1, w[1]);
  if (what !== "chain" && what !== "rule") return;
  const name = s.slice(w[3] + 1, w[4]);
  if (isServiceChainName(name)) return;
  const chain = copyOf(name);
  if (what === "rule") counts.set(chain, (counts.get(chain) ?? 0) + 1);
  else if (verb === "delete") counts.delete(chain);
  else if (verb === "flush") counts.set(chain, 0);
  else if (!counts.has(chain)) counts.set(chain, 0);
}

/**
 * A copy of `s` not sharing storage with the string it was cut from: a regexp match or slice of a full
 * sync's transaction kept in a long-lived Map would keep the whole transaction (20 MB at 5k Services)
 * alive in JavaScriptCore, which cuts substrings out of their base string.
 */
export function copyOf(s: string): string {
  return [...s].join("");
}

/** Element counts of the sampled maps in `elements` (the last applied sync's). */
export function mapSizes(elements: NftElementState): Map<string, number> {
  return new Map(SAMPLED_MAPS.map((m) => [m, elements.get(m)?.size ?? 0]));
}

/** One drift check's reads: the fixed chains it looks at and the `nft -a -f -` batches to run. */
export interface DriftReads {
  readonly chains: readonly string[];
  /** Run each as its own nft process (they may run in parallel). */
  readonly batches: readonly string[];
}

/**
 * The reads of a drift check: the `services` chain and each sampled map, one command per nft process
 * (nft 1.0.6 fails a batch of two `list chain`s with "No such file or directory" on the first).
 */
export function driftReads(family: NftFamily, expected: FixedChainRules): DriftReads {
  const chains = expected.has(SERVICES_CHAIN) ? [SERVICES_CHAIN] : [];
  const batches = chains.map((c) => `list chain ${family} ${KUBE_PROXY_TABLE} ${c}\n`);
  for (const m of SAMPLED_MAPS) batches.push(`list map ${family} ${KUBE_PROXY_TABLE} ${m}\n`);
  return { chains, batches };
}

/** Element counts per map in `nft list map` output (each element of a verdict map has one " : "). */
export function parseMapSizes(output: string): Map<string, number> {
  const sizes = new Map<string, number>();
  let map: string | null = null;
  for (const line of output.split("\n")) {
    const h = /^\tmap (\S+) \{/.exec(line);
    if (h !== null) {
      map = h[1];
      sizes.set(map, 0);
      continue;
    }
    if (map === null || !/^\t\t(elements = \{|\t)/.test(line)) continue;
    sizes.set(map, sizes.get(map)! + (line.split(" : ").length - 1));
  }
  return sizes;
}

/** Differences between expected and listed map sizes, one phrase each. */
export function compareMapSizes(
  expected: ReadonlyMap<string, number>,
  listed: ReadonlyMap<string, number>,
): string[] {
  const out: string[] = [];
  for (const [map, want] of expected) {
    const got = listed.get(map) ?? 0;
    if (got !== want) out.push(`map ${map} has ${got} elements, expected ${want}`);
  }
  return out;
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
