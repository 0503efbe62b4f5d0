/**
 * Installs the jump rules from built-in chains into kube-proxy's chains (iptablesJumpChains), the way upstream's
 * syncProxyRules does on full syncs: for each rule, EnsureChain(table, toChain) (`iptables -N`, "already
 * exists" is fine), then EnsureRule(Prepend, …) (`iptables -C`, and `iptables -I` when missing). They are
 * not part of the restore payload because that would replace all of PREROUTING, INPUT, …
 *
 * `ensureJumpRules` does that literally (~30 processes per family); the agent uses
 * `ensureBaseRulesBatched`, the same end state (canary chains included) from one `-S` per built-in chain
 * and one `iptables-restore --noflush`.
 */
import {
  type ExecResult,
  firstMeaningfulLine,
  iptablesArgs,
  type IptablesRunner,
  type IptablesTable,
  isNotFoundError,
} from "./runner.ts";
import {
  IPTABLES_JUMP_RULES,
  IPTABLES_KUBELET_JUMP_RULES,
  type JumpRule,
  jumpRuleArgs,
  jumpRuleLine,
} from "./jump_rules_table.ts";
import { KUBE_PROXY_CANARY } from "./chain_names.ts";

/** The rules a full sync ensures: kube-proxy's own, then the duplicates of kubelet's KUBE-FIREWALL jumps. */
export const DEFAULT_ENSURED_JUMP_RULES: readonly JumpRule[] = Object.freeze([
  ...IPTABLES_JUMP_RULES,
  ...IPTABLES_KUBELET_JUMP_RULES,
]);

/** What `ensureJumpRules` changed. */
export interface EnsureJumpRulesResult {
  /** "table/CHAIN" for each target chain that had to be created. */
  readonly chainsCreated: string[];
  /** The rules that were missing and got inserted. */
  readonly rulesInserted: JumpRule[];
}

/** An `iptables` call made while ensuring or deleting jump rules failed. */
export class JumpRuleError extends Error {
  readonly rule: JumpRule;
  readonly result: ExecResult;
  constructor(what: string, rule: JumpRule, args: readonly string[], result: ExecResult) {
    const detail = `iptables ${args.join(" ")}: exit ${result.code}: ${firstMeaningfulLine(result.stderr)}`;
    super(`${what} jump rule ${rule.table} ${rule.fromChain} -> ${rule.toChain} (${detail})`);
    this.name = "JumpRuleError";
    this.rule = rule;
    this.result = result;
  }
}

/** Creates `chain` in `table` unless it exists (upstream EnsureChain: exit 1 means "already exists"). */
export async function ensureChain(
  runner: IptablesRunner,
  table: IptablesTable,
  chain: string,
): Promise<boolean> {
  const args = iptablesArgs(runner, "-N", table, chain);
  const r = await runner.exec(args);
  if (r.code === 0) return true;
  if (r.code === 1) return false;
  throw new Error(
    `creating chain ${table}/${chain} (iptables ${args.join(" ")}): exit ${r.code}: ${
      firstMeaningfulLine(r.stderr)
    }`,
  );
}

/**
 * `iptables -C`: true when the rule exists; false when it does not (exit 1) or cannot (its chain or target
 * chain is missing: exit 2 with a not-found message); `JumpRuleError` otherwise.
 */
export async function jumpRuleExists(runner: IptablesRunner, rule: JumpRule): Promise<boolean> {
  const args = iptablesArgs(runner, "-C", rule.table, rule.fromChain, jumpRuleArgs(rule));
  const r = await runner.exec(args);
  if (r.code === 0) return true;
  if (r.code === 1 || isNotFoundError(r.stderr)) return false;
  throw new JumpRuleError("checking", rule, args, r);
}

/**
 * Ensures each jump rule (default: `DEFAULT_ENSURED_JUMP_RULES`) exists, creating its target chain first.
 * Sequential (iptables-nft and the xtables lock both serialise anyway). Idempotent: a second call changes
 * nothing. Stops at the first failure, as upstream does (the sync then fails and is retried).
 */
export async function ensureJumpRules(
  runner: IptablesRunner,
  rules: readonly JumpRule[] = DEFAULT_ENSURED_JUMP_RULES,
): Promise<EnsureJumpRulesResult> {
  const chainsCreated: string[] = [];
  const rulesInserted: JumpRule[] = [];
  const ensured = new Set<string>();
  for (const rule of rules) {
    const key = `${rule.table}/${rule.toChain}`;
    if (!ensured.has(key)) {
      if (await ensureChain(runner, rule.table, rule.toChain)) chainsCreated.push(key);
      ensured.add(key);
    }
    if (await jumpRuleExists(runner, rule)) continue;
    const args = iptablesArgs(runner, "-I", rule.table, rule.fromChain, jumpRuleArgs(rule));
    const r = await runner.exec(args);
    if (r.code !== 0) throw new JumpRuleError("inserting", rule, args, r);
    rulesInserted.push(rule);
  }
  return { chainsCreated, rulesInserted };
}

