/**
 * Runs inside a user-mode-linux guest (bench/ipvs_uml_bench.ts starts it, one guest per mode and size):
 * one proxy mode's provider, built by the mode's backend as the agent builds it (lib/app/backends.ts),
 * programs the guest kernel from the synthetic cluster of bench/synthetic_cluster.ts (through the change
 * trackers, bench/cluster_model.ts): the first sync, then one-endpoint changes as partial syncs, then an
 * unchanged resync. In ipvs mode every ipvsadm / ipset / kube-ipvs0 write is counted, to show that a
 * change rewrites only the changed service. Prints `FIGURE <name> <value>` lines.
 *   bench/ipvs_uml_sync.ts <ipvs|iptables|nftables> <services> [changes]
 */
import process from "node:process";
import { backendFor } from "../lib/app/backends.ts";
import { defaultConfig } from "../lib/config/defaults.ts";
import { createKubeProxyMetrics } from "../lib/metrics/kubeproxy.ts";
import { Registry } from "../lib/metrics/registry.ts";
import type { BackendContext, Provider, ProxyState } from "../lib/proxy/provider.ts";
import { detectLocalByCIDR } from "../lib/proxy/local_detect.ts";
import { createIpvsBackend } from "../lib/proxy/ipvs/mode.ts";
import { createIpvsHost, type IpvsHost } from "../lib/proxy/ipvs/host.ts";
import { createIptablesRunner, type IptablesRunner } from "../lib/proxy/iptables/runner.ts";
import { parseIpvsadmSave } from "../lib/proxy/ipvs/ipvsadm.ts";
import { openIpvsNetlink } from "./ipvs_netlink_ops.ts";
import { execFileSync } from "node:child_process";
import { syntheticCluster } from "./synthetic_cluster.ts";
import {
  BENCH_CLUSTER_CIDR,
  buildClusterModel,
  oneEndpointChange,
  plainServiceIndex,
} from "./cluster_model.ts";
import { summarize } from "./stats.ts";

const mode = process.argv[2] ?? "ipvs";
const n = Number(process.argv[3] ?? "1000");
const changes = Number(process.argv[4] ?? "5");
if (!["ipvs", "iptables", "nftables"].includes(mode) || !(n > 0) || !(changes > 0)) {
  console.error(
    `ipvs_uml_sync: usage: <ipvs|iptables|nftables> <services> [changes]; got ${process.argv.slice(2)}`,
  );
  process.exit(2);
}

/** What the IPVS host was asked to write since the last reset. */
const writes = { ipvsadm: 0, ipset: 0, dummy: 0 };
/** Milliseconds spent in each host step since the last reset (one child process or more each). */
const stepMs: Record<string, number> = {};
/** Every `ipvsadm -R` line written, in order. */
const ipvsadmLines: string[] = [];
/** `fn`, its time added to `stepMs[step]`. */
function timed<A extends unknown[], R>(step: string, fn: (...a: A) => Promise<R>): (...a: A) => Promise<R> {
  return async (...a: A) => {
    const t = performance.now();
    try {
      return await fn(...a);
    } finally {
      stepMs[step] = (stepMs[step] ?? 0) + performance.now() - t;
    }
  };
}
function countingHost(h: IpvsHost): IpvsHost {
  return {
    ipvsSave: timed("ipvsadm_save", h.ipvsSave),
    ipvsList: timed("ipvsadm_list", h.ipvsList),
    ipvsRestore: timed("ipvsadm_restore", (lines) => {
      writes.ipvsadm += lines.length;
      ipvsadmLines.push(...lines);
      return h.ipvsRestore(lines);
    }),
    ipvsSetTimeouts: timed("ipvsadm_set", h.ipvsSetTimeouts),
    ipsetSave: timed("ipset_save", h.ipsetSave),
    ipsetRestore: timed("ipset_restore", (text) => {
      writes.ipset += text.split("\n").filter((l) => l.trim() !== "").length;
      return h.ipsetRestore(text);
    }),
    ensureDummy: timed("ip_link", h.ensureDummy),
    dummyAddresses: timed("ip_addr_list_dummy", h.dummyAddresses),
    changeDummyAddresses: timed("ip_batch", (add, del) => {
      writes.dummy += add.length + del.length;
      return h.changeDummyAddresses(add, del);
    }),
    nodeAddresses: timed("ip_addr_list_node", h.nodeAddresses),
  };
}
// The iptables runner is built inside the mode (lib/proxy/ipvs/mode.ts); its restore is timed on the
// class, bench-only, so the mode runs unchanged.
if (mode === "ipvs") {
  const probe = await createIptablesRunner({ family: "IPv4" });
  const proto = Object.getPrototypeOf(probe) as IptablesRunner;
  const restore = proto.restore;
  proto.restore = function (this: IptablesRunner, payload) {
    return timed("iptables_restore", () => restore.call(this, payload))();
  };
}
const resetWrites = () => {
  Object.assign(writes, { ipvsadm: 0, ipset: 0, dummy: 0 });
  for (const k of Object.keys(stepMs)) delete stepMs[k];
};
/** Prints the step breakdown of one sync of `totalMs`: each step, and the rest (model, diff, plan). */
function breakdown(prefix: string, totalMs: number): void {
  let io = 0;
  for (const [step, ms] of Object.entries(stepMs).sort()) {
    figure(`${prefix}_step_${step}_ms`, ms);
    io += ms;
  }
  figure(`${prefix}_step_in_process_ms`, totalMs - io);
  const ipvsadm = (stepMs.ipvsadm_save ?? 0) + (stepMs.ipvsadm_restore ?? 0) + (stepMs.ipvsadm_list ?? 0);
  figure(`${prefix}_ipvsadm_share_pct`, totalMs > 0 ? (100 * ipvsadm) / totalMs : 0);
}

