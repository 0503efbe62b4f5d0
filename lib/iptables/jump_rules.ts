/**
 * Installs the jump rules from built-in chains into kube-proxy's chains (§1.4), the way upstream's
 * syncProxyRules does on full syncs: for each rule, EnsureChain(table, toChain) (`iptables -N`, "already
 * exists" is fine), then EnsureRule(Prepend, …) (`iptables -C`, and `iptables -I` when missing). They are
 * not part of the restore payload because that would replace all of PREROUTING, INPUT, …
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
} from "./jump_rules_table.ts";

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
