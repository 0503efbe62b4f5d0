/**
 * The apiserver source end to end against the HTTPS test apiserver: ProxyHandlers receive Services,
 * EndpointSlices and the own Node, each Synced callback fires once after its initial list, and poll mode
 * reaches exactly the same handler state as watch mode for the same change script.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startTestApiserver, type TestApiserver } from "../../support/apiserver.ts";
import { loadRestConfig } from "../../../lib/k8s/kubeconfig.ts";
import { ApiTransport, type Logger } from "../../../lib/k8s/transport.ts";
import { ApiStats } from "../../../lib/k8s/stats.ts";
import type { EndpointSlice, Node, Service } from "../../../lib/k8s/objects.ts";
import type { ProxyHandlers } from "../../../lib/proxy/handlers.ts";
import { startApiserverSource } from "../../../lib/source/apiserver.ts";
import { type KubeObject, objectKey } from "../../../lib/k8s/store.ts";

class Handlers implements ProxyHandlers {
  services = new Map<string, Service>();
  slices = new Map<string, EndpointSlice>();
  nodes = new Map<string, Node>();
  synced = { services: 0, slices: 0, node: 0 };
  sizesAtSync = { services: -1, slices: -1, node: -1 };
  violations: string[] = [];

  #add<T extends KubeObject>(m: Map<string, T>, o: T) {
    if (m.has(objectKey(o))) this.violations.push(`duplicate add ${objectKey(o)}`);
    m.set(objectKey(o), o);
  }
  #update<T extends KubeObject>(m: Map<string, T>, old: T, o: T) {
    const held = m.get(objectKey(o));
    if (held?.metadata?.resourceVersion !== old.metadata?.resourceVersion) {
      this.violations.push(`stale update ${objectKey(o)}`);
    }
    m.set(objectKey(o), o);
  }
  #delete<T extends KubeObject>(m: Map<string, T>, o: T) {
    if (!m.delete(objectKey(o))) this.violations.push(`ghost delete ${objectKey(o)}`);
  }
  onServiceAdd(s: Service) {
    this.#add(this.services, s);
  }
  onServiceUpdate(o: Service, s: Service) {
    this.#update(this.services, o, s);
  }
  onServiceDelete(s: Service) {
    this.#delete(this.services, s);
  }
  onServicesSynced() {
    this.synced.services++;
    this.sizesAtSync.services = this.services.size;
  }
  onEndpointSliceAdd(s: EndpointSlice) {
    this.#add(this.slices, s);
  }
  onEndpointSliceUpdate(o: EndpointSlice, s: EndpointSlice) {
    this.#update(this.slices, o, s);
  }
  onEndpointSliceDelete(s: EndpointSlice) {
    this.#delete(this.slices, s);
  }
  onEndpointSlicesSynced() {
    this.synced.slices++;
    this.sizesAtSync.slices = this.slices.size;
  }
  onNodeAdd(n: Node) {
    this.#add(this.nodes, n);
  }
  onNodeUpdate(o: Node, n: Node) {
    this.#update(this.nodes, o, n);
  }
  onNodeDelete(n: Node) {
    this.#delete(this.nodes, n);
  }
  onNodeSynced() {
    this.synced.node++;
    this.sizesAtSync.node = this.nodes.size;
  }
  /** Canonical JSON of everything held. */
  state(): string {
    const dump = (m: Map<string, unknown>) => [...m.keys()].sort().map((k) => [k, m.get(k)]);
    return JSON.stringify({ s: dump(this.services), e: dump(this.slices), n: dump(this.nodes) });
  }
  summary(): string {
    const s = (m: Map<string, KubeObject>) =>
      [...m.values()].map((o) => `${objectKey(o)}@${o.metadata?.resourceVersion}`).sort();
    return JSON.stringify([s(this.services), s(this.slices), s(this.nodes)]);
  }
}

