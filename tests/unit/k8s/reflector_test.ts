/**
 * The list+watch reflector against the HTTPS test apiserver (tests/support/apiserver.ts): pagination,
 * reconnects, 410 relists, apiserver restarts with new history, and a chaos run. Every test checks that the
 * delivered event stream is consistent (no ghost deletes, no duplicate adds, no unchanged re-emits) and that
 * the state it builds equals the server's list.
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
import { Reflector, type ReflectorTimings } from "../../../lib/k8s/reflector.ts";
import {
  ENDPOINTSLICES_RESOURCE,
  nodeResource,
  type ResourceEventHandler,
  type ResourceSpec,
  SERVICES_RESOURCE,
} from "../../../lib/k8s/resource.ts";
import { type KubeObject, objectKey } from "../../../lib/k8s/store.ts";

const FAST: ReflectorTimings = {
  backoff: { initialMs: 20, maxMs: 200, resetAfterMs: 2000 },
  watchTimeoutMinSeconds: 1,
  watchTimeoutMaxSeconds: 3,
  watchdogMs: 1500,
  shortWatchMs: 50,
  pageSize: 5,
};

/** Records handler calls and checks that they form a consistent stream. */
class Recorder implements ResourceEventHandler<KubeObject> {
  state = new Map<string, KubeObject>();
  violations: string[] = [];
  adds = 0;
  updates = 0;
  deletes = 0;
  synced = 0;
  log: string[] = [];

  onAdd(o: KubeObject): void {
    const k = objectKey(o);
    this.adds++;
    this.log.push(`add ${k}`);
    if (this.state.has(k)) this.violations.push(`duplicate add ${k}`);
    this.state.set(k, o);
  }
  onUpdate(old: KubeObject, o: KubeObject): void {
    const k = objectKey(o);
    this.updates++;
    this.log.push(`update ${k}`);
    const cur = this.state.get(k);
    if (!cur) this.violations.push(`update of unknown ${k}`);
    else if (cur.metadata?.resourceVersion !== old.metadata?.resourceVersion) {
      this.violations.push(
        `update of ${k}: old rv ${old.metadata?.resourceVersion} != held ${cur.metadata?.resourceVersion}`,
      );
    }
    if (old.metadata?.resourceVersion === o.metadata?.resourceVersion) {
      this.violations.push(`update of ${k} with unchanged rv ${o.metadata?.resourceVersion}`);
    }
    this.state.set(k, o);
  }
  onDelete(o: KubeObject): void {
    const k = objectKey(o);
    this.deletes++;
    this.log.push(`delete ${k}`);
    if (!this.state.has(k)) this.violations.push(`ghost delete ${k}`);
    this.state.delete(k);
  }
  onSynced(): void {
    this.synced++;
  }
  /** "key@rv" of the delivered state, sorted. */
  summary(): string[] {
    return [...this.state.values()].map((o) => `${objectKey(o)}@${o.metadata?.resourceVersion}`).sort();
  }
}

function serverSummary(
  srv: TestApiserver,
  kind: "services" | "endpointslices" | "nodes",
  keep = (_: KubeObject) => true,
) {
  return srv.list(kind).filter((o) => keep(o as KubeObject)).map((o) =>
    `${objectKey(o as KubeObject)}@${(o as KubeObject).metadata?.resourceVersion}`
  ).sort();
}

async function waitFor(what: string, cond: () => boolean, timeoutMs = 10_000): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
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

function svc(
  name: string,
  ns = "default",
  extra: Record<string, unknown> = {},
  labels: Record<string, string> = {},
) {
  return {
    metadata: { name, namespace: ns, labels },
    spec: {
      type: "ClusterIP",
      clusterIP: "10.96.0.10",
      ports: [{ name: "http", port: 80, protocol: "TCP" }],
      ...extra,
    },
  };
}

interface Harness {
  srv: TestApiserver;
  transport: ApiTransport;
  stats: ApiStats;
  log: ReturnType<typeof captureLog>;
  dir: string;
}

async function harness(
  opts: Parameters<typeof startTestApiserver>[0] = {},
  user: "token" | "tokenFile" | "clientCert" = "token",
) {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-refl-"));
  const srv = await startTestApiserver({ bookmarkIntervalMs: 200, ...opts });
  const kc = join(dir, "kubeconfig");
  await srv.writeKubeconfig(kc, { user });
  const config = await loadRestConfig({ kubeconfig: kc, env: {} });
  const stats = new ApiStats();
  const log = captureLog();
  const transport = new ApiTransport({ config, qps: -1, stats, log });
  return { srv, transport, stats, log, dir } satisfies Harness;
}

