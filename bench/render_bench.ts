/**
 * In-process compute figures for one cluster size: objects → model (change trackers), rule rendering of
 * a full sync and of a one-endpoint-change partial sync, payload sizes, and the make-before-break split
 * of the full payload (lib/proxy/iptables/restore_plan.ts, when present). Pure CPU: no iptables, no netns, so
 * it runs anywhere (the smoke test runs it on 50 Services). Times are medians of `repeats` runs.
 */
import { renderIptablesRules, type RenderResult } from "../lib/proxy/iptables/render/render.ts";
import { type SyntheticCluster, syntheticCluster } from "./synthetic_cluster.ts";
import {
  buildClusterModel,
  type ClusterModel,
  type ModelCounts,
  modelCounts,
  oneEndpointChange,
  plainServiceIndex,
  renderInputFor,
} from "./cluster_model.ts";
import { byteLength, countLines, round, summarize, type Summary } from "./stats.ts";

/** Size of a payload. */
export interface PayloadSize {
  readonly bytes: number;
  readonly lines: number;
}

/** The split plan of the full payload (restore_plan.ts), or why it was not measured. */
export interface PlanFigures {
  readonly available: boolean;
  /** Why not available ("" when it is). */
  readonly note: string;
  readonly splitMs?: Summary;
  readonly transactions?: number;
  readonly bytes?: number;
}

/** Everything measured for one size. */
export interface RenderFigures {
  readonly counts: ModelCounts;
  /** Objects → ServicePortMap/EndpointsMap through the change trackers (initial list). */
  readonly modelMs: Summary;
  readonly fullRenderMs: Summary;
  readonly full: PayloadSize;
  /** Applying the one-endpoint change to the model (tracker update + map apply). */
  readonly partialApplyMs: Summary;
  readonly partialRenderMs: Summary;
  readonly partial: PayloadSize;
  /** Partial bytes as a share of the full payload's bytes (percent). */
  readonly partialBytesPercent: number;
  /** What render.ts did at the time of the run: does a partial sync still rewrite nat KUBE-SERVICES? */
  readonly partialRewritesKubeServices: boolean;
  /** The renderer's mode for the partial syncs ("partial" = upstream's; "incremental" = shared-chain edits). */
  readonly partialMode: string;
  /** Upstream's partial sync of the same change, when render.ts also has an incremental mode. */
  readonly upstreamPartial:
    | (PayloadSize & { readonly renderMs: Summary; readonly bytesPercent: number })
    | null;
  /** nat KUBE-SERVICES rules in the full payload (the agent benchmarks wait for this many). */
  readonly kubeServicesRules: number;
  readonly largeClusterMode: boolean;
  readonly plan: PlanFigures;
}

/** Payloads kept for the restore benchmarks (not stored in results.json). */
export interface RenderArtifacts {
  readonly cluster: SyntheticCluster;
  readonly fullPayload: string;
  /**
   * Successive one-endpoint-change partial payloads as the agent's renderer writes them (incremental when
   * render.ts has that mode); [0] applies on top of fullPayload, [i] on top of [i - 1].
   */
  readonly partialPayloads: readonly string[];
  /** Upstream's partial sync of the next change, valid on top of the last of partialPayloads; null when
   * render.ts has no incremental mode (then partialPayloads already are upstream partial syncs). */
  readonly upstreamPartialPayload: string | null;
  /** The full payload as bounded transactions, or null when restore_plan.ts is unavailable. */
  readonly splitPayload: string | null;
  /** Index of the Service whose endpoint the partial sync changed. */
  readonly changedIndex: number;
}

/** Options of {@link benchRender}. */
export interface RenderBenchOptions {
  readonly services: number;
  readonly repeats?: number;
  readonly seed?: number;
}

/** A restore_plan.ts split function, loaded lazily so the bench still runs while that module is missing. */
type Splitter = (payload: string) => { transactions: number; payload: string };

/** Loads lib/proxy/iptables/restore_plan.ts; returns null and a reason when it is missing or unusable. */
export async function loadSplitter(): Promise<{ split: Splitter | null; note: string }> {
  try {
    const m = await import("../lib/proxy/iptables/restore_plan.ts");
    if (typeof m.splitRestorePayload !== "function" || typeof m.payloadOf !== "function") {
      return { split: null, note: "restore_plan.ts has no splitRestorePayload/payloadOf" };
    }
    return {
      split: (payload: string) => {
        const plan = m.splitRestorePayload(payload, { backend: "nf_tables" });
        return { transactions: plan.transactions.length, payload: m.payloadOf(plan) };
      },
      note: "",
    };
  } catch (e) {
    return { split: null, note: `lib/proxy/iptables/restore_plan.ts not loadable: ${(e as Error).message}` };
  }
}

/**
 * Calls the renderer with the previous sync's state as a second argument. render.ts takes it when it has
 * an incremental mode and ignores it otherwise, so the benchmark measures whichever renderer is there.
 */
function renderWithState(input: Parameters<typeof renderIptablesRules>[0], state: unknown): RenderResult {
  const render = renderIptablesRules as (input: unknown, previous: unknown) => RenderResult;
  return render(input, state ?? null);
}

function stateOf(r: RenderResult): unknown {
  return (r as { state?: unknown }).state ?? null;
}

function modeOf(r: RenderResult): string {
  return (r as { mode?: string }).mode ?? "partial";
}

function size(text: string): PayloadSize {
  return { bytes: byteLength(text), lines: countLines(text) };
}

