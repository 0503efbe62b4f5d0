/**
 * Drift detection: has someone flushed or edited OUR chains since the last successful sync (e.g.
 * `iptables -t nat -F KUBE-SERVICES`, a firewall reload that wipes everything, a deleted jump rule)?
 * Upstream only notices when its KUBE-PROXY-CANARY disappears; this check runs every syncPeriod and the
 * caller forces a full sync when it reports drift.
 *
 * What must be there comes from the restore payloads applied (OwnedRules: rule counts per chain, the
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
import { isServiceChainName } from "./chain_names.ts";
import { DEFAULT_ENSURED_JUMP_RULES } from "./jump_rules.ts";
import type { JumpRule } from "./jump_rules_table.ts";
import { ruleTarget } from "./restore_content.ts";
import { applyPayloadToOwnedRules, type OwnedRules, ownedRulesVersion } from "./owned_rules.ts";
import { firstMeaningfulLine, iptablesArgs, type IptablesRunner, type IptablesTable } from "./runner.ts";
import { parseIptablesSave, type SavedTables } from "./save_parse.ts";

/** Chain → rule count, read-only (a Map, or a view of one). */
export interface ChainCounts extends Iterable<[string, number]> {
  readonly size: number;
  get(chain: string): number | undefined;
  keys(): Iterable<string>;
}

/** What must be in the kernel after the last successful sync. */
export interface DriftExpectation {
  /** table → chain → rule count for chains checked every time (everything not per-service). */
  readonly fixedChains: ReadonlyMap<string, ReadonlyMap<string, number>>;
  /** nat per-service chain (SVC/SVL/EXT/FW/SEP) → rule count. */
  readonly serviceChains: ChainCounts;
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
 * Splits what we believe we own (chain → rule count per table) into a check's expectation. The per-service
 * chains are read in place, not copied: at 10k Services they are ~80k entries, copied on every check
 * (every syncPeriod) before.
 */
export function expectationFromOwned(
  owned: OwnedRules,
  jumpRules: readonly JumpRule[] = DEFAULT_ENSURED_JUMP_RULES,
): DriftExpectation {
  const fixedChains = new Map<string, Map<string, number>>();
  for (const [table, chains] of owned) {
    const fixed = new Map<string, number>();
    for (const [chain, n] of chains) {
      if (table !== "nat" || !isServiceChainName(chain)) fixed.set(chain, n);
    }
    fixedChains.set(table, fixed);
  }
  return { fixedChains, serviceChains: new OwnedServiceChains(owned), jumpRules };
}

/** The nat per-service chains of an OwnedRules, as a read-only view that follows it. */
class OwnedServiceChains implements ChainCounts {
  constructor(private readonly owned: OwnedRules) {}

  get #nat(): ReadonlyMap<string, number> {
    return this.owned.get("nat") ?? new Map();
  }

