/**
 * Peak memory and CPU of the rule renderer at one cluster size: builds the synthetic cluster's model (as
 * bench/render_bench.ts does), then measures, each with its own peak RSS (VmHWM from /proc/self/status,
 * reset between phases through /proc/self/clear_refs "5", so the model build does not count):
 *  - a full render without a previous state (the first sync after start or after a failure);
 *  - a full render given the previous state (the proxier's periodic full sync: hashes reused);
 *  - joining the payload chunks into one string (what a string-only restore writer needs);
 *  - a series of one-endpoint-change incremental renders (median time, peak).
 *
 *   ./node_modules/.bin/bun bench/render_mem.ts [--services=10000] [--partials=20]
 *   ./node_modules/.bin/deno run -A --v8-flags=--expose-gc bench/render_mem.ts [--services=10000]
 *
 * `--renderer=PATH` loads another render.ts (e.g. a checkout of an older commit) for before/after
 * figures; results it does not have (payloadChunks, work) are printed as "-". A diagnostic, not part of
 * results.json.
 */
import { parseArgs } from "node:util";
import { readFileSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import process from "node:process";
import type { RenderInput, RenderResult } from "../lib/proxy/iptables/render/render.ts";
import { syntheticCluster } from "./synthetic_cluster.ts";
import { buildClusterModel, oneEndpointChange, plainServiceIndex, renderInputFor } from "./cluster_model.ts";
import { round, summarize } from "./stats.ts";

/** Forces a full GC where the runtime allows it (Bun.gc, or V8's gc with --expose-gc). */
function gc(): void {
  const g = globalThis as { Bun?: { gc(sync: boolean): void }; gc?: () => void };
  if (g.Bun) g.Bun.gc(true);
  else g.gc?.();
}

/** VmRSS and VmHWM of this process in MiB (NaN where /proc is unavailable). */
function procMem(): { rss: number; hwm: number } {
  try {
    const status = readFileSync("/proc/self/status", "utf8");
    const kib = (field: string) =>
      Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(status)?.[1] ?? NaN);
    return { rss: round(kib("VmRSS") / 1024), hwm: round(kib("VmHWM") / 1024) };
  } catch {
    return { rss: NaN, hwm: NaN };
  }
}

/** Resets VmHWM to the current RSS (Linux clear_refs "5"); false when not permitted. */
function resetPeak(): boolean {
  try {
    writeFileSync("/proc/self/clear_refs", "5");
    return true;
  } catch {
    return false;
  }
}

type Render = (input: RenderInput, previous?: unknown) => RenderResult;
/** Fields older renderers lack. */
type Extras = { payloadChunks?: readonly string[]; work?: { hashes: number }; state?: unknown };

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    services: { type: "string", default: "10000" },
    partials: { type: "string", default: "20" },
    renderer: { type: "string", default: "" },
  },
});
const n = Number(values.services);
const partials = Number(values.partials);
const modulePath = values.renderer === ""
  ? "../lib/proxy/iptables/render/render.ts"
  : resolve(values.renderer);
const render = (await import(modulePath)).renderIptablesRules as Render;
const runtime = (globalThis as { Bun?: unknown }).Bun ? "bun" : "Deno" in globalThis ? "deno" : "node";
const out = (line: string) => process.stdout.write(line + "\n");
const chunksOf = (r: RenderResult) => (r as Extras).payloadChunks ?? null;
const hashesOf = (r: RenderResult) => (r as Extras).work?.hashes ?? "-";

const cluster = syntheticCluster({ services: n });
const model = buildClusterModel(cluster);
let endpoints = 0;
for (const eps of model.endpoints.values()) endpoints += eps.length;
gc();
const start = procMem();
out(
  `render memory at ${n} Services (${model.services.size} service ports, ${endpoints} endpoints), ` +
    `${runtime}, ${values.renderer || "lib/proxy/iptables/render/render.ts"}`,
);
out(`  model built:              rss ${start.rss} MiB, peak so far ${start.hwm} MiB`);

const canReset = resetPeak();
if (!canReset) out("  (cannot reset VmHWM: phase peaks below include the model build)");

// 1. Full render, no previous state. Chunks are not joined here (a streaming writer would not).
let t0 = performance.now();
let last: RenderResult = render(renderInputFor(model, { full: true, existingNatChains: new Set() }), null);
const fullMs = performance.now() - t0;
const fullPeak = procMem();
const chunks = chunksOf(last);
const chars = chunks === null ? last.payload.length : chunks.reduce((a, c) => a + c.length, 0);
out(
  `  full render:              peak ${fullPeak.hwm} MiB (+${
    round(fullPeak.hwm - start.rss)
  } over the model), ` +
    `${round(fullMs)} ms, ${hashesOf(last)} hashes, payload ${round(chars / 2 ** 20)} MiB in ${
      chunks?.length ?? "one string"
    }${chunks === null ? "" : " chunks"}`,
);

// 2. Full render given the previous state (what the proxier's periodic full sync does).
const previous = (last as Extras).state ?? null;
last = null as unknown as RenderResult;
gc();
if (canReset) resetPeak();
const before2 = procMem();
t0 = performance.now();
last = render(renderInputFor(model, { full: true, existingNatChains: new Set() }), previous);
const againMs = performance.now() - t0;
const againPeak = procMem();
out(
  `  full render with state:   peak ${againPeak.hwm} MiB (+${round(againPeak.hwm - before2.rss)}), ` +
    `${round(againMs)} ms, ${hashesOf(last)} hashes`,
);

// 3. The payload as one string.
if (canReset) resetPeak();
const before3 = procMem();
t0 = performance.now();
const joined = last.payload.length;
const joinPeak = procMem();
out(
  `  payload as one string:    peak ${joinPeak.hwm} MiB (+${round(joinPeak.hwm - before3.rss)}), ` +
    `${round(performance.now() - t0)} ms, ${joined} chars`,
);
gc();
const retained = procMem();
out(`  after GC, result kept:    rss ${retained.rss} MiB`);

// 4. One-endpoint changes, each handed the previous state and active-chain set.
const index = plainServiceIndex(cluster);
const samples: number[] = [];
if (canReset) resetPeak();
for (let g = 1; g <= partials; g++) {
  model.endpointsTracker.endpointSliceUpdate(oneEndpointChange(cluster, index, g), false);
  const a = model.services.apply(model.serviceTracker);
  const b = model.endpoints.apply(model.endpointsTracker);
  const changed = new Set([...a.updatedServices, ...b.updatedServices]);
  t0 = performance.now();
  last = render(
    renderInputFor(model, { full: false, changedServices: changed, existingNatChains: last.activeNatChains }),
    (last as Extras).state ?? null,
  );
  samples.push(performance.now() - t0);
}
const partialPeak = procMem();
const s = summarize(samples);
out(
  `  ${partials} incremental renders: peak ${partialPeak.hwm} MiB, render median ${s.median} ms ` +
    `(min ${s.min}, max ${s.max}), mode ${last.mode}, ${hashesOf(last)} hashes, last payload ` +
    `${last.payload.length} chars`,
);
// Keep the model alive until the end of the measurement.
if (model.services.size < 0) process.exit(1);
