/**
 * Where a first full sync's render/plan peak goes, in-process: builds the synthetic cluster's model, then
 * runs the agent's path (full render without a state, the restore plan from the render's sections, the
 * plan drained chunk by chunk as the stdin writer reads it), then drops all but the render state. After
 * each step: JSC's heap size and capacity and its extra (string, buffer) memory, the allocator's bytes
 * in use, VmRSS, and VmHWM since the model was built (reset through /proc/self/clear_refs "5"). The steps
 * before a forced GC show what the render leaves behind; note that heap size and extra memory are only
 * recounted by a collection. Bun only (bun:jsc).
 *
 *   ./node_modules/.bin/bun bench/render_peak.ts [--services=10000] [--types] [--lib=<another lib/>] [--paced]
 *
 * `--paced`: the event loop turns every 4 chunks of the drain, as while the stdin writer waits for
 * iptables-restore (a renderer that renders as it is drained can then be collected meanwhile).
 * `--types`: the 12 most numerous object types with the result kept (after a GC). `--lib`: the renderer
 * and planner of another checkout (before/after figures; e.g. `git archive <commit> lib | tar -x -C dir`).
 * RSS figures move with the allocator's page purging (MIMALLOC_PURGE_DELAY=0 steadies them): compare
 * several runs, alternately. A diagnostic, not part of results.json.
 */
import { parseArgs } from "node:util";
import { readFileSync, writeFileSync } from "node:fs";
import process from "node:process";
import { resolve } from "node:path";
import type { renderIptablesRules as Render } from "../lib/proxy/iptables/render/render.ts";
import type * as Plan from "../lib/proxy/iptables/restore_plan.ts";
import type { RenderState } from "../lib/proxy/iptables/render/state.ts";
import { syntheticCluster } from "./synthetic_cluster.ts";
import { buildClusterModel, renderInputFor } from "./cluster_model.ts";
import { round } from "./stats.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    services: { type: "string", default: "10000" },
    types: { type: "boolean", default: false },
    lib: { type: "string", default: "" },
    paced: { type: "boolean", default: false },
  },
});
const lib = values.lib === "" ? new URL("../lib/", import.meta.url).pathname : resolve(values.lib) + "/";
const renderIptablesRules = (await import(`${lib}proxy/iptables/render/render.ts`))
  .renderIptablesRules as typeof Render;
const { payloadChunksOf, planSections } =
  (await import(`${lib}proxy/iptables/restore_plan.ts`)) as typeof Plan;
type HeapStats = {
  heapSize: number;
  heapCapacity: number;
  extraMemorySize: number;
  objectCount: number;
  objectTypeCounts: Record<string, number>;
};
const jsc = (await import("bun:jsc")) as unknown as {
  heapStats(): HeapStats;
  heapSize(): number;
  memoryUsage(): { current: number; peak: number };
};
const bun = (globalThis as unknown as { Bun: { gc(sync: boolean): void } }).Bun;
const mib = (b: number) => round(b / 2 ** 20);

/** VmRSS and VmHWM in MiB. */
function proc(): { rss: number; hwm: number } {
  const s = readFileSync("/proc/self/status", "utf8");
  const kib = (f: string) => Number(new RegExp(`^${f}:\\s+(\\d+) kB`, "m").exec(s)?.[1] ?? NaN);
  return { rss: round(kib("VmRSS") / 1024), hwm: round(kib("VmHWM") / 1024) };
}
/** Prints one step's figures. */
function report(name: string): void {
  const h = jsc.heapStats();
  const p = proc();
  process.stdout.write(
    `  ${name.padEnd(34)} heap ${mib(jsc.heapSize())}/${mib(h.heapCapacity)} MiB, extra ${
      mib(h.extraMemorySize)
    } MiB, ` +
      `malloc ${mib(jsc.memoryUsage().current)} MiB; rss ${p.rss} MiB, hwm ${p.hwm} MiB\n`,
  );
}

const n = Number(values.services);
const paced = values.paced;
const model = buildClusterModel(syntheticCluster({ services: n }));
bun.gc(true);
report("model built (after GC)");
writeFileSync("/proc/self/clear_refs", "5");
/** The agent's path for one full sync; returns what the sync keeps (the render state). */
async function sync(): Promise<RenderState> {
  let t0 = performance.now();
  const result = renderIptablesRules(renderInputFor(model, { full: true, existingNatChains: new Set() }));
  report(`full render (${round(performance.now() - t0)} ms)`);
  t0 = performance.now();
  // As the agent's backend: the whole payload's chunks only if the planner reads them (it does not).
  const payload = { [Symbol.iterator]: () => result.payloadChunks[Symbol.iterator]() };
  const plan = planSections(result.sections!, payload, { backend: "nf_tables" });
  report(`plan (${round(performance.now() - t0)} ms)`);
  let chars = 0;
  let chunks = 0;
  for (const c of payloadChunksOf(plan)) {
    chars += c.length;
    // As the stdin writer does, waiting for 'drain' (--paced): the event loop turns between chunks.
    if (paced && ++chunks % 4 === 0) await new Promise((r) => setTimeout(r, 0));
  }
  report(`drained (${mib(chars)} MiB${paced ? ", paced" : ""})`);
  bun.gc(true);
  report("after GC (result, plan kept)");
  if (values.types) {
    const counts = Object.entries(jsc.heapStats().objectTypeCounts).sort((a, b) => b[1] - a[1]).slice(0, 12);
    for (const [t, c] of counts) process.stdout.write(`    ${String(c).padStart(8)} ${t}\n`);
  }
  return result.state;
}

const state = await sync();
// What a sync keeps: the render state (for partial syncs and the drift check), not the payload or plan.
// Collected from a later task, so no stale stack slot of sync() keeps the result alive.
await new Promise((r) => setTimeout(r, 10));
bun.gc(true);
await new Promise((r) => setTimeout(r, 10));
bun.gc(true);
report("after GC (state kept)");
if (state.keys.length < 0 || model.services.size < 0) process.exit(1);