function serverSummary(srv: TestApiserver, node: string): string {
  const proxied = (o: KubeObject) => {
    const l = o.metadata?.labels ?? {};
    return !("service.kubernetes.io/service-proxy-name" in l) && !("service.kubernetes.io/headless" in l);
  };
  const s = (xs: KubeObject[]) => xs.map((o) => `${objectKey(o)}@${o.metadata?.resourceVersion}`).sort();
  return JSON.stringify([
    s((srv.list("services") as KubeObject[]).filter(proxied)),
    s((srv.list("endpointslices") as KubeObject[]).filter(proxied)),
    s((srv.list("nodes") as KubeObject[]).filter((n) => n.metadata?.name === node)),
  ]);
}

async function waitFor(what: string, cond: () => boolean, timeoutMs = 15_000): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const quiet: Logger = { debug() {}, info() {}, warn() {}, error() {} };
const TIMINGS = {
  backoff: { initialMs: 20, maxMs: 200 },
  watchTimeoutMinSeconds: 1,
  watchTimeoutMaxSeconds: 2,
  watchdogMs: 3000,
  shortWatchMs: 50,
  pageSize: 4,
};

async function connect(srv: TestApiserver, dir: string, stats: ApiStats) {
  const kc = join(dir, `kc-${Math.random()}`);
  await srv.writeKubeconfig(kc, { user: "clientCert" });
  return new ApiTransport({
    config: await loadRestConfig({ kubeconfig: kc, env: {} }),
    qps: -1,
    stats,
    log: quiet,
  });
}

function slice(name: string, svc: string, ip: string, labels: Record<string, string> = {}) {
  return {
    metadata: { name, namespace: "default", labels: { "kubernetes.io/service-name": svc, ...labels } },
    addressType: "IPv4",
    endpoints: [{ addresses: [ip], conditions: { ready: true }, nodeName: "edge-1" }],
    ports: [{ name: "http", port: 8080, protocol: "TCP" }],
  };
}
function service(name: string, labels: Record<string, string> = {}) {
  return {
    metadata: { name, namespace: "default", labels },
    spec: {
      type: "ClusterIP",
      clusterIP: "10.96.1.1",
      ports: [{ name: "http", port: 80, targetPort: 8080, protocol: "TCP" }],
    },
  };
}

/** A fixed script of changes to all three resources (with selector transitions). */
function changeScript(srv: TestApiserver, step: number): void {
  const n = step % 7;
  if (n === 0) srv.create("services", service(`svc-${step}`));
  if (n === 1) {
    srv.create("endpointslices", slice(`svc-${step - 1}-abc`, `svc-${step - 1}`, `10.0.${step}.1`));
  }
  if (n === 2) {
    const s = srv.list("services").at(-1) as unknown as KubeObject & { spec: Record<string, unknown> };
    srv.update("services", { ...s, spec: { ...s.spec, type: "NodePort" } });
  }
  if (n === 3) {
    const e = srv.list("endpointslices").at(0) as KubeObject;
    if (e) srv.remove("endpointslices", "default", e.metadata!.name!);
  }
  if (n === 4) {
    // a Service starts being handled by another proxy: it must disappear from our view
    const s = srv.list("services").at(0) as KubeObject;
    if (s) {
      srv.update("services", {
        ...s,
        metadata: { ...s.metadata, labels: { "service.kubernetes.io/service-proxy-name": "other" } },
      });
    }
  }
  if (n === 5) {
    const node = srv.list("nodes").find((o) => (o as KubeObject).metadata?.name === "edge-1") as KubeObject;
    srv.update("nodes", {
      ...node,
      metadata: { ...node.metadata, labels: { "topology.kubernetes.io/zone": `z${step}` } },
    });
  }
  if (n === 6) srv.update("nodes", { metadata: { name: "edge-2", labels: { step: String(step) } } });
}

