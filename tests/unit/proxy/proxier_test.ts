import { test } from "node:test";
import assert from "node:assert/strict";
import type { EndpointSlice, Service } from "../../../lib/k8s/objects.ts";
import { Proxier } from "../../../lib/proxy/proxier.ts";
import { IptablesBackend, type IptablesHost } from "../../../lib/proxy/iptables/backend.ts";
import { FakeClock } from "../../../lib/runtime/clock.ts";
import { Registry } from "../../../lib/metrics/registry.ts";
import { createKubeProxyMetrics } from "../../../lib/metrics/kubeproxy.ts";
import { detectLocalByCIDR } from "../../../lib/proxy/local_detect.ts";
import type { RenderState } from "../../../lib/proxy/iptables/render/state.ts";
import { expectationFromState } from "../../../lib/proxy/iptables/drift.ts";

const quiet = { info() {}, warn() {}, error() {}, debug() {} };

function svc(name: string, ip: string, port: number): Service {
  return {
    metadata: { namespace: "ns1", name, resourceVersion: "1" },
    spec: {
      type: "ClusterIP",
      clusterIP: ip,
      clusterIPs: [ip],
      ports: [{ name: "p", protocol: "TCP", port, targetPort: port }],
    },
  };
}
function slice(name: string, ip: string, port: number): EndpointSlice {
  return {
    metadata: { namespace: "ns1", name: `${name}-x`, labels: { "kubernetes.io/service-name": name } },
    addressType: "IPv4",
    endpoints: [{ addresses: [ip], conditions: { ready: true } }],
    ports: [{ name: "p", protocol: "TCP", port }],
  };
}

interface Fake {
  host: IptablesHost;
  payloads: string[];
  /** Whether each restore got chunks (an array) rather than one joined string. */
  chunked: boolean[];
  /** "restore" / "ensure" in call order. */
  calls: string[];
  failNext: number;
  drift: string | null;
  ensured: number;
  lastState: RenderState | null;
}

function fakeHost(): Fake {
  const f: Fake = {
    payloads: [],
    chunked: [],
    calls: [],
    failNext: 0,
    drift: null,
    ensured: 0,
    lastState: null,
    host: {
      restore: (p) => {
        f.calls.push("restore");
        if (f.failNext > 0) {
          f.failNext--;
          return Promise.reject(new Error("iptables-restore failed (IPv4): line 3: boom"));
        }
        f.chunked.push(typeof p !== "string");
        f.payloads.push(typeof p === "string" ? p : [...p].join(""));
        return Promise.resolve();
      },
      natChains: () => Promise.resolve(new Set(["KUBE-SERVICES", "KUBE-SVC-LEFTOVER0000000"])),
      ensureBaseRules: () => {
        f.calls.push("ensure");
        f.ensured++;
        return Promise.resolve();
      },
      checkDrift: (state) => {
        f.lastState = state;
        return Promise.resolve(f.drift);
      },
    },
  };
  return f;
}

function newProxier(f: Fake) {
  const metrics = createKubeProxyMetrics(new Registry());
  const health = { queued: 0, updated: 0 };
  const p = new Proxier({
    family: "IPv4",
    nodeName: "node-a",
    provider: new IptablesBackend({
      family: "IPv4",
      nodeName: "node-a",
      host: f.host,
      log: quiet,
      metrics,
      masqueradeAll: false,
      masqueradeBit: 14,
      localhostNodePorts: true,
      nodePortAddresses: [],
      features: { randomFully: false, nfacct: false, dropInvalid: true },
      nodeIPs: () => ["127.0.0.1", "192.168.0.2"],
      primaryNodeIP: () => "192.168.0.2",
    }),
    clock: new FakeClock(),
    log: quiet,
    metrics,
    health: { queuedUpdate: () => health.queued++, updated: () => health.updated++ },
    minSyncPeriodMs: 1000,
    syncPeriodMs: 30000,
    localDetection: () => detectLocalByCIDR("10.0.0.0/8"),
  });
  return { p, metrics, health };
}

