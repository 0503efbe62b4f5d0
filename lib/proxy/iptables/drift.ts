/**
 * Drift detection: has someone flushed or edited OUR chains since the last successful sync (e.g.
 * `iptables -t nat -F KUBE-SERVICES`, a firewall reload that wipes everything, a deleted jump rule)?
 * Upstream only notices when its KUBE-PROXY-CANARY disappears; this check runs every syncPeriod and the
 * caller forces a full sync when it reports drift.
 *
 * What must be there comes from the render state of the last successful sync (rule counts per chain: the
 * always-rewritten chains such as nat KUBE-SERVICES plus every per-service chain) and the jump rules.
 * Rules are compared by count, not text, because iptables-save normalises what we write (match order,
 * "/32" suffixes, quoting).
 *
 * Two ways to check, chosen by backend (measured at 10k Services × 5 endpoints, see the report):
 * - iptables-nft: `iptables -S <chain>` reads only that chain (~2-5 ms; 0.11 s for a 10k-rule
 *   KUBE-SERVICES), while iptables-save reads everything (nat 2.5 s). So the cheap check lists the built-in
 *   chains holding jump rules, every always-present chain, and a rotating sample of per-service chains.
 * - iptables-legacy: every `-S` downloads the whole table (0.56 s each for that nat table), so one
 *   iptables-save per table and a full comparison is cheaper there.
 */
import { DEFAULT_ENSURED_JUMP_RULES } from "./jump_rules.ts";
import type { JumpRule } from "./jump_rules_table.ts";
import { ruleTarget } from "./restore_content.ts";
import { forEachOwnChain, ownChainCount, type RenderState } from "./render/state.ts";
import { fixedChainRuleCounts } from "./render/fixed_chains.ts";
import { firstMeaningfulLine, iptablesArgs, type IptablesRunner, type IptablesTable } from "./runner.ts";

/**
 * The nat per-service chains (SVC/SVL/EXT/FW/SEP) that must exist, with their rule counts, in a fixed
 * order that the cheap check's sample rotates over.
 */
export interface ServiceChainCounts extends Iterable<readonly [chain: string, rules: number]> {
  /** Number of chains. */
  readonly size: number;
  /**
   * `n` chains (all of them when there are fewer) from position `cursor` on, wrapping around, and the
   * position after them.
   */
  sample(cursor: number, n: number): { chains: (readonly [string, number])[]; cursor: number };
}

/** What must be in the kernel after the last successful sync. */
export interface DriftExpectation {
  /** table → chain → rule count for chains checked every time (everything not per-service). */
  readonly fixedChains: ReadonlyMap<string, ReadonlyMap<string, number>>;
  /** nat per-service chains and their rule counts. */
  readonly serviceChains: ServiceChainCounts;
  /** Jump rules that must be present in built-in chains. */
  readonly jumpRules: readonly JumpRule[];
}

/** Result of one check. */
export interface DriftReport {
  /** True when anything differs. */
  readonly drifted: boolean;
  /** Precise differences, e.g. "nat KUBE-SERVICES has 0 rules, expected 10001" (at most `maxReasons`). */
  readonly reasons: string[];
  /** Chains whose rule counts were compared. */
  readonly chainsChecked: number;
  /** iptables/iptables-save processes run. */
  readonly commands: number;
}

/** Options of a check. */
export interface DriftCheckOptions {
  /** "cheap" (per-chain -S, nft), "full" (iptables-save), or "auto" (by backend). Default "auto". */
  mode?: "auto" | "cheap" | "full";
  /** Per-service chains checked per cheap call, rotating. Default 16. */
  sampleSize?: number;
  /** Stop collecting reasons after this many. Default 10. */
  maxReasons?: number;
}

const DEFAULT_SAMPLE = 16;
const DEFAULT_MAX_REASONS = 10;

