import { test } from "node:test";
import assert from "node:assert/strict";
import { chmod, mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { EndpointSlice, Node, Service } from "../../../lib/k8s/objects.ts";
import type { ProxyHandlers } from "../../../lib/proxy/handlers.ts";
import { encodeState, STATE_FILE, writeStateCache } from "../../../lib/source/state_cache.ts";
import { StateCacheWriter } from "../../../lib/source/state_cache_writer.ts";
import { StateStore } from "../../../lib/source/state_store.ts";

const noop: ProxyHandlers = {
  onServiceAdd: () => {},
  onServiceUpdate: () => {},
  onServiceDelete: () => {},
  onServicesSynced: () => {},
  onEndpointSliceAdd: () => {},
  onEndpointSliceUpdate: () => {},
  onEndpointSliceDelete: () => {},
  onEndpointSlicesSynced: () => {},
  onNodeAdd: () => {},
  onNodeUpdate: () => {},
  onNodeDelete: () => {},
  onNodeSynced: () => {},
};

const svc = (name: string): Service => ({
  metadata: { namespace: "ns", name, resourceVersion: "1" },
  spec: { clusterIP: "172.30.0.1" },
});
const slice: EndpointSlice = {
  metadata: { namespace: "ns", name: "a-1" },
  addressType: "IPv4",
  endpoints: [],
};
const node: Node = { metadata: { name: "node-a" } };

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-writer-"));
  try {
    await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

function writerFor(store: StateStore, dir: string, warnings: string[] = []): StateCacheWriter {
  return new StateCacheWriter(store, {
    dir,
    nodeName: "node-a",
    minIntervalMs: 0,
    now: () => Date.parse("2026-02-02T00:00:00Z"),
    warn: (m) => warnings.push(m),
  });
}

test("nothing is persisted before the live lists of Services, EndpointSlices and the Node", async () => {
  await withDir(async (dir) => {
    const good = encodeState(
      { services: [svc("web")], endpointSlices: [slice], node },
      "node-a",
      Date.parse("2026-01-01T00:00:00Z"),
    );
    await writeStateCache(dir, good);
    const store = new StateStore(noop);
    const writer = writerFor(store, dir);
    // Shutdown before any live sync (offline restart): the good cache stays byte-identical.
    await writer.flush();
    assert.equal(await readFile(join(dir, STATE_FILE), "utf8"), good);
    // The state loaded from the cache is not rewritten with a new timestamp.
    store.loadFromCache({ services: [svc("web")], endpointSlices: [slice], node });
    await writer.flush();
    assert.equal(await readFile(join(dir, STATE_FILE), "utf8"), good);
    // Services and EndpointSlices listed live, the Node not yet: still unconfirmed.
    store.onServiceAdd(svc("other"));
    store.onServicesSynced();
    store.onEndpointSlicesSynced();
    await writer.flush();
    assert.equal(await readFile(join(dir, STATE_FILE), "utf8"), good);
    store.onNodeSynced();
    await writer.flush();
    const text = await readFile(join(dir, STATE_FILE), "utf8");
    assert.notEqual(text, good);
    assert.match(text, /"name":"other"/);
    assert.match(text, /2026-02-02T00:00:00/);
  });
});

test("afterSync does not schedule a write before the live sync", async () => {
  await withDir(async (dir) => {
    const store = new StateStore(noop);
    const writer = writerFor(store, dir);
    store.onServiceAdd(svc("web"));
    writer.afterSync();
    await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(await readdir(dir), []);
    writer.stop();
  });
});

test("a failing write is warned about once, not on every attempt", async () => {
  await withDir(async (dir) => {
    const warnings: string[] = [];
    const store = new StateStore(noop);
    store.onServicesSynced();
    store.onEndpointSlicesSynced();
    store.onNodeSynced();
    const writer = writerFor(store, dir, warnings);
    await chmod(dir, 0o777);
    for (const name of ["a", "b", "c"]) {
      store.onServiceAdd(svc(name));
      await writer.flush();
    }
    assert.equal(warnings.length, 1, warnings.join("\n"));
    assert.match(warnings[0], /has mode 0777 \(group\/world-writable\)/);
    await chmod(dir, 0o700);
    await writer.flush();
    assert.deepEqual(await readdir(dir), [STATE_FILE]);
  });
});

test("a write hands the writer's `collect` to the payload: called per MiB of a large state, not for a small one", async () => {
  await withDir(async (dir) => {
    const store = new StateStore(noop);
    store.onServicesSynced();
    store.onEndpointSlicesSynced();
    store.onNodeSynced();
    let calls = 0;
    const writer = new StateCacheWriter(store, {
      dir,
      nodeName: "node-a",
      minIntervalMs: 0,
      now: () => Date.parse("2026-02-02T00:00:00Z"),
      warn: (m) => assert.fail(m),
      collect: () => calls++,
    });
    store.onServiceAdd(svc("small"));
    await writer.flush();
    assert.equal(calls, 0);
    // ~3 MiB of Services.
    for (let i = 0; i < 30000; i++) store.onServiceAdd(svc(`service-with-a-long-name-${i}`));
    await writer.flush();
    const size = (await readFile(join(dir, STATE_FILE))).length;
    assert.ok(size > 3 * 1024 * 1024, `${size} bytes`);
    assert.ok(calls >= 2, `${calls} collections`);
  });
});
