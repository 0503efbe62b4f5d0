/**
 * When the reflector waits and when it does not (client-go's rules), against the HTTPS test apiserver:
 * an established watch that ends resumes at once from the last resourceVersion (no backoff, no relist); a
 * 410 after a drop relists at once, as HTTP status and as ERROR event; the backoff grows while connections
 * are refused and starts over after the first good watch; 429 waits its Retry-After; a watch line or a list
 * page over the size limit is dropped with one error naming the resource and the limit, and retried with
 * backoff.
 *
 * "At once" is asserted without timing: these reflectors have a 60 s backoff, so a reconnect that went
 * through the backoff would not happen within the test's wait.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startTestApiserver, type TestApiserver } from "../../support/apiserver.ts";
import { loadRestConfig } from "../../../lib/k8s/kubeconfig.ts";
import { ApiTransport, type Logger } from "../../../lib/k8s/transport.ts";
import { Reflector, type ReflectorTimings } from "../../../lib/k8s/reflector.ts";
import { type ResourceEventHandler, SERVICES_RESOURCE } from "../../../lib/k8s/resource.ts";
import { Poller } from "../../../lib/k8s/poller.ts";
import { type KubeObject, objectKey } from "../../../lib/k8s/store.ts";
import { MAX_API_MESSAGE_BYTES, MAX_WATCH_EVENT_BYTES } from "../../../lib/k8s/bounded_read.ts";

/** A backoff this long never ends within a test: a reconnect that happens went around it. */
const NO_BACKOFF: ReflectorTimings = {
  backoff: { initialMs: 60_000, maxMs: 60_000 },
  watchTimeoutMinSeconds: 300,
  watchTimeoutMaxSeconds: 301,
  watchdogMs: 60_000,
  shortWatchMs: 200,
};

class Rec implements ResourceEventHandler<KubeObject> {
  keys = new Set<string>();
  onAdd(o: KubeObject): void {
    this.keys.add(objectKey(o));
  }
  onUpdate(): void {}
  onDelete(o: KubeObject): void {
    this.keys.delete(objectKey(o));
  }
  onSynced(): void {}
}

function captureLog(): Logger & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    debug: (m) => lines.push(`D ${m}`),
    info: (m) => lines.push(`I ${m}`),
    warn: (m) => lines.push(`W ${m}`),
    error: (m) => lines.push(`E ${m}`),
  };
}

async function waitFor(what: string, cond: () => boolean, timeoutMs = 10_000): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

const svc = (name: string) => ({
  metadata: { name, namespace: "default" },
  spec: { type: "ClusterIP", clusterIP: "10.96.0.10", ports: [{ name: "http", port: 80, protocol: "TCP" }] },
});

interface Harness {
  srv: TestApiserver;
  log: ReturnType<typeof captureLog>;
  rec: Rec;
  r: Reflector<KubeObject>;
  /** LIST and WATCH requests for services so far. */
  lists(): number;
  watches(): number;
  stop(): Promise<void>;
}

