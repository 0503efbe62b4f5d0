/**
 * Where the agent's memory goes at a given size, measured in-process step by step (heap after a forced
 * GC, and RSS): the API objects as the informers hold them (parsed from JSON, like a LIST response), the
 * model (change trackers, EndpointSliceCache, ServicePortMap, EndpointsMap), the full payload, its
 * make-before-break split, and the drift check's expectation (derived from the render state).
 *
 *   bun bench/memory_breakdown.ts [--services=10000] [--apiserver-fields] [--reparse]
 *
 * `--apiserver-fields`: objects as a real apiserver sends them (managedFields, last-applied annotation,
 * owner references, targetRef; synthetic_cluster.ts withApiserverFields). Either way the objects go
 * through reduceObject, as ResourceSink.check does, and the step shows what the store then holds.
 *
 * The render, plan and drift-expectation steps follow the agent (backend.ts, host.ts): the payload stays in
 * chunks, the plan is built from the render's sections (`--reparse`: by re-reading the payload, as
 * restorePlanned does without sections), streamed (here: drained) chunk by chunk; the VmHWM line is the
 * process's peak after streaming.
 *
 * Run it under Bun (the agent's runtime); under Deno add --v8-flags=--expose-gc. A diagnostic for
 * README.md, not part of results.json.
 */
import { parseArgs } from "node:util";
import process from "node:process";
import { renderIptablesRules } from "../lib/proxy/iptables/render/render.ts";
import { expectationFromState } from "../lib/proxy/iptables/drift.ts";
import { type SyntheticCluster, syntheticCluster, withApiserverFields } from "./synthetic_cluster.ts";
import { EndpointValueTable } from "../lib/k8s/endpoint_values.ts";
import { reduceObject } from "../lib/k8s/reduce.ts";
import { buildClusterModel, renderInputFor } from "./cluster_model.ts";
import { payloadChunksOf, planSections, splitRestorePayload } from "../lib/proxy/iptables/restore_plan.ts";
import { readFileSync } from "node:fs";
import { round } from "./stats.ts";

/** Forces a full GC where the runtime allows it (Bun.gc, or V8's gc with --expose-gc). */
function gc(): void {
  const g = globalThis as { Bun?: { gc(sync: boolean): void }; gc?: () => void };
  if (g.Bun) g.Bun.gc(true);
  else g.gc?.();
}

/** Heap used and RSS after a GC, in MiB. */
function sample(): { heap: number; rss: number } {
  gc();
  const m = process.memoryUsage();
  return { heap: m.heapUsed / 2 ** 20, rss: m.rss / 2 ** 20 };
}

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    services: { type: "string", default: "10000" },
    "apiserver-fields": { type: "boolean", default: false },
    reparse: { type: "boolean", default: false },
  },
});
const n = Number(values.services);
const rows: Array<[string, number, number]> = [];
let prev = sample();
const step = (name: string) => {
  const now = sample();
  rows.push([name, round(now.heap - prev.heap), round(now.rss)]);
  prev = now;
};
step("baseline (modules loaded)");

// The informers hold objects decoded from the apiserver's JSON, not the generator's shared literals.
let received: SyntheticCluster | null = (() => {
  const generated = syntheticCluster({ services: n });
  const text = JSON.stringify(values["apiserver-fields"] ? withApiserverFields(generated) : generated);
  return JSON.parse(text) as SyntheticCluster;
})();
step(
  `API objects as received (${received.services.length} Services, ${received.endpointSlices.length} ` +
    `EndpointSlices${values["apiserver-fields"] ? ", with apiserver fields" : ""})`,
);
// What the informer store holds: each object through the sink's reduction (reduce.ts), the slices' endpoint
// values shared through one table per resource as the sink shares them (endpoint_values.ts).
const sliceValues = new EndpointValueTable();
const cluster: SyntheticCluster = {
  services: received.services.map((o) => reduceObject(o)),
  endpointSlices: received.endpointSlices.map((o) => reduceObject(o, sliceValues)),
  node: received.node,
};
received = null;
step("API objects as the store holds them (reduce.ts; the received copies dropped)");
const model = buildClusterModel(cluster);
step("model (trackers, slice cache, ServicePortMap, EndpointsMap)");
const full = renderIptablesRules(renderInputFor(model, { full: true, existingNatChains: new Set() }));
step(
  `full render result (payload ${
    round(chunkBytes(full.payloadChunks) / 2 ** 20)
  } MiB in chunks, state, chains)`,
);
const planned = values.reparse
  ? splitRestorePayload(full.payloadChunks, { backend: "nf_tables" })
  : planSections(full.sections!, full.payloadChunks, { backend: "nf_tables" });
step(`restore plan (${values.reparse ? "re-parsing the payload" : "from the render's sections"})`);
const streamed = drain(payloadChunksOf(planned));
const hwmBefore = vmHwm();
step(`plan streamed (${round(streamed / 2 ** 20)} MiB written in chunks; garbage collected)`);
const expectation = expectationFromState(full.state);
const sampled = expectation.serviceChains.sample(0, 32).chains.length;
step(`drift expectation (derived from the render state; ${expectation.serviceChains.size} service chains)`);

process.stdout.write(`memory at ${n} Services (heap deltas after GC; RSS of this process)\n`);
for (const [name, heap, rss] of rows) {
  process.stdout.write(`  ${name.padEnd(90)} heap +${String(heap).padStart(7)} MiB   rss ${rss} MiB\n`);
}
process.stdout.write(`  VmHWM of this process after streaming the plan: ${hwmBefore} MiB\n`);
// Keep everything alive until the end of the measurement.
if (planned.transactions.length < 0 || sampled < 0 || model.services.size < 0) process.exit(1);

/** Characters of a chunked payload. */
function chunkBytes(chunks: Iterable<string>): number {
  let n = 0;
  for (const c of chunks) n += c.length;
  return n;
}

/** Reads every chunk once, as the stdin writer does, keeping none. */
function drain(chunks: Iterable<string>): number {
  return chunkBytes(chunks);
}

/** Peak resident MiB of this process so far (Linux). */
function vmHwm(): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"));
  return m ? round(Number(m[1]) / 1024) : NaN;
}
