import { test } from "node:test";
import assert from "node:assert/strict";
import { Buffer } from "node:buffer";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { EndpointSlice, Service } from "../../../lib/k8s/objects.ts";
import {
  decodeState,
  encodeState,
  loadStateCache,
  STATE_COLLECT_EVERY_BYTES,
  STATE_FILE,
  STATE_MAX_BYTES,
  writeStateCache,
  writeStateSnapshot,
} from "../../../lib/source/state_cache.ts";
import { statePayloadChunks } from "../../../lib/source/state_payload.ts";
import type { StateSnapshot } from "../../../lib/source/state_store.ts";

function cluster(n: number, extra: Partial<StateSnapshot> = {}): StateSnapshot {
  const services: Service[] = [];
  const endpointSlices: EndpointSlice[] = [];
  for (let i = 0; i < n; i++) {
    services.push({
      metadata: {
        namespace: `ns${i % 7}`,
        name: `svc-${i}`,
        resourceVersion: `${i + 1}`,
        labels: { app: "é€😀" },
      },
      spec: { clusterIP: `172.30.${i >> 8}.${i & 255}`, ports: [{ port: 80 + (i % 3), protocol: "TCP" }] },
    });
    endpointSlices.push({
      metadata: { namespace: `ns${i % 7}`, name: `svc-${i}-x` },
      addressType: "IPv4",
      endpoints: Array.from({ length: i % 5 }, (_, k) => ({ addresses: [`10.1.${i & 255}.${k}`] })),
    });
  }
  return { services, endpointSlices, node: { metadata: { name: "node-a" } }, ...extra };
}

const whole = (s: StateSnapshot): string =>
  JSON.stringify({
    services: s.services,
    endpointSlices: s.endpointSlices,
    node: s.node,
    ...(s.serviceCIDRs === undefined ? {} : { serviceCIDRs: s.serviceCIDRs }),
  });

test("the payload's chunks are JSON.stringify of the snapshot, for any chunk size and shape", () => {
  const shapes: Array<[string, StateSnapshot]> = [
    ["empty", { services: [], endpointSlices: [], node: null }],
    ["one of each", cluster(1)],
    ["node null", cluster(3, { node: null })],
    [
      "service CIDRs",
      cluster(40, {
        serviceCIDRs: [{ metadata: { name: "kubernetes" }, spec: { cidrs: ["172.30.0.0/16"] } }],
      }),
    ],
    ["no service CIDRs", cluster(40, { serviceCIDRs: [] })],
    ["many", cluster(300)],
  ];
  for (const [name, s] of shapes) {
    const expected = Buffer.from(whole(s));
    for (const chunkBytes of [1, 7, 100, 4096, 1 << 20]) {
      for (const reuse of [false, true]) {
        // With reuse a chunk is valid until the next is pulled: copy each one as it comes.
        const chunks = [...(function* () {
          for (const c of statePayloadChunks(s, { chunkBytes, reuse })) yield Buffer.from(c);
        })()];
        assert.deepEqual(Buffer.concat(chunks), expected, `${name}, ${chunkBytes} bytes, reuse ${reuse}`);
        for (const c of chunks.slice(0, -1)) assert.ok(c.length >= chunkBytes, `${name}: a chunk cut early`);
      }
    }
  }
});

test("a chunk without reuse stays intact after later chunks are made", () => {
  const s = cluster(200);
  const chunks = [...statePayloadChunks(s, { chunkBytes: 512 })];
  assert.ok(chunks.length > 10);
  assert.equal(Buffer.concat(chunks).toString("utf8"), whole(s));
});

test("writeStateSnapshot writes exactly encodeState's bytes, which load back", async () => {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-snapshot-"));
  try {
    for (const s of [cluster(0), cluster(5), cluster(3000)]) {
      const size = await writeStateSnapshot(join(dir, "a"), s, "node-a", 1_700_000_000_000);
      await writeStateCache(join(dir, "b"), encodeState(s, "node-a", 1_700_000_000_000));
      const a = await readFile(join(dir, "a", STATE_FILE));
      assert.deepEqual(a, await readFile(join(dir, "b", STATE_FILE)));
      assert.equal(size, a.length);
      const r = await loadStateCache(join(dir, "a"), "node-a", 1_700_000_060_000);
      assert.ok(r.ok, r.ok ? "" : r.reason);
      if (r.ok) {
        assert.deepEqual(r.state, s);
        assert.equal(r.ageMs, 60_000);
      }
      assert.deepEqual((await readdir(join(dir, "a"))).sort(), [STATE_FILE]);
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("writeStateSnapshot asks for a collection every STATE_COLLECT_EVERY_BYTES of payload, same bytes", async () => {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-snapshot-"));
  try {
    const s = cluster(12000);
    let calls = 0;
    const size = await writeStateSnapshot(join(dir, "a"), s, "node-a", 0, { collect: () => calls++ });
    await writeStateSnapshot(join(dir, "b"), s, "node-a", 0);
    const a = await readFile(join(dir, "a", STATE_FILE));
    assert.deepEqual(a, await readFile(join(dir, "b", STATE_FILE)));
    assert.ok(size > 3 * STATE_COLLECT_EVERY_BYTES, `payload ${size} bytes`);
    // Once per full interval: a chunk may carry the count past a multiple by up to a chunk's size.
    assert.ok(calls >= 2 && calls <= Math.floor(size / STATE_COLLECT_EVERY_BYTES), `${calls} collections`);
    let none = 0;
    await writeStateSnapshot(join(dir, "c"), cluster(5), "node-a", 0, { collect: () => none++ });
    assert.equal(none, 0, "a small state writes without a collection");
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("the header line has one length whatever the payload's size, and an unpadded header still loads", () => {
  const small = encodeState(cluster(1), "node-a", 0);
  const large = encodeState(cluster(2000), "node-a", 0);
  const headerOf = (t: string) => t.slice(0, t.indexOf("\n"));
  assert.equal(headerOf(small).length, headerOf(large).length);
  assert.match(headerOf(small), /} +$/);
  // A file as earlier versions wrote it (no padding) is read as before.
  const unpadded = headerOf(small).trimEnd() + small.slice(small.indexOf("\n"));
  const r = decodeState(unpadded, "node-a", 0);
  assert.ok(r.ok);
  if (r.ok) assert.deepEqual(r.state, cluster(1));
});

test("a state over the size limit is not written, the temp file is removed and the old cache stays", async () => {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-snapshot-"));
  try {
    await writeStateSnapshot(dir, cluster(2), "node-a", 0);
    const before = await readFile(join(dir, STATE_FILE));
    const huge = cluster(2);
    huge.services[1] = {
      ...huge.services[1],
      metadata: { name: "big", annotations: { a: "x".repeat(STATE_MAX_BYTES) } },
    };
    await assert.rejects(
      writeStateSnapshot(dir, huge, "node-a", 0),
      new RegExp(
        `^Error: state cache would be over ${STATE_MAX_BYTES} bytes, over the ${STATE_MAX_BYTES} limit; not written$`,
      ),
    );
    assert.deepEqual(await readdir(dir), [STATE_FILE]);
    assert.deepEqual(await readFile(join(dir, STATE_FILE)), before);
    // And a file edited after the write is refused as before (the checksum covers the payload).
    await writeFile(join(dir, STATE_FILE), before.toString("utf8").replace("svc-1", "svc-9"));
    const r = await loadStateCache(dir, "node-a", 0);
    assert.equal(r.ok, false);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
