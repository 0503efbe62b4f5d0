import { after, test } from "node:test";
import assert from "node:assert/strict";
import {
  startTestApiserver,
  type TestApiserver,
  type TestApiserverOptions,
} from "../../support/apiserver.ts";
import {
  type ReadEvent,
  removeSharedCertsDir,
  sharedCertsDir,
  TestHttpClient,
  type WatchReader,
} from "../../support/apiserver_client.ts";
import { PROXY_LABEL_SELECTOR } from "../../../lib/k8s/objects.ts";

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

const svc = (name: string, labels?: Record<string, string>, ns = "ns") => ({
  metadata: { name, namespace: ns, ...(labels ? { labels } : {}) },
  spec: { clusterIP: "10.96.0.10" },
});

const summary = (e: ReadEvent) =>
  `${e.type} ${e.object?.metadata?.name} ${e.object?.metadata?.resourceVersion}`;

test("watch without resourceVersion: synthetic ADDED for current state, then live changes", async () => {
  await withServer({}, async (s, _c, open) => {
    const a = s.create("services", svc("a"));
    s.create("services", svc("b"));
    const w = await open("/api/v1/services?watch=1");
    assert.equal(w.status, 200);
    assert.equal(w.response.headers.get("content-type"), "application/json");
    const e1 = await w.next();
    assert.equal(e1.type, "ADDED");
    assert.equal(e1.object.kind, "Service");
    assert.equal(e1.object.apiVersion, "v1");
    assert.equal(e1.object.metadata.name, "a");
    assert.equal((await w.next()).object.metadata.name, "b");
    s.update("services", { ...a, spec: { clusterIP: "10.96.0.11" } });
    const m = await w.next();
    assert.equal(m.type, "MODIFIED");
    assert.equal(m.object.spec.clusterIP, "10.96.0.11");
    assert.equal(m.object.metadata.resourceVersion, s.resourceVersion());
    s.remove("services", "ns", "b");
    const d = await w.next();
    assert.equal(d.type, "DELETED");
    assert.equal(d.object.metadata.name, "b");
    assert.equal(d.object.metadata.resourceVersion, s.resourceVersion(), "DELETED carries the deletion's rv");
    assert.equal(s.activeWatches(), 1);
  });
});

test("watch from a resourceVersion replays exactly the changes after it", async () => {
  await withServer({}, async (s, _c, open) => {
    s.create("services", svc("a"));
    const rv = s.resourceVersion();
    s.create("services", svc("b"));
    s.create("nodes", { metadata: { name: "n1" } }); // another kind: not in this watch
    s.update("services", { ...svc("a"), spec: { clusterIP: "10.96.0.12" } });
    const w = await open(`/api/v1/services?watch=true&resourceVersion=${rv}`);
    const got = [summary(await w.next()), summary(await w.next())];
    assert.deepEqual(got, [
      `ADDED b ${Number(rv) + 1}`,
      `MODIFIED a ${Number(rv) + 3}`,
    ]);
    // resourceVersion "0" behaves like "": the current state as ADDED.
    const w0 = await open("/api/v1/services?watch=1&resourceVersion=0");
    assert.deepEqual([summary(await w0.next()), summary(await w0.next())], [
      `ADDED a ${Number(rv) + 3}`,
      `ADDED b ${Number(rv) + 1}`,
    ]);
  });
});

test("BOOKMARK events only with allowWatchBookmarks, carrying the current resourceVersion", async () => {
  await withServer({ bookmarkIntervalMs: 50 }, async (s, _c, open) => {
    s.create("services", svc("a"));
    const rv = s.resourceVersion();
    const w = await open(`/api/v1/services?watch=1&resourceVersion=${rv}&allowWatchBookmarks=true`);
    const b = await w.next(3000);
    assert.equal(b.type, "BOOKMARK");
    assert.deepEqual(b.object, { kind: "Service", apiVersion: "v1", metadata: { resourceVersion: rv } });
    s.create("nodes", { metadata: { name: "n" } });
    let e = await w.next(3000);
    while (e.object.metadata.resourceVersion === rv) e = await w.next(3000);
    assert.equal(e.type, "BOOKMARK");
    assert.equal(
      e.object.metadata.resourceVersion,
      s.resourceVersion(),
      "bookmarks advance with other kinds",
    );
    const plain = await open(`/api/v1/services?watch=1&resourceVersion=${rv}`);
    await assert.rejects(plain.next(300), /no event within/);
  });
});

