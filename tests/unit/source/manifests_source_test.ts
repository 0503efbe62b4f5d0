import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startManifestsSource } from "../../../lib/source/manifests.ts";
import type { ProxyHandlers } from "../../../lib/proxy/handlers.ts";
import type { EndpointSlice, Node, Service } from "../../../lib/k8s/objects.ts";
import { StateStore } from "../../../lib/source/state_store.ts";

/** Handlers that record every call as one line. */
function recorder(): { handlers: ProxyHandlers; calls: string[] } {
  const calls: string[] = [];
  const id = (o: { metadata?: { namespace?: string; name?: string } }) =>
    o.metadata?.namespace ? `${o.metadata.namespace}/${o.metadata.name}` : `${o.metadata?.name}`;
  const handlers: ProxyHandlers = {
    onServiceAdd: (s: Service) => calls.push(`ServiceAdd ${id(s)}`),
    onServiceUpdate: (o: Service, s: Service) =>
      calls.push(`ServiceUpdate ${id(o)} ${JSON.stringify(o.spec)} -> ${JSON.stringify(s.spec)}`),
    onServiceDelete: (s: Service) => calls.push(`ServiceDelete ${id(s)}`),
    onServicesSynced: () => calls.push("ServicesSynced"),
    onEndpointSliceAdd: (s: EndpointSlice) => calls.push(`EndpointSliceAdd ${id(s)}`),
    onEndpointSliceUpdate: (_o: EndpointSlice, s: EndpointSlice) =>
      calls.push(`EndpointSliceUpdate ${id(s)}`),
    onEndpointSliceDelete: (s: EndpointSlice) => calls.push(`EndpointSliceDelete ${id(s)}`),
    onEndpointSlicesSynced: () => calls.push("EndpointSlicesSynced"),
    onNodeAdd: (n: Node) => calls.push(`NodeAdd ${id(n)}`),
    onNodeUpdate: (_o: Node, n: Node) =>
      calls.push(`NodeUpdate ${id(n)} ${JSON.stringify(n.metadata?.labels)}`),
    onNodeDelete: (n: Node) => calls.push(`NodeDelete ${id(n)}`),
    onNodeSynced: () => calls.push("NodeSynced"),
  };
  return { handlers, calls };
}

const svcDoc = (name: string, ip: string, labels = "{}") =>
  `apiVersion: v1\nkind: Service\nmetadata: {name: ${name}, namespace: site, labels: ${labels}}\n` +
  `spec: {clusterIP: ${ip}, ports: [{port: 80, protocol: TCP}]}\n`;
const sliceDoc = (name: string, svc: string) =>
  `apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\n` +
  `metadata: {name: ${name}, namespace: site, labels: {kubernetes.io/service-name: ${svc}}}\n` +
  `addressType: IPv4\nendpoints: [{addresses: [10.244.1.5], nodeName: edge-node-1}]\nports: [{port: 8080}]\n`;