/**
 * Deletes every copy of `rule` (upstream DeleteRule removes one; two kube-proxies or a crash between -C
 * and -I can leave duplicates, and one leftover would keep the chain from being deleted). Returns how many
 * were removed; a missing chain counts as nothing to remove.
 */
export async function deleteJumpRule(runner: IptablesRunner, rule: JumpRule): Promise<number> {
  let removed = 0;
  // Bounded: iptables cannot hold unbounded duplicates in practice, and a bug must not loop forever.
  for (let i = 0; i < 100; i++) {
    if (!(await jumpRuleExists(runner, rule))) return removed;
    const args = iptablesArgs(runner, "-D", rule.table, rule.fromChain, jumpRuleArgs(rule));
    const r = await runner.exec(args);
    if (r.code !== 0) throw new JumpRuleError("deleting", rule, args, r);
    removed++;
  }
  return removed;
}

/** What `planBaseRules` needs: the rules, what the built-in chains hold, which target chains exist. */
export interface BaseRulesPlanInput {
  /** Jump rules to ensure, in upstream order. */
  readonly rules: readonly JumpRule[];
  /** "table/CHAIN" → output of `iptables -t table -S CHAIN`, for every `fromChain` of `rules`. */
  readonly listings: ReadonlyMap<string, string>;
  /** "table/CHAIN" of target chains known to exist (e.g. probed; chains jumped to are implied). */
  readonly existingChains: ReadonlySet<string>;
  /** Canary chain declared in each canary table; null for none. */
  readonly canary: string | null;
  /** Tables holding the canary (upstream: mangle, nat, filter). */
  readonly canaryTables: readonly IptablesTable[];
}

/** One iptables-restore --noflush transaction set that installs whatever is missing. */
export interface BaseRulesPlan {
  /** The iptables-restore input ("" when there is nothing to do). */
  readonly payload: string;
  /** "table/CHAIN" of each target chain the payload creates. */
  readonly chainsCreated: string[];
  /** The rules the payload inserts (each `-I FROM …`, i.e. prepended, in upstream order). */
  readonly rulesInserted: JumpRule[];
}

/** The `-S` lines of a listing that are rules of `chain`. */
function ruleLines(listing: string, chain: string): string[] {
  const head = `-A ${chain} `;
  return listing.split("\n").filter((l) => l.startsWith(head));
}

/** The target of a `-S` rule line ("-j X" / "-g X", last one), or null. */
function lineTarget(line: string): string | null {
  const m = /\s-[jg]\s+(\S+)\s*$/.exec(line) ?? /\s-[jg]\s+(\S+)(?:\s|$)/.exec(line);
  return m === null ? null : m[1];
}

/**
 * Whether a `-S` rule line is `rule`: same chain and target, and every match argument and the comment
 * appear in it. Tolerant of how iptables versions print matches (as drift.ts), so an existing rule is
 * never taken for missing and duplicated on every full sync.
 */
export function listedRuleMatches(line: string, rule: JumpRule): boolean {
  if (!line.startsWith(`-A ${rule.fromChain} `) || lineTarget(line) !== rule.toChain) return false;
  if (rule.comment !== "" && !line.includes(rule.comment)) return false;
  if (rule.comment === "" && line.includes("--comment")) return false;
  return rule.extraArgs.every((a) => line.includes(` ${a}`));
}

/** "table/CHAIN" of the built-in chains `rules` jump from, in first-use order. */
export function builtinChainKeys(rules: readonly JumpRule[]): string[] {
  return [...new Set(rules.map((r) => `${r.table}/${r.fromChain}`))];
}

/**
 * Target chains whose existence the listings do not prove (no listed rule jumps to them): the caller
 * probes these (`iptables -S CHAIN 1 -t T`) before planning. "table/CHAIN", in first-use order.
 */
export function targetsToProbe(
  rules: readonly JumpRule[],
  listings: ReadonlyMap<string, string>,
): string[] {
  const proven = provenChains(listings);
  return [...new Set(rules.map((r) => `${r.table}/${r.toChain}`))].filter((k) => !proven.has(k));
}

/** "table/CHAIN" of every chain some listed rule jumps to (a rule cannot jump to a missing chain). */
function provenChains(listings: ReadonlyMap<string, string>): Set<string> {
  const out = new Set<string>();
  for (const [key, listing] of listings) {
    const table = key.slice(0, key.indexOf("/"));
    for (const l of listing.split("\n")) {
      if (!l.startsWith("-A ")) continue;
      const t = lineTarget(l);
      if (t !== null) out.add(`${table}/${t}`);
    }
  }
  return out;
}

/**
 * Pure planning of `ensureBaseRulesBatched`: one `*table … COMMIT` section per table that needs
 * something, writing `:CHAIN - [0:0]` only for target chains that do not exist (under --noflush a
 * declaration flushes an existing chain, so a populated KUBE-SERVICES or kubelet's KUBE-FIREWALL is
 * never declared), then `-I FROM …` for each missing rule in upstream order (the same final order as
 * upstream's sequential EnsureRule(Prepend)), and the canary chain last (it is empty by design, so
 * declaring it is harmless and it only appears once the jump rules are in). Tables: filter, nat, then
 * the other canary tables.
 */
