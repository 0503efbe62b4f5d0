/**
 * `--api-mode=poll` over HTTP/2, where the pollers of one transport share one connection: every bounded
 * watch starts at the poll interval; once a watch streamed (data well before its end), the watches other
 * than the keeper (EndpointSlices) run `relaxedFactor` × the interval; over HTTP/1.1 nothing relaxes; a
 * buffering middlebox keeps, or brings back, every watch at the interval and the fallback to LISTs still
 * happens; a cut connection resumes every watch and changes still arrive within the interval + 1 s.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type RecordedRequest, startTestApiserver, type TestApiserver } from "../../support/apiserver.ts";
import { loadRestConfig } from "../../../lib/k8s/kubeconfig.ts";
import { ApiTransport, type Logger } from "../../../lib/k8s/transport.ts";
import {
  ENDPOINTSLICES_RESOURCE,
  type ResourceEventHandler,
  SERVICES_RESOURCE,
} from "../../../lib/k8s/resource.ts";
import { Poller } from "../../../lib/k8s/poller.ts";
import { type KubeObject, objectKey } from "../../../lib/k8s/store.ts";

/** Records when each object was last seen changed (ms since epoch). */
class Rec implements ResourceEventHandler<KubeObject> {
  seen = new Map<string, number>();
  onAdd(o: KubeObject): void {
    this.seen.set(objectKey(o), Date.now());
  }
  onUpdate(_old: KubeObject, o: KubeObject): void {
    this.seen.set(objectKey(o), Date.now());
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

const svc = (name: string, ip = "10.96.0.10") => ({
  metadata: { name, namespace: "default" },
  spec: { type: "ClusterIP", clusterIP: ip, ports: [{ name: "http", port: 80, protocol: "TCP" }] },
});

const on = (path: string, watch: boolean) => (srv: TestApiserver) =>
  srv.requests.filter((r) => r.path === path && r.watch === watch);
const svcWatches = on(SERVICES_RESOURCE.path, true);
const sliceWatches = on(ENDPOINTSLICES_RESOURCE.path, true);
const svcLists = on(SERVICES_RESOURCE.path, false);
const sliceLists = on(ENDPOINTSLICES_RESOURCE.path, false);
const timeoutS = (r: RecordedRequest) => new URLSearchParams(r.query).get("timeoutSeconds");

interface Harness {
  srv: TestApiserver;
  transport: ApiTransport;
  log: ReturnType<typeof captureLog>;
  rec: Rec;
  services: Poller<KubeObject>;
  slices: Poller<KubeObject>;
  stop(): Promise<void>;
}

/** The Services and EndpointSlices pollers of one node, on one transport, as lib/source/apiserver.ts makes them. */
async function harness(
  intervalMs: number,
  srvOpts: Parameters<typeof startTestApiserver>[0],
  before?: (srv: TestApiserver) => void,
  withKeeper = true,
): Promise<Harness> {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-poll-h2-"));
  const srv = await startTestApiserver(srvOpts);
  const kc = join(dir, "kubeconfig");
  await srv.writeKubeconfig(kc);
  before?.(srv);
  const log = captureLog();
  const transport = new ApiTransport({
    config: await loadRestConfig({ kubeconfig: kc, env: {} }),
    qps: -1,
    log,
  });
  const rec = new Rec();
  const common = {
    transport,
    intervalMs,
    log,
    timings: { backoff: { initialMs: 100, maxMs: 400, jitter: 0 } },
  };
  const services = new Poller<KubeObject>({ ...common, spec: SERVICES_RESOURCE, handler: rec });
  const slices = new Poller<KubeObject>({ ...common, spec: ENDPOINTSLICES_RESOURCE, handler: new Rec() });
  services.start();
  if (withKeeper) slices.start();
  return {
    srv,
    transport,
    log,
    rec,
    services,
    slices,
    stop: async () => {
      await Promise.all([services.stop(), slices.stop()]);
      transport.close();
      await srv.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

describe("--api-mode=poll over HTTP/2: one keeper at the interval, the other watches relaxed once the link streams", () => {
  it("before proof every watch is bounded at the interval; after an event streamed the non-keeper runs 3 ×", {
    timeout: 60_000,
  }, async () => {
    const h = await harness(
      1000,
      { http2: true, bookmarkIntervalMs: 300 },
      (srv) => srv.create("services", svc("a")),
    );
    try {
      await Promise.all([h.services.synced, h.slices.synced]);
      assert.equal(h.transport.protocol, "h2");
      await waitFor("a relaxed Services watch", () => svcWatches(h.srv).some((r) => timeoutS(r) === "3"));
      assert.equal(
        timeoutS(svcWatches(h.srv)[0]),
        "1",
        "the first watch, before any proof, is at the interval",
      );
      // A change reaches the relaxed watch as it happens: it streams.
      await pause(500);
      const made = Date.now();
      h.srv.create("services", svc("b", "10.96.0.11"));
      await waitFor("b", () => h.rec.seen.has("default/b"));
      assert.ok(h.rec.seen.get("default/b")! - made < 1000, "delivered by the relaxed watch as it happened");
      await pause(4000);
      const relaxed = svcWatches(h.srv).slice(1).map(timeoutS);
      assert.ok(relaxed.slice(-2).every((t) => t === "3"), `Services watches: ${relaxed.join(",")}`);
      const kept = sliceWatches(h.srv).map(timeoutS);
      assert.ok(
        kept.length >= 5 && kept.every((t) => t === "1"),
        `EndpointSlices watches: ${kept.join(",")}`,
      );
      assert.equal(svcLists(h.srv).length, 1, "no steady-state LIST of Services");
      assert.equal(sliceLists(h.srv).length, 1, "no steady-state LIST of EndpointSlices");
      assert.deepEqual(h.log.lines.filter((l) => l.startsWith("W ") || l.startsWith("E ")), []);
    } finally {
      await h.stop();
    }
  });

  it("without a keeper running on the connection nothing relaxes", { timeout: 60_000 }, async () => {
    const h = await harness(
      1000,
      { http2: true, bookmarkIntervalMs: 300 },
      (srv) => srv.create("services", svc("a")),
      false,
    );
    try {
      await h.services.synced;
      await pause(5000);
      assert.equal(h.transport.protocol, "h2");
      const all = svcWatches(h.srv).map(timeoutS);
      assert.ok(all.length >= 4 && all.every((t) => t === "1"), `watches: ${all.join(",")}`);
    } finally {
      await h.stop();
    }
  });

  it("over HTTP/1.1 nothing relaxes: every watch stays at the interval", { timeout: 60_000 }, async () => {
    const h = await harness(
      1000,
      { http2: false, bookmarkIntervalMs: 300 },
      (srv) => srv.create("services", svc("a")),
    );
    try {
      await Promise.all([h.services.synced, h.slices.synced]);
      await pause(5000);
      assert.equal(h.transport.protocol, "http/1.1");
      const all = [...svcWatches(h.srv), ...sliceWatches(h.srv)].map(timeoutS);
      assert.ok(all.length >= 8 && all.every((t) => t === "1"), `watches: ${all.join(",")}`);
      assert.equal(svcLists(h.srv).length, 1);
    } finally {
      await h.stop();
    }
  });

  it("a buffering middlebox from the start: every watch stays at the interval and both fall back to LISTs", {
    timeout: 60_000,
  }, async () => {
    const h = await harness(1000, { http2: true, bookmarkIntervalMs: 200 }, (srv) => {
      srv.create("services", svc("a"));
      srv.faults.bufferResponses(true);
    });
    try {
      await Promise.all([h.services.synced, h.slices.synced]);
      await waitFor("the fallback", () => h.services.listing && h.slices.listing, 20_000);
      const all = [...svcWatches(h.srv), ...sliceWatches(h.srv)].map(timeoutS);
      assert.ok(all.length >= 6 && all.every((t) => t === "1"), `watches: ${all.join(",")}`);
    } finally {
      await h.stop();
    }
  });

  it(
    "buffering after the proof: the relaxed watch in flight ends, every watch returns to the interval, fallback",
    {
      timeout: 60_000,
    },
    async () => {
      const h = await harness(
        1000,
        { http2: true, bookmarkIntervalMs: 200 },
        (srv) => srv.create("services", svc("a")),
      );
      try {
        await Promise.all([h.services.synced, h.slices.synced]);
        await waitFor("a relaxed Services watch", () => svcWatches(h.srv).some((r) => timeoutS(r) === "3"));
        // Start buffering just after a relaxed watch began, so that it is still in flight when the keeper notices.
        const n = svcWatches(h.srv).length;
        await waitFor("the next relaxed watch", () => svcWatches(h.srv).length > n);
        assert.equal(timeoutS(svcWatches(h.srv).at(-1)!), "3");
        h.srv.faults.bufferResponses(true);
        const t0 = Date.now();
        await waitFor(
          "the relaxed watch to end early",
          () =>
            h.log.lines.some((l) => /services: the link may buffer; resuming at the poll interval/.test(l)),
          2500,
        );
        assert.ok(Date.now() - t0 < 2500);
        await waitFor("the fallback", () => h.services.listing && h.slices.listing, 20_000);
        const after = svcWatches(h.srv).slice(n + 1).map(timeoutS);
        assert.ok(
          after.length >= 3 && after.every((t) => t === "1"),
          `Services watches since: ${after.join(",")}`,
        );
        assert.ok(
          svcLists(h.srv).slice(1).every((r) => new URLSearchParams(r.query).get("resourceVersion") === "0"),
        );
      } finally {
        await h.stop();
      }
    },
  );

  it("connections cut every 3 s: every watch resumes, and each change arrives within the interval + 1 s", {
    timeout: 90_000,
  }, async () => {
    const h = await harness(2000, { http2: true, bookmarkIntervalMs: 500 }, (srv) => {
      srv.create("services", svc("a"));
      srv.faults.cutConnectionsAfter(3000);
    });
    try {
      await Promise.all([h.services.synced, h.slices.synced]);
      await waitFor("a relaxed Services watch", () => svcWatches(h.srv).some((r) => timeoutS(r) === "6"));
      let worst = 0;
      for (let i = 0; i < 6; i++) {
        await pause(2500 * (0.5 + Math.random()));
        const made = Date.now();
        h.srv.create("services", svc(`cut-${i}`, `10.96.1.${i + 1}`));
        await waitFor(`cut-${i}`, () => h.rec.seen.has(`default/cut-${i}`), 15_000);
        worst = Math.max(worst, h.rec.seen.get(`default/cut-${i}`)! - made);
      }
      assert.ok(worst <= 3000, `worst delay ${worst} ms is within the interval + 1 s`);
      assert.equal(svcLists(h.srv).length, 1, "a cut watch resumes; it does not list");
    } finally {
      await h.stop();
    }
  });
});
