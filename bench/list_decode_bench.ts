/**
 * The cost of decoding a LIST item by item (lib/k8s/list_decode.ts, what listAll does) against reading
 * the whole body and one JSON.parse (what it did before, and what ApiTransport.request still does), each
 * followed by the reflector's check and reduction of every item, over the same transport against the
 * test apiserver (TLS, gzip above 128 KiB as a real apiserver). The two are run alternately, `--runs`
 * times each, so that load from other processes falls on both; prints the median, min and max per
 * resource of the wall time and of the process's CPU time (user + system; it includes the in-process
 * apiserver's serializing and compressing, the same for both, and is less disturbed by other processes).
 *
 *   bun bench/list_decode_bench.ts [--services=10000] [--apiserver-fields] [--runs=7]
 *
 * Prints figures; nothing goes to results.json.
 */
import { parseArgs } from "node:util";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { startTestApiserver } from "../tests/support/apiserver.ts";
import { loadRestConfig } from "../lib/k8s/kubeconfig.ts";
import { ApiTransport, listAll } from "../lib/k8s/transport.ts";
import { ResourceSink } from "../lib/k8s/resource_sink.ts";
import { ENDPOINTSLICES_RESOURCE, type ResourceSpec, SERVICES_RESOURCE } from "../lib/k8s/resource.ts";
import type { KubeObject } from "../lib/k8s/store.ts";
import type { ObjectList } from "../lib/k8s/objects.ts";
import { syntheticCluster, withApiserverFields } from "./synthetic_cluster.ts";
import { summarize } from "./stats.ts";

const { values } = parseArgs({
  args: process.argv.slice(2),
  options: {
    services: { type: "string", default: "10000" },
    "apiserver-fields": { type: "boolean", default: false },
    runs: { type: "string", default: "7" },
  },
});
const generated = syntheticCluster({ services: Number(values.services) });
const cluster = values["apiserver-fields"] ? withApiserverFields(generated) : generated;
const dir = await mkdtemp(join(tmpdir(), "edgeproxy-listdec-"));
const api = await startTestApiserver({ tlsDir: join(dir, "tls") });
const noRv = <T extends KubeObject>(o: T): T => ({
  ...o,
  metadata: { ...o.metadata, resourceVersion: undefined },
});
for (const s of cluster.services) api.create("services", noRv(s));
for (const e of cluster.endpointSlices) api.create("endpointslices", noRv(e));
await api.writeKubeconfig(join(dir, "kubeconfig"));
const t = new ApiTransport({
  config: await loadRestConfig({ kubeconfig: join(dir, "kubeconfig") }),
  qps: -1,
});
const handler = { onAdd() {}, onUpdate() {}, onDelete() {}, onSynced() {} };

/** Forces a full collection (Bun; under Deno with --v8-flags=--expose-gc). */
function gc(): void {
  const g = globalThis as { Bun?: { gc(sync: boolean): void }; gc?: () => void };
  if (g.Bun) g.Bun.gc(true);
  else g.gc?.();
}

/**
 * Wall and CPU milliseconds of `fn`, including a full collection at its end: each way pays for collecting
 * its own garbage (alternating runs would otherwise bill one way's garbage to the next run of the other).
 */
async function timed(fn: () => Promise<void>): Promise<{ wall: number; cpu: number }> {
  gc();
  const c0 = process.cpuUsage();
  const t0 = performance.now();
  await fn();
  gc();
  const wall = performance.now() - t0;
  const c = process.cpuUsage(c0);
  return { wall, cpu: (c.user + c.system) / 1000 };
}

/** The whole body, one JSON.parse, then each item checked: the former listAll plus applyList's check. */
async function whole(spec: ResourceSpec): Promise<void> {
  const sink = new ResourceSink<KubeObject>(spec, handler, console);
  const page = await t.request<ObjectList<unknown>>({
    path: spec.path,
    query: { resourceVersion: "0" },
    verb: "list",
    resource: spec.resource,
  });
  const items = (page.items ?? []).map((raw) => sink.listItem(raw));
  if (items.length === 0) throw new Error(`no ${spec.resource}`);
}

/** listAll decoding item by item, each checked as it is parsed (the reflector's path). */
async function itemwise(spec: ResourceSpec): Promise<void> {
  const sink = new ResourceSink<KubeObject>(spec, handler, console);
  const res = await listAll<unknown>(t, {
    path: spec.path,
    resource: spec.resource,
    resourceVersion: "0",
    limit: 0,
    item: (raw) => sink.listItem(raw),
  });
  if (res.items.length === 0) throw new Error(`no ${spec.resource}`);
}

try {
  for (const spec of [SERVICES_RESOURCE, ENDPOINTSLICES_RESOURCE]) {
    const a: Array<{ wall: number; cpu: number }> = [];
    const b: Array<{ wall: number; cpu: number }> = [];
    await whole(spec); // warm-up: JIT, connection
    await itemwise(spec);
    for (let r = 0; r < Number(values.runs); r++) {
      a.push(await timed(() => whole(spec)));
      b.push(await timed(() => itemwise(spec)));
    }
    const bytes = api.requests[api.requests.length - 1].bytes;
    const fmt = (xs: Array<{ wall: number; cpu: number }>) => {
      const w = summarize(xs.map((x) => x.wall));
      const c = summarize(xs.map((x) => x.cpu));
      return `wall median ${w.median} ms (${w.min}–${w.max}), cpu median ${c.median} ms (${c.min}–${c.max})`;
    };
    process.stdout.write(
      `${spec.resource} (${cluster.services.length} Services${
        values["apiserver-fields"] ? ", apiserver fields" : ""
      }, ${(bytes / 2 ** 20).toFixed(1)} MiB on the wire):\n  whole body + JSON.parse: ${fmt(a)}\n` +
        `  item by item:            ${fmt(b)}\n`,
    );
  }
} finally {
  t.close();
  await api.close();
  await rm(dir, { recursive: true, force: true });
}
