/**
 * The kubeproxy_* metrics upstream kube-proxy registers in iptables mode (pkg/proxy/metrics/metrics.go,
 * RegisterMetrics(ProxyModeIPTables)), with upstream's names, help texts, types, stability level, label
 * names and buckets as listed for v1.34 in the Kubernetes metrics reference. Sync metrics carry
 * `ip_family` ("IPv4" | "IPv6"); the change counters and the health counters do not.
 * nftables-only and IPVS-only metrics are not registered, as upstream does not register them in this mode.
 * In nftables mode (RegisterMetrics(ProxyModeNFTables)) the two nftables failure counters are registered
 * instead of the iptables-only families; the unregistered ones still exist, in a registry nobody serves.
 * In IPVS mode (RegisterMetrics(ProxyModeIPVS)) only the families every mode shares are served, plus
 * kubeproxy_sync_proxy_rules_iptables_restore_failures_total (the IPVS proxier's iptables payload).
 */
import { type Counter, type Gauge, type Histogram, Registry } from "./registry.ts";

/** `prometheus.ExponentialBuckets(start, factor, count)`: computed by repeated multiplication, as Go does. */
export function exponentialBuckets(start: number, factor: number, count: number): number[] {
  const out: number[] = [];
  for (let i = 0, v = start; i < count; i++, v *= factor) out.push(v);
  return out;
}

/** `prometheus.LinearBuckets(start, width, count)`: computed by repeated addition, as Go does. */
export function linearBuckets(start: number, width: number, count: number): number[] {
  const out: number[] = [];
  for (let i = 0, v = start; i < count; i++, v += width) out.push(v);
  return out;
}

/**
 * component-base `metrics.MergeBuckets`: concatenates, after a leading 0 (its result slice starts with one
 * zero element, so upstream's network-programming histogram really has an `le="0"` bucket).
 */
export function mergeBuckets(...lists: number[][]): number[] {
  return [0, ...lists.flat()];
}

/** Buckets of every sync-duration histogram: 1 ms .. 16.384 s. */
export const SYNC_DURATION_BUCKETS: readonly number[] = exponentialBuckets(0.001, 2, 15);

/** Buckets of kubeproxy_network_programming_duration_seconds: 0, 0.25, 0.5, 1..59, 60..115 by 5, 120..300 by 30. */
export const NETWORK_PROGRAMMING_BUCKETS: readonly number[] = mergeBuckets(
  linearBuckets(0.25, 0.25, 2),
  linearBuckets(1, 1, 59),
  linearBuckets(60, 5, 12),
  linearBuckets(120, 30, 7),
);

/** nfacct counter behind kubeproxy_iptables_ct_state_invalid_dropped_packets_total. */
export const NFACCT_CT_STATE_INVALID_DROPPED = "ct_state_invalid_dropped_pkts";
/** nfacct counter behind kubeproxy_iptables_localhost_nodeports_accepted_packets_total. */
export const NFACCT_LOCALHOST_NODEPORTS_ACCEPTED = "localhost_nps_accepted_pkts";

/**
 * Reads nfacct packet counters (upstream uses netlink). Return null when the counter cannot be read: the
 * family is then left out of the scrape, as upstream's collector does on an error.
 */
export interface NfacctSource {
  packets(counterName: string): number | null;
}

/** Label values of `ip_family`. */
export type IPFamilyLabel = "IPv4" | "IPv6";

