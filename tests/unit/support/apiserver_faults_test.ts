import { after, test } from "node:test";
import assert from "node:assert/strict";
import {
  startTestApiserver,
  type TestApiserver,
  type TestApiserverOptions,
} from "../../support/apiserver.ts";
import {
  removeSharedCertsDir,
  sharedCertsDir,
  TestHttpClient,
  type WatchReader,
} from "../../support/apiserver_client.ts";

after(removeSharedCertsDir);

async function withServer(
  opts: TestApiserverOptions,
  fn: (s: TestApiserver, c: TestHttpClient, open: (p: string) => Promise<WatchReader>) => Promise<void>,
): Promise<void> {
  const s = await startTestApiserver({ tlsDir: await sharedCertsDir(), bookmarkIntervalMs: 0, ...opts });
  const c = new TestHttpClient(s);
  const readers: WatchReader[] = [];
  try {
    await fn(s, c, async (p) => {
      const w = await c.watch(p);
      readers.push(w);
      return w;
    });
  } finally {
    for (const w of readers) await w.close();
    c.close();
    await s.close();
  }
}

const svc = (name: string) => ({ metadata: { name, namespace: "ns" }, spec: { clusterIP: "10.96.0.10" } });

test("dropWatches: streams break without a final event", async () => {
  await withServer({}, async (s, _c, open) => {
    const w = await open("/api/v1/services?watch=1");
    const w2 = await open("/api/v1/nodes?watch=1");
    assert.equal(s.activeWatches(), 2);
    s.faults.dropWatches();
    assert.equal(s.activeWatches(), 0);
    for (const r of [w, w2]) {
      const e = await r.next();
      assert.ok(e.type === "BROKEN" || e.type === "END", e.type);
      assert.notEqual(e.type, "ERROR");
    }
    // A new watch works.
    const w3 = await open("/api/v1/services?watch=1");
    s.create("services", svc("a"));
    assert.equal((await w3.next()).type, "ADDED");
  });
});

test("failNext: n requests get the status with a Status body, 429 with Retry-After", async () => {
  await withServer({}, async (s, c) => {
    s.faults.failNext(2);
    for (let i = 0; i < 2; i++) {
      const r = await c.getJson("/api/v1/services");
      assert.equal(r.status, 500);
      assert.equal(r.body.kind, "Status");
      assert.equal(r.body.reason, "InternalError");
    }
    assert.equal((await c.getJson("/api/v1/services")).status, 200);
    s.faults.failNext(1, 429);
    const r = await c.fetch("/api/v1/nodes?watch=1");
    assert.equal(r.status, 429);
    assert.equal(r.headers.get("retry-after"), "1");
    const body = await r.json();
    assert.equal(body.reason, "TooManyRequests");
    assert.equal(body.details.retryAfterSeconds, 1);
    s.faults.failNext(1, 503);
    assert.equal((await c.getJson("/healthz")).status, 503, "any path");
    assert.equal((await c.getJson("/healthz")).status, 200);
  });
});

test("down/up: connections refused while down, same port after up, state kept", async () => {
  await withServer({}, async (s, c, open) => {
    s.create("services", svc("a"));
    const port = s.port;
    const w = await open("/api/v1/services?watch=1");
    assert.equal((await w.next()).type, "ADDED");
    await s.faults.down();
    assert.notEqual((await w.next()).type, "ADDED");
    assert.equal(s.activeWatches(), 0);
    await assert.rejects(c.fetch("/healthz"));
    await s.faults.up();
    assert.equal(s.port, port);
    assert.equal(s.url, `https://127.0.0.1:${port}`);
    const r = await c.getJson("/api/v1/services");
    assert.equal(r.status, 200);
    assert.equal(r.body.items.length, 1);
  });
});

