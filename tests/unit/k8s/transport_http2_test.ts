/**
 * The apiserver transport over HTTP/2 (lib/runtime/fetch_h2.ts): chosen by ALPN when the server offers it,
 * one connection for lists and (bounded) watches, fewer bytes per request than HTTP/1.1, abort and dropped
 * streams, client certificates, and HTTP/1.1 as before when the server does not offer h2.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import net from "node:net";
import { startTestApiserver, type TestApiserver } from "../../support/apiserver.ts";
import { type CountingRelay, startCountingRelay } from "../../support/counting_relay.ts";
import { loadRestConfig } from "../../../lib/k8s/kubeconfig.ts";
import { ApiTransport, listAll, NetworkError } from "../../../lib/k8s/transport.ts";
import { createTlsFetch, type TlsFetch, type TlsFetchOptions } from "../../../lib/runtime/fetch_tls.ts";
import { createH2Fetch } from "../../../lib/runtime/fetch_h2.ts";

interface Setup {
  srv: TestApiserver;
  relay: CountingRelay;
  dir: string;
}

async function setup(http2: boolean): Promise<Setup> {
  const srv = await startTestApiserver({ http2, bookmarkIntervalMs: 0 });
  srv.create("services", { metadata: { name: "a", namespace: "default" }, spec: { clusterIP: "10.0.0.1" } });
  const relay = await startCountingRelay(Number(new URL(srv.url).port));
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-h2-"));
  return { srv, relay, dir };
}

async function teardown(s: Setup): Promise<void> {
  await s.relay.close();
  await s.srv.close();
  await rm(s.dir, { recursive: true, force: true });
}

/** A transport through the relay, authenticated with `user`; also returns the fetch it made. */
async function transport(s: Setup, user: "token" | "clientCert" = "token") {
  const kc = join(s.dir, `kubeconfig-${user}`);
  await s.srv.writeKubeconfig(kc, { user, server: `https://127.0.0.1:${s.relay.port}` });
  const config = await loadRestConfig({ kubeconfig: kc, env: {} });
  const made: TlsFetch[] = [];
  const t = new ApiTransport({
    config,
    qps: -1,
    fetchFactory: (o: TlsFetchOptions) => {
      const f = createTlsFetch(o);
      made.push(f);
      return f;
    },
  });
  return { t, made };
}

/** n bounded watches one after the other (each ends by its timeoutSeconds), as poll mode makes them. */
async function boundedWatches(t: ApiTransport, rv: string, n: number): Promise<string[]> {
  const bodies: string[] = [];
  for (let i = 0; i < n; i++) {
    const res = await t.openWatch({
      path: "/api/v1/services",
      query: { watch: "true", resourceVersion: rv, timeoutSeconds: "1", allowWatchBookmarks: "true" },
      resource: "services",
    });
    bodies.push(await res.text());
  }
  return bodies;
}

