/**
 * What `--api-mode` costs on the node's link and on the control plane, in steady state: bytes received per
 * node per hour at N Services with one change per minute, for watch mode, the poll mode before bounded
 * watches (a full paginated LIST of each resource every interval; reproduced here, it is no longer a
 * product mode) and the poll mode of today (bounded watches); then a simulated fleet (many sources in
 * one process against one test apiserver) with the requests/s and bytes/s the apiserver serves.
 *
 *   bun bench/wan_bench.ts [--sizes=1000,10000] [--window=60] [--interval=10] [--fleet=200]
 *                          [--fleet-services=100] [--fleet-window=60] [--only=node,fleet] [--http2=false]
 *                          [--watch-cache-bookmarks=false] [--modes=watch,poll-list,poll]
 *
 * The fleet needs BUN_CONFIG_MAX_HTTP_REQUESTS=2048 (Bun's fetch allows 256 requests in flight per process,
 * and each node holds 3 watches open).
 *
 * Each figure is measured over one window of `--window` seconds after the first sync has settled, with
 * one change (an EndpointSlice update) in the middle of it, and scaled to an hour (× 3600 / window): the
 * run is shorter than an hour, the rate is extrapolated. Two byte counts: response bodies as the apiserver
 * wrote them (after gzip), counted by the test apiserver; and the real bytes on the node's link, counted by
 * a TCP relay between each node's client and the apiserver (tests/support/counting_relay.ts): TLS
 * handshakes and records, HTTP headers and framing, bodies. New TCP connections per hour show whether
 * connections are reused. The client's own count of body bytes received (ApiTransport.bytesReceived, wire
 * and decoded) is printed beside them. The test apiserver offers HTTP/2 by ALPN (as a real one does) unless
 * `--http2=false`, and sends bookmarks on watches that ask for them as a real one's watch cache does: every
 * 60 s and 2 s before a watch's timeoutSeconds deadline, only when the resourceVersion moved past what the
 * watcher was sent (`--watch-cache-bookmarks=false`: every 60 s, moved or not, the model of the earlier figures).
 * Before each node window, one change and one poll interval: the steady state of a cluster that changes,
 * where poll mode over HTTP/2 has seen its link stream (lib/k8s/poll_link.ts); the fleet likewise.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startTestApiserver, type TestApiserver } from "../tests/support/apiserver.ts";
import { loadRestConfig } from "../lib/k8s/kubeconfig.ts";
import { ApiTransport, listAll } from "../lib/k8s/transport.ts";
import { ENDPOINTSLICES_RESOURCE, nodeResource, SERVICES_RESOURCE } from "../lib/k8s/resource.ts";
import { startApiserverSource } from "../lib/source/apiserver.ts";
import type { ProxyHandlers } from "../lib/proxy/handlers.ts";
import type { RestConfig } from "../lib/k8s/rest_config.ts";
import { syntheticCluster } from "./synthetic_cluster.ts";
import { startCountingRelay } from "../tests/support/counting_relay.ts";

type Mode = "watch" | "poll-list" | "poll";
const ALL_MODES: Mode[] = ["watch", "poll-list", "poll"];
const NODE = "bench-node";

const args = new Map(
  process.argv.slice(2).filter((a) => a.startsWith("--")).map((a) => {
    const [k, v] = a.slice(2).split("=");
    return [k, v ?? "true"] as const;
  }),
);
const num = (k: string, d: number) => Number(args.get(k) ?? d);
const sizes = (args.get("sizes") ?? "1000,10000").split(",").map(Number);
const windowS = num("window", 60);
const intervalMs = num("interval", 10) * 1000;
const fleet = num("fleet", 200);
const fleetServices = num("fleet-services", 100);
const fleetWindowS = num("fleet-window", 60);
const only = new Set((args.get("only") ?? "node,fleet").split(","));
/** The modes to measure (e.g. `--modes=watch --window=900`: watch mode over its own re-watches, 300–600 s). */
const MODES = (args.get("modes") ?? ALL_MODES.join(",")).split(",") as Mode[];
for (const m of MODES) if (!ALL_MODES.includes(m)) throw new Error(`--modes: unknown mode ${m}`);
/** The test apiserver offers HTTP/2 by ALPN, as a real apiserver does (`--http2=false`: HTTP/1.1 only). */
const offerHttp2 = args.get("http2") !== "false";
/** Bookmarks timed as a real apiserver's watch cache sends them (TestApiserverOptions.watchCacheBookmarks). */
const watchCacheBookmarks = args.get("watch-cache-bookmarks") !== "false";

