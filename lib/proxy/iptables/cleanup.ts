/**
 * `--cleanup`: remove every iptables rule and chain edgeproxy (or upstream kube-proxy in iptables mode)
 * created, for IPv4 and, when ip6tables works, IPv6. Follows upstream's CleanupLeftovers:
 * delete the jump rules, then flush and delete the nat and filter chains in iptables-restore transactions.
 *
 * Deliberate differences from upstream, all in the direction of "remove what we own, nothing else":
 * - Upstream leaves KUBE-MARK-MASQ (nat), KUBE-PROXY-FIREWALL (filter) and KUBE-PROXY-CANARY (mangle, nat,
 *   filter) behind — a quirk. We remove them too: kube-proxy creates all three (kubelet stopped creating
 *   KUBE-MARK-MASQ with KEP-3178).
 * - We never touch KUBE-FIREWALL, its INPUT/OUTPUT jumps, or KUBE-KUBELET-CANARY: kubelet owns them, and
 *   upstream's cleanup leaves them alone too.
 * - Every copy of a jump rule is deleted (upstream deletes one), and any other rule in a built-in chain that
 *   jumps to one of our chains (e.g. an older kube-proxy's variant of a jump rule) is deleted as well, so
 *   the chains can actually go.
 * - A chain of ours that a foreign user chain still jumps to is kept (with the chains it leads to) and
 *   reported, instead of failing the whole transaction as upstream would.
 * - Many chains are flushed, then deleted, in bounded transactions (see restore_plan.ts) on iptables-nft.
 * Idempotent: a second run finds nothing and succeeds.
 */
import {
  isServiceChainName,
  KUBE_EXTERNAL_SERVICES,
  KUBE_FORWARD,
  KUBE_MARK_MASQ,
  KUBE_NODEPORTS,
  KUBE_POSTROUTING,
  KUBE_PROXY_CANARY,
  KUBE_PROXY_FIREWALL,
  KUBE_SERVICES,
} from "./chain_names.ts";
import { deleteJumpRule } from "./jump_rules.ts";
import { IPTABLES_JUMP_RULES } from "./jump_rules_table.ts";
import { chainRemovalTransactions, payloadOf } from "./restore_plan.ts";
import { ruleTarget } from "./restore_content.ts";
import { firstMeaningfulLine, iptablesArgs, type IptablesRunner, type IptablesTable } from "./runner.ts";
import { parseIptablesSave, type SavedTable } from "./save_parse.ts";
import type { IPFamily } from "../types.ts";

/** Fixed chains removed per table (per-service chains are found by prefix in nat). */
export const CLEANUP_CHAINS: Readonly<Record<IptablesTable, readonly string[]>> = Object.freeze({
  nat: [KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_MARK_MASQ, KUBE_PROXY_CANARY],
  filter: [
    KUBE_SERVICES,
    KUBE_EXTERNAL_SERVICES,
    KUBE_FORWARD,
    KUBE_NODEPORTS,
    KUBE_PROXY_FIREWALL,
    KUBE_PROXY_CANARY,
  ],
  mangle: [KUBE_PROXY_CANARY],
});

