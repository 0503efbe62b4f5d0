/**
 * IPVS mode's metrics: upstream's RegisterMetrics(ProxyModeIPVS) families (the shared ones plus the iptables
 * restore-failure counter; no full/partial histograms, no iptables rule counts, no nfacct, no nftables
 * counters), the counter counting a failed payload restore, and the edgeproxy_ipvs_* gauges after a sync.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createKubeProxyMetrics } from "../../../../lib/metrics/kubeproxy.ts";
import { Registry } from "../../../../lib/metrics/registry.ts";
import { registerIpvsMetrics } from "../../../../lib/proxy/ipvs/metrics.ts";
import { IpvsBackend } from "../../../../lib/proxy/ipvs/backend.ts";
import type { IptablesRunner } from "../../../../lib/proxy/iptables/runner.ts";
import { newNodePortAddresses } from "../../../../lib/proxy/nodeport_addresses.ts";
import { ServicePortMap } from "../../../../lib/proxy/service_change_tracker.ts";
import { EndpointsMap } from "../../../../lib/proxy/endpoints_change_tracker.ts";
import { detectLocalByCIDR } from "../../../../lib/proxy/local_detect.ts";
import type { ProxyState } from "../../../../lib/proxy/provider.ts";
import { servicePortKey } from "../../../../lib/proxy/types.ts";
import { makeEndpoint, makeServicePort } from "../../../support/tracer.ts";
import { fakeIpvsBackend } from "../../../support/ipvs_fake_host.ts";

/** The kubeproxy_* families of upstream's iptables-mode list that its IPVS case does not register. */
const NOT_IN_IPVS_MODE = [
  "kubeproxy_iptables_ct_state_invalid_dropped_packets_total",
  "kubeproxy_iptables_localhost_nodeports_accepted_packets_total",
  "kubeproxy_sync_full_proxy_rules_duration_seconds",
  "kubeproxy_sync_partial_proxy_rules_duration_seconds",
  "kubeproxy_sync_proxy_rules_iptables_last",
  "kubeproxy_sync_proxy_rules_iptables_partial_restore_failures_total",
  "kubeproxy_sync_proxy_rules_iptables_total",
];

function upstreamIptablesModeFamilies(): string[] {
  const text = readFileSync(new URL("../../../support/upstream_metrics_v1.34.txt", import.meta.url), "utf8");
  return text.split("\n").filter((l) => l.startsWith("kubeproxy_")).map((l) => l.split(" ")[0]);
}

function oneService(eps: number): ProxyState {
  const svc = makeServicePort("ns1", "svc1", { clusterIP: "172.30.0.41" });
  const services = new ServicePortMap();
  const endpoints = new EndpointsMap();
  services.set(servicePortKey(svc.name), svc);
  endpoints.set(
    servicePortKey(svc.name),
    Array.from({ length: eps }, (_, i) => makeEndpoint(`10.180.0.${i + 1}`, 80)),
  );
  return {
    family: "IPv4",
    services,
    endpoints,
    changedServices: new Set(),
    nodeLabels: {},
    localDetection: detectLocalByCIDR("10.0.0.0/8"),
  };
}

describe("IPVS mode metrics", () => {
  it("registers upstream's IPVS families: the shared ones and the iptables restore-failure counter", () => {
    const registry = new Registry();
    createKubeProxyMetrics(registry, { mode: "ipvs" });
    const names = registry.names();
    const want = upstreamIptablesModeFamilies().filter((n) => !NOT_IN_IPVS_MODE.includes(n));
    assert.ok(want.includes("kubeproxy_sync_proxy_rules_iptables_restore_failures_total"));
    assert.ok(want.includes("kubeproxy_sync_proxy_rules_duration_seconds"));
    assert.deepEqual(names.filter((n) => n.startsWith("kubeproxy_")), want.sort());
    assert.ok(!names.some((n) => n.includes("nftables")));
  });

  it("a failed iptables-restore of the payload counts in ..._iptables_restore_failures_total{ip_family}", async () => {
    const registry = new Registry();
    const metrics = createKubeProxyMetrics(registry, { mode: "ipvs" });
    const failing = new IpvsBackend({
      family: "IPv4",
      nodeName: "n1",
      host: fakeHostOf(),
      iptables: {
        family: "IPv4",
        features: { hasRandomFully: true, waitFlags: [] },
        restore: () => Promise.reject(new Error("iptables-restore: line 3 failed")),
        exec: () => Promise.resolve({ code: 0, stdout: "", stderr: "" }),
      } as unknown as IptablesRunner,
      scheduler: "",
      excludeCIDRs: [],
      masqueradeAll: false,
      masqueradeBit: 14,
      nodePortAddresses: newNodePortAddresses("IPv4", []),
      primaryNodeIP: () => null,
      preferSameTrafficDistribution: true,
      metrics,
      log: { info: () => {}, warn: () => {}, debug: () => {} },
    });
    await assert.rejects(failing.sync(oneService(1), { full: true }), /line 3 failed/);
    assert.match(
      registry.metrics(),
      /^kubeproxy_sync_proxy_rules_iptables_restore_failures_total\{ip_family="IPv4"\} 1$/m,
    );
  });

  it("edgeproxy_ipvs_* gauges show what the last sync programmed", async () => {
    const registry = new Registry();
    const f = fakeIpvsBackend();
    registerIpvsMetrics(registry, () => [["IPv4", f.backend]]);
    assert.match(registry.metrics(), /^edgeproxy_ipvs_virtual_servers\{ip_family="IPv4"\} 0$/m);
    await f.backend.sync(oneService(2), { full: true });
    const text = registry.metrics();
    assert.match(text, /^edgeproxy_ipvs_virtual_servers\{ip_family="IPv4"\} 1$/m);
    assert.match(text, /^edgeproxy_ipvs_real_servers\{ip_family="IPv4"\} 2$/m);
    assert.match(text, /^edgeproxy_ipvs_service_addresses\{ip_family="IPv4"\} 1$/m);
    assert.match(text, /^edgeproxy_ipvs_terminating_real_servers\{ip_family="IPv4"\} 0$/m);
  });
});

/** A host that answers an empty kernel and accepts every write. */
function fakeHostOf() {
  const none = () => Promise.resolve("");
  const ok = () => Promise.resolve();
  return {
    ipvsSave: none,
    ipvsList: none,
    ipvsRestore: ok,
    ipvsSetTimeouts: ok,
    ipsetSave: none,
    ipsetRestore: ok,
    ensureDummy: ok,
    dummyAddresses: () => Promise.resolve([]),
    changeDummyAddresses: ok,
    nodeAddresses: () => Promise.resolve([]),
  };
}
