/**
 * The real host side of a proxier: iptables-restore through bounded make-before-break transactions
 * (one process per sync), jump rules and canary chains on full syncs (batched: one `-S` per built-in
 * chain, one iptables-restore), iptables-save for stale chains,
 * and the drift check every syncPeriod. Also `--cleanup` for both families.
 */
import type { IPFamily } from "../types.ts";
import { createIptablesRunner, type IptablesRunner, type RestorePayload } from "./runner.ts";
import { restorePlanned } from "./restore_plan.ts";
import { ChainNameCollector } from "./save_parse.ts";
import { ensureBaseRulesBatched } from "./jump_rules.ts";
import { canaryFlushed } from "./canary.ts";
import { checkDrift, expectationFromState } from "./drift.ts";
import { cleanupAllFamilies, iptablesPresent } from "./cleanup.ts";
import type { RenderState } from "./render/state.ts";
import type { SectionedPayload } from "./restore_content.ts";
import type { IptablesHost } from "./backend.ts";

/** Per-service chains sampled by each cheap drift check (rotating); fixed chains are always checked. */
const DRIFT_SAMPLE = 32;

/** Adapts an IptablesRunner to the proxier's host interface. */
export function iptablesHost(runner: IptablesRunner): IptablesHost {
  let cursor = 0;
  return {
    async restore(payload: RestorePayload, sections?: SectionedPayload | null): Promise<void> {
      // Large full syncs go in as bounded make-before-break transactions (planned from the render's
      // sections when it gave them); incremental partial syncs (-D/-I lines, small) go in unchanged as
      // one transaction. Chunks are streamed, never joined.
      await restorePlanned(runner, payload, {}, sections ?? null);
    },
    async natChains(): Promise<Set<string>> {
      // Streamed: only the declarations are kept, not the nat table's text (~25 MB at 10k Services).
      const chains = new ChainNameCollector("nat");
      await runner.saveLines("nat", (l) => chains.line(l));
      return chains.names;
    },
    async ensureBaseRules(): Promise<void> {
      // 6 concurrent `-S` reads and one iptables-restore instead of ~30 sequential -N/-C/-I calls.
      await ensureBaseRulesBatched(runner);
    },
    async checkDrift(state: RenderState): Promise<string | null> {
      if (await canaryFlushed(runner)) return "KUBE-PROXY-CANARY is gone (tables flushed)";
      const { report, cursor: next } = await checkDrift(runner, expectationFromState(state), cursor, {
        sampleSize: DRIFT_SAMPLE,
      });
      cursor = next;
      return report.drifted ? report.reasons.join("; ") : null;
    },
  };
}

/**
 * The host of a family, on `runner` when the caller already has one (the IPv6 probe's), else on a new
 * runner; `randomFully` comes from the iptables version.
 */
export async function createIptablesHost(
  family: IPFamily,
  warn: (m: string) => void,
  existing?: IptablesRunner,
): Promise<{ host: IptablesHost; randomFully: boolean; runner: IptablesRunner }> {
  const runner = existing ?? await createIptablesRunner({ family });
  if (runner.versionNote) warn(`${runner.binaries.iptables}: ${runner.versionNote}`);
  return { host: iptablesHost(runner), randomFully: runner.features.hasRandomFully, runner };
}

/**
 * The IPv6 runner when ip6tables exists and works (upstream's dual-stack detection), else null. The
 * runner is handed on to `createIptablesHost`, so ip6tables is probed once.
 */
export async function usableIp6tablesRunner(): Promise<IptablesRunner | null> {
  try {
    const runner = await createIptablesRunner({ family: "IPv6" });
    return (await iptablesPresent(runner)) ? runner : null;
  } catch {
    return null;
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