test("timeoutSeconds ends the stream cleanly", async () => {
  await withServer({}, async (s, _c, open) => {
    const w = await open(`/api/v1/services?watch=1&resourceVersion=${s.resourceVersion()}&timeoutSeconds=1`);
    const e = await w.next(5000);
    assert.equal(e.type, "END");
    assert.equal(s.activeWatches(), 0);
  });
});

test("an object that stops matching the selector is DELETED (old content, new rv); matching again is ADDED", async () => {
  await withServer({}, async (s, _c, open) => {
    s.create("services", svc("a"));
    const w = await open(
      `/api/v1/services?watch=1&resourceVersion=${s.resourceVersion()}&labelSelector=${
        encodeURIComponent(PROXY_LABEL_SELECTOR)
      }`,
    );
    s.update("services", svc("a", { "service.kubernetes.io/service-proxy-name": "other" }));
    const d = await w.next();
    assert.equal(d.type, "DELETED");
    assert.equal(d.object.metadata.labels, undefined, "DELETED shows the last matching content");
    assert.equal(d.object.metadata.resourceVersion, s.resourceVersion());
    s.update("services", { ...svc("a", { "service.kubernetes.io/service-proxy-name": "other" }), spec: {} });
    s.update("services", svc("a"));
    const add = await w.next();
    assert.equal(add.type, "ADDED");
    assert.equal(add.object.metadata.resourceVersion, s.resourceVersion());
    s.create("services", svc("h", { "service.kubernetes.io/headless": "" }));
    s.create("services", svc("visible"));
    assert.equal(summary(await w.next()), `ADDED visible ${s.resourceVersion()}`);
  });
});

test("field selectors on watches: own Node by metadata.name, namespace-scoped paths", async () => {
  await withServer({}, async (s, _c, open) => {
    const w = await open("/api/v1/nodes?watch=1&fieldSelector=metadata.name%3Dedge-1");
    const wn = await open("/api/v1/namespaces/ns2/services?watch=1");
    s.create("nodes", { metadata: { name: "edge-2" } });
    s.create("nodes", { metadata: { name: "edge-1" } });
    s.create("services", svc("a"));
    s.create("services", svc("b", undefined, "ns2"));
    assert.equal((await w.next()).object.metadata.name, "edge-1");
    const e = await wn.next();
    assert.equal(e.object.metadata.name, "b");
    assert.equal(e.object.metadata.namespace, "ns2");
    // A watch on the named path is a watch with metadata.name.
    const wi = await open("/api/v1/nodes/edge-2?watch=1");
    assert.equal(summary(await wi.next()).startsWith("ADDED edge-2"), true);
    await assert.rejects(w.next(200), /no event within/);
  });
});

test("watch from a compacted resourceVersion: HTTP 410 Expired Status", async () => {
  await withServer({}, async (s, c) => {
    s.create("services", svc("a"));
    const rv = s.resourceVersion();
    s.create("services", svc("b"));
    s.faults.compact();
    const r = await c.getJson(`/api/v1/services?watch=1&resourceVersion=${rv}`);
    assert.equal(r.status, 410);
    assert.deepEqual(
      [r.body.kind, r.body.apiVersion, r.body.status, r.body.reason, r.body.code],
      ["Status", "v1", "Failure", "Expired", 410],
    );
    assert.equal(r.body.message, `too old resource version: ${rv} (${s.resourceVersion()})`);
    // From the current resourceVersion a watch is fine.
    const ok = await c.watch(`/api/v1/services?watch=1&resourceVersion=${s.resourceVersion()}`);
    assert.equal(ok.status, 200);
    await ok.close();
  });
});

