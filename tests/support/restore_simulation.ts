/**
 * A model of iptables-restore --noflush for tests: applies a restore plan's transactions to simulated
 * tables and reports the first one the kernel would refuse, so the planner's make-before-break order can
 * be checked without a kernel.
 */
import { ruleTarget } from "../../lib/proxy/iptables/restore_content.ts";
import type { RestorePlan } from "../../lib/proxy/iptables/restore_plan.ts";

/** Targets that are not chains (extensions); any other target must name an existing chain. */
const BUILTIN_TARGETS = new Set([
  "ACCEPT",
  "DROP",
  "RETURN",
  "REJECT",
  "DNAT",
  "SNAT",
  "MASQUERADE",
  "REDIRECT",
  "MARK",
  "CONNMARK",
  "LOG",
  "NFLOG",
  "NOTRACK",
  "CT",
  "QUEUE",
  "NFQUEUE",
  "TPROXY",
  "TCPMSS",
  "TRACE",
]);

/** Kernel-side state for `simulatePlan`: table → chain → rule lines. */
export type SimulatedTables = Map<string, Map<string, string[]>>;

/** Outcome of `simulatePlan`. */
export interface SimulationResult {
  /** State after the last transaction that succeeded. */
  readonly state: SimulatedTables;
  /** Index of the first failing transaction and why; null when all applied. */
  readonly failure: { readonly transaction: number; readonly reason: string } | null;
}

/**
 * A model of `iptables-restore --noflush` applying `plan` to `initial`: each transaction is atomic;
 * ":X" creates or flushes X, "-A X" needs X, "-X X" needs X to exist and be empty, and at COMMIT every
 * jump must name an existing chain (so a deleted chain can never still be jumped to). Stops at the first
 * failing transaction, like iptables-restore. Pure; used to check plans' make-before-break invariants.
 */
export function simulatePlan(plan: RestorePlan, initial: SimulatedTables): SimulationResult {
  const state: SimulatedTables = new Map([...initial].map(([t, chains]) => [t, new Map(chains)]));
  for (let i = 0; i < plan.transactions.length; i++) {
    const tx = plan.transactions[i];
    const next = new Map(state.get(tx.table) ?? new Map<string, string[]>());
    const fail = (reason: string): SimulationResult => ({ state, failure: { transaction: i, reason } });
    for (const line of tx.lines) {
      if (line.startsWith(":")) {
        next.set(line.slice(1, line.indexOf(" ") === -1 ? line.length : line.indexOf(" ")), []);
      } else if (line.startsWith("-A ")) {
        const sp = line.indexOf(" ", 3);
        const name = line.slice(3, sp === -1 ? line.length : sp);
        const rules = next.get(name);
        if (rules === undefined) return fail(`rule for missing chain ${name}: ${line}`);
        next.set(name, [...rules, line]);
      } else if (line.startsWith("-X ")) {
        const name = line.slice(3).trim();
        const rules = next.get(name);
        if (rules === undefined) return fail(`-X of missing chain ${name}`);
        if (rules.length > 0) return fail(`-X of non-empty chain ${name}`);
        next.delete(name);
      } else {
        return fail(`unsupported line: ${line}`);
      }
    }
    for (const rules of next.values()) {
      for (const r of rules) {
        const tg = ruleTarget(r);
        if (tg !== null && !BUILTIN_TARGETS.has(tg) && !next.has(tg)) {
          return fail(`jump to missing chain ${tg}: ${r}`);
        }
      }
    }
    state.set(tx.table, next);
  }
  return { state, failure: null };
}
