/**
 * The benchmark suite's entry point (`npm run bench` → bench/run.sh → this file under Bun, the runtime
 * the compiled agent uses). Measures, per cluster size: compute (render_bench.ts), iptables-restore in
 * scratch namespaces (restore_bench.ts) and the compiled agent end to end (agent_bench.ts); evaluates the
 * targets (results.ts); prints the tables and writes bench/results.json and bench/results.md. Never
 * asserts timings: a missed target is a figure, and the exit code is 0 unless the harness itself broke.
 *
 *   bun bench/main.ts [--ci] [--sizes=1000,5000,10000] [--trap-sizes=2000] [--only=render,restore,agent,idle]
 *                     [--binary=dist/edgeproxy] [--restore-timeout=300] [--changes=5] [--repeats=5]
 *                     [--out=bench/results.json] [--reuse=<earlier results.json for the stages not run>]
 *                     [--idle-settle=<seconds after the idle agent's first sync, 35>]
 */
import { parseArgs } from "node:util";
import { readFileSync, statSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { join, relative } from "node:path";
import process from "node:process";
import { machineInfo } from "./machine.ts";
import { benchRender, type RenderFigures } from "./render_bench.ts";
import {
  type Backend,
  benchRestore,
  predictMs,
  type RestoreFigure,
  type RestoreMode,
  restoreUnavailableReason,
  skipKey,
} from "./restore_bench.ts";
import { type AgentFigures, agentUnavailableReason, benchAgent, benchIdleRss } from "./agent_bench.ts";
import { type BenchResults, evaluateTargets, type Figures } from "./results.ts";
import { resultsMarkdown, resultTables, tableText } from "./report.ts";
import { run } from "../tests/support/netns.ts";
import { round, scalingExponent } from "./stats.ts";
import { syntheticCluster } from "./synthetic_cluster.ts";

const REPO = fileURLToPath(new URL("..", import.meta.url));

/** Stages that can be selected with --only. */
export type Stage = "render" | "restore" | "agent" | "idle";

/** Parsed command line. */
export interface BenchOptions {
  readonly mode: "full" | "ci" | "custom";
  /** Sizes measured by every stage. */
  readonly sizes: readonly number[];
  /** Extra sizes measured by render + restore only (the --noflush scaling trap). */
  readonly trapSizes: readonly number[];
  readonly stages: ReadonlySet<Stage>;
  readonly binary: string;
  readonly restoreTimeoutMs: number;
  readonly changes: number;
  readonly repeats: number;
  readonly out: string;
  /** An earlier results.json whose figures fill the stages not selected now (e.g. re-running the agent only). */
  readonly reuse: string | null;
  /** Idle RSS is read this long after the idle agent's first sync: past one full resync and drift check. */
  readonly idleSettleMs: number;
}

function numbers(s: string, flag: string): number[] {
  const out = s.split(",").filter((x) => x.trim() !== "").map((x) => Number(x.trim()));
  if (out.some((n) => !Number.isInteger(n) || n <= 0)) {
    throw new Error(`--${flag}: positive integers, got ${s}`);
  }
  return out;
}

/** Parses argv (without the runtime and script). Throws with a one-line message on bad input. */
export function parseBenchArgs(argv: readonly string[]): BenchOptions {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      ci: { type: "boolean", default: false },
      sizes: { type: "string" },
      "trap-sizes": { type: "string" },
      only: { type: "string" },
      binary: { type: "string" },
      "restore-timeout": { type: "string" },
      changes: { type: "string" },
      repeats: { type: "string" },
      out: { type: "string" },
      reuse: { type: "string" },
      "idle-settle": { type: "string" },
    },
    strict: true,
  });
  const ci = values.ci === true;
  const custom = values.sizes !== undefined || values["trap-sizes"] !== undefined ||
    values.only !== undefined;
  const stages = new Set<Stage>(["render", "restore", "agent", "idle"]);
  if (values.only !== undefined) {
    stages.clear();
    for (const s of values.only.split(",")) {
      if (!["render", "restore", "agent", "idle"].includes(s)) throw new Error(`--only: unknown stage ${s}`);
      stages.add(s as Stage);
    }
  }
  const int = (v: string | undefined, flag: string, dflt: number) => {
    if (v === undefined) return dflt;
    const n = Number(v);
    if (!Number.isFinite(n) || n <= 0) throw new Error(`--${flag}: a positive number, got ${v}`);
    return n;
  };
  return {
    mode: custom ? "custom" : ci ? "ci" : "full",
    sizes: values.sizes !== undefined ? numbers(values.sizes, "sizes") : ci ? [1000] : [1000, 5000, 10000],
    trapSizes: values["trap-sizes"] !== undefined
      ? numbers(values["trap-sizes"], "trap-sizes")
      : ci
      ? [2000]
      : [2000],
    stages,
    binary: values.binary ?? join(REPO, "dist/edgeproxy"),
    restoreTimeoutMs: int(values["restore-timeout"], "restore-timeout", ci ? 60 : 300) * 1000,
    changes: int(values.changes, "changes", ci ? 3 : 5),
    repeats: int(values.repeats, "repeats", ci ? 3 : 5),
    out: values.out ?? join(REPO, "bench/results.json"),
    reuse: values.reuse ?? null,
    idleSettleMs: int(values["idle-settle"], "idle-settle", 35) * 1000,
  };
}

