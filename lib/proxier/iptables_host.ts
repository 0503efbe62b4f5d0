/**
 * The real host side of a proxier: iptables-restore through bounded make-before-break transactions
 * (one process per sync), jump rules and canary chains on full syncs (batched: one `-S` per built-in
 * chain, one iptables-restore), iptables-save for stale chains,
 * and the drift check every syncPeriod. Also `--cleanup` for both families.
 */
import type { IPFamily } from "../model/types.ts";
import { createIptablesRunner, type IptablesRunner, type RestorePayload } from "../iptables/runner.ts";
import { restorePlanned } from "../iptables/restore_plan.ts";
import { chainNamesFromSave } from "../iptables/save_parse.ts";
import { DEFAULT_ENSURED_JUMP_RULES, ensureBaseRulesBatched } from "../iptables/jump_rules.ts";
import { canaryFlushed } from "../iptables/canary.ts";
import { checkDriftCheap, checkDriftFull, type DriftExpectation } from "../iptables/drift.ts";
import { cleanupAllFamilies, iptablesPresent } from "../iptables/cleanup.ts";
import { isServiceChainName } from "../iptables/chain_names.ts";
import type { OwnedRules } from "../iptables/owned_rules.ts";
import type { ProxierHost } from "./proxier.ts";

/** Per-service chains sampled by each cheap drift check (rotating); fixed chains are always checked. */
const DRIFT_SAMPLE = 32;

/** Splits what we believe we own into the drift check's expectation. */
export function expectationFromOwned(owned: OwnedRules): DriftExpectation {
  const fixedChains = new Map<string, Map<string, number>>();
  const serviceChains = new Map<string, number>();
  for (const [table, chains] of owned) {
    const fixed = new Map<string, number>();
    for (const [chain, n] of chains) {
      if (table === "nat" && isServiceChainName(chain)) serviceChains.set(chain, n);
      else fixed.set(chain, n);
    }
    fixedChains.set(table, fixed);
  }
  return { fixedChains, serviceChains, jumpRules: DEFAULT_ENSURED_JUMP_RULES };
}

/** Adapts an IptablesRunner to the proxier's host interface. */
export function iptablesHost(runner: IptablesRunner): ProxierHost {
  let cursor = 0;
  return {
    async restore(payload: RestorePayload): Promise<void> {
      // Large full syncs go in as bounded make-before-break transactions; incremental partial syncs
      // (-D/-I lines, small) go in unchanged as one transaction. Chunks are streamed, never joined.
      await restorePlanned(runner, payload);
    },
    async natChains(): Promise<Set<string>> {
      return chainNamesFromSave(await runner.save("nat"), "nat");
    },
    async ensureBaseRules(): Promise<void> {
      // 6 concurrent `-S` reads and one iptables-restore instead of ~30 sequential -N/-C/-I calls.
      await ensureBaseRulesBatched(runner);
    },
    async checkDrift(owned: OwnedRules): Promise<string | null> {
      if (await canaryFlushed(runner)) return "KUBE-PROXY-CANARY is gone (tables flushed)";
      const exp = expectationFromOwned(owned);
      let report;
      if (runner.version.backend === "legacy") {
        // iptables-legacy lists a whole table per `-S` anyway: one save per table is cheaper.
        report = await checkDriftFull(runner, exp);
      } else {
        const names = [...exp.serviceChains.keys()].sort();
        const sample: string[] = [];
        for (let i = 0; i < Math.min(DRIFT_SAMPLE, names.length); i++) {
          sample.push(names[(cursor + i) % names.length]);
        }
        cursor = names.length === 0 ? 0 : (cursor + sample.length) % names.length;
        report = await checkDriftCheap(runner, exp, sample);
      }
      return report.drifted ? report.reasons.join("; ") : null;
    },
  };
}

/** Creates the runner for a family and its host; `randomFully` comes from the iptables version. */
export async function createIptablesHost(
  family: IPFamily,
  warn: (m: string) => void,
): Promise<{ host: ProxierHost; randomFully: boolean; runner: IptablesRunner }> {
  const runner = await createIptablesRunner({ family });
  if (runner.versionNote) warn(`${runner.binaries.iptables}: ${runner.versionNote}`);
  return { host: iptablesHost(runner), randomFully: runner.features.hasRandomFully, runner };
}

/** True when ip6tables exists and works (upstream's dual-stack detection). */
export async function ip6tablesUsable(): Promise<boolean> {
  try {
    return await iptablesPresent(await createIptablesRunner({ family: "IPv6" }));
  } catch {
    return false;
  }
}

/** `--cleanup`: removes our chains and jump rules in both families. Returns the exit code. */
export async function cleanupAll(info: (m: string) => void, warn: (m: string) => void): Promise<number> {
  const reports = await cleanupAllFamilies((family) => createIptablesRunner({ family }));
  let code = 0;
  for (const r of reports) {
    const text = JSON.stringify(r);
    if (r.skipped) {
      (r.family === "IPv4" ? warn : info)(`cleanup ${r.family}: skipped: ${r.skipped}`);
      if (r.family === "IPv4") code = 1;
    } else {
      info(`cleanup ${r.family}: ${text}`);
    }
  }
  return code;
}