describe("apiserver transport over HTTP/2", () => {
  let h2: Setup;
  let h1: Setup;
  before(async () => {
    h2 = await setup(true);
    h1 = await setup(false);
  });
  after(async () => {
    await teardown(h2);
    await teardown(h1);
  });

  it("uses h2 when offered: a list and bounded watches share one TLS connection", async () => {
    const { t, made } = await transport(h2);
    try {
      const before = h2.srv.requests.length;
      const list = await listAll<{ metadata: { name: string } }>(t, {
        path: "/api/v1/services",
        resource: "services",
      });
      assert.deepEqual(list.items.map((s) => s.metadata.name), ["a"]);
      // the server counts the body it wrote once (HTTP/2's end(data) writes through write())
      assert.equal(h2.srv.requests[before].bytes, t.bytesReceived.wire);
      await boundedWatches(t, list.resourceVersion, 3);
      const reqs = h2.srv.requests.slice(before);
      assert.equal(reqs.length, 4);
      assert.deepEqual(reqs.map((r) => r.httpVersion), ["2.0", "2.0", "2.0", "2.0"]);
      assert.equal(made[0].protocol, "h2");
      assert.equal(h2.relay.counts().connections, 1);
    } finally {
      t.close();
    }
  });

  it("falls back to HTTP/1.1 when the server does not offer h2, keeping the connection alive", async () => {
    const { t, made } = await transport(h1);
    try {
      const c0 = h1.relay.counts().connections;
      const list = await listAll(t, { path: "/api/v1/services", resource: "services" });
      await boundedWatches(t, list.resourceVersion, 3);
      assert.equal(made[0].protocol, "http/1.1");
      assert.ok(h1.srv.requests.every((r) => r.httpVersion === "1.1"));
      // one probe connection (ALPN said http/1.1) and one kept-alive connection for all four requests
      assert.equal(h1.relay.counts().connections - c0, 2);
    } finally {
      t.close();
    }
  });

  it("receives fewer bytes per bounded watch over h2 than over HTTP/1.1", async () => {
    const perWatch = async (s: Setup) => {
      const { t } = await transport(s);
      try {
        const list = await listAll(t, { path: "/api/v1/services", resource: "services" });
        const b0 = s.relay.counts().toClient;
        const bodies = await boundedWatches(t, list.resourceVersion, 5);
        assert.deepEqual(bodies, ["", "", "", "", ""]);
        return (s.relay.counts().toClient - b0) / 5;
      } finally {
        t.close();
      }
    };
    const over1 = await perWatch(h1);
    const over2 = await perWatch(h2);
    if (process.env.H2_BYTES) console.log(`per bounded watch: h2 ${over2} B, HTTP/1.1 ${over1} B`);
    assert.ok(over2 < over1 * 0.75, `h2 ${over2} B per watch, HTTP/1.1 ${over1} B`);
  });

  it("presents the client certificate over h2", async () => {
    const { t, made } = await transport(h2, "clientCert");
    try {
      const list = await listAll(t, { path: "/api/v1/services", resource: "services" });
      assert.equal(list.items.length, 1);
      assert.equal(made[0].protocol, "h2");
    } finally {
      t.close();
    }
  });

  it("aborts an open h2 watch, and a dropped watch stream errors; the connection serves on", async () => {
    const { t } = await transport(h2);
    try {
      const list = await listAll(t, { path: "/api/v1/services", resource: "services" });
      const q = { watch: "true", resourceVersion: list.resourceVersion };
      const ctl = new AbortController();
      const res = await t.openWatch({
        path: "/api/v1/services",
        query: q,
        resource: "services",
        signal: ctl.signal,
      });
      const reading = res.text();
      ctl.abort(new Error("stop watching"));
      await assert.rejects(reading, /stop watching/);

      const res2 = await t.openWatch({ path: "/api/v1/services", query: q, resource: "services" });
      const reading2 = res2.text();
      await new Promise((r) => setTimeout(r, 100));
      h2.srv.faults.dropWatches();
      await assert.rejects(reading2);

      const again = await listAll(t, { path: "/api/v1/services", resource: "services" });
      assert.equal(again.items.length, 1);
    } finally {
      t.close();
    }
  });

  it("a cut connection errors the open h2 watch, the next request connects again, a stopped server gets a new connection attempt", async () => {
    const s = await setup(true);
    const { t } = await transport(s);
    try {
      const list = await listAll(t, { path: "/api/v1/services", resource: "services" });
      const q = { watch: "true", resourceVersion: list.resourceVersion };
      const res = await t.openWatch({ path: "/api/v1/services", query: q, resource: "services" });
      s.srv.faults.cutConnectionsAfter(200);
      await assert.rejects(res.text(), /closed mid-body/);
      s.srv.faults.cutConnectionsAfter(0);
      assert.equal((await listAll(t, { path: "/api/v1/services", resource: "services" })).items.length, 1);
      assert.equal(s.relay.counts().connections, 2);

      // the server's GOAWAY on shutdown must not leave a dead session in use: a new connection is tried
      // (the relay accepts it and drops it, since nothing listens behind it)
      await s.srv.faults.down();
      // The first request can race the shutdown on the old session and fail there; the one after it must
      // then connect anew (a dead session kept in use would fail both without a new connection).
      for (let i = 0; i < 2 && s.relay.counts().connections < 3; i++) {
        await assert.rejects(
          listAll(t, { path: "/api/v1/services", resource: "services" }),
          (e) => e instanceof NetworkError && !/GOAWAY/.test(e.message),
        );
      }
      assert.equal(s.relay.counts().connections, 3);
      await s.srv.faults.up();
      assert.equal((await listAll(t, { path: "/api/v1/services", resource: "services" })).items.length, 1);
    } finally {
      t.close();
      await teardown(s);
    }
  });

  it("a connection a middlebox silently lost fails its open watch after PING goes unanswered; the next request reconnects", async () => {
    const s = await setup(true);
    const kc = join(s.dir, "kubeconfig-ping");
    await s.srv.writeKubeconfig(kc, { server: `https://127.0.0.1:${s.relay.port}` });
    const config = await loadRestConfig({ kubeconfig: kc, env: {} });
    const t = new ApiTransport({
      config,
      qps: -1,
      fetchFactory: (o) => {
        const h2f = createH2Fetch(o, () => Promise.reject(new Error("no HTTP/1.1 here")), {
          readIdleMs: 200,
          pingTimeoutMs: 200,
        });
        return Object.assign(h2f.fetch, {
          close: h2f.close,
          implementation: "global",
          decodesContent: false,
        }) as TlsFetch;
      },
    });
    try {
      const list = await listAll(t, { path: "/api/v1/services", resource: "services" });
      const q = { watch: "true", resourceVersion: list.resourceVersion };
      const res = await t.openWatch({ path: "/api/v1/services", query: q, resource: "services" });
      let settled = false;
      const reading = res.text().finally(() => (settled = true));
      // a quiet watch on a live connection is kept (PINGs are answered)
      await new Promise((r) => setTimeout(r, 800));
      assert.equal(settled, false);
      s.relay.blackhole();
      const t0 = Date.now();
      await assert.rejects(reading);
      assert.ok(Date.now() - t0 < 2000, `watch failed after ${Date.now() - t0} ms`);
      assert.equal((await listAll(t, { path: "/api/v1/services", resource: "services" })).items.length, 1);
      assert.equal(s.relay.counts().connections, 2);
    } finally {
      t.close();
      await teardown(s);
    }
  });

  it("a request waiting for a TLS handshake that never comes ends with its abort signal", async () => {
    const silent = net.createServer(() => {}); // accepts, never answers
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", () => r()));
    const port = (silent.address() as net.AddressInfo).port;
    const h2f = createH2Fetch(
      { caPem: h2.srv.caPem },
      () => Promise.reject(new Error("no fallback expected")),
    );
    try {
      const t0 = Date.now();
      await assert.rejects(
        h2f.fetch(`https://127.0.0.1:${port}/api`, { signal: AbortSignal.timeout(200) }),
        (e) => (e as Error).name === "TimeoutError",
      );
      assert.ok(Date.now() - t0 < 2000, `${Date.now() - t0} ms`);
    } finally {
      h2f.close();
      await new Promise((r) => {
        (silent as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
        silent.close(r);
        setTimeout(r, 200);
      });
    }
  });

  it("a reused h2 connection the server closed: the request goes to a new one (here refused)", async () => {
    const srv = await startTestApiserver({ http2: true, bookmarkIntervalMs: 0 });
    const dir = await mkdtemp(join(tmpdir(), "edgeproxy-h2-"));
    await srv.writeKubeconfig(join(dir, "kubeconfig"));
    const t = new ApiTransport({
      config: await loadRestConfig({ kubeconfig: join(dir, "kubeconfig"), env: {} }),
      requestTimeoutMs: 100,
    });
    try {
      // a request that timed out leaves the server busy with it when it goes down
      srv.faults.slow(400);
      await assert.rejects(
        listAll(t, { path: "/api/v1/services", resource: "services" }),
        (e) => e instanceof NetworkError && e.timedOut,
      );
      srv.faults.slow(0);
      await srv.faults.down();
      await assert.rejects(
        listAll(t, { path: "/api/v1/services", resource: "services" }),
        (e) => e instanceof NetworkError && e.refused,
      );
      await srv.faults.up();
      await listAll(t, { path: "/api/v1/services", resource: "services" });
    } finally {
      t.close();
      await srv.close();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