/** Every kubeproxy_* metric, by upstream's Go variable name (lower-camel). */
export interface KubeProxyMetrics {
  /** kubeproxy_sync_proxy_rules_duration_seconds{ip_family}: every sync, full or partial. */
  readonly syncProxyRulesLatency: Histogram;
  /** kubeproxy_sync_full_proxy_rules_duration_seconds{ip_family}. */
  readonly syncFullProxyRulesLatency: Histogram;
  /** kubeproxy_sync_partial_proxy_rules_duration_seconds{ip_family}. */
  readonly syncPartialProxyRulesLatency: Histogram;
  /** kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family}: last successful sync (unix seconds). */
  readonly syncProxyRulesLastTimestamp: Gauge;
  /** kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds{ip_family}: last time a sync was queued. */
  readonly syncProxyRulesLastQueuedTimestamp: Gauge;
  /** kubeproxy_network_programming_duration_seconds{ip_family}: now − last-change-trigger-time. */
  readonly networkProgrammingLatency: Histogram;
  /** kubeproxy_sync_proxy_rules_endpoint_changes_pending. */
  readonly endpointChangesPending: Gauge;
  /** kubeproxy_sync_proxy_rules_endpoint_changes_total. */
  readonly endpointChangesTotal: Counter;
  /** kubeproxy_sync_proxy_rules_service_changes_pending. */
  readonly serviceChangesPending: Gauge;
  /** kubeproxy_sync_proxy_rules_service_changes_total. */
  readonly serviceChangesTotal: Counter;
  /** kubeproxy_sync_proxy_rules_iptables_restore_failures_total{ip_family}. */
  readonly iptablesRestoreFailuresTotal: Counter;
  /** kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total{ip_family}. */
  readonly iptablesPartialRestoreFailuresTotal: Counter;
  /** kubeproxy_sync_proxy_rules_iptables_total{ip_family,table} (a gauge despite the name). */
  readonly iptablesRulesTotal: Gauge;
  /** kubeproxy_sync_proxy_rules_iptables_last{ip_family,table}. */
  readonly iptablesRulesLastSync: Gauge;
  /** kubeproxy_sync_proxy_rules_no_local_endpoints_total{ip_family,traffic_policy} (a gauge). */
  readonly syncProxyRulesNoLocalEndpointsTotal: Gauge;
  /** kubeproxy_proxy_healthz_total{code}. */
  readonly proxyHealthzTotal: Counter;
  /** kubeproxy_proxy_livez_total{code}. */
  readonly proxyLivezTotal: Counter;
  /** kubeproxy_conntrack_reconciler_sync_duration_seconds{ip_family}. */
  readonly reconcileConntrackFlowsLatency: Histogram;
  /** kubeproxy_conntrack_reconciler_deleted_entries_total{ip_family}. */
  readonly reconcileConntrackFlowsDeletedEntriesTotal: Counter;
  /** kubeproxy_sync_proxy_rules_nftables_sync_failures_total{ip_family} (nftables mode). */
  readonly nftablesSyncFailuresTotal: Counter;
  /** kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total{ip_family} (nftables mode). */
  readonly nftablesCleanupFailuresTotal: Counter;
}

/** Proxy modes whose metric sets differ (upstream RegisterMetrics(mode)). */
export type MetricsProxyMode = "iptables" | "nftables" | "ipvs";

/** Options of {@link createKubeProxyMetrics}. */
export interface KubeProxyMetricsOptions {
  /** Source of the two nfacct collectors; without it they export nothing. */
  readonly nfacct?: NfacctSource;
  /** Which mode's families to register (default "iptables"). */
  readonly mode?: MetricsProxyMode;
}

const ALPHA = "ALPHA" as const;
const IP_FAMILY = ["ip_family"] as const;

