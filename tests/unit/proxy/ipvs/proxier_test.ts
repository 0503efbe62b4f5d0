/**
 * The IPVS Provider behind the shared sync loop (lib/proxy/proxier.ts), as the agent would run it: Service
 * and EndpointSlice events become ipvsadm batches through the Provider contract; the first sync is full,
 * later ones write only the changed Service; ClientIP affinity becomes persistence.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { EndpointSlice, Service } from "../../../../lib/k8s/objects.ts";
import { Proxier } from "../../../../lib/proxy/proxier.ts";
import { FakeClock } from "../../../../lib/runtime/clock.ts";
import { Registry } from "../../../../lib/metrics/registry.ts";
import { createKubeProxyMetrics } from "../../../../lib/metrics/kubeproxy.ts";
import { fakeIpvsBackend } from "../../../support/ipvs_fake_host.ts";

const quiet = { info() {}, warn() {}, error() {}, debug() {} };

function svc(name: string, ip: string, affinity = false): Service {
  return {
    metadata: { namespace: "ns", name },
    spec: {
      type: "ClusterIP",
      clusterIP: ip,
      clusterIPs: [ip],
      ports: [{ name: "p", protocol: "TCP", port: 80 }],
      ...(affinity
        ? { sessionAffinity: "ClientIP", sessionAffinityConfig: { clientIP: { timeoutSeconds: 600 } } }
        : {}),
    },
  };
}

function slice(name: string, ips: string[]): EndpointSlice {
  return {
    metadata: { namespace: "ns", name: `${name}-1`, labels: { "kubernetes.io/service-name": name } },
    addressType: "IPv4",
    endpoints: ips.map((ip) => ({ addresses: [ip], conditions: { ready: true } })),
    ports: [{ name: "p", protocol: "TCP", port: 8080 }],
  };
}

test("Service and EndpointSlice events reach IPVS through the shared loop", async () => {
  const f = fakeIpvsBackend();
  const p = new Proxier({
    family: "IPv4",
    nodeName: "n1",
    provider: f.backend,
    clock: new FakeClock(),
    log: quiet,
    metrics: createKubeProxyMetrics(new Registry()),
    health: { queuedUpdate() {}, updated() {} },
    minSyncPeriodMs: 1000,
    syncPeriodMs: 30000,
    localDetection: () => ({ kind: "none" }),
  });
  p.onServiceAdd(svc("a", "172.30.0.1"));
  p.onEndpointSliceAdd(slice("a", ["10.1.0.1", "10.1.0.2"]));
  p.onServiceAdd(svc("b", "172.30.0.2", true));
  p.onEndpointSliceAdd(slice("b", ["10.1.0.3"]));
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  await p.syncProxyRules();
  assert.deepEqual(f.ipvsLines, [[
    "-A -t 172.30.0.1:80 -s rr",
    "-a -t 172.30.0.1:80 -r 10.1.0.1:8080 -m -w 1",
    "-a -t 172.30.0.1:80 -r 10.1.0.2:8080 -m -w 1",
    "-A -t 172.30.0.2:80 -s rr -p 600",
    "-a -t 172.30.0.2:80 -r 10.1.0.3:8080 -m -w 1",
  ]]);
  assert.ok(f.calls.includes("ipvsSave"), "the first sync reads the kernel back");
  f.ipvsLines.length = 0;
  f.calls.length = 0;
  p.onEndpointSliceUpdate(slice("a", ["10.1.0.1", "10.1.0.2"]), slice("a", ["10.1.0.1"]));
  await p.syncProxyRules();
  assert.deepEqual(f.ipvsLines, [["-e -t 172.30.0.1:80 -r 10.1.0.2:8080 -m -w 0"]]);
  assert.ok(!f.calls.includes("ipvsSave"), "a partial sync reads nothing back");
});
