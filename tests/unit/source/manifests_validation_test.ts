/**
 * Apiserver-grade validation reaches every source: objects from --manifests, from the state cache and from a
 * live source (the apiserver feeds the same StateStore) pass through the same model conversion before any rule
 * is rendered.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { EndpointSlice, Service } from "../../../lib/k8s/objects.ts";
import { Proxier } from "../../../lib/proxy/proxier.ts";
import { IptablesBackend, type IptablesHost } from "../../../lib/proxy/iptables/backend.ts";
import { FakeClock } from "../../../lib/runtime/clock.ts";
import { Registry } from "../../../lib/metrics/registry.ts";
import { createKubeProxyMetrics } from "../../../lib/metrics/kubeproxy.ts";
import { detectLocalByCIDR } from "../../../lib/proxy/local_detect.ts";
import { startManifestsSource } from "../../../lib/source/manifests.ts";
import { StateStore } from "../../../lib/source/state_store.ts";

/** A proxier over a fake host that records restore payloads, and the warnings it logs. */
function newProxier() {
  const payloads: string[] = [];
  const warnings: string[] = [];
  const host: IptablesHost = {
    restore: (p) => {
      payloads.push(typeof p === "string" ? p : [...p].join(""));
      return Promise.resolve();
    },
    natChains: () => Promise.resolve(new Set<string>()),
    ensureBaseRules: () => Promise.resolve(),
    checkDrift: () => Promise.resolve(null),
  };
  const log = { info() {}, debug() {}, error() {}, warn: (m: string) => warnings.push(m) };
  const metrics = createKubeProxyMetrics(new Registry());
  const proxier = new Proxier({
    family: "IPv4",
    nodeName: "edge-node-1",
    provider: new IptablesBackend({
      family: "IPv4",
      nodeName: "edge-node-1",
      host,
      log,
      metrics,
      masqueradeAll: false,
      masqueradeBit: 14,
      localhostNodePorts: true,
      nodePortAddresses: [],
      features: { randomFully: false, nfacct: false, dropInvalid: true },
      nodeIPs: () => ["192.168.0.2"],
      primaryNodeIP: () => "192.168.0.2",
    }),
    clock: new FakeClock(),
    log,
    metrics,
    health: { queuedUpdate: () => {}, updated: () => {} },
    minSyncPeriodMs: 1000,
    syncPeriodMs: 30000,
    localDetection: () => detectLocalByCIDR("10.244.0.0/16"),
  });
  return { proxier, payloads, warnings };
}

const SERVICE: Service = {
  apiVersion: "v1",
  kind: "Service",
  metadata: { namespace: "site", name: "web", resourceVersion: "7" },
  spec: {
    clusterIP: "10.96.0.20",
    externalIPs: ["127.0.0.1", "203.0.113.9"],
    ports: [{ port: 80, protocol: "TCP" }],
  },
};
const SLICE: EndpointSlice = {
  apiVersion: "discovery.k8s.io/v1",
  kind: "EndpointSlice",
  metadata: { namespace: "site", name: "web-1", labels: { "kubernetes.io/service-name": "web" } },
  addressType: "IPv4",
  endpoints: [{ addresses: ["10.244.1.5"] }, { addresses: ["169.254.169.254"] }],
  ports: [{ port: 8080, protocol: "TCP" }],
};

/** The rules of the Service: the loopback external IP and the link-local endpoint are not among them. */
function assertValidated(payload: string, warnings: string[]): void {
  assert.match(payload, /"site\/web external IP" -m tcp -p tcp -d 203\.0\.113\.9 --dport 80 -j KUBE-EXT-/);
  assert.match(payload, /-d 10\.96\.0\.20 --dport 80 -j KUBE-SVC-/);
  assert.match(payload, /--to-destination 10\.244\.1\.5:8080/);
  assert.doesNotMatch(payload, /127\.0\.0\.1/, "a loopback external IP would capture the node's own traffic");
  assert.doesNotMatch(payload, /169\.254\.169\.254/);
  assert.ok(
    warnings.some((w) => w.includes("spec.externalIPs[0] of Service site/web") && w.includes("loopback")),
    JSON.stringify(warnings),
  );
  assert.ok(
    warnings.some((w) => w.includes("endpoints[1] of EndpointSlice site/web-1") && w.includes("link-local")),
    JSON.stringify(warnings),
  );
}

test("--manifests: externalIPs [127.0.0.1] is not rendered; the rest of the Service is", async () => {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-validate-"));
  try {
    const file = join(dir, "site.json");
    await writeFile(file, JSON.stringify({ kind: "List", apiVersion: "v1", items: [SERVICE, SLICE] }));
    const { proxier, payloads, warnings } = newProxier();
    const store = new StateStore(proxier);
    const src = startManifestsSource(file, store, { nodeName: "edge-node-1", warn: (m) => warnings.push(m) });
    try {
      await proxier.syncProxyRules();
      assert.equal(payloads.length, 1);
      assertValidated(payloads[0], warnings);
    } finally {
      src.stop();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("state cache and live (apiserver) objects pass the same validation", async () => {
  for (const path of ["cache", "live"] as const) {
    const { proxier, payloads, warnings } = newProxier();
    const store = new StateStore(proxier);
    if (path === "cache") {
      store.loadFromCache({ services: [SERVICE], endpointSlices: [SLICE], node: null });
    } else {
      store.onServiceAdd(structuredClone(SERVICE));
      store.onEndpointSliceAdd(structuredClone(SLICE));
      store.onServicesSynced();
      store.onEndpointSlicesSynced();
    }
    await proxier.syncProxyRules();
    assert.equal(payloads.length, 1, path);
    assertValidated(payloads[0], warnings);
  }
});
