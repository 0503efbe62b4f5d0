/**
 * The shape of bench/results.json and the issue's targets evaluated on one run's figures. Targets are
 * ratios or bounds computed from figures measured in the same run; a figure that was not measured gives
 * "NOT MEASURED" with the reason, never a guess.
 */
import type { MachineInfo } from "./machine.ts";
import type { RenderFigures } from "./render_bench.ts";
import type { Backend, RestoreFigure, RestoreMode } from "./restore_bench.ts";
import type { AgentFigures, RssFigure } from "./agent_bench.ts";
import { round } from "./stats.ts";

/** Verdict of one target. */
export type TargetStatus = "PASS" | "MISS" | "NOT MEASURED";

/** One target with its measured value. */
export interface TargetResult {
  readonly id: string;
  readonly description: string;
  /** Measured value (in `unit`), or null when not measured. */
  readonly measured: number | null;
  readonly limit: number;
  readonly unit: string;
  readonly status: TargetStatus;
  /** How the value was obtained (the figures it is computed from), or why it is missing. */
  readonly detail: string;
}

/** bench/results.json. */
export interface BenchResults {
  readonly schema: 1;
  readonly mode: "full" | "ci" | "custom";
  readonly startedAt: string;
  readonly finishedAt: string;
  readonly durationS: number;
  readonly machine: MachineInfo;
  readonly binary: { readonly path: string; readonly bytes: number | null; readonly version: string } | null;
  readonly sizes: readonly number[];
  readonly render: Record<string, RenderFigures>;
  readonly restore: readonly RestoreFigure[];
  /** Fitted exponent k of time ≈ c·n^k per backend/mode over the measured sizes (null: < 2 points). */
  readonly restoreScaling: Record<string, number | null>;
  readonly agent: Record<string, AgentFigures>;
  readonly idleRss: { readonly rss: RssFigure | null; readonly note: string } | null;
  readonly targets: readonly TargetResult[];
  /** Stages not run, and why. */
  readonly skipped: readonly string[];
}

/** The figures targets are computed from (results.json minus the targets). */
export type Figures = Omit<BenchResults, "targets" | "finishedAt" | "durationS">;

function restoreOf(f: Figures, backend: Backend, mode: RestoreMode, n: number): RestoreFigure | undefined {
  return f.restore.find((r) => r.backend === backend && r.mode === mode && r.services === n);
}

function verdict(measured: number | null, limit: number): TargetStatus {
  if (measured === null || !Number.isFinite(measured)) return "NOT MEASURED";
  return measured <= limit ? "PASS" : "MISS";
}

function target(
  id: string,
  description: string,
  measured: number | null,
  limit: number,
  unit: string,
  detail: string,
): TargetResult {
  const m = measured === null || !Number.isFinite(measured) ? null : round(measured, 2);
  return { id, description, measured: m, limit, unit, status: verdict(m, limit), detail };
}

function missing(f: Figures, n: number, what: string): string {
  if (!f.sizes.includes(n)) return `${n} Services not in this run (sizes ${f.sizes.join(", ")})`;
  const a = f.agent[String(n)];
  if (what === "agent" && a !== undefined && a.note !== "") return a.note;
  return `${what} figure at ${n} Services missing`;
}