const BUILTIN_CHAINS = new Set(["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]);
const CLEANUP_TABLES: readonly IptablesTable[] = ["nat", "filter", "mangle"];

/** What one family's cleanup did. */
export interface CleanupReport {
  readonly family: IPFamily;
  /** Why this family was not cleaned ("" when it was). */
  readonly skipped: string;
  /** Rules deleted from built-in chains. */
  readonly jumpRulesRemoved: number;
  /** "table/CHAIN" for each chain deleted. */
  readonly chainsRemoved: string[];
  /** "table/CHAIN: reason" for chains of ours left in place. */
  readonly kept: string[];
  /** Failures (the run goes on with the next step; exit non-zero when any). */
  readonly errors: string[];
}

/** Splits an iptables-save rule line into argv words (double quotes group, backslash escapes). */
export function splitRuleWords(line: string): string[] {
  const out: string[] = [];
  let cur = "";
  let inWord = false;
  let quoted = false;
  for (let i = 0; i < line.length; i++) {
    const ch = line[i];
    if (quoted) {
      if (ch === "\\" && i + 1 < line.length) cur += line[++i];
      else if (ch === '"') quoted = false;
      else cur += ch;
    } else if (ch === '"') {
      quoted = true;
      inWord = true;
    } else if (ch === " " || ch === "\t") {
      if (inWord) out.push(cur);
      cur = "";
      inWord = false;
    } else {
      cur += ch;
      inWord = true;
    }
  }
  if (inWord) out.push(cur);
  return out;
}

/** Cleans one table; appends to the report's arrays. Returns the number of built-in rules deleted. */
async function cleanupTable(
  runner: IptablesRunner,
  table: IptablesTable,
  report: { chainsRemoved: string[]; kept: string[]; errors: string[] },
): Promise<number> {
  let saved: SavedTable | undefined;
  try {
    saved = parseIptablesSave(await runner.save(table)).get(table);
  } catch (e) {
    report.errors.push(`${table}: ${(e as Error).message}`);
    return 0;
  }
  if (saved === undefined) return 0;
  const fixed = new Set(CLEANUP_CHAINS[table]);
  const owned = new Set<string>();
  for (const name of saved.chains.keys()) {
    if (fixed.has(name) || (table === "nat" && isServiceChainName(name))) owned.add(name);
  }
  if (owned.size === 0) return 0;

  // Built-in chains: delete any rule that still jumps to one of our chains.
  let removed = 0;
  for (const chain of saved.chains.values()) {
    if (!BUILTIN_CHAINS.has(chain.name)) continue;
    for (const rule of chain.rules) {
      const target = ruleTarget(rule);
      if (target === null || !owned.has(target)) continue;
      const args = iptablesArgs(runner, "-D", table, chain.name, splitRuleWords(rule).slice(2));
      const r = await runner.exec(args);
      if (r.code === 0) removed++;
      else {
        report.errors.push(
          `${table}: deleting "${rule}" (iptables ${args.join(" ")}): exit ${r.code}: ${
            firstMeaningfulLine(r.stderr)
          }`,
        );
      }
    }
  }

  // Foreign user chains: keep whatever of ours they reach.
  const keep = new Map<string, string>();
  const queue: string[] = [];
  for (const chain of saved.chains.values()) {
    if (owned.has(chain.name) || BUILTIN_CHAINS.has(chain.name)) continue;
    for (const rule of chain.rules) {
      const target = ruleTarget(rule);
      if (target !== null && owned.has(target) && !keep.has(target)) {
        keep.set(target, `still referenced by ${table}/${chain.name}`);
        queue.push(target);
      }
    }
  }
  while (queue.length > 0) {
    const name = queue.pop()!;
    for (const rule of saved.chains.get(name)?.rules ?? []) {
      const target = ruleTarget(rule);
      if (target !== null && owned.has(target) && !keep.has(target)) {
        keep.set(target, `reached from kept ${table}/${name}`);
        queue.push(target);
      }
    }
  }
  for (const [name, why] of keep) report.kept.push(`${table}/${name}: ${why}`);

  const remove = [...owned].filter((c) => !keep.has(c)).sort();
  if (remove.length === 0) return removed;
  // Legacy re-uploads the whole table per COMMIT: one flush and one delete transaction there.
  const max = runner.version.backend === "legacy" ? Number.MAX_SAFE_INTEGER : undefined;
  const transactions = chainRemovalTransactions(table, remove, max);
  try {
    await runner.restore(payloadOf({ transactions }));
    for (const c of remove) report.chainsRemoved.push(`${table}/${c}`);
  } catch (e) {
    report.errors.push(`${table}: ${(e as Error).message}`);
  }
  return removed;
}

/**
 * Upstream CleanupLeftovers for one family, with the fixes listed in the module comment. Never throws for
 * iptables failures: they are collected in `errors` and the remaining steps still run.
 */
export async function cleanupLeftovers(runner: IptablesRunner): Promise<CleanupReport> {
  const report = { chainsRemoved: [] as string[], kept: [] as string[], errors: [] as string[] };
  let jumpRulesRemoved = 0;
  for (const rule of IPTABLES_JUMP_RULES) {
    try {
      jumpRulesRemoved += await deleteJumpRule(runner, rule);
    } catch (e) {
      report.errors.push((e as Error).message);
    }
  }
  for (const table of CLEANUP_TABLES) jumpRulesRemoved += await cleanupTable(runner, table, report);
  return { family: runner.family, skipped: "", jumpRulesRemoved, ...report };
}

/**
 * Whether this family's iptables works at all (upstream Present: `iptables -t nat -S POSTROUTING`
 * succeeds). False e.g. for ip6tables on a kernel without IPv6 netfilter.
 */
export async function iptablesPresent(runner: IptablesRunner): Promise<boolean> {
  try {
    return (await runner.exec(iptablesArgs(runner, "-S", "nat", "POSTROUTING"))).code === 0;
  } catch {
    return false;
  }
}

/**
 * `--cleanup` for both families: IPv4 always, IPv6 only when ip6tables can be found and works. `makeRunner`
 * is usually `(family) => createIptablesRunner({ family })`.
 */
export async function cleanupAllFamilies(
  makeRunner: (family: IPFamily) => Promise<IptablesRunner>,
): Promise<CleanupReport[]> {
  const reports: CleanupReport[] = [];
  for (const family of ["IPv4", "IPv6"] as const) {
    let runner: IptablesRunner;
    try {
      runner = await makeRunner(family);
    } catch (e) {
      reports.push(skippedReport(family, `${(e as Error).message}`, family === "IPv4"));
      continue;
    }
    if (!(await iptablesPresent(runner))) {
      reports.push(
        skippedReport(family, `${runner.binaries.iptables} does not work here`, family === "IPv4"),
      );
      continue;
    }
    reports.push(await cleanupLeftovers(runner));
  }
  return reports;
}

/** IPv6 missing is normal (skipped); IPv4 missing is an error worth a non-zero exit. */
function skippedReport(family: IPFamily, why: string, isError: boolean): CleanupReport {
  return {
    family,
    skipped: why,
    jumpRulesRemoved: 0,
    chainsRemoved: [],
    kept: [],
    errors: isError ? [`${family}: ${why}`] : [],
  };
}