describe("apiserver source", () => {
  it("feeds ProxyHandlers; each Synced fires once after its initial list; stop() ends everything", {
    timeout: 30_000,
  }, async () => {
    const dir = await mkdtemp(join(tmpdir(), "edgeproxy-src-"));
    const srv = await startTestApiserver({ bookmarkIntervalMs: 300 });
    srv.create("nodes", { metadata: { name: "edge-1" } });
    srv.create("nodes", { metadata: { name: "edge-2" } });
    for (let i = 0; i < 6; i++) {
      srv.create("services", service(`s${i}`));
      srv.create("endpointslices", slice(`s${i}-x`, `s${i}`, `10.1.0.${i}`));
    }
    srv.create("services", service("headless", { "service.kubernetes.io/headless": "" }));
    const stats = new ApiStats();
    const t = await connect(srv, dir, stats);
    const h = new Handlers();
    const src = startApiserverSource({
      connection: t,
      nodeName: "edge-1",
      handlers: h,
      mode: "watch",
      stats,
      timings: TIMINGS,
    });
    try {
      await src.synced;
      assert.deepEqual(h.synced, { services: 1, slices: 1, node: 1 });
      assert.deepEqual(h.sizesAtSync, { services: 6, slices: 6, node: 1 }, "adds come before Synced");
      assert.ok(src.lastContact() !== null && Date.now() - src.lastContact()! < 5000);
      for (let step = 0; step < 21; step++) changeScript(srv, step);
      await waitFor("converged", () => h.summary() === serverSummary(srv, "edge-1"));
      assert.deepEqual(h.violations, []);
      assert.deepEqual(h.synced, { services: 1, slices: 1, node: 1 }, "Synced never fires again");
      assert.equal(src.stores.services.size, h.services.size);
      assert.equal(h.nodes.get("edge-1")?.kind, "Node");
    } finally {
      await src.stop();
      t.close();
      await srv.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("poll mode reaches the same handler state as watch mode for the same change script, through errors", {
    timeout: 30_000,
  }, async () => {
    const dir = await mkdtemp(join(tmpdir(), "edgeproxy-src-"));
    const srv = await startTestApiserver({ bookmarkIntervalMs: 200 });
    srv.create("nodes", { metadata: { name: "edge-1" } });
    srv.create("nodes", { metadata: { name: "edge-2" } });
    const stats = new ApiStats();
    const t = await connect(srv, dir, stats);
    const watchH = new Handlers();
    const pollH = new Handlers();
    const watchSrc = startApiserverSource({
      connection: t,
      nodeName: "edge-1",
      handlers: watchH,
      mode: "watch",
      stats,
      timings: TIMINGS,
    });
    const pollSrc = startApiserverSource({
      connection: t,
      nodeName: "edge-1",
      handlers: pollH,
      mode: "poll",
      pollIntervalMs: 100,
      stats,
      timings: TIMINGS,
    });
    try {
      await Promise.all([watchSrc.synced, pollSrc.synced]);
      for (let step = 0; step < 35; step++) {
        changeScript(srv, step);
        if (step === 10) srv.faults.failNext(4, 503);
        if (step === 20) srv.faults.unauthorizedNext(2, 401);
        if (step % 5 === 0) await new Promise((r) => setTimeout(r, 60));
      }
      const want = serverSummary(srv, "edge-1");
      await waitFor("watch converged", () => watchH.summary() === want);
      await waitFor("poll converged", () => pollH.summary() === want);
      assert.equal(pollH.state(), watchH.state(), "identical objects, byte for byte");
      assert.deepEqual(watchH.violations, []);
      assert.deepEqual(pollH.violations, []);
      assert.deepEqual(pollH.synced, { services: 1, slices: 1, node: 1 });
      // How poll mode follows (bounded watches, which LISTs) is asserted in tests/unit/k8s/poll_mode_test.ts.
    } finally {
      await Promise.all([watchSrc.stop(), pollSrc.stop()]);
      t.close();
      await srv.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("refuses poll mode without a positive interval", { timeout: 30_000 }, () => {
    const t = new ApiTransport({
      config: {
        server: "http://127.0.0.1:9",
        insecureSkipTlsVerify: false,
        credentials: { get: () => Promise.resolve({}), invalidate() {}, description: "none" },
        source: "x",
      },
    });
    assert.throws(
      () =>
        startApiserverSource({
          connection: t,
          nodeName: "n",
          handlers: new Handlers(),
          mode: "poll",
          pollIntervalMs: 0,
        }),
      /positive poll interval/,
    );
    t.close();
  });
});
