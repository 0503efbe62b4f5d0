import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import {
  createKubeProxyMetrics,
  exponentialBuckets,
  NETWORK_PROGRAMMING_BUCKETS,
  NFACCT_CT_STATE_INVALID_DROPPED,
  NFACCT_LOCALHOST_NODEPORTS_ACCEPTED,
  SYNC_DURATION_BUCKETS,
} from "../../../lib/metrics/kubeproxy.ts";
import { Registry } from "../../../lib/metrics/registry.ts";

/**
 * Upstream's iptables-mode kubeproxy_* families (Kubernetes metrics reference v1.34; help texts from
 * pkg/proxy/metrics/metrics.go): name → [type, help, sorted label names].
 */
const EXPECTED: Record<string, [string, string, string[]]> = {
  kubeproxy_sync_proxy_rules_duration_seconds: ["histogram", "SyncProxyRules latency in seconds", [
    "ip_family",
  ]],
  kubeproxy_sync_full_proxy_rules_duration_seconds: [
    "histogram",
    "SyncProxyRules latency in seconds for full resyncs",
    ["ip_family"],
  ],
  kubeproxy_sync_partial_proxy_rules_duration_seconds: [
    "histogram",
    "SyncProxyRules latency in seconds for partial resyncs",
    ["ip_family"],
  ],
  kubeproxy_network_programming_duration_seconds: [
    "histogram",
    "In Cluster Network Programming Latency in seconds",
    ["ip_family"],
  ],
  kubeproxy_sync_proxy_rules_last_timestamp_seconds: [
    "gauge",
    "The last time proxy rules were successfully synced",
    ["ip_family"],
  ],
  kubeproxy_sync_proxy_rules_last_queued_timestamp_seconds: [
    "gauge",
    "The last time a sync of proxy rules was queued",
    ["ip_family"],
  ],
  kubeproxy_sync_proxy_rules_endpoint_changes_pending: ["gauge", "Pending proxy rules Endpoint changes", []],
  kubeproxy_sync_proxy_rules_endpoint_changes_total: [
    "counter",
    "Cumulative proxy rules Endpoint changes",
    [],
  ],
  kubeproxy_sync_proxy_rules_service_changes_pending: ["gauge", "Pending proxy rules Service changes", []],
  kubeproxy_sync_proxy_rules_service_changes_total: ["counter", "Cumulative proxy rules Service changes", []],
  kubeproxy_sync_proxy_rules_iptables_restore_failures_total: [
    "counter",
    "Cumulative proxy iptables restore failures",
    ["ip_family"],
  ],
  kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total: [
    "counter",
    "Cumulative proxy iptables partial restore failures",
    ["ip_family"],
  ],
  kubeproxy_sync_proxy_rules_iptables_total: [
    "gauge",
    "Total number of iptables rules owned by kube-proxy",
    ["ip_family", "table"],
  ],
  kubeproxy_sync_proxy_rules_iptables_last: [
    "gauge",
    "Number of iptables rules written by kube-proxy in last sync",
    ["ip_family", "table"],
  ],
  kubeproxy_sync_proxy_rules_no_local_endpoints_total: [
    "gauge",
    "Number of services with a Local traffic policy and no endpoints",
    ["ip_family", "traffic_policy"],
  ],
  kubeproxy_proxy_healthz_total: ["counter", "Cumulative proxy healthz HTTP status", ["code"]],
  kubeproxy_proxy_livez_total: ["counter", "Cumulative proxy livez HTTP status", ["code"]],
  kubeproxy_conntrack_reconciler_sync_duration_seconds: [
    "histogram",
    "ReconcileConntrackFlowsLatency latency in seconds",
    ["ip_family"],
  ],
  kubeproxy_conntrack_reconciler_deleted_entries_total: [
    "counter",
    "Cumulative conntrack flows deleted by conntrack reconciler",
    ["ip_family"],
  ],
  kubeproxy_iptables_ct_state_invalid_dropped_packets_total: [
    "counter",
    "packets dropped by iptables to work around conntrack problems",
    [],
  ],
  kubeproxy_iptables_localhost_nodeports_accepted_packets_total: [
    "counter",
    "Number of packets accepted on nodeports of loopback interface",
    [],
  ],
};