test("restartWithNewHistory: old resourceVersions get 410, the revision jumps ahead", async () => {
  await withServer({}, async (s, c) => {
    s.create("services", svc("a"));
    const rv = s.resourceVersion();
    await s.faults.restartWithNewHistory();
    assert.ok(Number(s.resourceVersion()) > Number(rv) + 1000);
    const r = await c.getJson(`/api/v1/services?watch=1&resourceVersion=${rv}`);
    assert.equal(r.status, 410);
    assert.equal(r.body.reason, "Expired");
    const l = await c.getJson("/api/v1/services");
    assert.equal(l.body.metadata.resourceVersion, s.resourceVersion());
    assert.equal(l.body.items.length, 1);
  });
});

test("slow: every response starts after the delay", async () => {
  await withServer({}, async (s, c) => {
    s.faults.slow(300);
    const t0 = Date.now();
    assert.equal((await c.getJson("/api/v1/services")).status, 200);
    assert.ok(Date.now() - t0 >= 290, `took ${Date.now() - t0} ms`);
    s.faults.slow(0);
  });
});

test("garbageNextWatchLine: one line is not JSON, the following ones are", async () => {
  await withServer({}, async (s, _c, open) => {
    const w = await open("/api/v1/services?watch=1");
    s.faults.garbageNextWatchLine();
    s.create("services", svc("a"));
    s.create("services", svc("b"));
    const g = await w.next();
    assert.equal(g.type, "GARBAGE");
    assert.throws(() => JSON.parse(g.raw));
    const e = await w.next();
    assert.equal(e.type, "ADDED");
    assert.equal(e.object.metadata.name, "b");
  });
});

test("truncateNextList: the body is cut short, the next LIST is whole", async () => {
  await withServer({}, async (s, c) => {
    for (let i = 0; i < 20; i++) s.create("services", svc(`s${i}`));
    s.faults.truncateNextList();
    const r = await c.fetch("/api/v1/services");
    assert.equal(r.status, 200);
    await assert.rejects(async () => JSON.parse(await r.text()));
    const ok = await c.getJson("/api/v1/services");
    assert.equal(ok.body.items.length, 20);
  });
});

test("stallWatches: open streams go silent (no events, no bookmarks) but stay open; new ones work", async () => {
  await withServer({ bookmarkIntervalMs: 50 }, async (s, _c, open) => {
    const w = await open("/api/v1/services?watch=1&allowWatchBookmarks=true");
    assert.equal((await w.next()).type, "BOOKMARK");
    s.faults.stallWatches();
    s.create("services", svc("a"));
    await assert.rejects(w.next(400), /no event within/);
    assert.equal(s.activeWatches(), 1);
    const w2 = await open(`/api/v1/services?watch=1&resourceVersion=${Number(s.resourceVersion()) - 1}`);
    assert.equal((await w2.next()).object.metadata.name, "a", "streams opened after the stall work");
    // Nothing the server does later reaches a stalled stream: no ERROR from compact(), no drop.
    s.faults.compact();
    s.faults.dropWatches();
    assert.equal((await w2.next()).type, "ERROR", "compact() reached the healthy stream");
    await assert.rejects(w.next(300), /no event within/);
    assert.equal(s.activeWatches(), 1);
  });
});

test("unauthorizedNext: 401 or 403 Status for n requests", async () => {
  await withServer({}, async (s, c) => {
    s.faults.unauthorizedNext(1);
    const r1 = await c.getJson("/api/v1/services");
    assert.equal(r1.status, 401);
    assert.equal(r1.body.reason, "Unauthorized");
    s.faults.unauthorizedNext(2, 403);
    const r2 = await c.getJson("/apis/discovery.k8s.io/v1/endpointslices?watch=1");
    assert.equal(r2.status, 403);
    assert.equal(r2.body.reason, "Forbidden");
    assert.equal(
      r2.body.message,
      'endpointslices is forbidden: User "system:kube-proxy" cannot watch resource "endpointslices" in API group ' +
        '"discovery.k8s.io" at the cluster scope',
    );
    assert.equal((await c.getJson("/api/v1/nodes")).status, 403);
    assert.equal((await c.getJson("/api/v1/nodes")).status, 200);
    s.faults.unauthorizedNext(5);
    s.faults.clear();
    assert.equal((await c.getJson("/api/v1/nodes")).status, 200);
  });
});