const noop = () => {};
const handlers: ProxyHandlers = {
  onServiceAdd: noop,
  onServiceUpdate: noop,
  onServiceDelete: noop,
  onServicesSynced: noop,
  onEndpointSliceAdd: noop,
  onEndpointSliceUpdate: noop,
  onEndpointSliceDelete: noop,
  onEndpointSlicesSynced: noop,
  onNodeAdd: noop,
  onNodeUpdate: noop,
  onNodeDelete: noop,
  onNodeSynced: noop,
};
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A test apiserver holding a synthetic cluster of `n` Services (and their slices, and the node). */
async function cluster(n: number): Promise<{ srv: TestApiserver; config: RestConfig; dir: string }> {
  const srv = await startTestApiserver({
    bookmarkIntervalMs: 60_000,
    historyLimit: 100_000,
    http2: offerHttp2,
    watchCacheBookmarks,
  });
  const c = syntheticCluster({ services: n, nodeName: NODE });
  const bare = <T extends { metadata?: Record<string, unknown> }>(o: T): T => {
    const { resourceVersion: _rv, uid: _uid, ...metadata } = o.metadata ?? {};
    return { ...o, metadata };
  };
  for (const s of c.services) srv.create("services", bare(s));
  for (const s of c.endpointSlices) srv.create("endpointslices", bare(s));
  srv.create("nodes", bare(c.node));
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-wan-"));
  await srv.writeKubeconfig(join(dir, "kubeconfig"));
  const config = await loadRestConfig({ kubeconfig: join(dir, "kubeconfig"), env: {} });
  return { srv, config, dir };
}

/**
 * One node's apiserver client in `mode`, behind its own counting relay (real bytes on the node's link);
 * resolves once synced.
 */
async function startClient(mode: Mode, config: RestConfig, apiPort: number) {
  const relay = await startCountingRelay(apiPort);
  const transport = new ApiTransport({
    config: { ...config, server: `https://127.0.0.1:${relay.port}` },
    qps: -1,
  });
  if (mode !== "poll-list") {
    const src = startApiserverSource({
      connection: transport,
      nodeName: NODE,
      handlers,
      mode,
      pollIntervalMs: intervalMs,
    });
    await src.synced;
    return {
      transport,
      relay,
      stop: async () => {
        await src.stop();
        transport.close();
        await relay.close();
      },
    };
  }
  // The poll mode before bounded watches: every interval, a complete paginated LIST of each resource.
  const stop = new AbortController();
  const specs = [SERVICES_RESOURCE, ENDPOINTSLICES_RESOURCE, nodeResource(NODE)];
  const round = () =>
    Promise.all(specs.map((s) =>
      listAll(transport, {
        path: s.path,
        resource: s.resource,
        labelSelector: s.labelSelector,
        fieldSelector: s.fieldSelector,
        signal: stop.signal,
      })
    ));
  await round();
  const loop = (async () => {
    while (!stop.signal.aborted) {
      await pause(intervalMs);
      if (!stop.signal.aborted) await round().catch(noop);
    }
  })();
  return {
    transport,
    relay,
    stop: async () => {
      stop.abort();
      await loop;
      transport.close();
      await relay.close();
    },
  };
}

/** The test apiserver's port. */
const portOf = (srv: TestApiserver) => Number(new URL(srv.url).port);

/** Body bytes the apiserver has written so far and requests served. */
function served(srv: TestApiserver): { bytes: number; requests: number } {
  let bytes = 0;
  for (const r of srv.requests) bytes += r.bytes;
  return { bytes, requests: srv.requests.length };
}

let changes = 0;
/** Updates one EndpointSlice (a new endpoint address, never the same twice), as a rollout would. */
function change(srv: TestApiserver): void {
  const i = ++changes;
  const slices = srv.list("endpointslices");
  const s = structuredClone(slices[i % slices.length]) as { endpoints?: Array<{ addresses: string[] }> };
  if (s.endpoints?.[0]) s.endpoints[0].addresses = [`10.255.${(i >> 8) & 255}.${i & 255}`];
  srv.update("endpointslices", s);
}

const mib = (b: number) => (b / 1024 / 1024).toFixed(3);

