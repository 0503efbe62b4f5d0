import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { Node } from "../../../lib/k8s/objects.ts";
import { createKubeProxyMetrics } from "../../../lib/metrics/kubeproxy.ts";
import { Registry } from "../../../lib/metrics/registry.ts";
import {
  createHealthzApp,
  healthTimeoutFor,
  nodeEligible,
  ProxyHealthServer,
  type ProxyHealthServerOptions,
} from "../../../lib/server/proxier_health.ts";
import { serveApp, type ServedApp } from "../../../lib/runtime/serve.ts";
import { sanitizeNode } from "../../../lib/source/node_shape.ts";

/** A clock the test moves by hand. */
function fakeClock(start: number) {
  let t = start;
  return { now: () => t, advance: (ms: number) => void (t += ms), set: (ms: number) => void (t = ms) };
}

const T0 = Date.UTC(2025, 0, 1, 0, 0, 0); // 2025-01-01T00:00:00Z
const NODE: Node = { metadata: { name: "node-a" } };
const SYNC_PERIOD = 30_000;

function setup(extra: Partial<ProxyHealthServerOptions> = {}) {
  const clock = fakeClock(T0);
  const registry = new Registry();
  const metrics = createKubeProxyMetrics(registry);
  const hs = new ProxyHealthServer({
    healthTimeoutMs: healthTimeoutFor(SYNC_PERIOD),
    clock,
    metrics,
    ...extra,
  });
  return { clock, registry, metrics, hs };
}

async function withServer<T>(hs: ProxyHealthServer, fn: (base: string) => Promise<T>): Promise<T> {
  const served: ServedApp = await serveApp(createHealthzApp(hs), { hostname: "127.0.0.1", port: 0 });
  try {
    return await fn(`http://127.0.0.1:${served.port}`);
  } finally {
    await served.close();
  }
}

async function get(url: string) {
  const r = await fetch(url);
  return { status: r.status, headers: r.headers, body: await r.text() };
}

describe("ProxyHealthServer state", () => {
  it("healthTimeout is 2 × syncPeriod", () => {
    assert.equal(healthTimeoutFor(30_000), 60_000);
  });

  it("is healthy before any sync, and reports the zero time with no status map", () => {
    const { hs } = setup();
    hs.setNode(NODE);
    const h = hs.health();
    assert.equal(h.healthy, true);
    assert.equal(h.lastUpdatedMs, null);
    assert.equal(h.status.size, 0);
    const r = hs.livez();
    assert.equal(r.status, 200);
    // Healthy: lastUpdated is overwritten with now.
    assert.equal(
      r.body,
      '{"lastUpdated":"2025-01-01T00:00:00Z","currentTime":"2025-01-01T00:00:00Z","healthy":true}',
    );
  });

  it("stays healthy while a pending update is younger than healthTimeout, then fails", () => {
    const { hs, clock } = setup();
    hs.setNode(NODE);
    hs.updated("IPv4");
    clock.advance(1000);
    hs.queuedUpdate("IPv4");
    clock.advance(59_999);
    assert.equal(hs.isHealthy(), true, "59.999 s after the queued update: not late yet");
    clock.advance(1);
    assert.equal(hs.isHealthy(), false, "60 s after: late");
    // A second queuedUpdate does not move the oldest pending time.
    hs.queuedUpdate("IPv4");
    assert.equal(hs.isHealthy(), false);
    hs.updated("IPv4");
    assert.equal(hs.isHealthy(), true, "a successful sync clears the pending mark");
  });

  it("a pending update for a family that never synced does not count (starting up)", () => {
    const { hs, clock } = setup();
    hs.queuedUpdate("IPv6");
    clock.advance(10 * 60_000);
    assert.equal(hs.isHealthy(), true);
  });

  it("node eligibility: unknown, deleting, tainted, normal", () => {
    assert.equal(nodeEligible(null), false);
    assert.equal(nodeEligible(null, true), true);
    assert.equal(nodeEligible({ metadata: { name: "n", deletionTimestamp: "2025-01-01T00:00:00Z" } }), false);
    assert.equal(
      nodeEligible({
        metadata: { name: "n" },
        spec: { taints: [{ key: "ToBeDeletedByClusterAutoscaler" }] },
      }),
      false,
    );
    assert.equal(
      nodeEligible({
        metadata: { name: "n" },
        spec: { taints: [{ key: "node.kubernetes.io/unschedulable" }] },
      }),
      true,
    );
    assert.equal(nodeEligible(NODE), true);
  });

  it("works as the Node handler: add, update to deleting, delete", () => {
    const { hs } = setup();
    assert.equal(hs.nodeEligible(), false);
    hs.onNodeAdd(NODE);
    assert.equal(hs.nodeEligible(), true);
    hs.onNodeUpdate(NODE, { metadata: { name: "node-a", deletionTimestamp: "2025-01-01T00:00:00Z" } });
    assert.equal(hs.nodeEligible(), false);
    hs.onNodeUpdate(NODE, NODE);
    assert.equal(hs.nodeEligible(), true);
    hs.onNodeDelete(NODE);
    assert.equal(hs.nodeEligible(), false);
  });

  it("rejects a non-positive health timeout", () => {
    assert.throws(() => new ProxyHealthServer({ healthTimeoutMs: 0 }), /healthTimeoutMs must be > 0/);
  });
});

