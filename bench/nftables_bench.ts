/**
 * nftables programming figures in scratch network namespaces (prints figures; asserts nothing):
 *  - first sync per size: render time and bytes; one `nft -f -` transaction (sizes up to --single-max)
 *    against the bounded sequence (lib/proxy/nftables/render/incremental_first_sync.ts), per-transaction
 *    maximum and total;
 *  - one-endpoint change at the largest size: incremental render (render/incremental.ts) time, payload
 *    bytes and commit time through the nft session (libnftables under Bun) and through `nft -f -`,
 *    beside upstream's partial sync of the same kind of change (every service walked) through `nft -f -`.
 * Needs root and nft. Run with Bun (libnftables through bun:ffi):
 *   ./node_modules/.bin/bun bench/nftables_bench.ts [--sizes 1000,5000,10000] [--single-max 5000]
 *     [--chunk N | --budget B] [--changes 9]
 */
import { NetnsScope } from "../tests/support/netns.ts";
import { syntheticCluster } from "./synthetic_cluster.ts";
import { buildClusterModel, oneEndpointChange, plainServiceIndex } from "./cluster_model.ts";
import { nftRenderInputFor } from "./nftables_model.ts";
import { byteLength, round, summarize } from "./stats.ts";
import { renderNFTablesFullSync, renderNFTablesSync } from "../lib/proxy/nftables/render/render.ts";
import { NftIncrementalRenderer } from "../lib/proxy/nftables/render/incremental.ts";
import { splitNFTablesFullSync } from "../lib/proxy/nftables/render/incremental_first_sync.ts";
import { type NftSession, openNftSession } from "../lib/proxy/nftables/nft_session.ts";
import process from "node:process";
import { readFileSync, writeFileSync } from "node:fs";

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

const sizes = arg("sizes", "1000,5000,10000").split(",").map(Number);
const singleMax = Number(arg("single-max", "5000"));
// A fixed chunk size; none: the splitter's adaptive bound (--budget, default its own).
const chunk = arg("chunk", "") === "" ? undefined : Number(arg("chunk", ""));
const budget = arg("budget", "") === "" ? undefined : Number(arg("budget", ""));
const changes = Number(arg("changes", "9"));
// Netlink batches exactly as nft writes them (nft's anonymous set names), for a before/after.
const nftNames = process.argv.includes("--nft-names");
const scope = new NetnsScope("nftbench");

/** A session through one writer: our netlink batches, libnftables (large ones to `nft -f -`), or `nft -f -`. */
async function session(
  nsName: string,
  prefix: readonly string[],
  writer: "netlink" | "libnftables" | "nft",
): Promise<NftSession> {
  return await openNftSession({
    commandPrefix: prefix,
    netnsPath: `/var/run/netns/${nsName}`,
    libnftables: writer === "libnftables",
    netlink: writer === "netlink",
    nftIdenticalBatches: nftNames,
    timeoutMs: 600_000,
  });
}

async function timeRun(s: NftSession, tx: string): Promise<number> {
  const t = performance.now();
  await s.run(tx);
  return performance.now() - t;
}

const ms = (x: number) => `${round(x)} ms`;

/** Resets this process's VmHWM to its current RSS (Linux: "5" to clear_refs). */
function resetPeakRss(): void {
  try {
    writeFileSync("/proc/self/clear_refs", "5");
  } catch {
    // not Linux, or not allowed: the figure is then the peak since start
  }
}

/** This process's VmHWM, MiB. */
function peakRssMiB(): number {
  const m = /VmHWM:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "utf8"));
  return m === null ? NaN : round(Number(m[1]) / 1024, 1);
}

