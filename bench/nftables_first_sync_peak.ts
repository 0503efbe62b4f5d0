/**
 * Where a first nftables sync's peak RSS comes from, step by step, in-process (no kernel): the model; the
 * full render (NftIncrementalRenderer, its cache copied by compactCache, a collection asked for every 500
 * service ports unless `--no-collect`; as the agent renders it, without the service ports' chains, or with
 * `--text` the whole text); the first bounded transaction (the first chunk's service ports rendered; with
 * `--text` firstSyncTransactions' scan of the whole text); the rest of the bounded sequence; then a later
 * full sync not split (rendered whole, encoded into one netlink batch from its chunks; with `--text` from
 * the joined text). Each step prints the heap (after a collection only where said), VmRSS and the VmHWM
 * reached during that step: the peak is reset before each step (`echo 5 > /proc/self/clear_refs`). Nothing
 * here applies the transactions, so nothing collects between them (the agent's nft session does every 4
 * MiB): the last step's peak is not the agent's. With `--encode`, each transaction of the sequence is encoded
 * into a netlink batch as the agent's nft session encodes it (sent nowhere), with the session's collections
 * after each (forced every RELEASE_AFTER_BYTES of batches, young-generation otherwise), and the switch-over
 * (the last transaction, held back one step to know it is the last) is its own step.
 * Bun only, Linux; figures only, asserts nothing:
 *   ./node_modules/.bin/bun bench/nftables_first_sync_peak.ts [--services 10000] [--text] [--no-collect] [--encode]
 */
import process from "node:process";
import { readFileSync, writeFileSync } from "node:fs";
import { syntheticCluster } from "./synthetic_cluster.ts";
import { buildClusterModel } from "./cluster_model.ts";
import { nftRenderInputFor } from "./nftables_model.ts";
import { round } from "./stats.ts";
import { NftIncrementalRenderer } from "../lib/proxy/nftables/render/incremental.ts";
import {
  deferredFirstSyncTransactions,
  firstSyncTransactions,
} from "../lib/proxy/nftables/render/incremental_first_sync.ts";
import { releaseMemory, requestCollection } from "../lib/runtime/memory.ts";
import { anonymousSetNamer, NftBatchEncoder } from "../lib/proxy/nftables/netlink/batch.ts";
import { RELEASE_AFTER_BYTES } from "../lib/proxy/nftables/nft_session.ts";

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const MiB = 2 ** 20;

/** One step's figures; resets the peak for the next step. */
function step(label: string, collect = false): void {
  if (collect) releaseMemory();
  const status = readFileSync("/proc/self/status", "utf8");
  const kib = (field: string) => Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1]) / 1024;
  const heap = process.memoryUsage().heapUsed / MiB;
  console.log(
    `${label.padEnd(34)} heap ${round(heap, 1)} MiB${collect ? " (collected)" : ""}, ` +
      `VmRSS ${round(kib("VmRSS"), 1)}, step's VmHWM ${round(kib("VmHWM"), 1)}`,
  );
  writeFileSync("/proc/self/clear_refs", "5");
}

const services = Number(arg("services", "10000"));
const model = buildClusterModel(syntheticCluster({ services }));
const input = { ...nftRenderInputFor(model), services: model.services };
step("model", true);
const renderer = new NftIncrementalRenderer();
const text = process.argv.includes("--text");
// As the agent: a collection asked for every RENDER_COLLECT_EVERY service ports (`--no-collect`: none).
const collect = process.argv.includes("--no-collect") ? undefined : requestCollection;
const t0 = performance.now();
const full = renderer.sync(input, null, { deferServicePortChains: !text, collect });
console.log(`full render took ${round(performance.now() - t0, 0)} ms`);
const held = full.transactionChunks.reduce((n, c) => n + c.length + 1, 0);
step(`full render (${round(held / 1e6, 1)} MB held)`);
let parts = 0;
let bytes = 0;
const sequence = full.deferred === null
  ? firstSyncTransactions(full.transactionChunks)
  : deferredFirstSyncTransactions(full.deferred);
if (!process.argv.includes("--encode")) {
  for (const part of sequence) {
    parts++;
    bytes += part.length;
    if (parts === 1) step("first bounded transaction");
  }
  step(`the other ${parts - 1} (${round(bytes / 1e6, 1)} MB in all)`);
} else {
  // As the nft session: one encoder, our anonymous set names, elements of new sets by batch id.
  const encoder = new NftBatchEncoder();
  const opts = { anonymousSetName: anonymousSetNamer("kbnc"), elementsById: true };
  let sent = 0;
  let batchBytes = 0;
  const encode = (part: string): number => {
    const n = encoder.encode(part, 1, opts).bytes.length;
    sent += n;
    if (sent >= RELEASE_AFTER_BYTES) {
      sent = 0;
      releaseMemory();
    } else requestCollection();
    return n;
  };
  let held: string | null = null;
  for (const part of sequence) {
    if (held !== null) {
      batchBytes += encode(held);
      if (parts === 1) step("first bounded transaction, encoded");
    }
    parts++;
    bytes += part.length;
    held = part;
  }
  step(`the next ${parts - 2}, encoded (${round(batchBytes / 1e6, 1)} MB of batches)`);
  const switchOver = held!;
  held = null;
  const n = encode(switchOver);
  step(`the switch-over (${round(switchOver.length / 1e6, 1)} MB, ${round(n / 1e6, 1)} MB batch)`);
}
step("settled", true);
// A later full sync, not split (hourly, or after a failed bounded one): rendered whole and encoded into one
// netlink batch from its chunks (with `--text`: joined into one string first, as before).
const again = renderer.sync({ ...input, firstSync: false }, null);
const batch = new NftBatchEncoder().encode(text ? again.transaction : again.transactionChunks, 1);
step(`full sync not split (${round(batch.bytes.length / 1e6, 1)} MB batch)`);
step("settled", true);
(globalThis as Record<string, unknown>).benchKeep = [model, renderer, full];