describe("proxy health server over HTTP", () => {
  it("healthy: 200, upstream headers and exact body", async () => {
    const { hs, clock, registry } = setup();
    hs.setNode(NODE);
    hs.updated("IPv4");
    clock.advance(1234.5);
    await withServer(hs, async (base) => {
      const r = await get(`${base}/healthz`);
      assert.equal(r.status, 200);
      assert.equal(r.headers.get("content-type"), "application/json");
      assert.equal(r.headers.get("x-content-type-options"), "nosniff");
      assert.equal(
        r.body,
        '{"lastUpdated":"2025-01-01T00:00:01.2345Z","currentTime":"2025-01-01T00:00:01.2345Z","nodeEligible":true,' +
          '"healthy":true,"status":{"IPv4":{"lastUpdated":"2025-01-01T00:00:00Z","healthy":true}}}',
      );
      const l = await get(`${base}/livez`);
      assert.equal(l.status, 200);
      assert.equal(
        l.body,
        '{"lastUpdated":"2025-01-01T00:00:01.2345Z","currentTime":"2025-01-01T00:00:01.2345Z",' +
          '"healthy":true,"status":{"IPv4":{"lastUpdated":"2025-01-01T00:00:00Z","healthy":true}}}',
      );
    });
    const text = registry.metrics();
    assert.match(text, /^kubeproxy_proxy_healthz_total\{code="200"\} 1$/m);
    assert.match(text, /^kubeproxy_proxy_livez_total\{code="200"\} 1$/m);
    assert.doesNotMatch(text, /code="503"/);
  });

  it("stale pending update: 503 on both, lastUpdated keeps the last sync", async () => {
    const { hs, clock, registry } = setup();
    hs.setNode(NODE);
    hs.updated("IPv4");
    clock.advance(5000);
    hs.queuedUpdate("IPv4");
    clock.advance(60_000);
    await withServer(hs, async (base) => {
      const r = await get(`${base}/healthz`);
      assert.equal(r.status, 503);
      assert.equal(r.headers.get("content-type"), "application/json");
      assert.equal(
        r.body,
        '{"lastUpdated":"2025-01-01T00:00:00Z","currentTime":"2025-01-01T00:01:05Z","nodeEligible":true,' +
          '"healthy":false,"status":{"IPv4":{"lastUpdated":"2025-01-01T00:00:00Z","healthy":false}}}',
      );
      assert.equal((await get(`${base}/livez`)).status, 503);
      hs.updated("IPv4");
      assert.equal((await get(`${base}/healthz`)).status, 200, "recovers after the next successful sync");
    });
    const text = registry.metrics();
    assert.match(text, /^kubeproxy_proxy_healthz_total\{code="200"\} 1$/m);
    assert.match(text, /^kubeproxy_proxy_healthz_total\{code="503"\} 1$/m);
    assert.match(text, /^kubeproxy_proxy_livez_total\{code="503"\} 1$/m);
  });

  it("node being deleted: /healthz 503 (proxier still healthy in the body), /livez 200", async () => {
    const { hs } = setup();
    hs.setNode({ metadata: { name: "node-a", deletionTimestamp: "2025-01-01T00:00:00Z" } });
    hs.updated("IPv4");
    await withServer(hs, async (base) => {
      const h = await get(`${base}/healthz`);
      assert.equal(h.status, 503);
      const body = JSON.parse(h.body);
      assert.equal(body.nodeEligible, false);
      assert.equal(body.healthy, true, "the body's healthy is the proxiers' health, as upstream");
      assert.equal(body.lastUpdated, "2025-01-01T00:00:00Z", "not overwritten when the answer is 503");
      const l = await get(`${base}/livez`);
      assert.equal(l.status, 200);
      assert.equal("nodeEligible" in JSON.parse(l.body), false, "/livez has no nodeEligible");
    });
  });

  it("node tainted ToBeDeletedByClusterAutoscaler: /healthz 503", async () => {
    const { hs } = setup();
    hs.setNode({
      metadata: { name: "node-a" },
      spec: { taints: [{ key: "ToBeDeletedByClusterAutoscaler" }] },
    });
    await withServer(hs, async (base) => {
      assert.equal((await get(`${base}/healthz`)).status, 503);
      assert.equal((await get(`${base}/livez`)).status, 200);
    });
  });

  it("a malformed Node never makes /healthz answer 500", async () => {
    const { hs } = setup();
    hs.updated("IPv4");
    const malformed = [
      { metadata: { name: "node-a" }, spec: { taints: "ToBeDeletedByClusterAutoscaler" } },
      { metadata: { name: "node-a" }, spec: { taints: { key: "x" } } },
      { metadata: { name: "node-a" }, spec: { taints: [null, 7, "x", { key: 1 }] } },
      { metadata: "node-a", spec: "x" },
    ] as unknown as Node[];
    await withServer(hs, async (base) => {
      for (const node of malformed) {
        hs.setNode(node);
        const h = await get(`${base}/healthz`);
        assert.equal(h.status, 200, JSON.stringify(node));
        assert.equal(JSON.parse(h.body).nodeEligible, true, "a field of the wrong shape counts as absent");
      }
      // And through the shape check every source's Node passes in the agent: same answer, one warning.
      const warnings: string[] = [];
      const clean = sanitizeNode(malformed[0], (m) => warnings.push(m));
      hs.setNode(clean);
      assert.equal((await get(`${base}/healthz`)).status, 200);
      assert.deepEqual(warnings, [
        'ignoring spec.taints of Node node-a: must be a list (got "ToBeDeletedByClusterAutoscaler")',
      ]);
    });
  });

  it("node unknown: /healthz 503 unless configured eligible; /livez 200", async () => {
    const { hs } = setup();
    await withServer(hs, async (base) => {
      const h = await get(`${base}/healthz`);
      assert.equal(h.status, 503);
      assert.equal(JSON.parse(h.body).nodeEligible, false);
      assert.equal((await get(`${base}/livez`)).status, 200);
    });
    const manifests = setup({ nodeEligibleWhenUnknown: true }).hs;
    await withServer(manifests, async (base) => {
      assert.equal((await get(`${base}/healthz`)).status, 200);
    });
  });

  it("dual family: one late family fails the whole proxy, status lists both sorted", async () => {
    const { hs, clock } = setup();
    hs.setNode(NODE);
    hs.updated("IPv6");
    clock.advance(100);
    hs.updated("IPv4");
    await withServer(hs, async (base) => {
      const ok = JSON.parse((await get(`${base}/healthz`)).body);
      assert.deepEqual(Object.keys(ok.status), ["IPv4", "IPv6"]);
      assert.equal(ok.status.IPv4.lastUpdated, "2025-01-01T00:00:00.1Z");
      assert.equal(ok.status.IPv6.lastUpdated, "2025-01-01T00:00:00Z");

      hs.queuedUpdate("IPv6");
      hs.queuedUpdate("IPv4");
      clock.advance(30_000);
      hs.updated("IPv4"); // IPv4 keeps up, IPv6 does not
      clock.advance(30_000);
      const r = await get(`${base}/healthz`);
      assert.equal(r.status, 503);
      const body = JSON.parse(r.body);
      assert.equal(body.healthy, false);
      assert.deepEqual(body.status.IPv4, { lastUpdated: "2025-01-01T00:00:30.1Z", healthy: true });
      assert.deepEqual(body.status.IPv6, { lastUpdated: "2025-01-01T00:00:00Z", healthy: false });
      assert.equal(body.lastUpdated, "2025-01-01T00:00:30.1Z", "the most recent family's last update");
    });
  });

  it("serving from cache adds fields but never changes the code", async () => {
    let state = { servingFromCache: true, cacheAgeSeconds: 42.9 as number | null };
    const { hs, clock } = setup({ cacheState: { cacheState: () => state } });
    hs.setNode(NODE);
    hs.updated("IPv4");
    await withServer(hs, async (base) => {
      const r = await get(`${base}/healthz`);
      assert.equal(r.status, 200);
      assert.match(r.body, /,"servingFromCache":true,"cacheAgeSeconds":42\}$/);
      state = { servingFromCache: true, cacheAgeSeconds: null };
      assert.match((await get(`${base}/livez`)).body, /,"servingFromCache":true\}$/);
      hs.queuedUpdate("IPv4");
      clock.advance(60_000);
      const late = await get(`${base}/healthz`);
      assert.equal(late.status, 503, "a stale pending update is still unhealthy while serving from cache");
      assert.equal(JSON.parse(late.body).servingFromCache, true);
      state = { servingFromCache: false, cacheAgeSeconds: 3 };
      hs.updated("IPv4");
      const live = await get(`${base}/healthz`);
      assert.equal(live.status, 200);
      assert.doesNotMatch(
        live.body,
        /servingFromCache|cacheAgeSeconds/,
        "normal operation: upstream's body only",
      );
    });
  });

  it("other paths: Go's 404; any method on /healthz", async () => {
    const { hs } = setup();
    hs.setNode(NODE);
    await withServer(hs, async (base) => {
      for (const p of ["/", "/metrics", "/healthz/", "/livezz"]) {
        const r = await get(`${base}${p}`);
        assert.equal(r.status, 404, p);
        assert.equal(r.body, "404 page not found\n");
        assert.equal(r.headers.get("content-type"), "text/plain; charset=utf-8");
      }
      const post = await fetch(`${base}/healthz`, { method: "POST" });
      assert.equal(post.status, 200);
      await post.body?.cancel();
      const q = await get(`${base}/healthz?verbose`);
      assert.equal(q.status, 200, "query strings are ignored");
    });
  });
});
