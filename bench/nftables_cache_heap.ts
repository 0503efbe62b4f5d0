/**
 * The JavaScriptCore heap a full nftables render leaves behind, with and without the incremental
 * renderer's cache (lib/proxy/nftables/render/incremental.ts, compacted after a full sync by
 * incremental_cache.ts): live bytes and capacity (bun:jsc heapStats, after full collections and
 * Bun.shrink), and RssAnon. Capacity above live is blocks the collector keeps because a few live cells
 * sit in each. Bun only; one renderer per process, as the agent has. Figures only, asserts nothing:
 *   ./node_modules/.bin/bun bench/nftables_cache_heap.ts [--services 5000] [--renderer incremental|full|none]
 */
import process from "node:process";
import { readFileSync } from "node:fs";
import { heapStats } from "bun:jsc";
import { syntheticCluster } from "./synthetic_cluster.ts";
import { buildClusterModel } from "./cluster_model.ts";
import { nftRenderInputFor } from "./nftables_model.ts";
import { round } from "./stats.ts";
import { NftIncrementalRenderer } from "../lib/proxy/nftables/render/incremental.ts";
import { renderNFTablesFullSync } from "../lib/proxy/nftables/render/render.ts";
import { releaseMemory } from "../lib/runtime/memory.ts";

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const MiB = 2 ** 20;

/** Heap live / capacity / strings' extra memory (MiB) and RssAnon after collections. */
function settled(): string {
  for (let k = 0; k < 3; k++) releaseMemory();
  const h = heapStats();
  const anon = Number(/RssAnon:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"))?.[1]) / 1024;
  return `heap live ${round(h.heapSize / MiB, 1)} MiB of capacity ${round(h.heapCapacity / MiB, 1)} ` +
    `(extra ${round(h.extraMemorySize / MiB, 1)}), ${h.objectCount} objects, RssAnon ${round(anon, 1)} MiB`;
}

const services = Number(arg("services", "5000"));
const renderer = arg("renderer", "incremental");
const model = buildClusterModel(syntheticCluster({ services }));
const input = { ...nftRenderInputFor(model), services: model.services };
(globalThis as Record<string, unknown>).benchModel = model;
await new Promise((resolve) => setTimeout(resolve, 0));
console.log(`${services} Services, model: ${settled()}`);
let kept: NftIncrementalRenderer | null = null;
const t = performance.now();
if (renderer === "incremental") {
  kept = new NftIncrementalRenderer();
  kept.sync(input, null);
} else if (renderer === "full") renderNFTablesFullSync({ ...input, services: input.services.values() });
const ms = performance.now() - t;
// The model and the renderer stay reachable (the transaction does not: the agent drops it once applied).
(globalThis as Record<string, unknown>).benchKept = [input, kept];
// Measured from a timer, as the agent releases memory: the render's frames are off the stack, which the
// collector scans conservatively (from the same frame a dead reference to the transaction, ~20 MB at
// 5k, stays reachable in about half the runs).
await new Promise((resolve) => setTimeout(resolve, 0));
console.log(`${renderer}: render ${round(ms)} ms; ${settled()}`);