/** Sets every metric so that each family has at least one series. */
function populate() {
  const registry = new Registry();
  const counters: Record<string, number> = {
    [NFACCT_CT_STATE_INVALID_DROPPED]: 7,
    [NFACCT_LOCALHOST_NODEPORTS_ACCEPTED]: 1234567,
  };
  const m = createKubeProxyMetrics(registry, { nfacct: { packets: (n) => counters[n] ?? null } });
  for (const ip_family of ["IPv4", "IPv6"]) {
    const f = { ip_family };
    m.syncProxyRulesLatency.observe(f, 0.0042);
    m.syncFullProxyRulesLatency.observe(f, 0.2);
    m.syncPartialProxyRulesLatency.observe(f, 0.003);
    m.networkProgrammingLatency.observe(f, 2.5);
    m.syncProxyRulesLastTimestamp.set(f, 1735689600.5);
    m.syncProxyRulesLastQueuedTimestamp.set(f, 1735689601);
    m.iptablesRestoreFailuresTotal.inc(f);
    m.iptablesPartialRestoreFailuresTotal.inc(f);
    for (const table of ["filter", "nat"]) {
      m.iptablesRulesTotal.set({ table, ip_family }, 100);
      m.iptablesRulesLastSync.set({ table, ip_family }, 10);
    }
    for (const traffic_policy of ["internal", "external"]) {
      m.syncProxyRulesNoLocalEndpointsTotal.set({ traffic_policy, ip_family }, 0);
    }
    m.reconcileConntrackFlowsLatency.observe(f, 0.01);
    m.reconcileConntrackFlowsDeletedEntriesTotal.inc(f, 3);
  }
  m.endpointChangesPending.set({}, 2);
  m.endpointChangesTotal.inc();
  m.serviceChangesPending.set({}, 1);
  m.serviceChangesTotal.inc();
  m.proxyHealthzTotal.inc({ code: "200" });
  m.proxyLivezTotal.inc({ code: "503" });
  return { registry, m };
}