const t0 = performance.now();
function progress(m: string): void {
  process.stderr.write(`[${((performance.now() - t0) / 1000).toFixed(1).padStart(6)} s] ${m}\n`);
}

async function binaryInfo(path: string): Promise<BenchResults["binary"]> {
  let bytes: number | null = null;
  try {
    bytes = statSync(path).size;
  } catch {
    return { path, bytes: null, version: "missing" };
  }
  const r = await run([path, "--version"], { timeoutMs: 10_000 }).catch((e) => ({
    code: -1,
    stdout: "",
    stderr: (e as Error).message,
  }));
  return { path, bytes, version: r.code === 0 ? r.stdout.trim() : `--version failed: ${r.stderr.trim()}` };
}

/** Runs the selected stages and returns the results (the caller writes them). */
export async function runBench(o: BenchOptions): Promise<BenchResults> {
  const startedAt = new Date().toISOString();
  const machine = await machineInfo();
  progress(
    `machine: ${machine.nproc} × ${machine.cpuModel}, ${machine.iptables}; harness ${machine.runtime}`,
  );
  const skipped: string[] = [];
  const render: Record<string, RenderFigures> = {};
  const restore: RestoreFigure[] = [];
  const agent: Record<string, AgentFigures> = {};

  const restoreReason = o.stages.has("restore") ? await restoreUnavailableReason() : "not selected";
  if (restoreReason !== "" && o.stages.has("restore")) skipped.push(`restore: ${restoreReason}`);
  let agentReason = "";
  let binary: BenchResults["binary"] = null;
  if (o.stages.has("agent") || o.stages.has("idle")) {
    binary = await binaryInfo(o.binary);
    agentReason = agentUnavailableReason(o.binary) ||
      (binary?.version.startsWith("--version failed") ? `${o.binary} ${binary.version}` : "") ||
      (restoreReason !== "" && restoreReason !== "not selected" ? restoreReason : "");
    if (agentReason !== "") skipped.push(`agent: ${agentReason}`);
  }

  const all = [...new Set([...o.sizes, ...o.trapSizes])].sort((a, b) => a - b);
  for (const n of all) {
    const main = o.sizes.includes(n);
    progress(`${n} Services: rendering`);
    const { figures, artifacts } = await benchRender({ services: n, repeats: o.repeats });
    render[String(n)] = figures;
    progress(
      `${n} Services: model ${figures.modelMs.median} ms, full render ${figures.fullRenderMs.median} ms ` +
        `(${figures.full.bytes} B), partial render ${figures.partialRenderMs.median} ms (${figures.partial.bytes} B)`,
    );

    if (o.stages.has("restore") && restoreReason === "") {
      const skip = new Map<string, string>();
      // The quadratic --noflush trap: do not start a run predicted to exceed the limit.
      for (const backend of ["nft", "legacy"] as Backend[]) {
        const pts = restore.filter((r) => r.backend === backend && r.mode === "noflush" && r.ok)
          .map((r) => [r.services, r.ms] as const);
        const p = predictMs(pts, n);
        if (p !== null && p > o.restoreTimeoutMs) {
          skip.set(
            skipKey(backend, "noflush"),
            `predicted ${round(p / 1000)} s from ${pts.map(([s, t]) => `${s}: ${t} ms`).join(", ")} > the ${
              o.restoreTimeoutMs / 1000
            } s limit`,
          );
        }
      }
      const modes: RestoreMode[] = main
        ? ["plain", "noflush", "split", "partial"]
        : ["plain", "noflush", "split"];
      restore.push(
        ...await benchRestore({
          services: n,
          fullPayload: artifacts.fullPayload,
          partialPayloads: artifacts.partialPayloads,
          upstreamPartialPayload: artifacts.upstreamPartialPayload,
          splitPayload: artifacts.splitPayload,
          backends: ["nft", "legacy"],
          modes,
          timeoutMs: o.restoreTimeoutMs,
          skip,
        }, progress),
      );
    }

    if (main && o.stages.has("agent") && agentReason === "") {
      agent[String(n)] = await benchAgent({
        binary: o.binary,
        cluster: artifacts.cluster,
        kubeServicesRules: figures.kubeServicesRules,
        changedIndex: artifacts.changedIndex,
        changes: o.changes,
        startTimeoutMs: Math.max(60_000, o.restoreTimeoutMs),
        changeTimeoutMs: 60_000,
        settleMs: 3000,
        cacheStart: n === Math.min(...o.sizes) || n === 1000,
        progress,
      });
      if (agent[String(n)].note) progress(`agent ${n} Services: ${agent[String(n)].note}`);
    }
  }

  let idleRss: BenchResults["idleRss"] = null;
  if (o.stages.has("idle") && agentReason === "") {
    progress("idle agent (empty cluster)");
    idleRss = await benchIdleRss(o.binary, syntheticCluster({ services: 0 }).node, o.idleSettleMs, 60_000);
  }

  if (o.reuse !== null) {
    const old = JSON.parse(readFileSync(o.reuse, "utf8")) as BenchResults;
    const note = `figures reused from ${o.reuse} (run started ${old.startedAt})`;
    if (!o.stages.has("restore")) {
      restore.push(...old.restore);
      skipped.push(`restore: ${note}`);
    }
    if (!o.stages.has("render")) {
      Object.assign(render, old.render);
      skipped.push(`render: ${note}`);
    }
    if (!o.stages.has("agent")) {
      Object.assign(agent, old.agent);
      skipped.push(`agent: ${note}`);
    }
  }

  const restoreScaling: Record<string, number | null> = {};
  for (const backend of ["nft", "legacy"] as Backend[]) {
    for (const mode of ["plain", "noflush", "split"] as RestoreMode[]) {
      const pts = restore.filter((r) => r.backend === backend && r.mode === mode && r.ok)
        .map((r) => [r.services, r.ms] as const);
      if (pts.length > 0) restoreScaling[`${backend}/${mode}`] = scalingExponent(pts);
    }
  }

  const figures: Figures = {
    schema: 1,
    mode: o.mode,
    startedAt,
    machine,
    binary,
    sizes: o.sizes,
    render,
    restore,
    restoreScaling,
    agent,
    idleRss,
    skipped,
  };
  const results: BenchResults = {
    ...figures,
    finishedAt: new Date().toISOString(),
    durationS: round((performance.now() - t0) / 1000),
    targets: evaluateTargets(figures),
  };
  return results;
}

if (import.meta.main) {
  let opts: BenchOptions;
  try {
    opts = parseBenchArgs(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(`bench: ${(e as Error).message}\n`);
    process.exit(2);
  }
  const results = await runBench(opts);
  writeFileSync(opts.out, JSON.stringify(results, null, 2) + "\n");
  // bench/results.json → bench/results.md (any other --out gets its .md beside it).
  writeFileSync(opts.out.replace(/(\.json)?$/, ".md"), resultsMarkdown(results));
  process.stdout.write(`\n${resultTables(results).map(tableText).join("\n\n")}\n\n`);
  process.stdout.write(`wrote ${relative(process.cwd(), opts.out)}\n`);
  process.exit(0);
}
