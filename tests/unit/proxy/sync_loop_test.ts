import { test } from "node:test";
import assert from "node:assert/strict";
import type { EndpointSlice, Node, Service } from "../../../lib/k8s/objects.ts";
import { Proxier } from "../../../lib/proxy/proxier.ts";
import { DriftFoundError, type Provider, type ProxyState } from "../../../lib/proxy/provider.ts";
import { detectLocalByCIDR, type LocalDetection, nodePodCIDRs } from "../../../lib/proxy/local_detect.ts";
import { FakeClock } from "../../../lib/runtime/clock.ts";
import { Registry } from "../../../lib/metrics/registry.ts";
import { createKubeProxyMetrics } from "../../../lib/metrics/kubeproxy.ts";
import { backendFor, PROXY_BACKENDS } from "../../../lib/app/backends.ts";

const quiet = { info() {}, warn() {}, error() {}, debug() {} };

interface Recorded {
  full: boolean;
  changed: string[];
  services: number;
  labels: Record<string, string>;
  local: LocalDetection;
}
interface Fake {
  syncs: Recorded[];
  fail: number;
  /** Thrown by the next sync instead of syncing. */
  throwNext: Error | null;
  drift: string | null;
  provider: Provider;
}

/** A provider that records what the loop hands it (no iptables anywhere). */
function fakeProvider(): Fake {
  const f: Fake = {
    syncs: [],
    fail: 0,
    throwNext: null,
    drift: null,
    provider: {
      sync(state: ProxyState, { full }: { full: boolean }) {
        if (f.throwNext !== null) {
          const e = f.throwNext;
          f.throwNext = null;
          return Promise.reject(e);
        }
        if (f.fail > 0) {
          f.fail--;
          return Promise.reject(new Error("kernel said no"));
        }
        f.syncs.push({
          full,
          changed: [...state.changedServices].sort(),
          services: state.services.size,
          labels: { ...state.nodeLabels },
          local: state.localDetection,
        });
        return Promise.resolve({
          kind: full ? "full" : "partial",
          bytes: 1,
          noLocalEndpoints: { internal: 0, external: 0 },
        });
      },
      checkDrift: () => Promise.resolve(f.drift),
    },
  };
  return f;
}

function svc(name: string, ip: string): Service {
  return {
    metadata: { namespace: "ns", name },
    spec: {
      type: "ClusterIP",
      clusterIP: ip,
      clusterIPs: [ip],
      ports: [{ name: "p", protocol: "TCP", port: 80 }],
    },
  };
}
const slice = (name: string): EndpointSlice => ({
  metadata: { namespace: "ns", name: `${name}-1`, labels: { "kubernetes.io/service-name": name } },
  addressType: "IPv4",
  endpoints: [{ addresses: ["10.1.0.1"], conditions: { ready: true } }],
  ports: [{ name: "p", protocol: "TCP", port: 80 }],
});

function loop(f: ReturnType<typeof fakeProvider>) {
  return new Proxier({
    family: "IPv4",
    nodeName: "n1",
    provider: f.provider,
    clock: new FakeClock(),
    log: quiet,
    metrics: createKubeProxyMetrics(new Registry()),
    health: { queuedUpdate() {}, updated() {} },
    minSyncPeriodMs: 1000,
    syncPeriodMs: 30000,
    localDetection: (node: Node | null) => {
      const cidr = nodePodCIDRs(node)[0];
      return cidr ? detectLocalByCIDR(cidr) : { kind: "none" };
    },
  });
}

test("the shared loop hands any provider the state: full first, then only the changed Services", async () => {
  const f = fakeProvider();
  const p = loop(f);
  p.onServiceAdd(svc("a", "172.30.0.1"));
  p.onEndpointSliceAdd(slice("a"));
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  await p.syncProxyRules();
  p.onServiceAdd(svc("b", "172.30.0.2"));
  await p.syncProxyRules();
  assert.deepEqual(f.syncs.map((s) => [s.full, s.changed, s.services]), [
    [true, ["ns/a:p/TCP"], 1],
    [false, ["ns/b:p/TCP"], 2],
  ]);
});