const declared = (payload: string) =>
  payload.split("\n").filter((l) => l.startsWith(":KUBE-S")).map((l) => l.split(" ")[0].slice(1)).filter((
    c,
  ) => !c.includes("LEFTOVER"));

test("no rules are written before Services and EndpointSlices are both synced", async () => {
  const f = fakeHost();
  const { p } = newProxier(f);
  p.onServiceAdd(svc("svc1", "172.30.0.41", 80));
  p.onServicesSynced();
  await p.syncProxyRules();
  assert.equal(f.payloads.length, 0);
  p.onEndpointSlicesSynced();
  await p.syncProxyRules();
  assert.equal(f.payloads.length, 1);
});

test("full sync first, then partial syncs that write only changed services and delete stale chains", async () => {
  const f = fakeHost();
  const { p, metrics } = newProxier(f);
  p.onServiceAdd(svc("svc1", "172.30.0.41", 80));
  p.onEndpointSliceAdd(slice("svc1", "10.0.1.1", 80));
  p.onServiceAdd(svc("svc2", "172.30.0.42", 8080));
  p.onEndpointSliceAdd(slice("svc2", "10.0.2.1", 8080));
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  await p.syncProxyRules();
  assert.equal(f.ensured, 1, "full sync ensures jump rules");
  const first = f.payloads[0];
  assert.equal(declared(first).filter((c) => c.startsWith("KUBE-SVC-")).length, 2);
  // The leftover chain reported by the kernel on the full sync is flushed and deleted.
  assert.match(first, /^-X KUBE-SVC-LEFTOVER0000000$/m);

  p.onServiceAdd(svc("svc3", "172.30.0.43", 80));
  p.onEndpointSliceAdd(slice("svc3", "10.0.3.1", 80));
  await p.syncProxyRules();
  const second = f.payloads[1];
  assert.equal(f.ensured, 1, "partial sync does not touch jump rules");
  assert.deepEqual(
    declared(second).filter((c) => /^KUBE-S(VC|EP)-/.test(c)).length,
    2,
    "only svc3's SVC and SEP",
  );
  // Incremental: KUBE-SERVICES is not re-declared; svc3's jump is inserted where a full sync puts it
  // (after svc1's and svc2's), and nothing else is written to it.
  assert.doesNotMatch(second, /^:KUBE-SERVICES /m);
  assert.deepEqual(second.split("\n").filter((l) => / KUBE-SERVICES /.test(l)), [
    '-I KUBE-SERVICES 3 -m comment --comment "ns1/svc3:p cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-QVFWI4RMN45JYPT2',
  ]);

  p.onServiceDelete(svc("svc2", "172.30.0.42", 8080));
  p.onEndpointSliceDelete(slice("svc2", "10.0.2.1", 8080));
  await p.syncProxyRules();
  const third = f.payloads[2];
  assert.equal((third.match(/^-X KUBE-S(VC|EP)-/gm) ?? []).length, 2, "svc2's chains deleted");
  // svc2's jump is deleted by its exact text; nothing adds a rule for it.
  assert.match(
    third,
    /^-D KUBE-SERVICES -m comment --comment "ns1\/svc2:p cluster IP" -m tcp -p tcp -d 172\.30\.0\.42 --dport 8080 -j KUBE-SVC-/m,
  );
  assert.doesNotMatch(third, /^-[AI] .*172\.30\.0\.42/m);
  assert.doesNotMatch(third, /^:KUBE-SERVICES /m);
  // Owned rule counts follow the -I/-D edits: svc1, svc3 and the nodeports jump.
  assert.equal(await p.checkDrift(), null);
  assert.equal(expectationFromState(f.lastState!).fixedChains.get("nat")?.get("KUBE-SERVICES"), 3);
  assert.equal(metrics.iptablesRestoreFailuresTotal.get({ ip_family: "IPv4" }), 0);
});

