/**
 * Heap the nftables incremental renderer keeps between syncs, and the time of a full sync's render, at
 * N Services of the synthetic cluster (in-process; no kernel). Prints figures; asserts nothing. V8's
 * heap figures after a forced collection are the steadier ones:
 *   deno run -A --v8-flags=--expose-gc bench/nftables_memory.ts [--sizes 5000,10000]
 * (under Bun: ./node_modules/.bin/bun bench/nftables_memory.ts).
 */
import process from "node:process";
import { syntheticCluster } from "./synthetic_cluster.ts";
import { buildClusterModel } from "./cluster_model.ts";
import { nftRenderInputFor } from "./nftables_model.ts";
import { round } from "./stats.ts";
import { NftIncrementalRenderer } from "../lib/proxy/nftables/render/incremental.ts";

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

/** Heap in use after a full collection, MiB. */
function heapMiB(): number {
  const g = globalThis as { Bun?: { gc(full: boolean): void }; gc?: () => void };
  for (let i = 0; i < 3; i++) g.Bun?.gc(true) ?? g.gc?.();
  return process.memoryUsage().heapUsed / 2 ** 20;
}

for (const size of arg("sizes", "5000,10000").split(",").map(Number)) {
  const model = buildClusterModel(syntheticCluster({ services: size }));
  const input = { ...nftRenderInputFor(model), services: model.services };
  const before = heapMiB();
  const inc = new NftIncrementalRenderer();
  const t = performance.now();
  let full: { transaction: string } | null = inc.sync(input, null);
  const renderMs = performance.now() - t;
  const bytes = full.transaction.length;
  const withTx = heapMiB();
  // What stays: the renderer's cache (the transaction goes once applied).
  full = null;
  const kept = heapMiB();
  console.log(
    `${size} Services (${model.services.size} service ports): full sync render + cache ${
      round(renderMs)
    } ms, ` +
      `${round(bytes / 1e6, 2)} MB; heap retained by the renderer ${round(kept - before, 1)} MiB ` +
      `(with the transaction alive ${round(withTx - before, 1)} MiB)`,
  );
  if (inc.elementCounts().size === 0) console.log("(no elements)");
}
