/**
 * The test apiserver's `watchCacheBookmarks`: bookmarks timed as a real apiserver's watch cache sends them
 * (every interval and 2 s before a watch's timeoutSeconds deadline, only when the resourceVersion moved past
 * what the watcher was sent), so byte counts of bounded watches (bench/wan_bench.ts) include them.
 */
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { startTestApiserver, type TestApiserver } from "../../support/apiserver.ts";
import {
  type ReadEvent,
  removeSharedCertsDir,
  sharedCertsDir,
  TestHttpClient,
} from "../../support/apiserver_client.ts";

after(removeSharedCertsDir);

async function withServer(
  bookmarkIntervalMs: number,
  fn: (s: TestApiserver, c: TestHttpClient) => Promise<void>,
): Promise<void> {
  const s = await startTestApiserver({
    tlsDir: await sharedCertsDir(),
    bookmarkIntervalMs,
    watchCacheBookmarks: true,
  });
  const c = new TestHttpClient(s);
  try {
    await fn(s, c);
  } finally {
    c.close();
    await s.close();
  }
}

/** Every event of a watch until the server ends it (with the ms since `t0` each arrived). */
async function allEvents(
  c: TestHttpClient,
  path: string,
  t0: number,
): Promise<Array<ReadEvent & { ms: number }>> {
  const w = await c.watch(path);
  const out: Array<ReadEvent & { ms: number }> = [];
  try {
    for (;;) {
      const e = await w.next(10_000);
      out.push({ ...e, ms: Date.now() - t0 });
      if (e.type === "END" || e.type === "BROKEN") return out;
    }
  } finally {
    await w.close();
  }
}

const svc = { metadata: { name: "a", namespace: "ns" }, spec: { clusterIP: "10.96.0.10" } };

test("a bounded watch gets one bookmark 2 s before its deadline when the resourceVersion moved, none otherwise", async () => {
  await withServer(60_000, async (s, c) => {
    s.create("services", svc);
    const rv = s.resourceVersion();
    const path = `/api/v1/services?watch=1&resourceVersion=${rv}&allowWatchBookmarks=true&timeoutSeconds=3`;

    const quiet = await allEvents(c, path, Date.now());
    assert.deepEqual(quiet.map((e) => e.type), ["END"], "nothing moved: no bookmark");

    const t0 = Date.now();
    const moved = allEvents(c, path, t0);
    await new Promise((r) => setTimeout(r, 200));
    s.create("nodes", { metadata: { name: "n" } }); // another kind: the resourceVersion moves
    const events = await moved;
    assert.deepEqual(events.map((e) => e.type), ["BOOKMARK", "END"]);
    assert.equal(events[0].object.metadata.resourceVersion, s.resourceVersion());
    assert.ok(events[0].ms >= 900 && events[0].ms < 2500, `bookmark at ${events[0].ms} ms (deadline − 2 s)`);
  });
});

test("periodic bookmarks only while the resourceVersion moves; none without allowWatchBookmarks", async () => {
  await withServer(300, async (s, c) => {
    s.create("services", svc);
    const rv = s.resourceVersion();
    const quiet = await allEvents(
      c,
      `/api/v1/services?watch=1&resourceVersion=${rv}&allowWatchBookmarks=true&timeoutSeconds=1`,
      Date.now(),
    );
    assert.deepEqual(quiet.map((e) => e.type), ["END"], "three intervals without a change: no bookmark");

    const path = `/api/v1/services?watch=1&resourceVersion=${rv}&timeoutSeconds=3`;
    const plain = allEvents(c, path, Date.now());
    await new Promise((r) => setTimeout(r, 100));
    s.create("nodes", { metadata: { name: "n" } });
    assert.deepEqual((await plain).map((e) => e.type), ["END"], "bookmarks were not asked for");
  });
});