/** Registers every kubeproxy_* metric of the mode (default iptables) in `registry` and returns them. */
export function createKubeProxyMetrics(
  registry: Registry = new Registry(),
  opts: KubeProxyMetricsOptions = {},
): KubeProxyMetrics {
  const mode = opts.mode ?? "iptables";
  // Metrics of the other modes are created in a registry nobody serves, so backends can always write them.
  const unserved = new Registry();
  const iptablesOnly = mode === "iptables" ? registry : unserved;
  const nftablesOnly = mode === "nftables" ? registry : unserved;
  // Upstream's IPVS case registers the restore-failure counter and nothing else of its own.
  const restoreFailures = mode === "nftables" ? unserved : registry;
  // The full/partial histograms: not in upstream's IPVS case (its syncs are all full).
  const fullPartial = mode === "ipvs" ? unserved : registry;
  const syncHistogram = (name: string, help: string, into: Registry = registry) =>
    into.histogram({
      name,
      help,
      labelNames: IP_FAMILY,
      buckets: SYNC_DURATION_BUCKETS,
      stabilityLevel: ALPHA,
    });
  const m: KubeProxyMetrics = {
    syncProxyRulesLatency: syncHistogram(
      "kubeproxy_sync_proxy_rules_duration_seconds",
      "SyncProxyRules latency in seconds",
    ),
    syncFullProxyRulesLatency: syncHistogram(
      "kubeproxy_sync_full_proxy_rules_duration_seconds",
      "SyncProxyRules latency in seconds for full resyncs",
      fullPartial,
    ),
    syncPartialProxyRulesLatency: syncHistogram(
      "kubeproxy_sync_partial_proxy_rules_duration_seconds",
      "SyncProxyRules latency in seconds for partial resyncs",
      fullPartial,
    ),
    syncProxyRulesLastTimestamp: registry.gauge({
      name: "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
      help: "The last time proxy rules were successfully synced",
      labelNames: IP_FAMILY,
      stabilityLevel: ALPHA,
    }),
    syncProxyRulesLastQueuedTimestamp: registry.gauge({
      name: "kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds",
      help: "The last time a sync of proxy rules was queued",
      labelNames: IP_FAMILY,
      stabilityLevel: ALPHA,
    }),
    networkProgrammingLatency: registry.histogram({
      name: "kubeproxy_network_programming_duration_seconds",
      help: "In Cluster Network Programming Latency in seconds",
      labelNames: IP_FAMILY,
      buckets: NETWORK_PROGRAMMING_BUCKETS,
      stabilityLevel: ALPHA,
    }),
    endpointChangesPending: registry.gauge({
      name: "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
      help: "Pending proxy rules Endpoint changes",
      stabilityLevel: ALPHA,
    }),
    endpointChangesTotal: registry.counter({
      name: "kubeproxy_sync_proxy_rules_endpoint_changes_total",
      help: "Cumulative proxy rules Endpoint changes",
      stabilityLevel: ALPHA,
    }),
    serviceChangesPending: registry.gauge({
      name: "kubeproxy_sync_proxy_rules_service_changes_pending",
      help: "Pending proxy rules Service changes",
      stabilityLevel: ALPHA,
    }),
    serviceChangesTotal: registry.counter({
      name: "kubeproxy_sync_proxy_rules_service_changes_total",
      help: "Cumulative proxy rules Service changes",
      stabilityLevel: ALPHA,
    }),
    iptablesRestoreFailuresTotal: restoreFailures.counter({
      name: "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
      help: "Cumulative proxy iptables restore failures",
      labelNames: IP_FAMILY,
      stabilityLevel: ALPHA,
    }),
    iptablesPartialRestoreFailuresTotal: iptablesOnly.counter({
      name: "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
      help: "Cumulative proxy iptables partial restore failures",
      labelNames: IP_FAMILY,
      stabilityLevel: ALPHA,
    }),
    iptablesRulesTotal: iptablesOnly.gauge({
      name: "kubeproxy_sync_proxy_rules_iptables_total",
      help: "Total number of iptables rules owned by kube-proxy",
      labelNames: ["table", "ip_family"],
      stabilityLevel: ALPHA,
    }),
    iptablesRulesLastSync: iptablesOnly.gauge({
      name: "kubeproxy_sync_proxy_rules_iptables_last",
      help: "Number of iptables rules written by kube-proxy in last sync",
      labelNames: ["table", "ip_family"],
      stabilityLevel: ALPHA,
    }),
    syncProxyRulesNoLocalEndpointsTotal: registry.gauge({
      name: "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
      help: "Number of services with a Local traffic policy and no endpoints",
      labelNames: ["traffic_policy", "ip_family"],
      stabilityLevel: ALPHA,
    }),
    proxyHealthzTotal: registry.counter({
      name: "kubeproxy_proxy_healthz_total",
      help: "Cumulative proxy healthz HTTP status",
      labelNames: ["code"],
      stabilityLevel: ALPHA,
    }),
    proxyLivezTotal: registry.counter({
      name: "kubeproxy_proxy_livez_total",
      help: "Cumulative proxy livez HTTP status",
      labelNames: ["code"],
      stabilityLevel: ALPHA,
    }),
    reconcileConntrackFlowsLatency: syncHistogram(
      "kubeproxy_conntrack_reconciler_sync_duration_seconds",
      "ReconcileConntrackFlowsLatency latency in seconds",
    ),
    reconcileConntrackFlowsDeletedEntriesTotal: registry.counter({
      name: "kubeproxy_conntrack_reconciler_deleted_entries_total",
      help: "Cumulative conntrack flows deleted by conntrack reconciler",
      labelNames: IP_FAMILY,
      stabilityLevel: ALPHA,
    }),
    nftablesSyncFailuresTotal: nftablesOnly.counter({
      name: "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
      help: "Cumulative proxy nftables sync failures",
      labelNames: IP_FAMILY,
      stabilityLevel: ALPHA,
    }),
    nftablesCleanupFailuresTotal: nftablesOnly.counter({
      name: "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
      help: "Cumulative proxy nftables cleanup failures",
      labelNames: IP_FAMILY,
      stabilityLevel: ALPHA,
    }),
  };

  const nfacctCollector = (name: string, help: string, counter: string) =>
    iptablesOnly.collector({
      name,
      help,
      type: "counter",
      stabilityLevel: ALPHA,
      collect: () => {
        const v = opts.nfacct?.packets(counter) ?? null;
        return v === null ? [] : [{ value: v }];
      },
    });
  nfacctCollector(
    "kubeproxy_iptables_ct_state_invalid_dropped_packets_total",
    "packets dropped by iptables to work around conntrack problems",
    NFACCT_CT_STATE_INVALID_DROPPED,
  );
  nfacctCollector(
    "kubeproxy_iptables_localhost_nodeports_accepted_packets_total",
    "Number of packets accepted on nodeports of loopback interface",
    NFACCT_LOCALHOST_NODEPORTS_ACCEPTED,
  );
  return m;
}