try {
  for (const size of sizes) {
    const cluster = syntheticCluster({ services: size });
    const model = buildClusterModel(cluster);
    const base = nftRenderInputFor(model);
    const inc = new NftIncrementalRenderer();
    let t = performance.now();
    const full = inc.sync({ ...base, services: model.services }, null);
    const renderMs = performance.now() - t;
    const parts = splitNFTablesFullSync(full.transaction, {
      servicePortsPerTransaction: chunk,
      budget,
    });
    console.log(
      `\n## ${size} Services (${model.services.size} service ports): full render + cache ${ms(renderMs)}, ` +
        `${round(byteLength(full.transaction) / 1e6, 2)} MB, ${full.operations} commands`,
    );

    if (size <= singleMax) {
      const ns = await scope.create(`s${size}`);
      const s = await session(ns.name, ns.prefix, "nft");
      const single = await timeRun(s, full.transaction);
      console.log(`first sync, one transaction (nft -f -): ${ms(single)}`);
      await s.close();
    }

    const ns = await scope.create(`b${size}`);
    const proc = await session(ns.name, ns.prefix, "nft");
    const lib = await session(ns.name, ns.prefix, "libnftables");
    const nl = await session(ns.name, ns.prefix, "netlink");
    const firstVia = nl.netlink !== null ? nl : lib;
    const times: number[] = [];
    // CPU time too: the kernel's commit work runs as this process's system time, less noisy than the
    // wall clock on a shared machine.
    resetPeakRss();
    const cpu0 = process.cpuUsage();
    for (const p of parts) times.push(await timeRun(firstVia, p));
    const cpu = process.cpuUsage(cpu0);
    const total = times.reduce((a, b) => a + b, 0);
    console.log(
      `first sync (${firstVia.writer}), bounded (${
        chunk ?? `adaptive, budget ${budget ?? "default"}`
      }): ${parts.length} transactions, ` +
        `total ${ms(total)}, max ${ms(Math.max(...times))} (transaction ${
          times.indexOf(Math.max(...times)) + 1
        }), ` +
        `median ${ms(summarize(times).median)}; last (switch-over) ${ms(times[times.length - 1])}`,
    );
    console.log(`  per transaction (ms): ${times.map((x) => Math.round(x)).join(" ")}`);
    console.log(`  peak RSS during the commits (VmHWM, reset after rendering): ${peakRssMiB()} MiB`);
    console.log(
      `  CPU: system ${ms(cpu.system / 1000)}, user ${ms(cpu.user / 1000)}${
        nftNames ? " (nft's names)" : ""
      }`,
    );
    // (--changes 0: first syncs only.)
    if (size !== sizes[sizes.length - 1] || changes === 0) {
      await proc.close();
      await lib.close();
      await nl.close();
      continue;
    }

    // One-endpoint changes on the largest table: ours (incremental) through netlink, libnftables and nft -f -.
    const index = plainServiceIndex(cluster);
    const ours: { render: number; bytes: number; nl?: number; lib?: number; proc?: number }[] = [];
    for (let g = 1; g <= changes; g++) {
      const i = (index + g) % cluster.services.length;
      const svc = cluster.services[i];
      if (svc.spec?.type !== "ClusterIP") continue;
      model.endpointsTracker.endpointSliceUpdate(oneEndpointChange(cluster, i, g), false);
      t = performance.now();
      const changed = model.endpoints.apply(model.endpointsTracker).updatedServices;
      const r = inc.sync({ ...base, services: model.services }, changed);
      const render = performance.now() - t;
      const via = (["nl", "lib", "proc"] as const)[ours.length % 3];
      const commit = await timeRun(via === "nl" ? nl : via === "lib" ? lib : proc, r.transaction);
      ours.push({ render, bytes: byteLength(r.transaction), [via]: commit });
      // Upstream deletes stale chains in a later sync; do it between measurements.
      await proc.run(inc.staleChainDeletion(base));
    }
    // A writer can get no change to commit (--changes 3 skips the Services that are not ClusterIP).
    const med = (xs: number[]) => xs.length === 0 ? NaN : round(summarize(xs).median);
    const nlMs = ours.flatMap((o) => o.nl ?? []);
    const libMs = ours.flatMap((o) => o.lib ?? []);
    const procMs = ours.flatMap((o) => o.proc ?? []);
    console.log(
      `one-endpoint change (incremental, ${ours.length} changes): render median ${
        med(ours.map((o) => o.render))
      } ms, ` +
        `payload median ${med(ours.map((o) => o.bytes))} B; commit median: netlink ${med(nlMs)} ms ` +
        `(${nlMs.map((x) => round(x)).join(", ")}), libnftables ${med(libMs)} ms ` +
        `(${libMs.map((x) => round(x)).join(", ")}), nft -f - ${med(procMs)} ms (${
          procMs.map((x) => round(x)).join(", ")
        })`,
    );

    // Where a small commit's time goes (libnftables, 5 each): nft's cache read alone (a listing of
    // the table's chains), a plain set element (cache read + commit), a verdict-map element (plus the
    // kernel's validation of every chain reachable through the maps).
    const svcChain = full.transaction.match(/goto (service-[^ ]+)/)?.[1];
    const parts5 = async (f: (k: number) => string) => {
      const xs: number[] = [];
      for (let k = 0; k < 5; k++) xs.push(await timeRun(lib, f(k)));
      return med(xs);
    };
    const listMs = await parts5(() => "list chains ip\n");
    const setMs = await parts5((k) =>
      `add element ip kube-proxy cluster-ips { 11.255.0.${k} }\ndelete element ip kube-proxy cluster-ips { 11.255.0.${k} }\n`
    );
    const vmapMs = await parts5((k) =>
      `add element ip kube-proxy service-ips { 11.255.1.${k} . tcp . 80 : goto ${svcChain} }\n` +
      `delete element ip kube-proxy service-ips { 11.255.1.${k} . tcp . 80 }\n`
    );
    console.log(
      `small commits (libnftables, median of 5): list chains ${listMs} ms; set element ${setMs} ms; ` +
        `verdict-map element ${vmapMs} ms`,
    );

    // Upstream's partial sync (walks every service port, diffs every element) of further changes.
    const state = renderNFTablesFullSync({ ...base, services: model.services.values() });
    let previous = state.state;
    const up: { render: number; bytes: number; commit: number }[] = [];
    for (let g = changes + 1; g <= changes * 2; g++) {
      const i = (index + g) % cluster.services.length;
      const svc = cluster.services[i];
      if (svc.spec?.type !== "ClusterIP") continue;
      model.endpointsTracker.endpointSliceUpdate(oneEndpointChange(cluster, i, g), false);
      t = performance.now();
      const changedKeys = model.endpoints.apply(model.endpointsTracker).updatedServices;
      const changedServices = new Set(
        [...changedKeys].map((k) => model.services.get(k)).filter((s) => s !== undefined).map((s) =>
          `${s!.name.namespace}/${s!.name.name}`
        ),
      );
      // Upstream lists the table's chains each sync (seconds at 10k); the rendered list stands in here.
      const r = renderNFTablesSync({
        ...base,
        services: model.services.values(),
        firstSync: false,
        existingChains: state.activeChains,
        existingSets: [],
      }, { previous, changedServices });
      const render = performance.now() - t;
      previous = r.state;
      up.push({ render, bytes: byteLength(r.transaction), commit: await timeRun(proc, r.transaction) });
    }
    console.log(
      `one-endpoint change (upstream partial, ${up.length} changes): render median ${
        med(up.map((o) => o.render))
      } ms, ` +
        `payload median ${med(up.map((o) => o.bytes))} B, commit median (nft -f -) ${
          med(up.map((o) => o.commit))
        } ms`,
    );
    await proc.close();
    await lib.close();
    await nl.close();
  }
} finally {
  await scope.cleanup();
}