test("a failed provider sync makes the next one full; drift reported by the provider forces a full sync", async () => {
  const f = fakeProvider();
  const p = loop(f);
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  await p.syncProxyRules();
  f.fail = 1;
  p.onServiceAdd(svc("a", "172.30.0.1"));
  await p.syncProxyRules();
  await p.syncProxyRules();
  assert.deepEqual(f.syncs.map((s) => s.full), [true, true]);
  await p.syncProxyRules();
  f.drift = "someone flushed it";
  assert.equal(await p.checkDrift(), "someone flushed it");
  f.drift = null;
  await p.syncProxyRules();
  assert.deepEqual(f.syncs.map((s) => s.full), [true, true, false, true]);
});

test("drift a partial sync finds hands over to a full sync at once, logged as drift; from a full sync it is a failure", async () => {
  const f = fakeProvider();
  const logged: string[] = [];
  const log = {
    info: (m: string) => logged.push(`I ${m}`),
    warn: (m: string) => logged.push(`W ${m}`),
    error: (m: string) => logged.push(`E ${m}`),
    debug() {},
  };
  const clock = new FakeClock();
  const p = new Proxier({
    family: "IPv4",
    nodeName: "n1",
    provider: f.provider,
    clock,
    log,
    metrics: createKubeProxyMetrics(new Registry()),
    health: { queuedUpdate() {}, updated() {} },
    minSyncPeriodMs: 0,
    syncPeriodMs: 30000,
    localDetection: () => ({ kind: "none" }),
  });
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  p.start();
  const settle = async () => {
    for (let i = 0; i < 20; i++) await new Promise((r) => setTimeout(r, 0));
  };
  await settle();
  assert.deepEqual(f.syncs.map((s) => s.full), [true]);

  f.throwNext = new DriftFoundError("IPVS virtual server -t 10.96.0.1:80 (draining real servers) is missing");
  p.onServiceAdd(svc("a", "172.30.0.1"));
  await settle();
  // The full sync ran without waiting for the retry (the clock has not moved).
  assert.deepEqual(f.syncs.map((s) => s.full), [true, true]);
  assert.deepEqual(logged, [
    "I full resync of IPv4 rules: IPVS virtual server -t 10.96.0.1:80 (draining real servers) is missing",
  ]);

  logged.length = 0;
  p.forceFullSync("test");
  f.throwNext = new DriftFoundError("gone again");
  await settle();
  assert.deepEqual(f.syncs.map((s) => s.full), [true, true], "no sync succeeded");
  assert.deepEqual(logged, [
    "I full resync of IPv4 rules: test",
    "E full sync of IPv4 rules failed: gone again",
  ]);
  await settle();
  assert.equal(f.syncs.length, 2, "retried after syncPeriod, not at once");
  clock.advance(30000);
  await settle();
  assert.deepEqual(f.syncs.map((s) => s.full), [true, true, true]);
  await p.stop();
});

test("node labels and the local detection (from podCIDRs) reach the provider; a podCIDR change forces a full sync", async () => {
  const f = fakeProvider();
  const p = loop(f);
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  await p.syncProxyRules();
  assert.deepEqual(f.syncs[0].local, { kind: "none" });
  p.onNodeAdd({ metadata: { name: "n1", labels: { zone: "z1" } }, spec: { podCIDR: "10.244.1.0/24" } });
  await p.syncProxyRules();
  assert.deepEqual(f.syncs[1], {
    full: true,
    changed: [],
    services: 0,
    labels: { zone: "z1" },
    local: { kind: "cidr", cidr: "10.244.1.0/24" },
  });
});

test("the mode → backend factory knows iptables, nftables, userspace and ipvs and names the field for anything else", () => {
  assert.deepEqual(Object.keys(PROXY_BACKENDS), ["iptables", "nftables", "userspace", "ipvs"]);
  const b = backendFor("iptables");
  assert.equal(typeof b.provider, "function");
  assert.equal(typeof b.families, "function");
  assert.equal(typeof b.cleanup, "function");
  assert.throws(
    () => backendFor("kernelspace"),
    /^Error: mode: unsupported proxy mode "kernelspace" \(supported: iptables, nftables, userspace, ipvs\)$/,
  );
  assert.throws(() => backendFor("toString"), /unsupported proxy mode "toString"/);
});

test("the iptables backend takes its sync periods from the configuration's iptables section", () => {
  const periods = backendFor("iptables").syncPeriods(
    { iptables: { minSyncPeriod: 1000, syncPeriod: 30000 } } as never,
  );
  assert.deepEqual(periods, { minSyncPeriodMs: 1000, syncPeriodMs: 30000 });
});