/** Families in an exposition: name → {type, help, label-name sets seen}. */
function families(text: string) {
  const out = new Map<string, { type: string; help: string; labelSets: Set<string> }>();
  let current = "";
  for (const line of text.split("\n")) {
    let m;
    if ((m = /^# HELP (\S+) (.*)$/.exec(line))) {
      current = m[1];
      out.set(current, { type: "", help: m[2], labelSets: new Set() });
    } else if ((m = /^# TYPE (\S+) (\S+)$/.exec(line))) {
      out.get(m[1])!.type = m[2];
    } else if ((m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line))) {
      assert.ok(m[1].startsWith(current), `sample ${m[1]} outside its family ${current}`);
      const names = [...(m[2] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="/g)].map((x) => x[1]).filter((n) =>
        n !== "le"
      );
      out.get(current)!.labelSets.add(names.join(","));
    } else if (line !== "") {
      assert.fail(`unexpected line: ${line}`);
    }
  }
  return out;
}

/** `promtool check metrics` on `text`: null when promtool is missing, else its exit code and output. */
function promtoolCheck(text: string): { status: number; output: string } | null {
  const r = spawnSync("promtool", ["check", "metrics"], { input: text, encoding: "utf8" });
  if (r.error) return null;
  return { status: r.status ?? -1, output: `${r.stdout}${r.stderr}`.trim() };
}

describe("kubeproxy_* metrics", () => {
  it("buckets: 15 exponential from 1 ms; network programming as upstream (leading 0 from MergeBuckets)", () => {
    assert.deepEqual(SYNC_DURATION_BUCKETS, [
      0.001,
      0.002,
      0.004,
      0.008,
      0.016,
      0.032,
      0.064,
      0.128,
      0.256,
      0.512,
      1.024,
      2.048,
      4.096,
      8.192,
      16.384,
    ]);
    assert.deepEqual(exponentialBuckets(1, 10, 3), [1, 10, 100]);
    assert.equal(NETWORK_PROGRAMMING_BUCKETS.length, 1 + 2 + 59 + 12 + 7);
    assert.deepEqual(NETWORK_PROGRAMMING_BUCKETS.slice(0, 5), [0, 0.25, 0.5, 1, 2]);
    assert.deepEqual(NETWORK_PROGRAMMING_BUCKETS.slice(60, 64), [58, 59, 60, 65]);
    assert.deepEqual(NETWORK_PROGRAMMING_BUCKETS.slice(-8), [115, 120, 150, 180, 210, 240, 270, 300]);
  });

  it("every upstream family, with its type, [ALPHA] help and label names, and nothing else", () => {
    const { registry } = populate();
    const fams = families(registry.metrics());
    assert.deepEqual([...fams.keys()].sort(), Object.keys(EXPECTED).sort());
    for (const [name, [type, help, labels]] of Object.entries(EXPECTED)) {
      const f = fams.get(name)!;
      assert.equal(f.type, type, `${name} type`);
      assert.equal(f.help, `[ALPHA] ${help}`, `${name} help`);
      assert.deepEqual([...f.labelSets], [labels.join(",")], `${name} labels`);
    }
  });

  it("renders exact upstream lines for a sync histogram and table gauges", () => {
    const { registry } = populate();
    const text = registry.metrics();
    assert.match(
      text,
      /^kubeproxy_sync_proxy_rules_duration_seconds_bucket\{ip_family="IPv4",le="0.004"\} 0\nkubeproxy_sync_proxy_rules_duration_seconds_bucket\{ip_family="IPv4",le="0.008"\} 1$/m,
    );
    assert.match(
      text,
      /^kubeproxy_sync_proxy_rules_duration_seconds_bucket\{ip_family="IPv6",le="16.384"\} 1$/m,
    );
    assert.match(
      text,
      /^kubeproxy_network_programming_duration_seconds_bucket\{ip_family="IPv4",le="0"\} 0$/m,
    );
    assert.match(text, /^kubeproxy_sync_proxy_rules_iptables_total\{ip_family="IPv4",table="filter"\} 100$/m);
    assert.match(
      text,
      /^kubeproxy_sync_proxy_rules_last_timestamp_seconds\{ip_family="IPv6"\} 1.7356896005e\+09$/m,
    );
    assert.match(text, /^kubeproxy_iptables_localhost_nodeports_accepted_packets_total 1.234567e\+06$/m);
  });

  it("fresh registry: only the unlabelled families, and nfacct families only with a source", () => {
    const registry = new Registry();
    createKubeProxyMetrics(registry);
    const names = [...families(registry.metrics()).keys()];
    assert.deepEqual(names, [
      "kubeproxy_sync_proxy_rules_endpoint_changes_pending",
      "kubeproxy_sync_proxy_rules_endpoint_changes_total",
      "kubeproxy_sync_proxy_rules_service_changes_pending",
      "kubeproxy_sync_proxy_rules_service_changes_total",
    ]);
    const r2 = new Registry();
    createKubeProxyMetrics(r2, { nfacct: { packets: () => null } });
    assert.doesNotMatch(r2.metrics(), /kubeproxy_iptables_/, "an unreadable nfacct counter exports nothing");
  });

  it("passes promtool check metrics (only upstream's own _total gauges are flagged)", (t) => {
    const { registry } = populate();
    const r = promtoolCheck(registry.metrics());
    if (r === null) {
      t.skip("promtool is not installed");
      return;
    }
    // Exit 1 is a parse failure; 3 is lint findings. Upstream itself names two gauges *_total.
    assert.notEqual(r.status, 1, r.output);
    const findings = r.output.split("\n").filter((l) => l.trim() !== "").sort();
    assert.deepEqual(findings, [
      'kubeproxy_sync_proxy_rules_iptables_total non-counter metrics should not have "_total" suffix',
      'kubeproxy_sync_proxy_rules_no_local_endpoints_total non-counter metrics should not have "_total" suffix',
    ]);
  });
});