test("failNext with retryAfterSeconds: 429 carries that Retry-After and details.retryAfterSeconds", async () => {
  await withServer({}, async (s, c) => {
    s.faults.failNext(1, 429, 7);
    const r = await c.fetch("/api/v1/services?watch=1");
    assert.equal(r.status, 429);
    assert.equal(r.headers.get("retry-after"), "7");
    assert.equal((await r.json()).details.retryAfterSeconds, 7);
  });
});

test("goneNextWatch: the next watch of each kind gets 410, as HTTP status or as an ERROR event", async () => {
  await withServer({}, async (s, c, open) => {
    s.create("services", svc("a"));
    const rv = s.resourceVersion();
    s.faults.goneNextWatch("status", ["services"]);
    const r = await c.getJson(`/api/v1/services?watch=1&resourceVersion=${rv}`);
    assert.equal(r.status, 410);
    assert.equal(r.body.reason, "Expired");
    assert.equal((await c.getJson("/api/v1/services")).status, 200, "a LIST is not affected");
    const ok = await open(`/api/v1/nodes?watch=1&resourceVersion=${rv}`);
    assert.equal(ok.status, 200, "other kinds are not affected");

    s.faults.goneNextWatch("event");
    for (const path of ["/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices", "/api/v1/nodes"]) {
      const w = await open(`${path}?watch=1&resourceVersion=${rv}`);
      assert.equal(w.status, 200);
      const e = await w.next();
      assert.equal(e.type, "ERROR");
      assert.equal(e.object.code, 410);
      assert.equal((await w.next()).type, "END");
    }
    const again = await open(`/api/v1/services?watch=1&resourceVersion=${rv}`);
    s.create("services", svc("b"));
    assert.equal((await again.next()).type, "ADDED", "only the next watch is refused");
  });
});

test("endlessWatchLine: new watches stream one line without end until clear()", async () => {
  await withServer({}, async (s, c, open) => {
    s.faults.endlessWatchLine(["services"]);
    const ac = new AbortController();
    const w = await c.fetch("/api/v1/services?watch=1", { signal: ac.signal });
    assert.equal(w.status, 200);
    const reader = w.body!.getReader();
    let bytes = 0;
    let newline = false;
    while (bytes < 4 * 1024 * 1024) {
      const { value, done } = await reader.read();
      assert.ok(!done, "the stream goes on");
      bytes += value.length;
      if (value.includes(10)) newline = true;
    }
    assert.equal(newline, false, "no newline in 4 MiB");
    const n = await open("/api/v1/nodes?watch=1");
    s.create("nodes", { metadata: { name: "n1" } });
    assert.equal((await n.next()).type, "ADDED", "other kinds are not affected");
    s.faults.clear();
    for (;;) {
      const r = await reader.read().catch(() => ({ done: true }));
      if (r.done) break;
    }
    ac.abort();
    const after = await open("/api/v1/services?watch=1");
    s.create("services", svc("a"));
    assert.equal((await after.next()).type, "ADDED", "after clear() watches are normal again");
  });
});

test("oversizeNextList: the next LIST is valid JSON larger than asked, the one after is normal", async () => {
  await withServer({}, async (s, c) => {
    s.create("services", svc("a"));
    s.faults.oversizeNextList(2 * 1024 * 1024);
    const r = await c.fetch("/api/v1/services", { headers: { "accept-encoding": "identity" } });
    const text = await r.text();
    assert.ok(text.length > 2 * 1024 * 1024, `${text.length} bytes`);
    assert.equal(JSON.parse(text).items.length, 1);
    const ok = await c.fetch("/api/v1/services", { headers: { "accept-encoding": "identity" } });
    assert.ok((await ok.text()).length < 10_000);
  });
});
