/** The pure pieces under the reflector: the object store's diff, backoff, the token bucket, stats. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { type KubeObject, objectKey, ObjectStore } from "../../../lib/k8s/store.ts";
import { namespacedName } from "../../../lib/k8s/objects.ts";
import { Backoff, sleep } from "../../../lib/k8s/backoff.ts";
import { RateLimiter } from "../../../lib/k8s/rate_limiter.ts";
import { ApiStats, ERROR_CODE } from "../../../lib/k8s/stats.ts";

const o = (ns: string, name: string, rv: string, extra: Record<string, unknown> = {}): KubeObject =>
  ({ metadata: { namespace: ns || undefined, name, resourceVersion: rv }, ...extra }) as KubeObject;

describe("ObjectStore", () => {
  it("keys namespaced objects ns/name and cluster-scoped ones by name", () => {
    assert.equal(objectKey(o("default", "a", "1")), "default/a");
    assert.equal(objectKey(o("", "node-1", "1")), "node-1");
  });

  it("replace() reports adds and updates in list order, then deletes by key, skipping unchanged versions", () => {
    const s = new ObjectStore<KubeObject>();
    assert.deepEqual(
      s.replace([o("b", "x", "1"), o("a", "y", "2")]).map((c) => `${c.type} ${objectKey(c.object)}`),
      [
        "add b/x",
        "add a/y",
      ],
    );
    const changes = s.replace([o("c", "z", "5"), o("b", "x", "1"), o("a", "y", "3")]);
    assert.deepEqual(changes.map((c) => `${c.type} ${objectKey(c.object)}`), ["add c/z", "update a/y"]);
    const upd = changes[1];
    assert.ok(upd.type === "update" && upd.old.metadata?.resourceVersion === "2");
    const del = s.replace([o("c", "z", "5")]);
    assert.deepEqual(
      del.map((c) => `${c.type} ${objectKey(c.object)}@${c.object.metadata?.resourceVersion}`),
      [
        "delete a/y@3",
        "delete b/x@1",
      ],
    );
    assert.deepEqual(s.keys(), ["c/z"]);
    assert.deepEqual(s.replace([o("c", "z", "5")]), []);
  });

  it("apply() turns replays into no-ops and mismatched types into the right change", () => {
    const s = new ObjectStore<KubeObject>();
    assert.equal(s.apply("ADDED", o("n", "a", "1"))?.type, "add");
    assert.equal(s.apply("ADDED", o("n", "a", "1")), null, "replayed ADDED");
    assert.equal(s.apply("MODIFIED", o("n", "a", "1")), null, "MODIFIED with the held version");
    assert.equal(s.apply("ADDED", o("n", "a", "2"))?.type, "update", "ADDED for a known key");
    assert.equal(s.apply("MODIFIED", o("n", "b", "3"))?.type, "add", "MODIFIED for an unknown key");
    assert.equal(s.apply("DELETED", o("n", "c", "4")), null, "DELETED for an unknown key");
    const d = s.apply("DELETED", o("n", "a", "5"));
    assert.equal(d?.type, "delete");
    assert.deepEqual(s.keys(), ["n/b"]);
  });

  it("finds and deletes a cluster-scoped name with a slash in it (a broken server's) by its key", () => {
    const s = new ObjectStore<KubeObject>();
    s.replace([o("", "a/b", "1"), o("c", "d", "2")]);
    assert.deepEqual(s.keys(), ["a/b", "c/d"]);
    assert.equal(s.get("a/b")?.metadata?.name, "a/b");
    assert.equal(s.get("c/d")?.metadata?.name, "d");
    const gone = s.replace([o("c", "d", "2")]);
    assert.deepEqual(gone.map((c) => [c.type, c.object.metadata?.name]), [["delete", "a/b"]]);
    assert.deepEqual(s.keys(), ["c/d"]);
  });

  it("compares objects without resourceVersion by content", () => {
    const s = new ObjectStore<KubeObject>();
    const a = { metadata: { name: "a", namespace: "n" }, spec: { x: 1 } } as KubeObject;
    s.replace([a]);
    assert.deepEqual(s.replace([{ ...a }]), []);
    assert.equal(s.replace([{ ...a, spec: { x: 2 } } as KubeObject])[0].type, "update");
  });
});

describe("Backoff", () => {
  it("doubles from 800 ms to 30 s with up to 100% jitter and resets after 2 minutes without failures", () => {
    let now = 0;
    const b = new Backoff({ random: () => 0, now: () => now });
    const seq = Array.from({ length: 8 }, () => b.next());
    assert.deepEqual(seq, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
    now += 119_000;
    assert.equal(b.next(), 30000, "still failing within 2 minutes");
    now += 120_001;
    assert.equal(b.next(), 800, "healthy for 2 minutes: reset");
    const j = new Backoff({ random: () => 0.5, now: () => now });
    assert.equal(j.next(), 1200);
    const top = new Backoff({ random: () => 0.999, now: () => now });
    assert.ok(top.next() < 1600);
  });

  it("reset() starts over", () => {
    const b = new Backoff({ random: () => 0, initialMs: 10, maxMs: 100 });
    b.next();
    b.next();
    b.reset();
    assert.equal(b.next(), 10);
  });

  it("sleep() resolves false at once when aborted and leaves no timer", async () => {
    const c = new AbortController();
    const p = sleep(60_000, c.signal);
    c.abort();
    assert.equal(await p, false);
    assert.equal(await sleep(1), true);
  });
});

describe("namespacedName", () => {
  it("is upstream's NamespacedName.String(); the store key drops an empty namespace", () => {
    assert.equal(namespacedName("kube-system", "dns"), "kube-system/dns");
    assert.equal(namespacedName("", "node-a"), "/node-a");
    assert.equal(objectKey({ metadata: { namespace: "kube-system", name: "dns" } }), "kube-system/dns");
    assert.equal(objectKey({ metadata: { name: "node-a" } }), "node-a");
  });
});

describe("RateLimiter", () => {
  it("allows a burst, then refills at qps", () => {
    let now = 0;
    const b = new RateLimiter(5, 10, () => now);
    let n = 0;
    while (b.tryAcquire()) n++;
    assert.equal(n, 10);
    now += 1000;
    n = 0;
    while (b.tryAcquire()) n++;
    assert.equal(n, 5);
  });

  it("0 means the client-go defaults (5/10) and a negative qps disables limiting", () => {
    const d = new RateLimiter(0, 0);
    assert.equal(d.qps, 5);
    assert.equal(d.burst, 10);
    const off = new RateLimiter(-1, 0);
    for (let i = 0; i < 1000; i++) assert.ok(off.tryAcquire());
  });

  it("acquire() waits for a token and can be aborted", async () => {
    const b = new RateLimiter(50, 1);
    await b.acquire();
    const t0 = performance.now();
    await b.acquire();
    assert.ok(performance.now() - t0 >= 10, "second token waited ~20 ms");
    const c = new AbortController();
    const p = b.acquire(c.signal);
    c.abort(new Error("stop"));
    await assert.rejects(p, /stop/);
  });
});

describe("ApiStats", () => {
  it("counts requests by resource, verb and code, and tracks contact", () => {
    let now = 1000;
    const s = new ApiStats(() => now);
    s.recordRequest("services", "list", 200);
    s.recordRequest("services", "list", 200);
    now = 2000;
    s.recordRequest("services", "watch", ERROR_CODE);
    s.recordRequest("nodes", "watch", 410);
    s.recordWatchRestart("services");
    s.recordRelist("services");
    s.recordWatchEvent("services");
    s.recordWatchEvent("services", true);
    const snap = s.snapshot();
    assert.deepEqual(snap.requests, [
      { resource: "nodes", verb: "watch", code: "410", count: 1 },
      { resource: "services", verb: "list", code: "200", count: 2 },
      { resource: "services", verb: "watch", code: "<error>", count: 1 },
    ]);
    assert.equal(snap.resources.services.lastContactMs, 1000, "an error is no contact");
    assert.equal(snap.resources.nodes.lastContactMs, 2000);
    assert.equal(snap.lastContactMs, 2000);
    assert.deepEqual(
      { ...snap.resources.services, lastContactMs: 0 },
      { watchRestarts: 1, relists: 1, watchEvents: 1, bookmarks: 1, malformed: 0, lastContactMs: 0 },
    );
    snap.resources.services.relists = 99;
    assert.equal(s.snapshot().resources.services.relists, 1, "snapshot is a copy");
  });
});

describe("Backoff cap", () => {
  it("never waits longer than maxMs, jitter included", () => {
    const b = new Backoff({ random: () => 0.999, now: () => 0 });
    const waits = Array.from({ length: 12 }, () => b.next());
    assert.equal(waits[0] >= 800 && waits[0] < 1600, true);
    assert.equal(Math.max(...waits), 30_000);
  });
});