/**
 * The expectation after the sync that produced `state` (the backend's render state, what its payloads
 * left in the kernel): the shared and fixed chains' counts from the state's totals and fixed rules, the
 * per-service chains as a view of its facts. Nothing is copied: at 10k Services a Map of the ~80k chain
 * names and counts, kept beside the state, cost 7–9 MiB of heap.
 */
export function expectationFromState(
  state: RenderState,
  jumpRules: readonly JumpRule[] = DEFAULT_ENSURED_JUMP_RULES,
): DriftExpectation {
  return {
    fixedChains: fixedChainRuleCounts(state),
    serviceChains: new StateServiceChains(state),
    jumpRules,
  };
}

/** A RenderState's per-service chains in the state's order (service-port key, then forEachOwnChain's). */
class StateServiceChains implements ServiceChainCounts {
  #size = -1;

  constructor(private readonly state: RenderState) {}

  get size(): number {
    if (this.#size < 0) {
      let n = 0;
      for (const f of this.state.facts) n += ownChainCount(f);
      this.#size = n;
    }
    return this.#size;
  }

  *[Symbol.iterator](): Generator<readonly [string, number]> {
    const chains: (readonly [string, number])[] = [];
    const add = (chain: string, rules: number) => chains.push([chain, rules]);
    for (const f of this.state.facts) {
      chains.length = 0;
      forEachOwnChain(f, add);
      yield* chains;
    }
  }

  sample(cursor: number, n: number): { chains: (readonly [string, number])[]; cursor: number } {
    const total = this.size;
    const want = Math.min(total, Math.max(0, n));
    if (want === 0) return { chains: [], cursor: 0 };
    const start = cursor % total;
    const chains: (readonly [string, number])[] = [];
    const facts = this.state.facts;
    // Skip whole service ports by their chain count, so names are built only for the sampled chains.
    let i = 0;
    let pos = 0;
    while (pos + ownChainCount(facts[i]) <= start) pos += ownChainCount(facts[i++]);
    let skip = start - pos;
    while (chains.length < want) {
      forEachOwnChain(facts[i], (chain, rules) => {
        if (skip > 0) skip--;
        else if (chains.length < want) chains.push([chain, rules]);
      });
      i = (i + 1) % facts.length;
    }
    return { chains, cursor: (start + want) % total };
  }
}

/**
 * One check against the kernel, by backend unless `opts.mode` says otherwise: legacy lists whole tables
 * with every `-S`, so one iptables-save per table is cheaper there; nft lists single chains, so the cheap
 * check reads the fixed chains and `sampleSize` per-service chains from position `cursor` (in
 * ServiceChainCounts' order). Returns the report and where the next sample starts.
 */
export async function checkDrift(
  runner: IptablesRunner,
  exp: DriftExpectation,
  cursor: number,
  opts: DriftCheckOptions = {},
): Promise<{ report: DriftReport; cursor: number }> {
  const mode = opts.mode ?? "auto";
  if (mode === "full" || (mode === "auto" && runner.version.backend === "legacy")) {
    return { report: await checkDriftFull(runner, exp, opts.maxReasons), cursor };
  }
  const sample = exp.serviceChains.sample(cursor, opts.sampleSize ?? DEFAULT_SAMPLE);
  return {
    report: await checkDriftCheap(runner, exp, sample.chains, opts.maxReasons),
    cursor: sample.cursor,
  };
}

/** True when `line` (an iptables -S / iptables-save rule line) is `rule`. */
export function isJumpRuleLine(line: string, rule: JumpRule): boolean {
  return line.startsWith(`-A ${rule.fromChain} `) && ruleTarget(line) === rule.toChain &&
    (rule.comment === "" || line.includes(rule.comment)) &&
    rule.extraArgs.every((a) => line.includes(` ${a}`));
}

function countReason(table: string, chain: string, actual: number, expected: number): string | null {
  if (actual === -1) return `${table} ${chain} is missing`;
  if (actual !== expected) return `${table} ${chain} has ${actual} rules, expected ${expected}`;
  return null;
}