  get size(): number {
    let n = 0;
    for (const chain of this.#nat.keys()) if (isServiceChainName(chain)) n++;
    return n;
  }

  get(chain: string): number | undefined {
    return isServiceChainName(chain) ? this.#nat.get(chain) : undefined;
  }

  *keys(): Generator<string> {
    for (const chain of this.#nat.keys()) if (isServiceChainName(chain)) yield chain;
  }

  *[Symbol.iterator](): Generator<[string, number]> {
    for (const e of this.#nat) if (isServiceChainName(e[0])) yield e;
  }

  /** The chain names, sorted; cached until a payload is applied to the OwnedRules again. */
  sortedNames(): readonly string[] {
    const version = ownedRulesVersion(this.owned);
    const cached = sortedNameCache.get(this.owned);
    if (cached !== undefined && cached.version === version) return cached.names;
    const names = [...this.keys()].sort();
    sortedNameCache.set(this.owned, { version, names });
    return names;
  }
}

const sortedNameCache = new WeakMap<OwnedRules, { version: number; names: readonly string[] }>();

/**
 * One check against the kernel, by backend unless `opts.mode` says otherwise: legacy lists whole tables
 * with every `-S`, so one iptables-save per table is cheaper there; nft lists single chains, so the cheap
 * check reads the fixed chains and `sampleSize` per-service chains from position `cursor` (sorted by
 * name). Returns the report and where the next sample starts.
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
  const names = exp.serviceChains instanceof OwnedServiceChains
    ? exp.serviceChains.sortedNames()
    : [...exp.serviceChains.keys()].sort();
  const size = Math.min(names.length, Math.max(0, opts.sampleSize ?? DEFAULT_SAMPLE));
  const sample: string[] = [];
  for (let i = 0; i < size; i++) sample.push(names[(cursor + i) % names.length]);
  const next = names.length === 0 ? 0 : (cursor + size) % names.length;
  return { report: await checkDriftCheap(runner, exp, sample, opts.maxReasons), cursor: next };
}

/**
 * Keeps the expectation up to date from restore payloads (through OwnedRules, what the proxier keeps)
 * and runs rotating checks. Call `recordRestore` after each successful restore (full syncs replace what
 * was known, partial syncs apply on top), and `reset` after a failed one (some transactions may have been
 * applied; the next full sync records afresh).
 */
export class DriftTracker {
  #owned: OwnedRules = new Map();
  #known = false;
  #cursor = 0;

  constructor(private readonly jumpRules: readonly JumpRule[] = DEFAULT_ENSURED_JUMP_RULES) {}

  /** Learns from a payload (text or whole-line chunks) that iptables-restore just applied successfully. */
  recordRestore(payload: string | readonly string[], fullSync: boolean): void {
    if (fullSync) this.#owned = new Map();
    applyPayloadToOwnedRules(this.#owned, payload);
    if (fullSync) this.#known = true;
  }

  /** Forgets everything until the next full sync (after a failed restore). */
  reset(): void {
    this.#owned = new Map();
    this.#known = false;
  }

  /** The current expectation, or null before the first full sync is recorded. */
  expectation(): DriftExpectation | null {
    return this.#known ? expectationFromOwned(this.#owned, this.jumpRules) : null;
  }

  /** Runs a check (see `checkDrift`); null when there is nothing to compare yet. */
  async check(runner: IptablesRunner, opts: DriftCheckOptions = {}): Promise<DriftReport | null> {
    const exp = this.expectation();
    if (exp === null) return null;
    const { report, cursor } = await checkDrift(runner, exp, this.#cursor, opts);
    this.#cursor = cursor;
    return report;
  }
}

/** True when one of `lines` (iptables -S / iptables-save rule lines) is `rule`. */
export function hasJumpRule(lines: readonly string[], rule: JumpRule): boolean {
  const head = `-A ${rule.fromChain} `;
  return lines.some((l) =>
    l.startsWith(head) && ruleTarget(l) === rule.toChain &&
    (rule.comment === "" || l.includes(rule.comment)) &&
    rule.extraArgs.every((a) => l.includes(` ${a}`))
  );
}

function countRules(lines: readonly string[]): number {
  let n = 0;
  for (const l of lines) if (l.startsWith("-A ")) n++;
  return n;
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
 * Pure comparison of parsed iptables-save output (nat and filter, or everything) with an expectation:
 * every expected chain exists with the expected rule count, and every jump rule is present.
 */
export function compareSavedToExpectation(
  saved: SavedTables,
  exp: DriftExpectation,
  maxReasons = DEFAULT_MAX_REASONS,
): { reasons: string[]; chainsChecked: number } {
  const reasons: string[] = [];
  let chainsChecked = 0;
  const add = (r: string | null) => {
    if (r !== null && reasons.length < maxReasons) reasons.push(r);
  };
  for (const rule of exp.jumpRules) {
    const c = saved.get(rule.table)?.chains.get(rule.fromChain);
    if (!hasJumpRule(c?.rules ?? [], rule)) {
      add(`${rule.table} ${rule.fromChain} lacks the jump to ${rule.toChain}`);
    }
  }
  for (const [table, chains] of exp.fixedChains) {
    for (const [chain, n] of chains) {
      chainsChecked++;
      add(countReason(table, chain, saved.get(table)?.chains.get(chain)?.rules.length ?? -1, n));
    }
  }
  const nat = saved.get("nat");
  for (const [chain, n] of exp.serviceChains) {
    chainsChecked++;
    add(countReason("nat", chain, nat?.chains.get(chain)?.rules.length ?? -1, n));
  }
  return { reasons, chainsChecked };
}

/** Full check: one iptables-save per table in the expectation, then `compareSavedToExpectation`. */
export async function checkDriftFull(
  runner: IptablesRunner,
  exp: DriftExpectation,
  maxReasons = DEFAULT_MAX_REASONS,
): Promise<DriftReport> {
  const tables = new Set<string>([...exp.fixedChains.keys(), ...exp.jumpRules.map((r) => r.table)]);
  if (exp.serviceChains.size > 0) tables.add("nat");
  const saved: SavedTables = new Map();
  for (const t of tables) {
    const one = parseIptablesSave(await runner.save(t as IptablesTable)).get(t);
    if (one !== undefined) saved.set(t, one);
  }
  const { reasons, chainsChecked } = compareSavedToExpectation(saved, exp, maxReasons);
  return { drifted: reasons.length > 0, reasons, chainsChecked, commands: tables.size };
}

/** `iptables -S <chain> -t <table>` lines, or null when the chain does not exist. */
async function listChain(runner: IptablesRunner, table: string, chain: string): Promise<string[] | null> {
  const args = iptablesArgs(runner, "-S", table as IptablesTable, chain);
  const r = await runner.exec(args);
  if (r.code === 1) return null;
  if (r.code !== 0) {
    throw new Error(
      `listing ${table} ${chain} (iptables ${args.join(" ")}): exit ${r.code}: ${
        firstMeaningfulLine(r.stderr)
      }`,
    );
  }
  return r.stdout.split("\n");
}

/**
 * Cheap check: `iptables -S` of each built-in chain with jump rules, each always-present chain, and the
 * given sample of per-service chains. Throws when iptables itself fails (not for a missing chain).
 */
export async function checkDriftCheap(
  runner: IptablesRunner,
  exp: DriftExpectation,
  sample: readonly string[],
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
    const lines = (await listChain(runner, table, chain)) ?? [];
    for (const rule of rules) {
      if (!hasJumpRule(lines, rule)) add(`${table} ${chain} lacks the jump to ${rule.toChain}`);
    }
  }
  for (const [table, chains] of exp.fixedChains) {
    for (const [chain, n] of chains) {
      commands++;
      chainsChecked++;
      const lines = await listChain(runner, table, chain);
      add(countReason(table, chain, lines === null ? -1 : countRules(lines), n));
    }
  }
  for (const chain of sample) {
    const n = exp.serviceChains.get(chain);
    if (n === undefined) continue;
    commands++;
    chainsChecked++;
    const lines = await listChain(runner, "nat", chain);
    add(countReason("nat", chain, lines === null ? -1 : countRules(lines), n));
  }
  return { drifted: reasons.length > 0, reasons, chainsChecked, commands };
}
