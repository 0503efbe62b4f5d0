/**
 * What encoding a first sync's netlink batches costs in-process (no kernel): the bench's synthetic cluster
 * rendered and split into bounded transactions as the backend does, then each encoded as the nft session
 * does (lib/proxy/nftables/netlink/batch.ts NftBatchEncoder, our anonymous set names). Prints the encoding's
 * CPU time and the memory it leaves behind without a forced collection (RSS, VmHWM since the split, the
 * runtime's heap and external bytes), then after one; `--release-every MiB` collects as the session does
 * every that many MiB of batches. Figures only, asserts nothing:
 *   ./node_modules/.bin/bun bench/nftables_encode.ts [--sizes 5000] [--release-every 0] [--rounds 1]
 */
import process from "node:process";
import { readFileSync, writeFileSync } from "node:fs";
import { syntheticCluster } from "./synthetic_cluster.ts";
import { buildClusterModel } from "./cluster_model.ts";
import { nftRenderInputFor } from "./nftables_model.ts";
import { round } from "./stats.ts";
import { NftIncrementalRenderer } from "../lib/proxy/nftables/render/incremental.ts";
import { splitNFTablesFullSync } from "../lib/proxy/nftables/render/incremental_first_sync.ts";
import { anonymousSetNamer, NftBatchEncoder } from "../lib/proxy/nftables/netlink/batch.ts";
import { releaseMemory } from "../lib/runtime/memory.ts";

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const MiB = 2 ** 20;

/** VmRSS and VmHWM of this process, MiB. */
function status(): { rss: number; hwm: number } {
  const s = readFileSync("/proc/self/status", "utf8");
  const kb = (k: string) => Number(new RegExp(`${k}:\\s+(\\d+) kB`).exec(s)?.[1] ?? NaN) / 1024;
  return { rss: round(kb("VmRSS"), 1), hwm: round(kb("VmHWM"), 1) };
}

/** Heap and external bytes the runtime reports, MiB. */
function heap(): string {
  const m = process.memoryUsage();
  return `heap ${round(m.heapUsed / MiB, 1)} MiB, external ${round(m.external / MiB, 1)} MiB`;
}

const releaseEvery = Number(arg("release-every", "0")) * MiB;
for (const size of arg("sizes", "5000").split(",").map(Number)) {
  const model = buildClusterModel(syntheticCluster({ services: size }));
  const full = new NftIncrementalRenderer().sync(
    { ...nftRenderInputFor(model), services: model.services },
    null,
  );
  const parts = splitNFTablesFullSync(full.transaction, {});
  for (let r = 0; r < Number(arg("rounds", "1")); r++) {
    releaseMemory();
    // VmHWM from here (Linux: "5" to clear_refs resets it to the current RSS).
    writeFileSync("/proc/self/clear_refs", "5");
    const before = status();
    const beforeHeap = heap();
    const encoder = new NftBatchEncoder();
    const opts = { anonymousSetName: anonymousSetNamer("kbench"), elementsById: true };
    let bytes = 0;
    let sinceRelease = 0;
    let releases = 0;
    const cpu0 = process.cpuUsage();
    const t = performance.now();
    for (const p of parts) {
      const n = encoder.encode(p, 1, opts).bytes.length;
      bytes += n;
      sinceRelease += n;
      if (releaseEvery > 0 && sinceRelease >= releaseEvery) {
        sinceRelease = 0;
        releases++;
        releaseMemory();
      }
    }
    const ms = performance.now() - t;
    const cpu = process.cpuUsage(cpu0);
    const after = status();
    const afterHeap = heap();
    releaseMemory();
    const collected = status();
    console.log(
      `${size} Services, ${parts.length} transactions, ${round(bytes / 1e6, 2)} MB of batches: encoding ` +
        `${round(ms)} ms (user ${round(cpu.user / 1000)} ms, ${releases} collections)\n` +
        `  before: RSS ${before.rss} MiB, ${beforeHeap}\n` +
        `  after:  RSS ${after.rss} MiB (+${round(after.rss - before.rss, 1)}), VmHWM ${after.hwm} MiB ` +
        `(+${round(after.hwm - before.rss, 1)}), ${afterHeap}\n` +
        `  after a collection: RSS ${collected.rss} MiB, ${heap()}; encoder keeps ${
          round(encoder.retainedBytes / MiB, 2)
        } MiB`,
    );
  }
}