/** Built-in chains (by table) that hold the given jump rules. */
function builtinChains(rules: readonly JumpRule[]): Map<string, JumpRule[]> {
  const out = new Map<string, JumpRule[]>();
  for (const r of rules) {
    const key = `${r.table} ${r.fromChain}`;
    const l = out.get(key);
    if (l === undefined) out.set(key, [r]);
    else l.push(r);
  }
  return out;
}

/**
 * What the full check keeps of iptables-save output fed to it line by line (`line`): the rule count of
 * every declared chain and which of the expectation's jump rules were seen, never the rule text (the nat
 * table at 10k Services is ~25 MB of it). A rule for an undeclared chain (never printed by iptables-save,
 * but tolerated) counts for that chain.
 */
export class SavedRuleCounts {
  /** table → chain → rule count. */
  readonly tables = new Map<string, Map<string, number>>();
  /** The jump rules seen. */
  readonly jumpsFound = new Set<JumpRule>();
  #table: Map<string, number> | null = null;
  #tableName = "";
  /** The chain of the previous rule line: rules come grouped by chain, so most lines need no lookup. */
  #last = "";

  constructor(private readonly jumpRules: readonly JumpRule[]) {}

  /** One line of iptables-save output (without its newline). */
  line(l: string): void {
    const table = this.#table;
    const c = l.charCodeAt(0);
    if (c === 45 /* - */ && l.charCodeAt(1) === 65 /* A */ && l.charCodeAt(2) === 32 && table !== null) {
      const last = this.#last;
      let chain = last;
      if (
        last === "" || !l.startsWith(last, 3) ||
        (l.length !== 3 + last.length && l.charCodeAt(3 + last.length) !== 32)
      ) {
        const sp = l.indexOf(" ", 3);
        chain = l.slice(3, sp < 0 ? l.length : sp);
        this.#last = chain;
      }
      table.set(chain, (table.get(chain) ?? 0) + 1);
      for (const rule of this.jumpRules) {
        if (rule.table === this.#tableName && isJumpRuleLine(l, rule)) this.jumpsFound.add(rule);
      }
    } else if (c === 58 /* : */ && table !== null) {
      const sp = l.indexOf(" ", 1);
      const chain = l.slice(1, sp < 0 ? l.length : sp);
      if (!table.has(chain)) table.set(chain, 0);
    } else if (c === 42 /* * */) {
      this.#tableName = l.slice(1).trim();
      this.#table = this.tables.get(this.#tableName) ?? new Map();
      this.tables.set(this.#tableName, this.#table);
      this.#last = "";
    } else if (l.startsWith("COMMIT")) {
      this.#table = null;
      this.#last = "";
    }
  }

  /** Rules in `chain` of `table`, or -1 when it was not declared. */
  count(table: string, chain: string): number {
    return this.tables.get(table)?.get(chain) ?? -1;
  }
}

/**
 * Pure comparison of what iptables-save showed (nat and filter, or everything) with an expectation:
 * every expected chain exists with the expected rule count, and every jump rule is present. `saved` must
 * have been built for `exp.jumpRules`.
 */
export function compareSavedToExpectation(
  saved: SavedRuleCounts,
  exp: DriftExpectation,
  maxReasons = DEFAULT_MAX_REASONS,
): { reasons: string[]; chainsChecked: number } {
  const reasons: string[] = [];
  let chainsChecked = 0;
  const add = (r: string | null) => {
    if (r !== null && reasons.length < maxReasons) reasons.push(r);
  };
  for (const rule of exp.jumpRules) {
    if (!saved.jumpsFound.has(rule)) add(`${rule.table} ${rule.fromChain} lacks the jump to ${rule.toChain}`);
  }
  for (const [table, chains] of exp.fixedChains) {
    for (const [chain, n] of chains) {
      chainsChecked++;
      add(countReason(table, chain, saved.count(table, chain), n));
    }
  }
  const nat = saved.tables.get("nat");
  for (const [chain, n] of exp.serviceChains) {
    chainsChecked++;
    add(countReason("nat", chain, nat?.get(chain) ?? -1, n));
  }
  return { reasons, chainsChecked };
}

/**
 * Full check: one iptables-save per table in the expectation, streamed line by line into
 * `SavedRuleCounts`, then `compareSavedToExpectation`.
 */
export async function checkDriftFull(
  runner: IptablesRunner,
  exp: DriftExpectation,
  maxReasons = DEFAULT_MAX_REASONS,
): Promise<DriftReport> {
  const tables = new Set<string>([...exp.fixedChains.keys(), ...exp.jumpRules.map((r) => r.table)]);
  if (exp.serviceChains.size > 0) tables.add("nat");
  const saved = new SavedRuleCounts(exp.jumpRules);
  for (const t of tables) await runner.saveLines(t as IptablesTable, (l) => saved.line(l));
  const { reasons, chainsChecked } = compareSavedToExpectation(saved, exp, maxReasons);
  return { drifted: reasons.length > 0, reasons, chainsChecked, commands: tables.size };
}

/**
 * `iptables -S <chain> -t <table>`, its lines streamed to `onLine` (never held: KUBE-SERVICES is 10k
 * lines at 10k Services); false when the chain does not exist.
 */
async function listChain(
  runner: IptablesRunner,
  table: string,
  chain: string,
  onLine: (line: string) => void,
): Promise<boolean> {
  const args = iptablesArgs(runner, "-S", table as IptablesTable, chain);
  const r = await runner.execLines(args, onLine);
  if (r.code === 1) return false;
  if (r.code !== 0) {
    throw new Error(
      `listing ${table} ${chain} (iptables ${args.join(" ")}): exit ${r.code}: ${
        firstMeaningfulLine(r.stderr)
      }`,
    );
  }
  return true;
}

/** Rules in `chain` (`iptables -S`, counted as the lines stream by), or -1 when it does not exist. */
async function countChainRules(runner: IptablesRunner, table: string, chain: string): Promise<number> {
  let n = 0;
  const exists = await listChain(runner, table, chain, (l) => {
    if (l.startsWith("-A ")) n++;
  });
  return exists ? n : -1;
}

/**
 * Cheap check: `iptables -S` of each built-in chain with jump rules, each always-present chain, and the
 * given sample of per-service chains (with their expected rule counts). Throws when iptables itself fails
 * (not for a missing chain).
 */
export async function checkDriftCheap(
  runner: IptablesRunner,
  exp: DriftExpectation,
  sample: readonly (readonly [chain: string, rules: number])[],
  maxReasons = DEFAULT_MAX_REASONS,
): Promise<DriftReport> {
  const reasons: string[] = [];
  const add = (r: string | null) => {
    if (r !== null && reasons.length < maxReasons) reasons.push(r);
  };
  let commands = 0;
  let chainsChecked = 0;
  for (const [key, rules] of builtinChains(exp.jumpRules)) {
    const [table, chain] = key.split(" ");
    commands++;
    const found = new Set<JumpRule>();
    await listChain(runner, table, chain, (l) => {
      for (const rule of rules) if (isJumpRuleLine(l, rule)) found.add(rule);
    });
    for (const rule of rules) {
      if (!found.has(rule)) add(`${table} ${chain} lacks the jump to ${rule.toChain}`);
    }
  }
  for (const [table, chains] of exp.fixedChains) {
    for (const [chain, n] of chains) {
      commands++;
      chainsChecked++;
      add(countReason(table, chain, await countChainRules(runner, table, chain), n));
    }
  }
  for (const [chain, n] of sample) {
    commands++;
    chainsChecked++;
    add(countReason("nat", chain, await countChainRules(runner, "nat", chain), n));
  }
  return { drifted: reasons.length > 0, reasons, chainsChecked, commands };
}