/** Values of the `table` label of the iptables rule-count gauges. */
export const IPTABLES_TABLES = ["filter", "nat"] as const;
/** Values of the `traffic_policy` label of kubeproxy_sync_proxy_rules_no_local_endpoints_total. */
export const TRAFFIC_POLICIES = ["internal", "external"] as const;
/** Values of the `code` label of the healthz/livez counters (the two statuses the health server answers). */
export const HEALTH_CODES = ["200", "503"] as const;

/**
 * Creates every labelled kubeproxy_* series the agent will write, at zero, for the IP families it runs,
 * so each family registered for iptables mode is in the first scrape (counters 0, histograms with zero
 * counts, gauges 0) rather than after the first sync, probe or conntrack run. The label values are the
 * ones the proxier and health server use; series that exist are left as they are.
 */
export function initKubeProxySeries(m: KubeProxyMetrics, families: readonly IPFamilyLabel[]): void {
  for (const ip_family of families) {
    const fam = { ip_family };
    for (
      const metric of [
        m.syncProxyRulesLatency,
        m.syncFullProxyRulesLatency,
        m.syncPartialProxyRulesLatency,
        m.syncProxyRulesLastTimestamp,
        m.syncProxyRulesLastQueuedTimestamp,
        m.networkProgrammingLatency,
        m.iptablesRestoreFailuresTotal,
        m.iptablesPartialRestoreFailuresTotal,
        m.reconcileConntrackFlowsLatency,
        m.reconcileConntrackFlowsDeletedEntriesTotal,
        m.nftablesSyncFailuresTotal,
        m.nftablesCleanupFailuresTotal,
      ]
    ) metric.initSeries(fam);
    for (const table of IPTABLES_TABLES) {
      m.iptablesRulesTotal.initSeries({ ...fam, table });
      m.iptablesRulesLastSync.initSeries({ ...fam, table });
    }
    for (const traffic_policy of TRAFFIC_POLICIES) {
      m.syncProxyRulesNoLocalEndpointsTotal.initSeries({ ...fam, traffic_policy });
    }
  }
  for (const code of HEALTH_CODES) {
    m.proxyHealthzTotal.initSeries({ code });
    m.proxyLivezTotal.initSeries({ code });
  }
}