test("expiredWatchAs=event: HTTP 200 and one ERROR event with the 410 Status (watch-cache style)", async () => {
  await withServer({ expiredWatchAs: "event" }, async (s, _c, open) => {
    s.create("services", svc("a"));
    const rv = s.resourceVersion();
    s.create("services", svc("b"));
    s.faults.compact();
    const w = await open(`/api/v1/services?watch=1&resourceVersion=${rv}`);
    assert.equal(w.status, 200);
    const e = await w.next();
    assert.equal(e.type, "ERROR");
    assert.equal(e.object.kind, "Status");
    assert.equal(e.object.code, 410);
    assert.equal(e.object.reason, "Expired");
    assert.equal((await w.next()).type, "END");
  });
});

test("compact() with open streams: each gets an ERROR 410 event and ends", async () => {
  await withServer({}, async (s, _c, open) => {
    const w1 = await open("/api/v1/services?watch=1");
    const w2 = await open("/api/v1/nodes?watch=1&allowWatchBookmarks=true");
    s.create("services", svc("a"));
    assert.equal((await w1.next()).type, "ADDED");
    s.faults.compact();
    for (const w of [w1, w2]) {
      const e = await w.next();
      assert.equal(e.type, "ERROR");
      assert.equal(e.object.code, 410);
      assert.equal(e.object.reason, "Expired");
      assert.equal((await w.next()).type, "END");
    }
    assert.equal(s.activeWatches(), 0);
  });
});

test("historyLimit: events older than the kept history are compacted away", async () => {
  await withServer({ historyLimit: 3 }, async (s, c) => {
    const rv0 = s.resourceVersion();
    for (const n of ["a", "b", "c", "d", "e"]) s.create("services", svc(n));
    const old = await c.getJson(`/api/v1/services?watch=1&resourceVersion=${rv0}`);
    assert.equal(old.status, 410);
    // The 3 newest changes are still there: resuming after change #2 works.
    const w = await c.watch(`/api/v1/services?watch=1&resourceVersion=${Number(rv0) + 2}`);
    try {
      assert.deepEqual([(await w.next()).object.metadata.name, (await w.next()).object.metadata.name], [
        "c",
        "d",
      ]);
    } finally {
      await w.close();
    }
  });
});

test("sendInitialEvents=true: current state, then a BOOKMARK marked k8s.io/initial-events-end", async () => {
  await withServer({}, async (s, _c, open) => {
    s.create("services", svc("a"));
    const w = await open(
      "/api/v1/services?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
    );
    assert.equal(summary(await w.next()), `ADDED a ${s.resourceVersion()}`);
    const b = await w.next();
    assert.equal(b.type, "BOOKMARK");
    assert.deepEqual(b.object.metadata.annotations, { "k8s.io/initial-events-end": "true" });
    assert.equal(b.object.metadata.resourceVersion, s.resourceVersion());
  });
});

test("watch from a future resourceVersion: 504 Too large resource version", async () => {
  await withServer({}, async (s, c) => {
    const r = await c.getJson(`/api/v1/services?watch=1&resourceVersion=${Number(s.resourceVersion()) + 10}`);
    assert.equal(r.status, 504);
    assert.equal(r.body.details.causes[0].reason, "ResourceVersionTooLarge");
  });
});

test("a client closing its watch is noticed by the server", async () => {
  await withServer({}, async (s, c) => {
    const w = await c.watch("/api/v1/services?watch=1");
    assert.equal(s.activeWatches(), 1);
    await w.close();
    for (let i = 0; i < 100 && s.activeWatches() > 0; i++) await new Promise((r) => setTimeout(r, 10));
    assert.equal(s.activeWatches(), 0);
  });
});