export function planBaseRules(input: BaseRulesPlanInput): BaseRulesPlan {
  const proven = provenChains(input.listings);
  const tables = new Map<string, { decl: string[]; rules: string[] }>();
  const section = (t: string) => {
    let s = tables.get(t);
    if (s === undefined) {
      s = { decl: [], rules: [] };
      tables.set(t, s);
    }
    return s;
  };
  section("filter");
  section("nat");
  const chainsCreated: string[] = [];
  const rulesInserted: JumpRule[] = [];
  const created = new Set<string>();
  for (const rule of input.rules) {
    const key = `${rule.table}/${rule.toChain}`;
    if (!proven.has(key) && !input.existingChains.has(key) && !created.has(key)) {
      section(rule.table).decl.push(`:${rule.toChain} - [0:0]`);
      chainsCreated.push(key);
      created.add(key);
    }
    const listing = input.listings.get(`${rule.table}/${rule.fromChain}`);
    if (listing === undefined) {
      throw new Error(`planning jump rules: no listing of ${rule.table}/${rule.fromChain}`);
    }
    if (ruleLines(listing, rule.fromChain).some((l) => listedRuleMatches(l, rule))) continue;
    const line = jumpRuleLine(rule);
    section(rule.table).rules.push(`-I${line.slice(2)}`);
    rulesInserted.push(rule);
  }
  if (input.canary !== null) {
    for (const t of input.canaryTables) section(t).rules.push(`:${input.canary} - [0:0]`);
  }
  const out: string[] = [];
  for (const [table, s] of tables) {
    if (s.decl.length === 0 && s.rules.length === 0) continue;
    out.push(`*${table}`, ...s.decl, ...s.rules, "COMMIT");
  }
  return { payload: out.length === 0 ? "" : `${out.join("\n")}\n`, chainsCreated, rulesInserted };
}

/** Options of `ensureBaseRulesBatched`. */
export interface EnsureBaseRulesOptions {
  /** Default `DEFAULT_ENSURED_JUMP_RULES`. */
  rules?: readonly JumpRule[];
  /** Canary chain (default KUBE-PROXY-CANARY); null to skip it. */
  canary?: string | null;
  /** Default mangle, nat, filter. */
  canaryTables?: readonly IptablesTable[];
}

/**
 * Ensures the jump rules, their target chains and the canary chains with few processes: one
 * `iptables -S CHAIN` per built-in chain (6, run concurrently), `iptables -S CHAIN 1` only for target
 * chains no existing rule jumps to (first start), then one `iptables-restore --noflush` with whatever is
 * missing (see `planBaseRules`). Same end state as `ensureJumpRules` + `ensureCanary`; idempotent; never
 * flushes a chain that holds rules. A failed read throws an Error naming the table, chain, command and
 * stderr (nothing is written then); a failed write throws the runner's `RestoreError`.
 */
export async function ensureBaseRulesBatched(
  runner: IptablesRunner,
  opts: EnsureBaseRulesOptions = {},
): Promise<EnsureJumpRulesResult> {
  const rules = opts.rules ?? DEFAULT_ENSURED_JUMP_RULES;
  const listings = new Map<string, string>();
  await Promise.all(
    builtinChainKeys(rules).map(async (key) => {
      const [table, chain] = splitKey(key);
      const args = iptablesArgs(runner, "-S", table, chain);
      const r = await runner.exec(args);
      if (r.code !== 0) {
        throw new Error(
          `listing ${table}/${chain} (iptables ${args.join(" ")}): exit ${r.code}: ${
            firstMeaningfulLine(r.stderr)
          }`,
        );
      }
      listings.set(key, r.stdout);
    }),
  );
  const existingChains = new Set<string>();
  await Promise.all(
    targetsToProbe(rules, listings).map(async (key) => {
      const [table, chain] = splitKey(key);
      // "-S CHAIN 1" prints at most one rule: cheap even for a nat KUBE-SERVICES with 10k rules.
      // The rule number must follow the chain directly (after "-t T" it is a bad argument).
      const args = [...runner.features.waitFlags, "-S", chain, "1", "-t", table];
      const r = await runner.exec(args);
      if (r.code === 0) existingChains.add(key);
      else if (r.code !== 1) {
        throw new Error(
          `checking chain ${table}/${chain} (iptables ${args.join(" ")}): exit ${r.code}: ${
            firstMeaningfulLine(r.stderr)
          }`,
        );
      }
    }),
  );
  const plan = planBaseRules({
    rules,
    listings,
    existingChains,
    canary: opts.canary === undefined ? KUBE_PROXY_CANARY : opts.canary,
    canaryTables: opts.canaryTables ?? ["mangle", "nat", "filter"],
  });
  if (plan.payload !== "") await runner.restore(plan.payload);
  return { chainsCreated: plan.chainsCreated, rulesInserted: plan.rulesInserted };
}

function splitKey(key: string): [IptablesTable, string] {
  const i = key.indexOf("/");
  return [key.slice(0, i) as IptablesTable, key.slice(i + 1)];
}