async function harness(
  timings: ReflectorTimings,
  srvOpts: Parameters<typeof startTestApiserver>[0] = {},
  beforeStart: (srv: TestApiserver) => void = () => {},
): Promise<Harness> {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-resume-"));
  const srv = await startTestApiserver({ bookmarkIntervalMs: 0, ...srvOpts });
  const kc = join(dir, "kubeconfig");
  await srv.writeKubeconfig(kc);
  const log = captureLog();
  const transport = new ApiTransport({
    config: await loadRestConfig({ kubeconfig: kc, env: {} }),
    qps: -1,
    log,
  });
  const rec = new Rec();
  beforeStart(srv);
  const r = new Reflector<KubeObject>({ transport, spec: SERVICES_RESOURCE, handler: rec, timings, log });
  r.start();
  const count = (watch: boolean) =>
    srv.requests.filter((q) => q.path === "/api/v1/services" && q.watch === watch).length;
  return {
    srv,
    log,
    rec,
    r,
    lists: () => count(false),
    watches: () => count(true),
    stop: async () => {
      await r.stop();
      transport.close();
      await srv.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Backoff waits the log announces for `op` ("watch services failed: …; retrying in 50ms"), in ms. */
function waits(log: string[], op: string): number[] {
  return log.flatMap((l) => {
    const m = new RegExp(`^W ${op} services failed: .*; retrying in (\\d+)ms$`).exec(l);
    return m ? [Number(m[1])] : [];
  });
}

describe("reflector: an established watch that ends resumes at once", () => {
  it("6 drops (after events, or after 1 s of silence) each resume at once from the last resourceVersion", {
    timeout: 60_000,
  }, async () => {
    const h = await harness(NO_BACKOFF);
    try {
      await h.r.synced;
      for (let i = 0; i < 6; i++) {
        await waitFor(`watch ${i + 1} open`, () => h.srv.activeWatches() === 1);
        if (i % 2 === 0) {
          // a watch that delivered an event, however short
          h.srv.create("services", svc(`before-${i}`));
          await waitFor(`before-${i} delivered`, () => h.rec.keys.has(`default/before-${i}`));
        } else {
          await pause(300); // a watch that ran longer than shortWatchMs (200 ms) without events
        }
        const rv = h.r.lastResourceVersion;
        h.srv.faults.dropWatches();
        h.srv.create("services", svc(`after-${i}`));
        await waitFor(`after-${i} delivered after drop ${i + 1}`, () => h.rec.keys.has(`default/after-${i}`));
        const resumed = h.srv.requests.filter((q) => q.watch).at(-1)!;
        assert.equal(
          new URLSearchParams(resumed.query).get("resourceVersion"),
          rv,
          "resumed from the last rv",
        );
      }
      assert.equal(h.lists(), 1, "no relist");
      assert.equal(h.watches(), 7);
      assert.deepEqual(waits(h.log.lines, "watch"), [], "no backoff");
      assert.equal(
        h.log.lines.filter((l) => l.startsWith("I watch services: connection lost")).length +
          h.log.lines.filter((l) => l.startsWith("D watch services: closed by the server")).length,
        6,
      );
    } finally {
      await h.stop();
    }
  });

  for (const style of ["status", "event"] as const) {
    it(
      `a drop followed by 410 (${
        style === "status" ? "HTTP 410" : "ERROR event in a 200 stream"
      }) relists at once`,
      {
        timeout: 60_000,
      },
      async () => {
        const h = await harness(NO_BACKOFF, { expiredWatchAs: style });
        try {
          await h.r.synced;
          for (let i = 0; i < 3; i++) {
            await waitFor("watch open", () => h.srv.activeWatches() === 1);
            await pause(300);
            const lists = h.lists();
            h.srv.faults.goneNextWatch(style, ["services"]);
            h.srv.faults.dropWatches();
            h.srv.create("services", svc(`after-${i}`));
            await waitFor(`after-${i} delivered`, () => h.rec.keys.has(`default/after-${i}`));
            assert.equal(h.lists(), lists + 1, "one relist");
          }
          assert.deepEqual(waits(h.log.lines, "watch"), [], "no backoff");
          assert.equal(h.log.lines.filter((l) => l.includes("listing again")).length, 3);
        } finally {
          await h.stop();
        }
      },
    );
  }
});

describe("reflector: failing attempts back off", () => {
  it("the backoff grows while connections are refused and is back at its start after the first good watch", {
    timeout: 60_000,
  }, async () => {
    const h = await harness({ ...NO_BACKOFF, backoff: { initialMs: 40, maxMs: 10_000, jitter: 0 } });
    try {
      await h.r.synced;
      await waitFor("watch open", () => h.srv.activeWatches() === 1);
      await pause(300);
      await h.srv.faults.down();
      await waitFor("5 refused watches", () => waits(h.log.lines, "watch").length >= 5);
      assert.deepEqual(waits(h.log.lines, "watch").slice(0, 5), [40, 80, 160, 320, 640]);
      assert.ok(
        h.log.lines.some((l) => /^W watch services failed: .*(refused|connect)/i.test(l)),
        h.log.lines.join("\n"),
      );
      await h.srv.faults.up();
      await waitFor("a good watch", () => h.srv.activeWatches() === 1, 15_000);
      h.srv.create("services", svc("back"));
      await waitFor("back delivered", () => h.rec.keys.has("default/back"));
      const before = waits(h.log.lines, "watch").length;
      await h.srv.faults.down();
      await waitFor("a refused watch", () => waits(h.log.lines, "watch").length > before);
      assert.equal(
        waits(h.log.lines, "watch")[before],
        40,
        "the first wait after a good watch is the initial one",
      );
      assert.equal(h.lists(), 1, "refused watches resume without relisting");
    } finally {
      await h.stop();
    }
  });

  it("a 429 on the watch waits its Retry-After, then resumes", { timeout: 60_000 }, async () => {
    const h = await harness({ ...NO_BACKOFF, backoff: { initialMs: 20, maxMs: 100 } });
    try {
      await h.r.synced;
      await waitFor("watch open", () => h.srv.activeWatches() === 1);
      await pause(300);
      h.srv.faults.failNext(1, 429, 2);
      h.srv.faults.dropWatches();
      h.srv.create("services", svc("x"));
      await waitFor("x delivered", () => h.rec.keys.has("default/x"));
      const line = h.log.lines.find((l) => l.startsWith("W watch services failed:"));
      assert.ok(line?.includes("429 TooManyRequests"), h.log.lines.join("\n"));
      assert.ok(line?.endsWith("retrying in 2.0s"), String(line));
    } finally {
      await h.stop();
    }
  });
});

describe("reflector: size limits", () => {
  it("a watch line over the limit drops the stream with one error naming the resource and the limit", {
    timeout: 60_000,
  }, async () => {
    const h = await harness({
      ...NO_BACKOFF,
      backoff: { initialMs: 50, maxMs: 200, jitter: 0 },
      maxMessageBytes: 1024 * 1024,
    });
    try {
      await h.r.synced;
      await waitFor("watch open", () => h.srv.activeWatches() === 1);
      await pause(300);
      h.srv.faults.endlessWatchLine(["services"]);
      h.srv.faults.dropWatches();
      await waitFor("two oversized lines", () => waits(h.log.lines, "watch").length >= 2);
      const errs = h.log.lines.filter((l) => l.includes("larger than the limit"));
      assert.equal(
        errs[0],
        "W watch services failed: watch services: one event line is larger than the limit of 1 MiB; " +
          "dropped the stream; retrying in 50ms",
      );
      assert.deepEqual(waits(h.log.lines, "watch").slice(0, 2), [50, 100], "retried with backoff");
      h.srv.faults.clear();
      h.srv.create("services", svc("x"));
      await waitFor("x delivered once the stream is sane", () => h.rec.keys.has("default/x"));
    } finally {
      await h.stop();
    }
  });

  it("event lines have their own, lower limit: a 2 MiB page is listed while a 2 MiB event line is dropped", {
    timeout: 60_000,
  }, async () => {
    assert.equal(MAX_WATCH_EVENT_BYTES, 16 * 1024 * 1024);
    assert.ok(MAX_WATCH_EVENT_BYTES < MAX_API_MESSAGE_BYTES);
    const h = await harness(
      {
        ...NO_BACKOFF,
        backoff: { initialMs: 50, maxMs: 200, jitter: 0 },
        maxMessageBytes: 4 * 1024 * 1024,
        maxEventBytes: 1024 * 1024,
      },
      {},
      (srv) => {
        srv.create("services", svc("a"));
        srv.faults.oversizeNextList(2 * 1024 * 1024);
      },
    );
    try {
      await h.r.synced;
      assert.equal(h.lists(), 1, "the 2 MiB page is under the page limit");
      await waitFor("watch open", () => h.srv.activeWatches() === 1);
      await pause(300);
      h.srv.faults.endlessWatchLine(["services"]);
      h.srv.faults.dropWatches();
      await waitFor(
        "an oversized line",
        () => h.log.lines.some((l) => l.includes("larger than the limit of 1 MiB")),
      );
    } finally {
      await h.stop();
    }
  });

  it("a list page over the limit is dropped with one error naming the resource and the limit", {
    timeout: 60_000,
  }, async () => {
    const h = await harness(
      { ...NO_BACKOFF, backoff: { initialMs: 50, maxMs: 200, jitter: 0 }, maxMessageBytes: 1024 * 1024 },
      {},
      (srv) => {
        srv.create("services", svc("a"));
        // the resourceVersion=0 answer, then the first page of the paged list that replaces it
        srv.faults.oversizeNextList(2 * 1024 * 1024, 2);
      },
    );
    try {
      await h.r.synced;
      assert.deepEqual([...h.rec.keys], ["default/a"]);
      assert.equal(h.lists(), 3);
      assert.deepEqual(
        h.log.lines.filter((l) => l.startsWith("W ")),
        [
          "W list services: GET services (list): response body is larger than the limit of 1 MiB; dropped it; " +
          "the whole list does not fit in one response: listing in pages of 500 from now on",
          "W list services failed: GET services (list): response body is larger than the limit of 1 MiB; " +
          "dropped it; retrying in 50ms",
        ],
      );
    } finally {
      await h.stop();
    }
  });

  it(
    "a resourceVersion=0 answer over the limit (the watch cache ignores limit) is listed again at once in pages",
    {
      timeout: 60_000,
    },
    async () => {
      const h = await harness(
        { ...NO_BACKOFF, backoff: { initialMs: 50, maxMs: 200, jitter: 0 }, maxMessageBytes: 1024 * 1024 },
        {},
        (srv) => {
          for (const n of ["a", "b", "c"]) srv.create("services", svc(n));
          srv.faults.oversizeNextList(2 * 1024 * 1024);
        },
      );
      try {
        await h.r.synced;
        assert.deepEqual([...h.rec.keys].sort(), ["default/a", "default/b", "default/c"]);
        const lists = h.srv.requests.filter((q) => q.path === "/api/v1/services" && !q.watch);
        assert.equal(lists.length, 2, "no backoff: the paged list follows at once");
        const q = lists.map((r) => new URLSearchParams(r.query));
        assert.equal(q[0].get("resourceVersion"), "0");
        assert.equal(q[1].get("resourceVersion"), null, "a consistent read");
        assert.equal(q[1].get("limit"), "500");
        assert.equal(h.log.lines.filter((l) => l.startsWith("W ")).length, 1);
        // later lists page too, and "0" is not asked for again
        h.srv.faults.goneNextWatch("status");
        h.srv.faults.dropWatches();
        await waitFor("a relist", () => h.lists() === 3);
        const relist = new URLSearchParams(h.srv.requests.filter((r) => !r.watch).at(-1)!.query);
        assert.equal(relist.get("limit"), "500");
        assert.notEqual(relist.get("resourceVersion"), "0");
      } finally {
        await h.stop();
      }
    },
  );

  it("--api-mode=poll: a page over the limit fails that round with the same error, the next round works", {
    timeout: 60_000,
  }, async () => {
    const dir = await mkdtemp(join(tmpdir(), "edgeproxy-resume-"));
    const srv = await startTestApiserver({ bookmarkIntervalMs: 0 });
    const kc = join(dir, "kubeconfig");
    await srv.writeKubeconfig(kc);
    const log = captureLog();
    const transport = new ApiTransport({
      config: await loadRestConfig({ kubeconfig: kc, env: {} }),
      qps: -1,
      log,
    });
    srv.create("services", svc("a"));
    srv.faults.oversizeNextList(2 * 1024 * 1024, 2);
    const rec = new Rec();
    const p = new Poller<KubeObject>({
      transport,
      spec: SERVICES_RESOURCE,
      handler: rec,
      intervalMs: 60_000,
      timings: { backoff: { initialMs: 50, maxMs: 200, jitter: 0 }, maxMessageBytes: 1024 * 1024 },
      log,
    });
    p.start();
    try {
      await p.synced;
      assert.deepEqual([...rec.keys], ["default/a"]);
      assert.deepEqual(log.lines.filter((l) => l.startsWith("W ")), [
        "W list services: GET services (list): response body is larger than the limit of 1 MiB; dropped it; " +
        "the whole list does not fit in one response: listing in pages of 500 from now on",
        "W list services failed: GET services (list): response body is larger than the limit of 1 MiB; " +
        "dropped it; retrying in 50ms",
      ]);
    } finally {
      await p.stop();
      transport.close();
      await srv.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
