/**
 * The metrics registry at 10k Services: lib/metrics/registry.ts against prom-client, doing the same work.
 *
 *   bun bench/metrics_bench.ts [--services=10000] [--syncs=20] [--scrapes=500] [--prom-client=DIR]
 *
 * `--prom-client=DIR` is a prom-client package directory installed outside the repository (it is not a
 * dependency); without it only our registry is measured. Both registries get the same families (every
 * kubeproxy_* family of iptables mode, same names, labels and buckets) and the same updates:
 * - one full sync at N Services, as the proxier records it: N service and N endpoint changes counted,
 *   N network-programming latencies observed (one per changed EndpointSlice), the sync histograms, the
 *   timestamps and the rule-count gauges, for IPv4 and IPv6;
 * - one scrape: the whole registry rendered to text (the cardinality does not grow with N: kube-proxy's
 *   metrics have no per-Service labels).
 * Prints median ms per sync and per scrape over the repeats, the scrape size, and the heap retained by the
 * registry after the updates (heapUsed after a forced collection, minus the baseline before creating it).
 */
import {
  createKubeProxyMetrics,
  initKubeProxySeries,
  NETWORK_PROGRAMMING_BUCKETS,
  SYNC_DURATION_BUCKETS,
} from "../lib/metrics/kubeproxy.ts";
import { Registry } from "../lib/metrics/registry.ts";
import { releaseMemory } from "../lib/runtime/memory.ts";

/** What a benchmark subject offers: apply one full sync, render one scrape. */
interface Subject {
  readonly name: string;
  sync(services: number, now: number): void;
  scrape(): Promise<string> | string;
}

const FAMILIES = ["IPv4", "IPv6"] as const;

function ours(): Subject {
  const registry = new Registry();
  const m = createKubeProxyMetrics(registry);
  initKubeProxySeries(m, FAMILIES);
  return {
    name: "edgeproxy registry",
    sync(n, now) {
      for (const ip_family of FAMILIES) {
        const fam = { ip_family };
        for (let i = 0; i < n; i++) {
          m.serviceChangesTotal.inc();
          m.endpointChangesTotal.inc();
          m.networkProgrammingLatency.observe(fam, (i % 300) + 0.5);
        }
        m.syncProxyRulesLastQueuedTimestamp.set(fam, now);
        m.syncProxyRulesLatency.observe(fam, 0.8);
        m.syncFullProxyRulesLatency.observe(fam, 0.8);
        m.syncProxyRulesLastTimestamp.set(fam, now);
        for (const table of ["filter", "nat"]) {
          m.iptablesRulesTotal.set({ ...fam, table }, n * 7);
          m.iptablesRulesLastSync.set({ ...fam, table }, n * 7);
        }
        m.syncProxyRulesNoLocalEndpointsTotal.set({ ...fam, traffic_policy: "internal" }, 0);
        m.syncProxyRulesNoLocalEndpointsTotal.set({ ...fam, traffic_policy: "external" }, 0);
      }
      m.serviceChangesPending.set({}, 0);
      m.endpointChangesPending.set({}, 0);
    },
    scrape: () => registry.metrics(),
  };
}

/** The subset of prom-client's API used here. */
interface PromClient {
  Registry: new () => { metrics(): Promise<string> };
  Counter: new (o: Record<string, unknown>) => { inc(l?: Record<string, string> | number, v?: number): void };
  Gauge: new (o: Record<string, unknown>) => { set(l: Record<string, string> | number, v?: number): void };
  Histogram: new (o: Record<string, unknown>) => {
    observe(l: Record<string, string>, v: number): void;
    zero(l: Record<string, string>): void;
  };
}