test("a failed partial restore is counted and followed by a full sync", async () => {
  const f = fakeHost();
  const { p, metrics } = newProxier(f);
  p.onServiceAdd(svc("svc1", "172.30.0.41", 80));
  p.onEndpointSliceAdd(slice("svc1", "10.0.1.1", 80));
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  await p.syncProxyRules();
  p.onServiceAdd(svc("svc2", "172.30.0.42", 80));
  p.onEndpointSliceAdd(slice("svc2", "10.0.2.1", 80));
  f.failNext = 1;
  await p.syncProxyRules();
  assert.equal(metrics.iptablesRestoreFailuresTotal.get({ ip_family: "IPv4" }), 1);
  assert.equal(metrics.iptablesPartialRestoreFailuresTotal.get({ ip_family: "IPv4" }), 1);
  await p.syncProxyRules();
  const retry = f.payloads.at(-1)!;
  assert.equal(f.ensured, 2, "retry is a full sync");
  assert.equal(declared(retry).filter((c) => c.startsWith("KUBE-SVC-")).length, 2, "both services rewritten");
  assert.match(retry, /^:KUBE-SERVICES /m, "the full retry re-declares KUBE-SERVICES");
  // The next partial sync is incremental again, based on the retry's state.
  p.onServiceAdd(svc("svc3", "172.30.0.43", 80));
  p.onEndpointSliceAdd(slice("svc3", "10.0.3.1", 80));
  await p.syncProxyRules();
  const next = f.payloads.at(-1)!;
  assert.doesNotMatch(next, /^:KUBE-SERVICES /m);
  assert.match(next, /^-I KUBE-SERVICES 3 .*"ns1\/svc3:p cluster IP"/m);
});

test("a failed incremental restore is followed by a full sync, not by edits against a guessed state", async () => {
  const f = fakeHost();
  const { p } = newProxier(f);
  p.onServiceAdd(svc("svc1", "172.30.0.41", 80));
  p.onEndpointSliceAdd(slice("svc1", "10.0.1.1", 80));
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  await p.syncProxyRules();
  p.onServiceDelete(svc("svc1", "172.30.0.41", 80));
  f.failNext = 1; // e.g. "-D … Bad rule (does a matching rule exist in that chain?)"
  await p.syncProxyRules();
  await p.syncProxyRules();
  const retry = f.payloads.at(-1)!;
  assert.equal(f.ensured, 2, "retry is a full sync");
  assert.doesNotMatch(retry, /^-[DI] /m, "no edits against a state that may not be in the kernel");
  assert.match(retry, /^:KUBE-SERVICES /m);
  assert.doesNotMatch(retry, /172\.30\.0\.41/);
});

test("drift reported by the host forces a full resync; owned rule counts track what was written", async () => {
  const f = fakeHost();
  const { p } = newProxier(f);
  p.onServiceAdd(svc("svc1", "172.30.0.41", 80));
  p.onEndpointSliceAdd(slice("svc1", "10.0.1.1", 80));
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  await p.syncProxyRules();
  assert.equal(await p.checkDrift(), null);
  assert.equal(
    expectationFromState(f.lastState!).fixedChains.get("nat")?.get("KUBE-SERVICES"),
    2,
    "cluster IP rule + nodeports rule",
  );
  f.drift = "nat KUBE-SERVICES has 0 rules, expected 2";
  assert.equal(await p.checkDrift(), f.drift);
  await p.syncProxyRules();
  assert.equal(f.ensured, 2);
  assert.equal(declared(f.payloads.at(-1)!).filter((c) => c.startsWith("KUBE-SVC-")).length, 1);
});

