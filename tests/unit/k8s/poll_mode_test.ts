/**
 * `--api-mode=poll` against the HTTPS test apiserver: after the first LIST, bounded watches
 * (timeoutSeconds = the poll interval) keep the store current, so steady state makes no full LIST; a
 * middlebox that cuts every connection after a few seconds costs no LIST and a change still arrives within
 * the interval + 1 s; a middlebox that buffers whole responses is detected and the poller falls back to
 * resourceVersion=0 LISTs every interval, with one warning, and tries a watch again now and then (watching
 * resumes once the proxy is gone), while quiet watches on a live link are not taken for buffering; a 410 makes exactly one new LIST; a relist period, when asked for, adds LISTs; LISTs
 * come gzip-compressed and are decoded, with the wire bytes counted.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type RecordedRequest, startTestApiserver, type TestApiserver } from "../../support/apiserver.ts";
import { loadRestConfig } from "../../../lib/k8s/kubeconfig.ts";
import { ApiTransport, type Logger } from "../../../lib/k8s/transport.ts";
import { type ResourceEventHandler, SERVICES_RESOURCE } from "../../../lib/k8s/resource.ts";
import { Poller, type PollerOptions } from "../../../lib/k8s/poller.ts";
import { type KubeObject, objectKey } from "../../../lib/k8s/store.ts";

/** Records when each object was last seen changed (ms since epoch), keyed by namespace/name. */
class Rec implements ResourceEventHandler<KubeObject> {
  seen = new Map<string, { at: number; version: string }>();
  #note(o: KubeObject): void {
    const v = String((o as { spec?: { clusterIP?: string } }).spec?.clusterIP ?? "");
    this.seen.set(objectKey(o), { at: Date.now(), version: v });
  }
  onAdd(o: KubeObject): void {
    this.#note(o);
  }
  onUpdate(_old: KubeObject, o: KubeObject): void {
    this.#note(o);
  }
  onDelete(o: KubeObject): void {
    this.seen.delete(objectKey(o));
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

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what: string, cond: () => boolean, timeoutMs = 10_000): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await pause(10);
  }
}

const svc = (name: string, ip = "10.96.0.10", padding = "") => ({
  metadata: { name, namespace: "default", ...(padding ? { annotations: { note: padding } } : {}) },
  spec: { type: "ClusterIP", clusterIP: ip, ports: [{ name: "http", port: 80, protocol: "TCP" }] },
});

const isServices = (r: RecordedRequest) => r.path === "/api/v1/services";
const lists = (srv: TestApiserver) => srv.requests.filter((r) => isServices(r) && !r.watch);
const param = (r: RecordedRequest, name: string) => new URLSearchParams(r.query).get(name);
/** The LISTs after the first (the first is always there, at resourceVersion=0). */
const laterLists = (srv: TestApiserver) => lists(srv).slice(1);
const watches = (srv: TestApiserver) => srv.requests.filter((r) => isServices(r) && r.watch);

interface Harness {
  srv: TestApiserver;
  transport: ApiTransport;
  log: ReturnType<typeof captureLog>;
  rec: Rec;
  p: Poller<KubeObject>;
  stop(): Promise<void>;
}