async function nodeFigures(): Promise<void> {
  console.log(
    `\n## Bytes per node per hour (window ${windowS} s, 1 change per minute, poll interval ${
      intervalMs / 1000
    } s, server offers ${offerHttp2 ? "h2 and HTTP/1.1" : "HTTP/1.1 only"}, bookmarks ${
      watchCacheBookmarks ? "as the watch cache sends them" : "every 60 s"
    })`,
  );
  console.log(
    "| Services | mode | body MiB/h | × watch | wire MiB/h (relay) | × watch | sent MiB/h (relay) | " +
      "TCP connections/h | client wire body MiB/h | decoded MiB/h | requests/h |",
  );
  console.log("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
  for (const n of sizes) {
    const { srv, config, dir } = await cluster(n);
    let watchBytes = 0;
    let watchWire = 0;
    try {
      for (const mode of MODES) {
        const c = await startClient(mode, config, portOf(srv));
        await pause(2000); // settle: the first sync's watches are open
        // Steady state has seen a change: over HTTP/2 that is what proves the link streams, after which poll
        // mode bounds the watches other than the keeper at 3 × the interval. One change, then one interval
        // for the watches in flight to end, before the window (every mode alike).
        change(srv);
        await pause(intervalMs + 2000);
        const s0 = served(srv);
        const r0 = c.relay.counts();
        const w0 = c.transport.bytesReceived;
        // One change per minute of window (at least one), each in the middle of its minute.
        const changes = Math.max(1, Math.round(windowS / 60));
        const stepMs = (windowS * 1000) / changes;
        for (let i = 0; i < changes; i++) {
          await pause(stepMs / 2);
          change(srv);
          await pause(stepMs / 2);
        }
        const s1 = served(srv);
        const r1 = c.relay.counts();
        const w1 = c.transport.bytesReceived;
        await c.stop();
        const scale = 3600 / windowS;
        const bytes = (s1.bytes - s0.bytes) * scale;
        const wire = (r1.toClient - r0.toClient) * scale;
        const sent = (r1.toServer - r0.toServer) * scale;
        if (mode === "watch") [watchBytes, watchWire] = [bytes, wire];
        console.log(
          `| ${n} | ${mode} | ${mib(bytes)} | ${(bytes / watchBytes).toFixed(2)} | ${mib(wire)} | ${
            (wire / watchWire).toFixed(2)
          } | ${mib(sent)} | ${Math.round((r1.connections - r0.connections) * scale)} | ${
            mib((w1.wire - w0.wire) * scale)
          } | ${mib((w1.decoded - w0.decoded) * scale)} | ${
            Math.round((s1.requests - s0.requests) * scale)
          } |`,
        );
      }
    } finally {
      await srv.close();
      await rm(dir, { recursive: true, force: true });
    }
  }
}

async function fleetFigures(): Promise<void> {
  console.log(
    `\n## Fleet: ${fleet} nodes in one process, ${fleetServices} Services, window ${fleetWindowS} s, ` +
      `1 change per minute`,
  );
  console.log("| mode | requests/s served | body KiB/s served | wire KiB/s sent (relays) | open watches |");
  console.log("| ---- | ----------------- | ----------------- | ------------------------ | ------------ |");
  const { srv, config, dir } = await cluster(fleetServices);
  try {
    for (const mode of MODES) {
      const clients: Awaited<ReturnType<typeof startClient>>[] = [];
      for (let i = 0; i < fleet; i += 20) {
        clients.push(
          ...await Promise.all(
            Array.from({ length: Math.min(20, fleet - i) }, () => startClient(mode, config, portOf(srv))),
          ),
        );
      }
      await pause(2000);
      change(srv); // as for one node: the steady state of a cluster that changes
      await pause(intervalMs + 2000);
      const s0 = served(srv);
      const wire = () => clients.reduce((n, c) => n + c.relay.counts().toClient, 0);
      const r0 = wire();
      const t0 = Date.now();
      await pause(fleetWindowS * 500);
      change(srv);
      await pause(fleetWindowS * 500);
      const s1 = served(srv);
      const r1 = wire();
      const secs = (Date.now() - t0) / 1000;
      const watches = srv.activeWatches();
      await Promise.all(clients.map((c) => c.stop()));
      console.log(
        `| ${mode} | ${((s1.requests - s0.requests) / secs).toFixed(1)} | ${
          ((s1.bytes - s0.bytes) / secs / 1024).toFixed(1)
        } | ${((r1 - r0) / secs / 1024).toFixed(1)} | ${watches} |`,
      );
    }
  } finally {
    await srv.close();
    await rm(dir, { recursive: true, force: true });
  }
}

if (only.has("node")) await nodeFigures();
if (only.has("fleet")) await fleetFigures();