test("a drift check that overlaps a sync is discarded instead of forcing a full resync", async () => {
  const f = fakeHost();
  const { p } = newProxier(f);
  p.onServiceAdd(svc("svc1", "172.30.0.41", 80));
  p.onEndpointSliceAdd(slice("svc1", "10.0.1.1", 80));
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  await p.syncProxyRules();
  const ensuredBefore = f.ensured;
  // The check reads the kernel slowly; a sync deletes a chain meanwhile, so the check sees it "missing".
  let release!: (v: string | null) => void;
  f.host.checkDrift = () => new Promise((r) => (release = r));
  const check = p.checkDrift();
  p.onServiceAdd(svc("svc2", "172.30.0.42", 80));
  p.onEndpointSliceAdd(slice("svc2", "10.0.2.1", 80));
  await p.syncProxyRules();
  release("nat KUBE-SVC-XYZ is missing");
  assert.equal(await check, null, "an overlapping check proves nothing");
  await p.syncProxyRules();
  assert.equal(f.ensured, ensuredBefore, "no full resync was forced");
});

test("the payload goes to the host as chunks, and jump rules are ensured after a full sync's restore", async () => {
  const f = fakeHost();
  const { p } = newProxier(f);
  p.onServiceAdd(svc("svc1", "172.30.0.41", 80));
  p.onEndpointSliceAdd(slice("svc1", "10.0.1.1", 80));
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  await p.syncProxyRules();
  p.onServiceAdd(svc("svc2", "172.30.0.42", 80));
  p.onEndpointSliceAdd(slice("svc2", "10.0.2.1", 80));
  await p.syncProxyRules();
  assert.deepEqual(f.chunked, [true, true]);
  // Full sync: restore, then the jumps into the now populated chains; partial sync: restore only.
  assert.deepEqual(f.calls, ["restore", "ensure", "restore"]);
});

test("a failed full restore does not install jump rules into chains it did not fill", async () => {
  const f = fakeHost();
  const { p } = newProxier(f);
  p.onServiceAdd(svc("svc1", "172.30.0.41", 80));
  p.onEndpointSliceAdd(slice("svc1", "10.0.1.1", 80));
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  f.failNext = 1;
  await p.syncProxyRules();
  assert.deepEqual(f.calls, ["restore"]);
  assert.equal(f.ensured, 0);
});

test("a Node's labels changing while a sync awaits its provider leave that sync's labels as they were", async () => {
  const seen: Record<string, string>[] = [];
  let release: () => void = () => {};
  const provider = {
    sync: async (state: { nodeLabels: Readonly<Record<string, string>> }) => {
      seen.push(state.nodeLabels as Record<string, string>);
      // The provider is still writing (the rest of the sync would read the labels again).
      await new Promise<void>((r) => (release = r));
      return { kind: "full", bytes: 0, noLocalEndpoints: { internal: 0, external: 0 } };
    },
    checkDrift: () => Promise.resolve(null),
  };
  const metrics = createKubeProxyMetrics(new Registry());
  const p = new Proxier({
    family: "IPv4",
    nodeName: "node-a",
    provider,
    clock: new FakeClock(),
    log: quiet,
    metrics,
    health: { queuedUpdate: () => {}, updated: () => {} },
    minSyncPeriodMs: 1000,
    syncPeriodMs: 30000,
    localDetection: () => detectLocalByCIDR("10.0.0.0/8"),
  });
  const node = (zone: string) => ({
    metadata: { name: "node-a", labels: { "topology.kubernetes.io/zone": zone } },
  });
  p.onNodeAdd(node("zone-a"));
  p.onServiceAdd(svc("svc1", "172.30.0.41", 80));
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  const syncing = p.syncProxyRules();
  await new Promise((r) => setTimeout(r, 0));
  assert.equal(seen.length, 1);
  p.onNodeUpdate(node("zone-a"), node("zone-b"));
  assert.deepEqual(seen[0], { "topology.kubernetes.io/zone": "zone-a" });
  release();
  await syncing;
});
