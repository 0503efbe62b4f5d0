/**
 * KUBE-PROXY-CANARY: an empty chain in mangle, nat and filter whose disappearance means someone flushed
 * iptables (a firewall reload, `iptables -F -X` …), upstream's `Monitor` (pkg/util/iptables). These are the
 * primitives; the sync loop polls `canaryFlushed` every syncPeriod and forces a full sync when it says so,
 * then calls `ensureCanary` again. KUBE-KUBELET-CANARY belongs to kubelet and is never touched here.
 */
import { KUBE_PROXY_CANARY } from "./chain_names.ts";
import { ensureChain } from "./jump_rules.ts";
import { firstMeaningfulLine, iptablesArgs, type IptablesRunner, type IptablesTable } from "./runner.ts";

/** Tables holding a canary, in upstream's order: mangle first (it is the one polled). */
export const CANARY_TABLES: readonly IptablesTable[] = Object.freeze(["mangle", "nat", "filter"]);

/** Creates the canary chain in every canary table (existing ones are left alone). */
export async function ensureCanary(runner: IptablesRunner, chain: string = KUBE_PROXY_CANARY): Promise<void> {
  for (const table of CANARY_TABLES) await ensureChain(runner, table, chain);
}

/**
 * Whether `chain` exists in `table` (`iptables -S`; upstream chainExists). Exit 1 means missing; any other
 * failure (exit 4: resource problem, e.g. lock or kernel) throws, so a hiccup is not mistaken for a flush.
 */
export async function chainExists(
  runner: IptablesRunner,
  table: IptablesTable,
  chain: string,
): Promise<boolean> {
  const args = iptablesArgs(runner, "-S", table, chain);
  const r = await runner.exec(args);
  if (r.code === 0) return true;
  if (r.code === 1) return false;
  throw new Error(
    `checking chain ${table}/${chain} (iptables ${args.join(" ")}): exit ${r.code}: ${
      firstMeaningfulLine(r.stderr)
    }`,
  );
}

/** Which canary tables still hold the canary. */
export interface CanaryState {
  readonly present: IptablesTable[];
  readonly missing: IptablesTable[];
}

/** Checks the canary in every table. */
export async function canaryState(
  runner: IptablesRunner,
  chain: string = KUBE_PROXY_CANARY,
): Promise<CanaryState> {
  const present: IptablesTable[] = [];
  const missing: IptablesTable[] = [];
  for (const table of CANARY_TABLES) {
    ((await chainExists(runner, table, chain)) ? present : missing).push(table);
  }
  return { present, missing };
}

/**
 * The cheap per-syncPeriod poll, as upstream: true when the mangle canary is gone. Only mangle is polled
 * because it is small, and iptables-legacy's `-S` reads the whole table (0.56 s for a 10k-Service nat
 * table). A flush of nat or filter alone is caught by drift.ts instead.
 */
export async function canaryFlushed(
  runner: IptablesRunner,
  chain: string = KUBE_PROXY_CANARY,
): Promise<boolean> {
  return !(await chainExists(runner, CANARY_TABLES[0], chain));
}

/** Deletes the canary chains (on shutdown with upstream's Monitor, and by --cleanup); missing ones are fine. */
export async function deleteCanary(runner: IptablesRunner, chain: string = KUBE_PROXY_CANARY): Promise<void> {
  for (const table of CANARY_TABLES) {
    const args = iptablesArgs(runner, "-X", table, chain);
    const r = await runner.exec(args);
    if (r.code !== 0 && (await chainExists(runner, table, chain))) {
      throw new Error(
        `deleting chain ${table}/${chain} (iptables ${args.join(" ")}): exit ${r.code}: ${
          firstMeaningfulLine(r.stderr)
        }`,
      );
    }
  }
}
