/**
 * The agent's compute for a full sync's restore at N Services, in-process: the render, the restore plan
 * (from the render's sections, or `--reparse`: by re-reading the payload, as restorePlanned does without
 * sections) and the plan's text drained chunk by chunk as the stdin writer reads it. Medians in ms.
 *
 *   bun bench/restore_plan_time.ts [--services=10000] [--iterations=7] [--reparse]
 *
 * Prints figures; nothing goes to results.json.
 */
import { parseArgs } from "node:util";
import process from "node:process";
import { renderIptablesRules } from "../lib/proxy/iptables/render/render.ts";
import { payloadChunksOf, planSections, splitRestorePayload } from "../lib/proxy/iptables/restore_plan.ts";
import { syntheticCluster } from "./synthetic_cluster.ts";
import { buildClusterModel, renderInputFor } from "./cluster_model.ts";
import { summarize } from "./stats.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    services: { type: "string", default: "10000" },
    iterations: { type: "string", default: "7" },
    reparse: { type: "boolean", default: false },
  },
});
const model = buildClusterModel(syntheticCluster({ services: Number(values.services) }));
const render: number[] = [];
const plan: number[] = [];
const text: number[] = [];
const total: number[] = [];
for (let i = 0; i < Number(values.iterations); i++) {
  const t0 = performance.now();
  const full = renderIptablesRules(renderInputFor(model, { full: true, existingNatChains: new Set() }));
  const t1 = performance.now();
  const p = values.reparse
    ? splitRestorePayload(full.payloadChunks, { backend: "nf_tables" })
    : planSections(full.sections!, full.payloadChunks, { backend: "nf_tables" });
  const t2 = performance.now();
  let chars = 0;
  for (const c of payloadChunksOf(p)) chars += c.length;
  const t3 = performance.now();
  if (chars === 0) process.exit(1);
  render.push(t1 - t0);
  plan.push(t2 - t1);
  text.push(t3 - t2);
  total.push(t3 - t0);
}
const m = (a: number[]) => summarize(a).median;
process.stdout.write(
  `${values.services} Services, plan ${values.reparse ? "re-parsing the payload" : "from sections"}: ` +
    `render ${m(render)} ms, plan ${m(plan)} ms, plan text ${m(text)} ms, total ${m(total)} ms ` +
    `(medians of ${values.iterations})\n`,
);