/** nat-table lines of a payload that match `prefix`. */
function natLines(payload: string, prefix: string): number {
  const nat = payload.indexOf("\n*nat\n");
  if (nat === -1) return 0;
  let n = 0;
  for (const l of payload.slice(nat).split("\n")) if (l.startsWith(prefix)) n++;
  return n;
}

/** nat KUBE-SERVICES rules of the cluster's complete ruleset (one full render; what agents wait for). */
export function kubeServicesRuleCount(cluster: SyntheticCluster): number {
  const full = renderIptablesRules(
    renderInputFor(buildClusterModel(cluster), { full: true, existingNatChains: new Set() }),
  );
  return natLines(full.payload, "-A KUBE-SERVICES ");
}

/** Measures one cluster size. */
export async function benchRender(
  opts: RenderBenchOptions,
): Promise<{ figures: RenderFigures; artifacts: RenderArtifacts }> {
  const repeats = Math.max(1, opts.repeats ?? 5);
  const cluster = syntheticCluster({ services: opts.services, seed: opts.seed ?? 1 });

  const modelSamples: number[] = [];
  let model: ClusterModel | null = null;
  for (let i = 0; i < repeats; i++) {
    const t0 = performance.now();
    model = buildClusterModel(cluster);
    modelSamples.push(performance.now() - t0);
  }
  const m = model!;

  const fullSamples: number[] = [];
  let full: RenderResult | null = null;
  for (let i = 0; i < repeats; i++) {
    const t0 = performance.now();
    full = renderIptablesRules(renderInputFor(m, { full: true, existingNatChains: new Set() }));
    fullSamples.push(performance.now() - t0);
  }
  const fullResult = full!;

  // Partial syncs: each repeat moves the same endpoint to a new address, as successive events would, and
  // hands the renderer the previous sync's state (incremental mode, when render.ts has one). Then the
  // same with no previous state: upstream's partial sync, which rewrites the shared chains.
  const index = plainServiceIndex(cluster);
  let state: unknown = stateOf(fullResult);
  let active = fullResult.activeNatChains;
  const partialRun = (g: number, incremental: boolean) => {
    const t0 = performance.now();
    m.endpointsTracker.endpointSliceUpdate(oneEndpointChange(cluster, index, g), false);
    const svcResult = m.services.apply(m.serviceTracker);
    const epResult = m.endpoints.apply(m.endpointsTracker);
    const changed = new Set([...svcResult.updatedServices, ...epResult.updatedServices]);
    const t1 = performance.now();
    const input = renderInputFor(m, { full: false, changedServices: changed, existingNatChains: active });
    const r = incremental ? renderWithState(input, state) : renderIptablesRules(input);
    const t2 = performance.now();
    state = stateOf(r);
    active = r.activeNatChains;
    return { r, applyMs: t1 - t0, renderMs: t2 - t1 };
  };
  const applySamples: number[] = [];
  const partialSamples: number[] = [];
  const partialPayloads: string[] = [];
  let partial: RenderResult | null = null;
  for (let g = 1; g <= repeats; g++) {
    const { r, applyMs, renderMs } = partialRun(g, true);
    applySamples.push(applyMs);
    partialSamples.push(renderMs);
    partialPayloads.push(r.payload);
    partial = r;
  }
  const partialResult = partial!;
  const partialMode = modeOf(partialResult);
  const upstreamSamples: number[] = [];
  let upstreamPayload: string | null = null;
  if (partialMode === "incremental") {
    for (let g = repeats + 1; g <= 2 * repeats; g++) {
      const { r, renderMs } = partialRun(g, false);
      upstreamSamples.push(renderMs);
      upstreamPayload ??= r.payload;
    }
  }
  const partialPayload = partialPayloads[0];

  const splitter = await loadSplitter();
  let plan: PlanFigures = { available: false, note: splitter.note };
  let splitPayload: string | null = null;
  if (splitter.split !== null) {
    try {
      const samples: number[] = [];
      let out: { transactions: number; payload: string } | null = null;
      for (let i = 0; i < repeats; i++) {
        const t0 = performance.now();
        out = splitter.split(fullResult.payload);
        samples.push(performance.now() - t0);
      }
      splitPayload = out!.payload;
      plan = {
        available: true,
        note: "",
        splitMs: summarize(samples),
        transactions: out!.transactions,
        bytes: byteLength(splitPayload),
      };
    } catch (e) {
      plan = { available: false, note: `splitRestorePayload failed: ${(e as Error).message}` };
    }
  }

  const fullSize = size(fullResult.payload);
  const partialSize = size(partialPayload);
  const figures: RenderFigures = {
    counts: modelCounts(cluster, m),
    modelMs: summarize(modelSamples),
    fullRenderMs: summarize(fullSamples),
    full: fullSize,
    partialApplyMs: summarize(applySamples),
    partialRenderMs: summarize(partialSamples),
    partial: partialSize,
    partialBytesPercent: round((100 * partialSize.bytes) / fullSize.bytes, 2),
    partialRewritesKubeServices: natLines(partialPayload, ":KUBE-SERVICES ") > 0,
    partialMode,
    upstreamPartial: upstreamPayload === null ? null : {
      renderMs: summarize(upstreamSamples),
      ...size(upstreamPayload),
      bytesPercent: round((100 * byteLength(upstreamPayload)) / fullSize.bytes, 2),
    },
    kubeServicesRules: natLines(fullResult.payload, "-A KUBE-SERVICES "),
    largeClusterMode: fullResult.largeClusterMode,
    plan,
  };
  return {
    figures,
    artifacts: {
      cluster,
      fullPayload: fullResult.payload,
      partialPayloads,
      upstreamPartialPayload: upstreamPayload,
      splitPayload,
      changedIndex: index,
    },
  };
}