const NODE_IP = "192.0.2.10";
const config = { ...defaultConfig(), mode, clusterCIDR: BENCH_CLUSTER_CIDR };
const ctx: BackendContext = {
  config,
  dryRun: false,
  nodeName: "bench-node",
  log: {
    info: () => {},
    warn: (m) => console.error(`warn: ${m}`),
    error: (m) => console.error(m),
    debug: () => {},
  },
  metrics: createKubeProxyMetrics(new Registry(), { mode: mode as "ipvs" | "iptables" | "nftables" }),
  out: () => {},
  nodeIPs: () => ["127.0.0.1", NODE_IP],
  primaryNodeIP: () => NODE_IP,
};
const backend = mode === "ipvs"
  ? createIpvsBackend({ host: () => countingHost(createIpvsHost()) })
  : backendFor(mode);
await backend.families(ctx);
const provider: Provider = await backend.provider("IPv4", ctx);

const cluster = syntheticCluster({ services: n, nodeName: "bench-node" });
const model = buildClusterModel(cluster);
const state = (changed: ReadonlySet<string>): ProxyState => ({
  family: "IPv4",
  services: model.services,
  endpoints: model.endpoints,
  changedServices: changed,
  nodeLabels: model.nodeLabels,
  localDetection: detectLocalByCIDR(BENCH_CLUSTER_CIDR),
});
const figure = (name: string, value: number) => console.log(`FIGURE ${name} ${Math.round(value * 10) / 10}`);

figure("service_ports", model.services.size);
resetWrites();
let t = performance.now();
const first = await provider.sync(state(new Set()), { full: true });
const firstMs = performance.now() - t;
figure("first_sync_ms", firstMs);
if (mode === "ipvs") breakdown("first_sync", firstMs);
figure("first_sync_bytes", first.bytes);
if (mode === "ipvs") {
  figure("first_sync_ipvsadm_lines", writes.ipvsadm);
  figure("first_sync_ipset_lines", writes.ipset);
}

// One-endpoint changes of a plain ClusterIP service (one port): a partial sync each, as the loop does.
const base = plainServiceIndex(cluster);
const changedVS = `-t ${cluster.services[base].spec!.clusterIP}:80 `;
const linesBefore = ipvsadmLines.length;
const times: number[] = [];
const bytes: number[] = [];
const perChange: (typeof writes)[] = [];
const perChangeSteps: Record<string, number>[] = [];
for (let g = 1; g <= changes; g++) {
  model.endpointsTracker.endpointSliceUpdate(oneEndpointChange(cluster, base, g), false);
  resetWrites();
  t = performance.now();
  const changed = model.endpoints.apply(model.endpointsTracker).updatedServices;
  const out = await provider.sync(state(changed), { full: false });
  times.push(performance.now() - t);
  bytes.push(out.bytes);
  perChange.push({ ...writes });
  perChangeSteps.push({ ...stepMs, total: times[times.length - 1] });
}
const s = summarize(times);
figure("one_endpoint_change_median_ms", s.median);
figure("one_endpoint_change_max_ms", Math.max(...times));
// What the mode wrote for a change (its SyncOutcome.bytes: restore payload / nft transaction / ipvs mode's
// iptables payload + ipset + ipvsadm lines).
figure("change_bytes_max", Math.max(...bytes));
if (mode === "ipvs") {
  // A one-endpoint change: the new real server added, the old one set to weight 0 (graceful termination)
  // or deleted, nothing else: a handful of lines whatever the cluster size.
  figure("change_ipvsadm_lines_max", Math.max(...perChange.map((w) => w.ipvsadm)));
  figure("change_ipset_lines_max", Math.max(...perChange.map((w) => w.ipset)));
  figure("change_dummy_addresses_max", Math.max(...perChange.map((w) => w.dummy)));
  // The check: no line of any change touched another virtual server than the changed service's.
  const others = ipvsadmLines.slice(linesBefore).filter((l) => !l.includes(changedVS));
  figure("change_ipvsadm_lines_other_services", others.length);
  if (others.length > 0) {
    console.error(`ipvs change rewrote other services: ${others.slice(0, 5).join("; ")}`);
  }
  // Each step's median over the changes (the step breakdown of the median change).
  const steps = new Set(perChangeSteps.flatMap((r) => Object.keys(r)));
  const med = (k: string) => summarize(perChangeSteps.map((r) => r[k] ?? 0)).median;
  resetWrites();
  for (const k of steps) if (k !== "total") stepMs[k] = med(k);
  breakdown("change_median", med("total"));
}