async function teardown(h: Harness, ...refs: Array<Reflector<KubeObject>>) {
  for (const r of refs) await r.stop();
  h.transport.close();
  await h.srv.close();
  await rm(h.dir, { recursive: true, force: true });
}

function reflector(h: Harness, spec: ResourceSpec, rec: Recorder, timings: ReflectorTimings = FAST) {
  const r = new Reflector<KubeObject>({
    transport: h.transport,
    spec,
    handler: rec,
    timings,
    log: h.log,
    stats: h.stats,
  });
  r.start();
  return r;
}

/** Random create/update/delete steps on services; returns the names touched. */
function randomChanges(srv: TestApiserver, n: number, rnd: () => number, prefix = "s") {
  for (let i = 0; i < n; i++) {
    const names = srv.list("services").map((o) => (o as KubeObject).metadata!.name!);
    const p = rnd();
    if (p < 0.4 || names.length === 0) {
      const name = `${prefix}${Math.floor(rnd() * 1e6)}`;
      if (!names.includes(name)) srv.create("services", svc(name, rnd() < 0.5 ? "default" : "kube-system"));
    } else if (p < 0.75) {
      const o = srv.list("services")[Math.floor(rnd() * names.length)] as unknown as KubeObject & {
        spec: object;
      };
      srv.update("services", {
        ...o,
        spec: { ...o.spec, ports: [{ name: "p", port: 1000 + Math.floor(rnd() * 1000), protocol: "TCP" }] },
      });
    } else {
      const o = srv.list("services")[Math.floor(rnd() * names.length)] as KubeObject;
      srv.remove("services", o.metadata!.namespace!, o.metadata!.name!);
    }
  }
}