const nodeDoc = (name: string, zone: string) =>
  `apiVersion: v1\nkind: Node\nmetadata: {name: ${name}, labels: {topology.kubernetes.io/zone: ${zone}}}\n` +
  `spec: {podCIDR: 10.244.1.0/24}\n`;

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-manifests-"));
  try {
    await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Waits until `calls` has at least `n` entries (or fails after 5 s). */
async function waitCalls(calls: string[], n: number): Promise<void> {
  for (let i = 0; i < 500 && calls.length < n; i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(calls.length >= n, `expected ${n} calls, got ${JSON.stringify(calls)}`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test("single file: initial adds (Node, Services, EndpointSlices, sorted), then the synced calls once", async () => {
  await withDir(async (dir) => {
    const f = join(dir, "site.yaml");
    await writeFile(
      f,
      [
        svcDoc("web", "10.96.0.20"),
        sliceDoc("web-1", "web"),
        svcDoc("api", "10.96.0.21"),
        nodeDoc("edge-node-1", "z1"),
      ]
        .join("---\n"),
    );
    const { handlers, calls } = recorder();
    const warnings: string[] = [];
    const src = startManifestsSource(f, handlers, { nodeName: "edge-node-1", warn: (m) => warnings.push(m) });
    try {
      assert.deepEqual(calls, [
        "NodeAdd edge-node-1",
        "ServiceAdd site/api",
        "ServiceAdd site/web",
        "EndpointSliceAdd site/web-1",
        "ServicesSynced",
        "EndpointSlicesSynced",
        "NodeSynced",
      ]);
      assert.deepEqual(warnings, []);
    } finally {
      src.stop();
    }
  });
});

test("directory: *.yaml/*.yml/*.json sorted, non-recursive, other files and dotfiles ignored", async () => {
  await withDir(async (dir) => {
    await writeFile(join(dir, "b.yml"), svcDoc("b", "10.96.0.2"));
    await writeFile(join(dir, "a.yaml"), svcDoc("a", "10.96.0.1"));
    await writeFile(
      join(dir, "c.json"),
      JSON.stringify({
        apiVersion: "v1",
        kind: "Service",
        metadata: { name: "c", namespace: "site" },
        spec: {},
      }),
    );
    await writeFile(join(dir, "notes.txt"), svcDoc("txt", "10.96.0.9"));
    await writeFile(join(dir, ".hidden.yaml"), svcDoc("hidden", "10.96.0.9"));
    const { handlers, calls } = recorder();
    const warnings: string[] = [];
    const src = startManifestsSource(dir, handlers, {
      nodeName: "edge-node-1",
      warn: (m) => warnings.push(m),
    });
    try {
      assert.deepEqual(calls.filter((c) => c.startsWith("Service")), [
        "ServiceAdd site/a",
        "ServiceAdd site/b",
        "ServiceAdd site/c",
        "ServicesSynced",
      ]);
      assert.deepEqual(warnings, [
        `manifests ${dir}: no Node named "edge-node-1"; topology labels and the node's podCIDR are unknown`,
      ]);
    } finally {
      src.stop();
    }
  });
});

test("only the own Node is delivered; proxy-labelled Services/EndpointSlices are skipped", async () => {
  await withDir(async (dir) => {
    const f = join(dir, "site.yaml");
    await writeFile(
      f,
      [
        nodeDoc("edge-node-2", "z2"),
        nodeDoc("edge-node-1", "z1"),
        svcDoc("mine", "10.96.0.1"),
        svcDoc("cilium", "10.96.0.2", "{service.kubernetes.io/service-proxy-name: cilium}"),
        svcDoc("headless", "10.96.0.3", "{service.kubernetes.io/headless: ''}"),
        sliceDoc("mine-1", "mine"),
        sliceDoc("headless-1", "headless").replace(
          "labels: {",
          "labels: {service.kubernetes.io/headless: '', ",
        ),
      ].join("---\n"),
    );
    const { handlers, calls } = recorder();
    const src = startManifestsSource(f, handlers, { nodeName: "edge-node-1", warn: () => {} });
    try {
      assert.deepEqual(calls.filter((c) => c.includes("Add")), [
        "NodeAdd edge-node-1",
        "ServiceAdd site/mine",
        "EndpointSliceAdd site/mine-1",
      ]);
    } finally {
      src.stop();
    }
  });
});

test("an invalid document is reported in one line and the valid ones still apply", async () => {
  await withDir(async (dir) => {
    const f = join(dir, "site.yaml");
    await writeFile(
      f,
      [svcDoc("a", "10.96.0.1"), "apiVersion: v1\nmetadata: {name: x}\n", svcDoc("b", "10.96.0.2")].join(
        "---\n",
      ),
    );
    const { handlers, calls } = recorder();
    const warnings: string[] = [];
    const src = startManifestsSource(f, handlers, { nodeName: "n", warn: (m) => warnings.push(m) });
    try {
      assert.deepEqual(calls.filter((c) => c.startsWith("ServiceAdd")), [
        "ServiceAdd site/a",
        "ServiceAdd site/b",
      ]);
      assert.equal(warnings[0], `manifests ${f} document 2: missing kind`);
    } finally {
      src.stop();
    }
  });
});

test("changes are polled and delivered as add/update/delete diffs, unchanged objects give no event", async () => {
  await withDir(async (dir) => {
    const f = join(dir, "site.yaml");
    await writeFile(
      f,
      [nodeDoc("edge-node-1", "z1"), svcDoc("a", "10.96.0.1"), svcDoc("b", "10.96.0.2")].join("---\n"),
    );
    const { handlers, calls } = recorder();
    const warnings: string[] = [];
    const src = startManifestsSource(f, handlers, {
      nodeName: "edge-node-1",
      warn: (m) => warnings.push(m),
      pollIntervalMs: 20,
    });
    try {
      calls.length = 0;
      // b changes, a is removed, c is added, the node's zone changes
      await writeFile(
        f,
        [nodeDoc("edge-node-1", "z9"), svcDoc("b", "10.96.0.22"), svcDoc("c", "10.96.0.3")].join("---\n"),
      );
      await waitCalls(calls, 4);
      await sleep(100);
      assert.deepEqual(calls, [
        'NodeUpdate edge-node-1 {"topology.kubernetes.io/zone":"z9"}',
        "ServiceDelete site/a",
        'ServiceUpdate site/b {"clusterIP":"10.96.0.2","ports":[{"port":80,"protocol":"TCP"}]} -> ' +
        '{"clusterIP":"10.96.0.22","ports":[{"port":80,"protocol":"TCP"}]}',
        "ServiceAdd site/c",
      ]);
      // Same objects, different formatting, key order and comments: no events at all.
      calls.length = 0;
      await writeFile(
        f,
        "# reformatted\n" + nodeDoc("edge-node-1", "z9") + "---\n" +
          "kind: Service\napiVersion: v1\nspec:\n  ports:\n  - protocol: TCP\n    port: 80\n  clusterIP: 10.96.0.22\n" +
          "metadata:\n  namespace: site\n  labels: {}\n  name: b\n---\n" + svcDoc("c", "10.96.0.3"),
      );
      await sleep(200);
      assert.deepEqual(calls, []);
      assert.deepEqual(warnings, []);
    } finally {
      src.stop();
    }
  });
});

test("an edit that keeps metadata.resourceVersion (kubectl get -o yaml) is applied through the store", async () => {
  await withDir(async (dir) => {
    const f = join(dir, "site.yaml");
    const doc = (ip: string) =>
      `apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: site, resourceVersion: "4711"}\n` +
      `spec: {clusterIP: ${ip}, ports: [{port: 80, protocol: TCP}]}\n`;
    await writeFile(f, doc("10.96.0.20"));
    const { handlers, calls } = recorder();
    // The StateStore sits between every source and the proxier in the agent.
    const src = startManifestsSource(f, new StateStore(handlers), {
      nodeName: "edge-node-1",
      warn: () => {},
      pollIntervalMs: 20,
    });
    try {
      calls.length = 0;
      await writeFile(f, doc("10.96.0.21"));
      await waitCalls(calls, 1);
      assert.deepEqual(calls, [
        'ServiceUpdate site/web {"clusterIP":"10.96.0.20","ports":[{"port":80,"protocol":"TCP"}]} -> ' +
        '{"clusterIP":"10.96.0.21","ports":[{"port":80,"protocol":"TCP"}]}',
      ]);
    } finally {
      src.stop();
    }
  });
});

test("directory: a new file adds, a removed file deletes its objects", async () => {
  await withDir(async (dir) => {
    await writeFile(join(dir, "a.yaml"), svcDoc("a", "10.96.0.1"));
    const { handlers, calls } = recorder();
    const src = startManifestsSource(dir, handlers, { nodeName: "n", warn: () => {}, pollIntervalMs: 20 });
    try {
      calls.length = 0;
      await writeFile(join(dir, "b.yaml"), svcDoc("b", "10.96.0.2") + "---\n" + sliceDoc("b-1", "b"));
      await waitCalls(calls, 2);
      assert.deepEqual(calls, ["ServiceAdd site/b", "EndpointSliceAdd site/b-1"]);
      calls.length = 0;
      await unlink(join(dir, "a.yaml"));
      await waitCalls(calls, 1);
      assert.deepEqual(calls, ["ServiceDelete site/a"]);
    } finally {
      src.stop();
    }
  });
});

test("a file that stops parsing keeps its previous objects until it parses again", async () => {
  await withDir(async (dir) => {
    const f = join(dir, "site.yaml");
    await writeFile(f, svcDoc("a", "10.96.0.1") + "---\n" + svcDoc("b", "10.96.0.2"));
    const { handlers, calls } = recorder();
    const warnings: string[] = [];
    const src = startManifestsSource(f, handlers, {
      nodeName: "n",
      warn: (m) => warnings.push(m),
      pollIntervalMs: 20,
    });
    try {
      calls.length = 0;
      warnings.length = 0; // the "no Node named" notice of the first load
      await writeFile(
        f,
        svcDoc("a", "10.96.0.1") + "---\napiVersion: v1\nkind: Service\nmetadata: {name: b\n",
      );
      for (let i = 0; i < 300 && warnings.length < 2; i++) await sleep(10);
      assert.equal(warnings.length, 2, JSON.stringify(warnings));
      assert.match(warnings[0], new RegExp(`^manifests ${f} document 2: `));
      assert.equal(
        warnings[1],
        `manifests ${f}: not applied (YAML syntax error); keeping its previous objects`,
      );
      await sleep(100);
      assert.deepEqual(calls, [], "no deletes while the file is broken");
      await writeFile(f, svcDoc("a", "10.96.0.1"));
      await waitCalls(calls, 1);
      assert.deepEqual(calls, ["ServiceDelete site/b"]);
    } finally {
      src.stop();
    }
  });
});

test("a file caught half-written (truncated, then rewritten) does not flap its objects", async () => {
  await withDir(async (dir) => {
    const f = join(dir, "site.yaml");
    const content = svcDoc("a", "10.96.0.1") + "---\n" + svcDoc("b", "10.96.0.2");
    await writeFile(f, content);
    const { handlers, calls } = recorder();
    // Polls every 150 ms; a change must be read twice, 100 ms apart (the settle delay), before it applies.
    // The file is empty for 50 ms of every 200, so a second read 100 ms after one in the empty window always
    // sees the full file again. Without the settle rule, polls (150 ms apart) land in the empty window every
    // few rounds and delete both Services.
    const src = startManifestsSource(f, handlers, { nodeName: "n", warn: () => {}, pollIntervalMs: 150 });
    try {
      calls.length = 0;
      for (let i = 0; i < 10; i++) {
        await writeFile(f, ""); // what a poll sees between a writer's truncate and its write
        await sleep(50);
        await writeFile(f, content);
        await sleep(150);
      }
      // A real removal of the file's content still applies once it is stable.
      assert.deepEqual(calls, []);
      await writeFile(f, svcDoc("a", "10.96.0.1"));
      await waitCalls(calls, 1);
      assert.deepEqual(calls, ["ServiceDelete site/b"]);
    } finally {
      src.stop();
    }
  });
});

test("duplicates: the first definition wins (file order) with a warning naming both places", async () => {
  await withDir(async (dir) => {
    await writeFile(join(dir, "1.yaml"), svcDoc("a", "10.96.0.1"));
    await writeFile(join(dir, "2.yaml"), svcDoc("a", "10.96.0.99"));
    const { handlers, calls } = recorder();
    const warnings: string[] = [];
    const src = startManifestsSource(dir, handlers, { nodeName: "n", warn: (m) => warnings.push(m) });
    try {
      assert.deepEqual(calls.filter((c) => c.startsWith("ServiceAdd")), ["ServiceAdd site/a"]);
      assert.equal(
        warnings[0],
        `manifests ${join(dir, "2.yaml")} document 1: duplicate Service site/a, ignored (first defined at ` +
          `manifests ${join(dir, "1.yaml")} document 1)`,
      );
    } finally {
      src.stop();
    }
  });
});

test("a missing path at start throws; a handler that throws is reported, not fatal", async () => {
  await withDir(async (dir) => {
    assert.throws(
      () =>
        startManifestsSource(join(dir, "nope.yaml"), recorder().handlers, { nodeName: "n", warn: () => {} }),
      /nope\.yaml/,
    );
    const f = join(dir, "site.yaml");
    await writeFile(f, svcDoc("a", "10.96.0.1") + "---\n" + svcDoc("b", "10.96.0.2"));
    const { handlers, calls } = recorder();
    const warnings: string[] = [];
    handlers.onServiceAdd = (s) => {
      if (s.metadata?.name === "a") throw new Error("boom");
      calls.push(`ServiceAdd ${s.metadata?.name}`);
    };
    const src = startManifestsSource(f, handlers, { nodeName: "n", warn: (m) => warnings.push(m) });
    src.stop();
    assert.deepEqual(calls.filter((c) => c.startsWith("ServiceAdd")), ["ServiceAdd b"]);
    assert.ok(warnings.includes("manifests: handler onServiceAdd failed: boom"), JSON.stringify(warnings));
  });
});

test("stop(): no handler call after stop", async () => {
  await withDir(async (dir) => {
    const f = join(dir, "site.yaml");
    await writeFile(f, svcDoc("a", "10.96.0.1"));
    const { handlers, calls } = recorder();
    const src = startManifestsSource(f, handlers, { nodeName: "n", warn: () => {}, pollIntervalMs: 10 });
    src.stop();
    const n = calls.length;
    await writeFile(f, svcDoc("b", "10.96.0.2"));
    await sleep(100);
    assert.equal(calls.length, n);
  });
});