async function harness(
  intervalMs: number,
  srvOpts: Parameters<typeof startTestApiserver>[0] = {},
  before?: (srv: TestApiserver) => void,
  insecure = false,
  poller: Partial<PollerOptions<KubeObject>> = {},
): Promise<Harness> {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-poll-"));
  const srv = await startTestApiserver(srvOpts);
  const kc = join(dir, "kubeconfig");
  await srv.writeKubeconfig(kc);
  before?.(srv);
  const log = captureLog();
  const config = await loadRestConfig({ kubeconfig: kc, env: {} });
  const transport = new ApiTransport({
    config: insecure ? { ...config, caPem: undefined, insecureSkipTlsVerify: true } : config,
    qps: -1,
    log,
  });
  const rec = new Rec();
  const p = new Poller<KubeObject>({
    transport,
    spec: SERVICES_RESOURCE,
    handler: rec,
    intervalMs,
    ...poller,
    timings: { backoff: { initialMs: 100, maxMs: 400, jitter: 0 } },
    log,
  });
  p.start();
  return {
    srv,
    transport,
    log,
    rec,
    p,
    stop: async () => {
      await p.stop();
      transport.close();
      await srv.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Makes `n` changes spread over `spanMs` and returns the largest delay until the poller saw each. */
async function worstDelay(h: Harness, n: number, spanMs: number, prefix: string): Promise<number> {
  let worst = 0;
  for (let i = 0; i < n; i++) {
    await pause(spanMs / n * (0.5 + Math.random()));
    const name = `${prefix}-${i}`;
    const made = Date.now();
    h.srv.create("services", svc(name, `10.96.1.${i + 1}`));
    await waitFor(`${name} to arrive`, () => h.rec.seen.has(`default/${name}`), 15_000);
    worst = Math.max(worst, h.rec.seen.get(`default/${name}`)!.at - made);
  }
  return worst;
}

describe("--api-mode=poll: bounded watches", () => {
  it("steady state makes no full LIST: bounded watches resume from the last resourceVersion", {
    timeout: 60_000,
  }, async () => {
    const h = await harness(1000, { bookmarkIntervalMs: 300 }, (srv) => srv.create("services", svc("a")));
    try {
      await h.p.synced;
      await pause(4500);
      h.srv.update("services", svc("a", "10.96.0.99"));
      await waitFor("the update", () => h.rec.seen.get("default/a")?.version === "10.96.0.99");
      assert.equal(lists(h.srv).length, 1, "one LIST, at start");
      assert.equal(
        param(lists(h.srv)[0], "resourceVersion"),
        "0",
        "the first LIST is served by the watch cache",
      );
      const w = watches(h.srv);
      assert.ok(w.length >= 4, `bounded watches follow each other (${w.length})`);
      for (const r of w) {
        const q = new URLSearchParams(r.query);
        assert.equal(q.get("timeoutSeconds"), "1", "timeoutSeconds is the poll interval");
        assert.equal(q.get("allowWatchBookmarks"), "true");
        assert.ok(Number(q.get("resourceVersion")) > 0, "each watch resumes from a resourceVersion");
      }
      assert.deepEqual(h.log.lines.filter((l) => l.startsWith("W ") || l.startsWith("E ")), []);
    } finally {
      await h.stop();
    }
  });

  it("connections cut every 3 s: no LIST, and each change arrives within the poll interval + 1 s", {
    timeout: 90_000,
  }, async () => {
    const h = await harness(2000, { bookmarkIntervalMs: 500 }, (srv) => {
      srv.create("services", svc("a"));
      srv.faults.cutConnectionsAfter(3000);
    });
    try {
      await h.p.synced;
      const worst = await worstDelay(h, 6, 15_000, "cut");
      assert.ok(worst <= 3000, `worst delay ${worst} ms is within the interval + 1 s`);
      assert.equal(lists(h.srv).length, 1, "a cut watch resumes; it does not list");
      assert.ok(watches(h.srv).length >= 6);
    } finally {
      await h.stop();
    }
  });

  it(
    "a middlebox that buffers whole responses: falls back to resourceVersion=0 LISTs, changes still arrive",
    {
      timeout: 90_000,
    },
    async () => {
      const h = await harness(1000, { bookmarkIntervalMs: 200 }, (srv) => {
        srv.create("services", svc("a"));
        srv.faults.bufferResponses(true);
      });
      try {
        await h.p.synced;
        await waitFor("the fallback", () => h.p.listing, 20_000);
        const warned = h.log.lines.filter((l) => l.startsWith("W "));
        assert.deepEqual(warned, [
          "W watch services: the last 3 watches delivered their data only when they ended (a proxy on the way " +
          "buffers responses); listing with resourceVersion=0 every 1000 ms instead of watching",
        ]);
        const watchesAtFallback = watches(h.srv).length;
        const worst = await worstDelay(h, 4, 6000, "buf");
        assert.ok(worst <= 2000, `worst delay ${worst} ms is within the interval + 1 s`);
        const later = laterLists(h.srv);
        assert.ok(later.length >= 3, `LISTs after the fallback (${later.length})`);
        assert.ok(
          lists(h.srv).every((r) => param(r, "resourceVersion") === "0"),
          "every LIST is served by the watch cache",
        );
        assert.equal(watches(h.srv).length, watchesAtFallback, "no watch after the fallback");
      } finally {
        await h.stop();
      }
    },
  );

  it("410 Gone: exactly one new LIST, and what changed meanwhile arrives", { timeout: 60_000 }, async () => {
    const h = await harness(1000, { bookmarkIntervalMs: 300 }, (srv) => srv.create("services", svc("a")));
    try {
      await h.p.synced;
      await pause(1500);
      h.srv.faults.stallWatches(); // the change below reaches the poller only through the new LIST
      h.srv.create("services", svc("b"));
      h.srv.faults.compact();
      h.srv.faults.goneNextWatch("event");
      await waitFor("b", () => h.rec.seen.has("default/b"), 10_000);
      await pause(2500);
      assert.equal(lists(h.srv).length, 2, "the first LIST and one after the 410");
      // client-go's relist: at the last resourceVersion seen, without limit (the watch cache serves it)
      const relist = lists(h.srv)[1];
      assert.ok(Number(param(relist, "resourceVersion")) > 0, relist.query);
      assert.equal(param(relist, "limit"), null);
      assert.ok(h.log.lines.some((l) => /listing again/.test(l)), h.log.lines.join("\n"));
    } finally {
      await h.stop();
    }
  });

  it("LISTs ask for gzip, are decoded, and the wire bytes are counted", { timeout: 60_000 }, async () => {
    const pad = "p".repeat(400);
    const h = await harness(60_000, { bookmarkIntervalMs: 0 }, (srv) => {
      for (let i = 0; i < 1000; i++) srv.create("services", svc(`s${i}`, "10.96.0.10", pad));
    }, true);
    try {
      await h.p.synced;
      assert.equal(h.rec.seen.size, 1000);
      const listed = lists(h.srv);
      assert.ok(listed.length >= 1 && listed.every((r) => r.gzip), "every LIST page came compressed");
      const sent = listed.reduce((n, r) => n + r.bytes, 0);
      const got = h.transport.bytesReceived;
      assert.ok(got.decoded > 1000 * 400, `decoded ${got.decoded} bytes`);
      assert.ok(got.wire < got.decoded / 5, `wire ${got.wire} bytes, decoded ${got.decoded}`);
      assert.ok(got.wire >= sent, `the client counted at least the ${sent} compressed bytes sent`);
    } finally {
      await h.stop();
    }
  });

  it(
    "relistPeriodMs, when asked for, adds a full LIST that often and no more",
    { timeout: 60_000 },
    async () => {
      const h = await harness(
        1000,
        { bookmarkIntervalMs: 300 },
        (srv) => srv.create("services", svc("a")),
        false,
        { relistPeriodMs: 2000 },
      );
      try {
        await h.p.synced;
        await pause(5000);
        const n = lists(h.srv).length;
        assert.ok(n >= 2 && n <= 4, `${n} LISTs in about 5 s with a 2 s relist period`);
      } finally {
        await h.stop();
      }
    },
  );

  it("quiet watches on a live link (no events, no bookmarks) are not taken for buffering", {
    timeout: 60_000,
  }, async () => {
    const h = await harness(1000, { bookmarkIntervalMs: 0 }, (srv) => srv.create("services", svc("a")));
    try {
      await h.p.synced;
      await pause(5000);
      assert.ok(watches(h.srv).length >= 4, "several empty watches ended by their timeout");
      assert.equal(h.p.listing, false);
      assert.equal(lists(h.srv).length, 1, "no LIST after the first");
      assert.deepEqual(h.log.lines.filter((l) => l.startsWith("W ")), []);
    } finally {
      await h.stop();
    }
  });

  it("after a fallback, a watch is tried again; once the proxy is gone, watching resumes", {
    timeout: 90_000,
  }, async () => {
    const h = await harness(
      1000,
      { bookmarkIntervalMs: 200 },
      (srv) => {
        srv.create("services", svc("a"));
        srv.faults.bufferResponses(true);
      },
      false,
      { watchRetryMs: 2500 },
    );
    try {
      await h.p.synced;
      await waitFor("the fallback", () => h.p.listing, 20_000);
      // A retry while the proxy still buffers: listing goes on, without a second warning.
      await waitFor(
        "a retried watch",
        () => h.log.lines.some((l) => /still buffered; listing on/.test(l)),
        20_000,
      );
      assert.equal(h.log.lines.filter((l) => l.startsWith("W ")).length, 1);
      h.srv.faults.bufferResponses(false);
      await waitFor(
        "watching again",
        () => !h.p.listing && h.log.lines.some((l) => /as they happen again/.test(l)),
        20_000,
      );
      const listed = lists(h.srv).length;
      const made = Date.now();
      h.srv.create("services", svc("late", "10.96.3.3"));
      await waitFor("late", () => h.rec.seen.has("default/late"));
      assert.ok(Date.now() - made < 1000, "delivered by the watch as it happened");
      await pause(2000);
      assert.equal(lists(h.srv).length, listed, "no more LISTs once watching");
    } finally {
      await h.stop();
    }
  });
});