function seeded(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

describe("reflector against the test apiserver", () => {
  it("one LIST from the watch cache (resourceVersion=0), adds then synced, label selector, then the watch", {
    timeout: 30_000,
  }, async () => {
    const h = await harness();
    for (let i = 0; i < 12; i++) h.srv.create("services", svc(`svc-${String(i).padStart(2, "0")}`));
    h.srv.create(
      "services",
      svc("other-proxy", "default", {}, { "service.kubernetes.io/service-proxy-name": "x" }),
    );
    h.srv.create("services", svc("headless", "default", {}, { "service.kubernetes.io/headless": "" }));
    const rec = new Recorder();
    let addsAtSync = -1;
    const origSynced = rec.onSynced.bind(rec);
    rec.onSynced = () => {
      addsAtSync = rec.adds;
      origSynced();
    };
    const r = reflector(h, SERVICES_RESOURCE, rec);
    try {
      await r.synced;
      assert.equal(addsAtSync, 12, "all adds before synced");
      assert.equal(rec.synced, 1);
      const lists = h.srv.requests.filter((q) => !q.watch && q.path === "/api/v1/services");
      // client-go's first list: resourceVersion=0 with its page size, which the watch cache ignores
      assert.equal(lists.length, 1, "12 objects in one response, whatever the page size of 5");
      const lq = new URLSearchParams(lists[0].query);
      assert.equal(lq.get("resourceVersion"), "0");
      assert.equal(lq.get("limit"), "5");
      assert.equal(
        lq.get("labelSelector"),
        "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless",
      );

      await waitFor("watch open", () => h.srv.activeWatches() === 1);
      const watch = h.srv.requests.find((q) => q.watch)!;
      const wq = new URLSearchParams(watch.query);
      assert.equal(wq.get("allowWatchBookmarks"), "true");
      const ts = Number(wq.get("timeoutSeconds"));
      assert.ok(ts >= 1 && ts < 3, `timeoutSeconds ${ts}`);
      assert.ok(wq.get("resourceVersion"), "watch starts at the list's resourceVersion");

      h.srv.create("services", svc("late"));
      const s0 = h.srv.list("services").find((o) =>
        (o as KubeObject).metadata?.name === "svc-00"
      ) as KubeObject;
      h.srv.update("services", { ...s0, spec: { type: "NodePort" } });
      h.srv.remove("services", "default", "svc-01");
      await waitFor("events", () => rec.state.size === 12 && rec.state.has("default/late"));
      await waitFor("update", () => rec.updates === 1 && rec.deletes === 1);
      assert.deepEqual(
        rec.summary(),
        serverSummary(h.srv, "services", (o) =>
          !o.metadata?.labels ||
          Object.keys(o.metadata.labels).length === 0),
      );
      assert.deepEqual(rec.violations, []);
      // objects carry their kind whether they came from the list or the watch
      assert.ok([...rec.state.values()].every((o) => o.kind === "Service"));
    } finally {
      await teardown(h, r);
    }
  });

  it("without the watch cache the resourceVersion=0 list comes in pages, and so do relists", {
    timeout: 30_000,
  }, async () => {
    const h = await harness({ watchCache: false });
    for (let i = 0; i < 12; i++) h.srv.create("services", svc(`svc-${String(i).padStart(2, "0")}`));
    const rec = new Recorder();
    const r = reflector(h, SERVICES_RESOURCE, rec);
    try {
      await r.synced;
      assert.equal(rec.state.size, 12);
      const lists = () => h.srv.requests.filter((q) => !q.watch && q.path === "/api/v1/services");
      const q = lists().map((l) => new URLSearchParams(l.query));
      assert.equal(q.length, 3, "12 objects in pages of 5");
      assert.ok(q.every((p) => p.get("limit") === "5"));
      assert.equal(q[0].get("resourceVersion"), "0");
      assert.ok(q[1].get("continue") && q[1].get("resourceVersion") === null, "second page uses continue");
      // A relist after 410 keeps paging (client-go's paginatedResult). Paged at a resourceVersion N it is an
      // exact read, which compaction made unavailable (410): then a consistent read, paged as well.
      await waitFor("watch open", () => h.srv.activeWatches() === 1);
      h.srv.faults.stallWatches(); // "late" and the compaction reach the reflector only through a relist
      h.srv.create("services", svc("late"));
      h.srv.faults.compact();
      await waitFor(
        "consistent relist",
        () => lists().slice(3).some((l) => !/resourceVersion=|continue=/.test(l.query)),
      );
      await waitFor("converged", () => rec.summary().join() === serverSummary(h.srv, "services").join());
      const relist = lists().slice(3).map((l) => new URLSearchParams(l.query));
      assert.ok(relist.every((p) => p.get("limit") === "5"), "every relist page asks for 5");
      assert.ok(Number(relist[0].get("resourceVersion")) > 0, "first at the last resourceVersion seen");
      assert.ok(
        h.log.lines.some((l) =>
          /resourceVersion \d+ unavailable .*410.*; listing again with a consistent read/.test(l)
        ),
        h.log.lines.join("\n"),
      );
      assert.deepEqual(rec.violations, []);
    } finally {
      await teardown(h, r);
    }
  });

  it("delivers every change made while the watch was down, from the last resourceVersion", {
    timeout: 30_000,
  }, async () => {
    const h = await harness({ bookmarkIntervalMs: 0 });
    for (let i = 0; i < 6; i++) h.srv.create("services", svc(`a${i}`));
    const rec = new Recorder();
    const r = reflector(h, SERVICES_RESOURCE, rec, {
      ...FAST,
      watchTimeoutMinSeconds: 60,
      watchTimeoutMaxSeconds: 61,
      watchdogMs: 60_000,
    });
    try {
      await r.synced;
      await waitFor("watch", () => h.srv.activeWatches() === 1);
      await h.srv.faults.down();
      const rnd = seeded(7);
      randomChanges(h.srv, 30, rnd);
      const listsBefore = h.srv.requests.filter((q) => !q.watch).length;
      await h.srv.faults.up();
      await waitFor("converged", () => rec.summary().join() === serverSummary(h.srv, "services").join());
      assert.deepEqual(rec.violations, []);
      // resumed by watching from the last resourceVersion, not by listing again
      assert.equal(h.srv.requests.filter((q) => !q.watch).length, listsBefore);
      const resumed = h.srv.requests.filter((q) => q.watch).at(-1)!;
      assert.ok(Number(new URLSearchParams(resumed.query).get("resourceVersion")) > 0);
      assert.ok(h.log.lines.some((l) => l.startsWith("W watch services failed")), "the outage is logged");
    } finally {
      await teardown(h, r);
    }
  });

  it("after 410 Expired relists and emits exactly what changed while away (no ghosts, no duplicates)", {
    timeout: 30_000,
  }, async () => {
    for (const expiredWatchAs of ["status", "event"] as const) {
      const h = await harness({ historyLimit: 5, bookmarkIntervalMs: 0, expiredWatchAs });
      const rnd = seeded(expiredWatchAs === "status" ? 11 : 12);
      randomChanges(h.srv, 20, rnd);
      const rec = new Recorder();
      const r = reflector(h, SERVICES_RESOURCE, rec, {
        ...FAST,
        watchTimeoutMinSeconds: 60,
        watchTimeoutMaxSeconds: 61,
        watchdogMs: 60_000,
      });
      try {
        await r.synced;
        await waitFor("watch", () => h.srv.activeWatches() === 1);
        for (let round = 0; round < 3; round++) {
          await h.srv.faults.down();
          randomChanges(h.srv, 25, rnd); // more than historyLimit: the resume point is gone
          const unchanged = new Map(rec.state);
          const updatesBefore = rec.updates;
          await h.srv.faults.up();
          await waitFor("converged", () => rec.summary().join() === serverSummary(h.srv, "services").join());
          // objects the outage did not touch were not re-emitted
          const touched = serverSummary(h.srv, "services").filter((s) =>
            !unchanged.has(s.split("@")[0]) ||
            unchanged.get(s.split("@")[0])!.metadata?.resourceVersion !== s.split("@")[1]
          ).length;
          assert.ok(
            rec.updates - updatesBefore <= touched,
            `${rec.updates - updatesBefore} updates for ${touched} touched`,
          );
        }
        assert.deepEqual(rec.violations, []);
        assert.ok(h.stats.snapshot().resources.services.relists >= 3, "each outage relisted");
        assert.ok(
          h.log.lines.some((l) => l.includes("410") || l.includes("Expired")),
          "the relist is logged",
        );
      } finally {
        await teardown(h, r);
      }
    }
  });

  it("recovers after restartWithNewHistory", { timeout: 30_000 }, async () => {
    const h = await harness({ bookmarkIntervalMs: 0 });
    const rnd = seeded(3);
    randomChanges(h.srv, 10, rnd);
    const rec = new Recorder();
    const r = reflector(h, SERVICES_RESOURCE, rec);
    try {
      await r.synced;
      await waitFor("watch", () => h.srv.activeWatches() === 1);
      await h.srv.faults.restartWithNewHistory();
      randomChanges(h.srv, 10, rnd);
      await waitFor("converged", () => rec.summary().join() === serverSummary(h.srv, "services").join());
      randomChanges(h.srv, 5, rnd);
      await waitFor(
        "converged again",
        () => rec.summary().join() === serverSummary(h.srv, "services").join(),
      );
      assert.deepEqual(rec.violations, []);
    } finally {
      await teardown(h, r);
    }
  });

  it("compaction while watching (ERROR 410 event on the open stream) relists without ghosts", {
    timeout: 30_000,
  }, async () => {
    const h = await harness({ bookmarkIntervalMs: 0 });
    const rnd = seeded(5);
    randomChanges(h.srv, 10, rnd);
    const rec = new Recorder();
    const r = reflector(h, SERVICES_RESOURCE, rec, {
      ...FAST,
      watchTimeoutMinSeconds: 60,
      watchTimeoutMaxSeconds: 61,
      watchdogMs: 60_000,
    });
    try {
      await r.synced;
      await waitFor("watch", () => h.srv.activeWatches() === 1);
      const listsBefore = h.srv.requests.filter((q) => !q.watch).length;
      h.srv.faults.compact();
      await waitFor("relist", () => h.srv.requests.filter((q) => !q.watch).length > listsBefore);
      randomChanges(h.srv, 10, rnd);
      await waitFor("converged", () => rec.summary().join() === serverSummary(h.srv, "services").join());
      assert.deepEqual(rec.violations, []);
    } finally {
      await teardown(h, r);
    }
  });

  it("bookmarks advance the resourceVersion the next watch starts from", { timeout: 30_000 }, async () => {
    const h = await harness({ bookmarkIntervalMs: 50 });
    h.srv.create("services", svc("one"));
    const rec = new Recorder();
    const r = reflector(h, SERVICES_RESOURCE, rec, {
      ...FAST,
      watchTimeoutMinSeconds: 60,
      watchTimeoutMaxSeconds: 61,
      watchdogMs: 60_000,
    });
    try {
      await r.synced;
      const listRv = r.lastResourceVersion;
      // changes to another resource move the global resourceVersion; only bookmarks tell this watch about it
      for (let i = 0; i < 5; i++) {
        h.srv.create("endpointslices", {
          metadata: { name: `e${i}`, namespace: "default", labels: { "kubernetes.io/service-name": "x" } },
          addressType: "IPv4",
          endpoints: [],
        });
      }
      await waitFor("bookmark", () => r.lastResourceVersion === h.srv.resourceVersion());
      assert.notEqual(r.lastResourceVersion, listRv);
      assert.ok(h.stats.snapshot().resources.services.bookmarks > 0);
      h.srv.faults.dropWatches();
      await waitFor("rewatch", () => h.srv.requests.filter((q) => q.watch).length === 2);
      const rewatch = h.srv.requests.filter((q) => q.watch)[1];
      assert.equal(new URLSearchParams(rewatch.query).get("resourceVersion"), h.srv.resourceVersion());
      assert.equal(rec.adds, 1);
      assert.deepEqual(rec.violations, []);
    } finally {
      await teardown(h, r);
    }
  });

  it("watches only its own Node through the field selector", { timeout: 30_000 }, async () => {
    const h = await harness();
    h.srv.create("nodes", { metadata: { name: "edge-1", labels: { "topology.kubernetes.io/zone": "a" } } });
    h.srv.create("nodes", { metadata: { name: "edge-2" } });
    const rec = new Recorder();
    const r = reflector(h, nodeResource("edge-1"), rec);
    try {
      await r.synced;
      assert.deepEqual([...rec.state.keys()], ["edge-1"]);
      const n = h.srv.list("nodes").find((o) => (o as KubeObject).metadata?.name === "edge-1") as KubeObject;
      h.srv.update("nodes", {
        ...n,
        metadata: { ...n.metadata, labels: { "topology.kubernetes.io/zone": "b" } },
      });
      h.srv.update("nodes", { metadata: { name: "edge-2", labels: { x: "y" } } });
      await waitFor("node update", () => rec.updates === 1);
      assert.equal(rec.state.get("edge-1")?.metadata?.labels?.["topology.kubernetes.io/zone"], "b");
      assert.deepEqual([...rec.state.keys()], ["edge-1"]);
      const q = h.srv.requests.find((x) => x.path === "/api/v1/nodes")!;
      assert.equal(new URLSearchParams(q.query).get("fieldSelector"), "metadata.name=edge-1");
    } finally {
      await teardown(h, r);
    }
  });

  it("converges through 500 storms, 429, garbage lines, stalled watches, truncated lists and 401 rotation", {
    timeout: 60_000,
  }, async () => {
    const h = await harness({ bookmarkIntervalMs: 100, historyLimit: 50 });
    const rnd = seeded(99);
    randomChanges(h.srv, 15, rnd);
    const recS = new Recorder();
    const recE = new Recorder();
    const timings = { ...FAST, watchdogMs: 600 };
    const rs = reflector(h, SERVICES_RESOURCE, recS, timings);
    const re = reflector(h, ENDPOINTSLICES_RESOURCE, recE, timings);
    try {
      await Promise.all([rs.synced, re.synced]);
      const answered = (code: number) => h.srv.requests.filter((q) => q.status === code).length;
      /** Sets a request-level fault, drops the watches so requests come at once, and waits until it was used. */
      const requestFault = async (code: number, n: number, set: () => void) => {
        const before = answered(code);
        set();
        h.srv.faults.dropWatches();
        await waitFor(`${n} × ${code} answered`, () => answered(code) >= before + n);
      };
      const faults: Array<() => void | Promise<void>> = [
        () => requestFault(500, 6, () => h.srv.faults.failNext(6, 500)),
        () => requestFault(429, 1, () => h.srv.faults.failNext(1, 429)),
        () => h.srv.faults.garbageNextWatchLine(),
        async () => {
          // A garbled line makes the watch resume after a backoff; stall only a watch that is open.
          await waitFor("an open watch to stall", () => h.srv.activeWatches() > 0, 20_000);
          h.srv.faults.stallWatches();
        },
        () => (h.srv.faults.truncateNextList(), h.srv.faults.compact()),
        () => requestFault(401, 3, () => h.srv.faults.unauthorizedNext(3, 401)),
        () => requestFault(403, 2, () => h.srv.faults.unauthorizedNext(2, 403)),
        () => h.srv.faults.dropWatches(),
        () => h.srv.faults.compact(),
      ];
      for (let round = 0; round < 2 * faults.length; round++) {
        await faults[round % faults.length]();
        randomChanges(h.srv, 5, rnd);
        if (rnd() < 0.5) {
          h.srv.create("endpointslices", {
            metadata: {
              name: `es-${round}`,
              namespace: "default",
              labels: { "kubernetes.io/service-name": "x" },
            },
            addressType: "IPv4",
            endpoints: [{ addresses: [`10.0.0.${round + 1}`] }],
          });
        }
        await new Promise((res) => setTimeout(res, 50 + Math.floor(rnd() * 150)));
      }
      h.srv.faults.clear();
      await waitFor(
        "services converged",
        () => recS.summary().join() === serverSummary(h.srv, "services").join(),
        20_000,
      );
      await waitFor(
        "slices converged",
        () => recE.summary().join() === serverSummary(h.srv, "endpointslices").join(),
        20_000,
      );
      assert.deepEqual(recS.violations, []);
      assert.deepEqual(recE.violations, []);
      assert.equal(recS.synced, 1);
      assert.equal(recE.synced, 1);
      const snap = h.stats.snapshot();
      const warned = h.log.lines.filter((l) => !l.startsWith("D ")).join("\n");
      for (
        const expect of [
          "500 InternalError",
          "429 TooManyRequests",
          "not JSON",
          "watchdog",
          "401 Unauthorized",
        ]
      ) {
        assert.ok(warned.includes(expect), `the run went through "${expect}"`);
      }
      assert.ok(snap.resources.services.malformed + snap.resources.endpointslices.malformed >= 1);
      if (process.env.DEBUG_CHAOS) {
        console.log(h.log.lines.filter((l) => !l.startsWith("D ")).join("\n"), JSON.stringify(snap, null, 1));
      }
      assert.ok(snap.lastContactMs !== null);
      assert.ok(snap.requests.some((x) => x.verb === "watch" && x.code === "200"));
    } finally {
      await teardown(h, rs, re);
    }
  });

  it("logs 401/403 once per failure streak and recovers when they stop", { timeout: 30_000 }, async () => {
    const h = await harness({ bookmarkIntervalMs: 0 });
    h.srv.create("services", svc("x"));
    h.srv.faults.unauthorizedNext(8, 403);
    const rec = new Recorder();
    const r = reflector(h, SERVICES_RESOURCE, rec, { ...FAST, backoff: { initialMs: 5, maxMs: 20 } });
    try {
      await r.synced;
      assert.equal(rec.adds, 1);
      const errs = h.log.lines.filter((l) => l.startsWith("E ") && l.includes("rejected our credentials"));
      assert.equal(errs.length, 1, h.log.lines.join("\n"));
      assert.ok(errs[0].includes("403") && errs[0].includes("bearer token"), errs[0]);
      assert.ok(
        h.log.lines.filter((l) => l.startsWith("D ") && l.includes("rejected our credentials")).length >= 6,
      );
      assert.ok(h.log.lines.some((l) => l.startsWith("I list services: apiserver reachable again")));
    } finally {
      await teardown(h, r);
    }
  });

  it("honours Retry-After on 429", { timeout: 30_000 }, async () => {
    const h = await harness({ bookmarkIntervalMs: 0 });
    h.srv.faults.failNext(1, 429); // the test apiserver sends Retry-After: 1
    const rec = new Recorder();
    const t0 = Date.now();
    const r = reflector(h, SERVICES_RESOURCE, rec, { ...FAST, backoff: { initialMs: 5, maxMs: 20 } });
    try {
      await r.synced;
      assert.ok(Date.now() - t0 >= 950, `waited ${Date.now() - t0} ms`);
    } finally {
      await teardown(h, r);
    }
  });

  it("stop() ends a reflector that is backing off or watching, promptly", { timeout: 30_000 }, async () => {
    const h = await harness({ bookmarkIntervalMs: 0 });
    const rec = new Recorder();
    const r = reflector(h, SERVICES_RESOURCE, rec, {
      ...FAST,
      backoff: { initialMs: 60_000, maxMs: 60_000 },
    });
    await r.synced;
    await waitFor("watch", () => h.srv.activeWatches() === 1);
    const t0 = Date.now();
    await r.stop();
    assert.ok(Date.now() - t0 < 1000);
    await waitFor("watch closed", () => h.srv.activeWatches() === 0);
    // a second reflector stuck in a 60 s backoff
    await h.srv.faults.down();
    const r2 = reflector(h, SERVICES_RESOURCE, new Recorder(), {
      ...FAST,
      backoff: { initialMs: 60_000, maxMs: 60_000 },
    });
    await new Promise((res) => setTimeout(res, 100));
    const t1 = Date.now();
    await r2.stop();
    assert.ok(Date.now() - t1 < 1000);
    await teardown(h);
  });
});