resetWrites();
t = performance.now();
await provider.sync(state(new Set()), { full: false });
const resyncMs = performance.now() - t;
figure("unchanged_resync_ms", resyncMs);
if (mode === "ipvs") {
  figure("unchanged_resync_ipvsadm_lines", writes.ipvsadm);
  breakdown("unchanged_resync", resyncMs);
  // The periodic full sync with nothing changed: reads the kernel back (ipset save, ipvsadm -Sn,
  // kube-ipvs0's addresses) and writes nothing but the iptables payload.
  resetWrites();
  t = performance.now();
  await provider.sync(state(new Set()), { full: true });
  const fullMs = performance.now() - t;
  figure("unchanged_full_sync_ms", fullMs);
  figure("unchanged_full_sync_ipvsadm_lines", writes.ipvsadm);
  breakdown("unchanged_full_sync", fullMs);
  // Drift check as the loop runs it (ipvsadm -Sn and kube-ipvs0's addresses read back).
  resetWrites();
  t = performance.now();
  await provider.checkDrift();
  const driftMs = performance.now() - t;
  figure("drift_check_ms", driftMs);
  breakdown("drift_check", driftMs);
  await compareReadBack();
  await compareWrite();
}
process.exit(0);

/**
 * The read-back both ways for the same kernel state, three times each (median): `ipvsadm -Sn` parsed as
 * the backend parses it, and a generic netlink dump in-process (bench/ipvs_netlink_dump.ts, Bun only).
 * The two must see the same virtual and real servers.
 */
async function compareReadBack(): Promise<void> {
  const host = createIpvsHost();
  const cli: number[] = [];
  let cliCounts = [0, 0];
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    const vs = parseIpvsadmSave(await host.ipvsSave());
    cli.push(performance.now() - t0);
    cliCounts = [vs.size, [...vs.values()].reduce((n, v) => n + v.realServers.size, 0)];
  }
  figure("readback_ipvsadm_save_parse_median_ms", summarize(cli).median);
  figure("readback_virtual_servers", cliCounts[0]);
  figure("readback_real_servers", cliCounts[1]);
  const nl = await openIpvsNetlink();
  if (nl === null) return;
  const times: number[] = [];
  let counts = [0, 0];
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    const vss = nl.dump();
    times.push(performance.now() - t0);
    counts = [vss.length, vss.reduce((n, v) => n + v.realServerWeights.length, 0)];
  }
  nl.close();
  figure("readback_netlink_dump_median_ms", summarize(times).median);
  figure("readback_netlink_virtual_servers", counts[0]);
  figure("readback_netlink_real_servers", counts[1]);
  if (counts[0] !== cliCounts[0] || counts[1] !== cliCounts[1]) {
    console.error(`netlink dump saw ${counts} virtual / real servers, ipvsadm -Sn ${cliCounts}`);
  }
}

/**
 * The first sync's write both ways for the same virtual and real servers (the ones the syncs left), each
 * into a fresh network namespace (an empty IPVS table; after `ipvsadm -C` the kernel keeps the deleted real
 * servers in a trash list that every add walks, which slows both down): `ipvsadm -R` with what
 * `ipvsadm -Sn` printed (through `ip netns exec`), and the netlink writer (bench/ipvs_netlink_ops.ts, Bun
 * only). Both must leave the same table.
 */
async function compareWrite(): Promise<void> {
  const sorted = (text: string) => text.split("\n").sort().join("\n");
  const host = createIpvsHost();
  const saved = await host.ipvsSave();
  const want = parseIpvsadmSave(saved);
  for (const ns of ["ipvs-w1", "ipvs-w2"]) execFileSync("ip", ["netns", "add", ns]);
  const save = (ns: string) =>
    execFileSync("ip", ["netns", "exec", ns, "ipvsadm", "-Sn"], { maxBuffer: 1 << 28 }).toString();
  let t0 = performance.now();
  execFileSync("ip", ["netns", "exec", "ipvs-w1", "true"]);
  figure("write_ip_netns_exec_overhead_ms", performance.now() - t0);
  t0 = performance.now();
  execFileSync("ip", ["netns", "exec", "ipvs-w1", "ipvsadm", "-R"], { input: saved });
  figure("write_ipvsadm_restore_ms", performance.now() - t0);
  figure("write_lines", saved.split("\n").filter((l) => l.trim() !== "").length);
  figure("write_ipvsadm_same_table", sorted(save("ipvs-w1")) === sorted(saved) ? 1 : 0);
  const nl = await openIpvsNetlink({ netnsPath: "/run/netns/ipvs-w2" });
  if (nl === null) return;
  t0 = performance.now();
  nl.write(want.values());
  figure("write_netlink_ms", performance.now() - t0);
  nl.close();
  figure("write_netlink_same_table", sorted(save("ipvs-w2")) === sorted(saved) ? 1 : 0);
}
