/**
 * A profiling target for the compute path: builds the synthetic cluster's model, then repeats one phase
 * (the full render, or the one-endpoint-change partial render) often enough to dominate a CPU profile.
 *
 *   deno run -A --cpu-prof-dir=/tmp/prof --cpu-prof-md bench/profile_render.ts --services=10000 --phase=partial
 *
 * Prints the per-iteration time; the profile (and its Markdown summary) is written by Deno on exit.
 */
import { parseArgs } from "node:util";
import process from "node:process";
import { renderIptablesRules, type RenderResult } from "../lib/proxy/iptables/render/render.ts";
import { syntheticCluster } from "./synthetic_cluster.ts";
import { buildClusterModel, oneEndpointChange, plainServiceIndex, renderInputFor } from "./cluster_model.ts";
import { round, summarize } from "./stats.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    services: { type: "string", default: "10000" },
    phase: { type: "string", default: "partial" },
    iterations: { type: "string", default: "20" },
  },
});
const n = Number(values.services);
const iterations = Number(values.iterations);
const cluster = syntheticCluster({ services: n });
const model = buildClusterModel(cluster);
const render = renderIptablesRules as (input: unknown, previous: unknown) => RenderResult;
let last = render(renderInputFor(model, { full: true, existingNatChains: new Set() }), null);
const index = plainServiceIndex(cluster);
const samples: number[] = [];
for (let i = 1; i <= iterations; i++) {
  if (values.phase === "full") {
    const t0 = performance.now();
    last = render(renderInputFor(model, { full: true, existingNatChains: new Set() }), null);
    samples.push(performance.now() - t0);
    continue;
  }
  const t0 = performance.now();
  model.endpointsTracker.endpointSliceUpdate(oneEndpointChange(cluster, index, i), false);
  const a = model.services.apply(model.serviceTracker);
  const b = model.endpoints.apply(model.endpointsTracker);
  const changed = new Set([...a.updatedServices, ...b.updatedServices]);
  last = render(
    renderInputFor(model, { full: false, changedServices: changed, existingNatChains: last.activeNatChains }),
    (last as { state?: unknown }).state ?? null,
  );
  samples.push(performance.now() - t0);
}
const s = summarize(samples);
process.stdout.write(
  `${values.phase} render at ${n} Services: median ${s.median} ms (min ${s.min}, max ${s.max}, n ${s.n}); ` +
    `last payload ${round(last.payload.length / 1024)} KiB\n`,
);