function promClient(pc: PromClient): Subject {
  const registry = new pc.Registry();
  const reg = { registers: [registry] };
  const hist = (name: string, help: string, buckets: readonly number[]) =>
    new pc.Histogram({
      name,
      help: `[ALPHA] ${help}`,
      labelNames: ["ip_family"],
      buckets: [...buckets],
      ...reg,
    });
  const gauge = (name: string, help: string, labelNames: string[]) =>
    new pc.Gauge({ name, help: `[ALPHA] ${help}`, labelNames, ...reg });
  const counter = (name: string, help: string, labelNames: string[]) =>
    new pc.Counter({ name, help: `[ALPHA] ${help}`, labelNames, ...reg });
  const p = "kubeproxy_";
  const syncLatency = hist(
    `${p}sync_proxy_rules_duration_seconds`,
    "SyncProxyRules latency in seconds",
    SYNC_DURATION_BUCKETS,
  );
  const syncFull = hist(`${p}sync_full_proxy_rules_duration_seconds`, "full", SYNC_DURATION_BUCKETS);
  const syncPartial = hist(`${p}sync_partial_proxy_rules_duration_seconds`, "partial", SYNC_DURATION_BUCKETS);
  const ctLatency = hist(
    `${p}conntrack_reconciler_sync_duration_seconds`,
    "conntrack",
    SYNC_DURATION_BUCKETS,
  );
  const netProg = hist(`${p}network_programming_duration_seconds`, "netprog", NETWORK_PROGRAMMING_BUCKETS);
  const lastTs = gauge(`${p}sync_proxy_rules_last_timestamp_seconds`, "last", ["ip_family"]);
  const lastQueued = gauge(`${p}sync_proxy_rules_last_queued_timestamp_seconds`, "queued", ["ip_family"]);
  const epPending = gauge(`${p}sync_proxy_rules_endpoint_changes_pending`, "ep pending", []);
  const svcPending = gauge(`${p}sync_proxy_rules_service_changes_pending`, "svc pending", []);
  const epTotal = counter(`${p}sync_proxy_rules_endpoint_changes_total`, "ep total", []);
  const svcTotal = counter(`${p}sync_proxy_rules_service_changes_total`, "svc total", []);
  const restoreFailures = counter(`${p}sync_proxy_rules_iptables_restore_failures_total`, "restore", [
    "ip_family",
  ]);
  const partialFailures = counter(`${p}sync_proxy_rules_iptables_partial_restore_failures_total`, "partial", [
    "ip_family",
  ]);
  const ctDeleted = counter(`${p}conntrack_reconciler_deleted_entries_total`, "deleted", ["ip_family"]);
  const healthz = counter(`${p}proxy_healthz_total`, "healthz", ["code"]);
  const livez = counter(`${p}proxy_livez_total`, "livez", ["code"]);
  const rulesTotal = gauge(`${p}sync_proxy_rules_iptables_total`, "total", ["table", "ip_family"]);
  const rulesLast = gauge(`${p}sync_proxy_rules_iptables_last`, "last", ["table", "ip_family"]);
  const noLocal = gauge(`${p}sync_proxy_rules_no_local_endpoints_total`, "nolocal", [
    "traffic_policy",
    "ip_family",
  ]);
  // The same zero series initKubeProxySeries creates, so both scrapes carry the same lines.
  for (const ip_family of FAMILIES) {
    const fam = { ip_family };
    for (const h of [syncLatency, syncFull, syncPartial, ctLatency, netProg]) h.zero(fam);
    for (const g of [lastTs, lastQueued]) g.set(fam, 0);
    for (const c of [restoreFailures, partialFailures, ctDeleted]) c.inc(fam, 0);
    for (const table of ["filter", "nat"]) {
      rulesTotal.set({ ...fam, table }, 0);
      rulesLast.set({ ...fam, table }, 0);
    }
    for (const traffic_policy of ["internal", "external"]) noLocal.set({ ...fam, traffic_policy }, 0);
  }
  for (const code of ["200", "503"]) {
    healthz.inc({ code }, 0);
    livez.inc({ code }, 0);
  }
  return {
    name: "prom-client",
    sync(n, now) {
      for (const ip_family of FAMILIES) {
        const fam = { ip_family };
        for (let i = 0; i < n; i++) {
          svcTotal.inc();
          epTotal.inc();
          netProg.observe(fam, (i % 300) + 0.5);
        }
        lastQueued.set(fam, now);
        syncLatency.observe(fam, 0.8);
        syncFull.observe(fam, 0.8);
        lastTs.set(fam, now);
        for (const table of ["filter", "nat"]) {
          rulesTotal.set({ ...fam, table }, n * 7);
          rulesLast.set({ ...fam, table }, n * 7);
        }
        noLocal.set({ ...fam, traffic_policy: "internal" }, 0);
        noLocal.set({ ...fam, traffic_policy: "external" }, 0);
      }
      svcPending.set(0);
      epPending.set(0);
    },
    scrape: () => registry.metrics(),
  };
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

function heapUsed(): number {
  releaseMemory();
  return process.memoryUsage().heapUsed;
}

async function measure(make: () => Subject, services: number, syncs: number, scrapes: number) {
  const before = heapUsed();
  const s = make();
  const syncMs: number[] = [];
  for (let i = 0; i < syncs; i++) {
    const t0 = performance.now();
    s.sync(services, 1_700_000_000 + i);
    syncMs.push(performance.now() - t0);
  }
  const retained = heapUsed() - before;
  const scrapeMs: number[] = [];
  let text = "";
  for (let i = 0; i < scrapes; i++) {
    const t0 = performance.now();
    text = await s.scrape();
    scrapeMs.push(performance.now() - t0);
  }
  return {
    name: s.name,
    syncMs: median(syncMs),
    scrapeMs: median(scrapeMs),
    scrapeBytes: text.length,
    scrapeLines: text.split("\n").length - 1,
    retainedKiB: Math.round(retained / 1024),
  };
}

function arg(name: string, dflt: string): string {
  const a = process.argv.find((x) => x.startsWith(`--${name}=`));
  return a ? a.slice(name.length + 3) : dflt;
}

const services = Number(arg("services", "10000"));
const syncs = Number(arg("syncs", "20"));
const scrapes = Number(arg("scrapes", "500"));
const pcDir = arg("prom-client", "");

const subjects: Array<() => Subject> = [ours];
if (pcDir) {
  const mod = await import(pcDir.endsWith(".js") ? pcDir : `${pcDir}/index.js`);
  const pc = (mod.default ?? mod) as PromClient;
  subjects.push(() => promClient(pc));
}
console.log(
  `${services} Services, ${syncs} full syncs, ${scrapes} scrapes; runtime ${
    process.versions.bun ? "bun " + process.versions.bun : process.version
  }`,
);
console.log(
  "subject              | ms/sync (median) | ms/scrape (median) | scrape bytes | lines | heap retained KiB",
);
for (const make of subjects) {
  // One warm-up round so both are measured JIT-compiled.
  await measure(make, services, 3, 20);
  const r = await measure(make, services, syncs, scrapes);
  console.log(
    `${r.name.padEnd(20)} | ${r.syncMs.toFixed(2).padStart(16)} | ${r.scrapeMs.toFixed(3).padStart(18)} | ${
      String(r.scrapeBytes).padStart(12)
    } | ${String(r.scrapeLines).padStart(5)} | ${String(r.retainedKiB).padStart(17)}`,
  );
}