/** Evaluates the issue's six targets (seven checks) on a run's figures. */
export function evaluateTargets(f: Figures): TargetResult[] {
  const out: TargetResult[] = [];

  // 1. Start → all rules at 5000 Services ≤ 3 × plain restore of the final ruleset.
  {
    const a = f.agent["5000"]?.fromApiserver?.allRules;
    const plain = restoreOf(f, "nft", "plain", 5000);
    const ok = a != null && plain?.ok === true;
    out.push(target(
      "start-5k",
      "start → all rules programmed at 5000 Services, as a multiple of plain iptables-restore of the final ruleset",
      ok ? a.ms / plain.ms : null,
      3,
      "×",
      ok
        ? `start → all rules ${a.ms} ms (poll ${a.pollMs} ms) / plain restore ${plain.ms} ms`
        : missing(f, 5000, a == null ? "agent" : "plain restore"),
    ));
  }

  // 2. Full-sync compute ≤ 10% of the iptables-restore time at 10k Services.
  {
    const r = f.render["10000"];
    const split = restoreOf(f, "nft", "split", 10000);
    const single = restoreOf(f, "nft", "noflush", 10000);
    const restore = split?.ok ? split : single?.ok ? single : undefined;
    const plain = restoreOf(f, "nft", "plain", 10000);
    if (r !== undefined && restore !== undefined) {
      const compute = r.modelMs.median + r.fullRenderMs.median + (r.plan.splitMs?.median ?? 0);
      out.push(target(
        "compute-10k",
        "full-sync compute (objects → model → payload → split) at 10000 Services, % of the iptables-restore time",
        (100 * compute) / restore.ms,
        10,
        "%",
        `compute ${round(compute)} ms (model ${r.modelMs.median} + render ${r.fullRenderMs.median} + split ${
          r.plan.splitMs?.median ?? 0
        }) / nft ${restore.mode} restore ${restore.ms} ms` +
          (plain?.ok ? `; vs plain restore ${plain.ms} ms: ${round((100 * compute) / plain.ms)} %` : ""),
      ));
    } else {
      out.push(target(
        "compute-10k",
        "full-sync compute at 10000 Services, % of the iptables-restore time",
        null,
        10,
        "%",
        missing(f, 10000, "render/restore"),
      ));
    }
  }

  // 3a. One-endpoint change at 10k writes ≤ 2% of the full payload's bytes.
  {
    const r = f.render["10000"];
    out.push(target(
      "partial-bytes-10k",
      "one-endpoint-change partial sync at 10000 Services, % of the full payload's bytes",
      r?.partialBytesPercent ?? null,
      2,
      "%",
      r
        ? `${r.partial.bytes} of ${r.full.bytes} bytes (${r.partial.lines} of ${r.full.lines} lines); ` +
          `partial rewrites KUBE-SERVICES: ${r.partialRewritesKubeServices}`
        : missing(f, 10000, "render"),
    ));
  }

  // 3b. … and is in the kernel ≤ 100 ms after the event.
  {
    const c = f.agent["10000"]?.endpointChange;
    out.push(target(
      "change-latency-10k",
      "EndpointSlice change → rule in the kernel at 10000 Services (median)",
      c?.median ?? null,
      100,
      "ms",
      c
        ? `median of ${c.n}: ${c.median} ms (min ${c.min}, max ${c.max}; ${
          c.observedBy === "xtables-monitor" ? "commit seen by xtables-monitor" : `poll ${c.pollMs} ms`
        }; agent-logged sync ${
          c.agentReportedSyncMs?.median ?? "n/a"
        } ms; kernel floor of a rule-adding commit ${c.commitFloorMs ?? "n/a"} ms)`
        : missing(f, 10000, "agent"),
    ));
  }

  // 4. RSS ≤ 100 MB at 10k Services / 50k endpoints.
  {
    const rss = f.agent["10000"]?.settledRss;
    out.push(target(
      "rss-10k",
      "agent RSS after settling at 10000 Services (VmRSS, MiB)",
      rss?.vmRssMiB ?? null,
      100,
      "MiB",
      rss
        ? `VmRSS ${rss.vmRssMiB} MiB${
          rss.rssAnonMiB === undefined ? "" : ` (anon ${rss.rssAnonMiB}, file-backed ${rss.rssFileMiB})`
        }, peak VmHWM ${rss.vmHwmMiB} MiB`
        : missing(f, 10000, "agent"),
    ));
  }

  // 5. Idle RSS ≤ 55 MiB (was 60; the scale issue's figure).
  {
    const idle = f.idleRss;
    out.push(target(
      "rss-idle",
      "agent RSS idle (empty cluster, connected, after settling; VmRSS, MiB)",
      idle?.rss?.vmRssMiB ?? null,
      55,
      "MiB",
      idle?.rss
        ? `VmRSS ${idle.rss.vmRssMiB} MiB${
          idle.rss.rssAnonMiB === undefined
            ? ""
            : ` (anon ${idle.rss.rssAnonMiB}, file-backed ${idle.rss.rssFileMiB})`
        }, peak ${idle.rss.vmHwmMiB} MiB`
        : idle?.note || "idle RSS not measured in this run",
    ));
  }

  // 6. Start from the state cache to first programmed rule ≤ 300 ms at 1k Services.
  {
    const a = f.agent["1000"];
    const c = a?.fromCache;
    out.push(target(
      "cache-start-1k",
      "start from the state cache (apiserver unreachable) → first programmed rule at 1000 Services",
      c?.firstRule?.ms ?? null,
      300,
      "ms",
      c?.firstRule
        ? `first rule ${c.firstRule.ms} ms (poll ${c.firstRule.pollMs} ms), all rules ${
          c.allRules?.ms ?? "never"
        } ms, agent-logged first full sync ${c.agentReportedSyncMs ?? "n/a"} ms`
        : a?.cacheNote ?? missing(f, 1000, "agent"),
    ));
  }
  return out;
}
