/**
 * O(change) syncs (lib/proxy/nftables/render/incremental.ts): random sequences of service and endpoint
 * changes, each applied as an incremental transaction to the fake table, leave it equal (once the stale
 * chains are deleted) to the table a fresh full sync of the same state writes; the per-change work is
 * the same at 20 and at 400 unchanged services; node-level changes fall back to a full sync. A full sync
 * split into bounded transactions leaves the single transaction's table, never jumping into an empty chain;
 * made with the service ports' chains rendered on demand, the sequence is the same, byte for byte.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { expandElementLists, FakeNftTable } from "../../../support/nft_fake.ts";
import { sortNFTablesTransaction } from "../../../support/nft_canonical.ts";
import { nftFakeProxierInput } from "../../../support/nft_fixtures.ts";
import { makeEndpoint, makeServicePort, TEST_NODE_NAME } from "../../../support/tracer.ts";
import { type EndpointInfo, type ServicePortInfo, servicePortKey } from "../../../../lib/proxy/types.ts";
import { renderNFTablesFullSync, renderNFTablesSync } from "../../../../lib/proxy/nftables/render/render.ts";
import { joinTransactionChunks } from "../../../../lib/proxy/nftables/render/transaction.ts";
import {
  type NftIncrementalInput,
  NftIncrementalRenderer,
  RENDER_COLLECT_EVERY,
} from "../../../../lib/proxy/nftables/render/incremental.ts";
import {
  adaptiveChunk,
  deferredFirstSyncTransactions,
  FIRST_SYNC_CHUNK_BUDGET,
  FIRST_SYNC_MAX_CHUNK,
  type FirstSyncSplitOptions,
  mergeElements,
  splitNFTablesFullSync,
} from "../../../../lib/proxy/nftables/render/incremental_first_sync.ts";
import { mulberry32 } from "../../../support/random.ts";

/** A cluster the test mutates: service ports and endpoints by servicePortKey. */
class Cluster {
  readonly services = new Map<string, ServicePortInfo>();
  readonly endpoints = new Map<string, readonly EndpointInfo[]>();
  readonly changed = new Set<string>();

  constructor(readonly rnd: () => number) {}

  pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.rnd() * xs.length)];
  }

  /** A random service port of service `i` (port `p`) with random features. */
  service(i: number, p: number): ServicePortInfo {
    const r = this.rnd;
    const lb = r() < 0.3;
    return makeServicePort(`ns${i % 3}`, `svc${i}`, {
      clusterIP: `172.30.${i >> 8}.${i & 255}`,
      port: p === 0 ? "http" : "dns",
      portNumber: p === 0 ? 80 : 53,
      protocol: p === 0 ? "TCP" : "UDP",
      nodePort: lb || r() < 0.2 ? 30000 + i * 2 + p : 0,
      loadBalancerVIPs: lb ? [`100.64.${i >> 8}.${i & 255}`] : [],
      loadBalancerSourceRanges: lb && r() < 0.5 ? ["203.0.113.0/25"] : [],
      // Two services may share an external IP and port: the first in key order wins the element.
      externalIPs: r() < 0.2 ? [`192.168.99.${1 + Math.floor(r() * 3)}`] : [],
      externalPolicyLocal: lb && r() < 0.5,
      internalPolicyLocal: r() < 0.1,
      stickyMaxAgeSeconds: r() < 0.2 ? 10800 : 0,
    });
  }

  endpointsFor(i: number, p: number): EndpointInfo[] {
    const n = Math.floor(this.rnd() * 4);
    const out: EndpointInfo[] = [];
    for (let k = 0; k < n; k++) {
      const local = this.rnd() < 0.3 ? { nodeName: TEST_NODE_NAME } : {};
      const ready = this.rnd() < 0.85;
      out.push(makeEndpoint(`10.${i & 255}.${p}.${1 + Math.floor(this.rnd() * 6)}`, p === 0 ? 8080 : 5353, {
        ...local,
        ready,
        serving: ready || this.rnd() < 0.5,
        terminating: !ready,
      }));
    }
    return out;
  }

  set(i: number, p: number): void {
    const svc = this.service(i, p);
    const key = servicePortKey(svc.name);
    this.services.set(key, svc);
    this.endpoints.set(key, this.endpointsFor(i, p));
    this.changed.add(key);
  }

  /** One random change. */
  mutate(size: number): void {
    const keys = [...this.services.keys()];
    const op = this.rnd();
    if (op < 0.5 && keys.length > 0) {
      const key = this.pick(keys);
      const svc = this.services.get(key)!;
      const i = Number(svc.name.name.slice(3));
      this.endpoints.set(key, this.endpointsFor(i, svc.name.port === "http" ? 0 : 1));
      this.changed.add(key);
    } else if (op < 0.7 && keys.length > 0) {
      const key = this.pick(keys);
      this.services.delete(key);
      this.endpoints.delete(key);
      this.changed.add(key);
    } else {
      this.set(Math.floor(this.rnd() * size), this.rnd() < 0.7 ? 0 : 1);
    }
  }

  input(base = nftFakeProxierInput()): NftIncrementalInput {
    return { ...base, services: this.services, endpoints: this.endpoints };
  }
}

/** Element counts of the table's service-port sets and maps (not the affinity sets), those above 0. */
function tableElementCounts(nft: FakeNftTable): Map<string, number> {
  const out = new Map<string, number>();
  const containers = [
    "cluster-ips",
    "service-ips",
    "service-nodeports",
    "no-endpoint-services",
    "no-endpoint-nodeports",
    "firewall-ips",
  ];
  for (const c of containers) {
    const n = nft.elements(c)?.length ?? 0;
    if (n > 0) out.set(c, n);
  }
  return out;
}

/** The canonical dump of a fresh full sync of `cluster` into an empty table. */
function freshTable(cluster: Cluster): string {
  const fresh = new FakeNftTable("ip", "kube-proxy");
  const input = cluster.input();
  fresh.run(renderNFTablesFullSync({ ...input, services: input.services.values() }).transaction);
  return sortNFTablesTransaction(fresh.dump());
}

for (const seed of [1, 2, 3, 4, 5, 6]) {
  test(`random changes (seed ${seed}): incremental transactions leave the table a fresh full sync writes`, () => {
    const rnd = mulberry32(seed);
    const cluster = new Cluster(rnd);
    const size = 12;
    for (let i = 0; i < size; i++) if (rnd() < 0.7) cluster.set(i, 0);
    const nft = new FakeNftTable("ip", "kube-proxy");
    const r = new NftIncrementalRenderer();
    const first = r.sync(cluster.input(), null);
    assert.equal(first.full, true);
    nft.run(first.transaction);
    cluster.changed.clear();
    for (let step = 0; step < 60; step++) {
      const n = 1 + Math.floor(rnd() * 3);
      for (let k = 0; k < n; k++) cluster.mutate(size);
      const res = r.sync(cluster.input(), cluster.changed);
      assert.equal(res.full, false);
      assert.equal(joinTransactionChunks(res.transactionChunks), res.transaction);
      nft.run(res.transaction);
      cluster.changed.clear();
      // Upstream deletes stale chains in a later sync; do it now and then, and before comparing.
      if (rnd() < 0.3 || step % 10 === 9) nft.run(r.staleChainDeletion({ family: "IPv4" }));
      if (step % 10 === 9) {
        assert.equal(sortNFTablesTransaction(nft.dump()), freshTable(cluster), `seed ${seed} step ${step}`);
      }
      assert.deepEqual(r.elementCounts(), tableElementCounts(nft), `seed ${seed} step ${step}`);
    }
  });
}

test("an element two service ports want: the first in key order writes it, the other takes over when it goes", () => {
  const cluster = new Cluster(mulberry32(17));
  // Both want service-ips 192.168.99.1 . tcp . 80, each with its own external chain.
  const shared = (name: string, clusterIP: string) =>
    makeServicePort("ns", name, { clusterIP, externalIPs: ["192.168.99.1"], stickyMaxAgeSeconds: 10800 });
  const a = shared("a", "172.30.0.1");
  const b = shared("b", "172.30.0.2");
  const ka = servicePortKey(a.name);
  const kb = servicePortKey(b.name);
  const put = (key: string, svc: ServicePortInfo, ip: string) => {
    cluster.services.set(key, svc);
    cluster.endpoints.set(key, [makeEndpoint(ip, 8080)]);
  };
  put(ka, a, "10.0.0.1");
  put(kb, b, "10.0.0.2");
  const nft = new FakeNftTable("ip", "kube-proxy");
  const r = new NftIncrementalRenderer();
  nft.run(r.sync(cluster.input(), null).transaction);
  const external = () =>
    nft.elements("service-ips")!.find((e) => e.key[0] === "192.168.99.1")?.value.join(" ").split("-").slice(2)
      .join("-");
  assert.equal(external(), "ns/a/tcp/p80");
  const step = (changed: string[]) => {
    const res = r.sync(cluster.input(), changed);
    nft.run(res.transaction);
    nft.run(r.staleChainDeletion({ family: "IPv4" }));
    assert.equal(sortNFTablesTransaction(nft.dump()), freshTable(cluster));
    assert.deepEqual(r.elementCounts(), tableElementCounts(nft));
    return res.transaction;
  };
  // The writer's endpoints change: its element stays as it was (no element line).
  put(ka, a, "10.0.0.3");
  assert.doesNotMatch(step([ka]), /element ip kube-proxy service-ips \{ 192\.168\.99\.1/);
  // The other's endpoints change: nothing of the shared element either.
  put(kb, b, "10.0.0.4");
  assert.doesNotMatch(step([kb]), /element ip kube-proxy service-ips \{ 192\.168\.99\.1/);
  // The writer goes: the other's body replaces it.
  cluster.services.delete(ka);
  cluster.endpoints.delete(ka);
  assert.match(step([ka]), /delete element ip kube-proxy service-ips \{ 192\.168\.99\.1 \. tcp \. 80 \}/);
  assert.equal(external(), "ns/b/tcp/p80");
  // It comes back: first in key order again.
  put(ka, a, "10.0.0.1");
  step([ka]);
  assert.equal(external(), "ns/a/tcp/p80");
  // Both go in one sync: the element goes, once.
  for (const k of [ka, kb]) {
    cluster.services.delete(k);
    cluster.endpoints.delete(k);
  }
  const gone = step([kb, ka]);
  assert.equal(gone.match(/delete element ip kube-proxy service-ips \{ 192\.168\.99\.1 /g)?.length, 1);
  assert.equal(nft.elements("service-ips")?.length ?? 0, 0);
  assert.deepEqual(r.elementCounts(), new Map());
});

test("per-change work does not grow with the number of unchanged services", () => {
  const work = (size: number) => {
    const cluster = new Cluster(mulberry32(7));
    for (let i = 0; i < size; i++) cluster.set(i, 0);
    // The changed service is the same plain ClusterIP service at either size.
    const svc = makeServicePort("other", "plain", { clusterIP: "172.31.0.3" });
    const key = servicePortKey(svc.name);
    cluster.services.set(key, svc);
    cluster.endpoints.set(key, [makeEndpoint("10.3.0.1", 8080), makeEndpoint("10.3.0.3", 8080)]);
    const r = new NftIncrementalRenderer();
    r.sync(cluster.input(), null);
    cluster.changed.clear();
    const before = { ...r.work };
    // One endpoint replaced.
    cluster.endpoints.set(key, [makeEndpoint("10.3.0.1", 8080), makeEndpoint("10.3.0.2", 8080)]);
    const res = r.sync(cluster.input(), [key]);
    return {
      rendered: r.work.servicePortsRendered - before.servicePortsRendered,
      derived: r.work.sharesDerived - before.sharesDerived,
      compared: r.work.elementsCompared - before.elementsCompared,
      bytes: res.transaction.length,
    };
  };
  const small = work(20);
  const large = work(400);
  assert.deepEqual(large, small);
  assert.equal(small.rendered, 1);
  // Its previous share is rendered again from the cached inputs; no other port's is needed.
  assert.equal(small.derived, 1);
  assert.ok(small.compared > 0 && small.compared < 10, `compared ${small.compared}`);
});

test("a full sync renders every service port; an unchanged sync writes nothing", () => {
  const cluster = new Cluster(mulberry32(9));
  for (let i = 0; i < 30; i++) cluster.set(i, 0);
  const r = new NftIncrementalRenderer();
  const full = r.sync(cluster.input(), null);
  assert.equal(r.work.servicePortsRendered, 30);
  const input = cluster.input();
  assert.equal(
    full.transaction,
    renderNFTablesFullSync({ ...input, services: input.services.values() }).transaction,
  );
  assert.equal(joinTransactionChunks(full.transactionChunks), full.transaction);
  const none = r.sync(cluster.input(), []);
  assert.equal(none.transaction, "");
  assert.deepEqual(none.transactionChunks, []);
  assert.equal(r.work.servicePortsRendered, 30);
});

test("a full render calls `collect` every RENDER_COLLECT_EVERY service ports, a partial one never; the output is the same", () => {
  const cluster = new Cluster(mulberry32(17));
  const ports = RENDER_COLLECT_EVERY * 2 + 7;
  for (let i = 0; i < ports; i++) cluster.set(i, 0);
  for (const defer of [false, true]) {
    let collections = 0;
    const r = new NftIncrementalRenderer();
    const full = r.sync(cluster.input(), null, {
      deferServicePortChains: defer,
      collect: () => collections++,
    });
    assert.equal(collections, 2);
    const plain = new NftIncrementalRenderer().sync(cluster.input(), null, { deferServicePortChains: defer });
    assert.equal(full.transaction, plain.transaction);
    const key = [...cluster.services.keys()][0];
    cluster.set(0, 1);
    r.sync(cluster.input(), [key, ...cluster.changed], { collect: () => collections++ });
    assert.equal(collections, 2);
  }
});

test("a full sync renders each service port once: its endpoints are read once per port", () => {
  const cluster = new Cluster(mulberry32(13));
  for (let i = 0; i < 30; i++) cluster.set(i, 0);
  const reads = new Map<string, number>();
  const endpoints = new Map(cluster.endpoints);
  const get = endpoints.get.bind(endpoints);
  endpoints.get = (key: string) => {
    reads.set(key, (reads.get(key) ?? 0) + 1);
    return get(key);
  };
  const r = new NftIncrementalRenderer();
  const full = r.sync({ ...cluster.input(), endpoints }, null);
  assert.equal(full.full, true);
  assert.equal(reads.size, 30);
  assert.deepEqual([...new Set(reads.values())], [1]);
  // The cache built from that single pass serves the next change as before.
  const key = [...cluster.services.keys()][3];
  endpoints.set(key, [makeEndpoint("10.9.9.9", 8080)]);
  const next = r.sync({ ...cluster.input(), endpoints }, [key]);
  assert.match(next.transaction, /10\.9\.9\.9/);
});

test("a sync that throws part-way leaves the renderer to start over with a full sync", () => {
  const cluster = new Cluster(mulberry32(19));
  for (let i = 0; i < 5; i++) cluster.set(i, 0);
  const r = new NftIncrementalRenderer();
  r.sync(cluster.input(), null);
  const key = [...cluster.services.keys()][0];
  const failing = (function* () {
    yield key;
    throw new Error("changed keys unreadable");
  })();
  assert.throws(() => r.sync(cluster.input(), failing), /changed keys unreadable/);
  assert.equal(r.needsFullSync(cluster.input()), true);
  assert.equal(r.sync(cluster.input(), []).full, true);
});

test("a node-level setting change falls back to a full sync", () => {
  const cluster = new Cluster(mulberry32(11));
  for (let i = 0; i < 5; i++) cluster.set(i, 0);
  const r = new NftIncrementalRenderer();
  r.sync(cluster.input(), null);
  const res = r.sync({ ...cluster.input(), masqueradeAll: true }, []);
  assert.equal(res.full, true);
  assert.match(res.transaction, /^add table ip kube-proxy/);
});

/**
 * Chains referenced from a rule or map element that are missing or empty, as "<referrer> -> <chain>"
 * (make-before-break: a jump into an empty per-service chain would let a packet fall through).
 */
function danglingJumps(nft: FakeNftTable): string[] {
  const out: string[] = [];
  const dump = nft.dump().split("\n");
  const chains = new Set(nft.chains());
  for (const line of dump) {
    if (!line.startsWith("add rule") && !line.startsWith("add element")) continue;
    for (const m of line.matchAll(/(?:goto|jump) ([^\s,}]+)/g)) {
      const target = m[1];
      const rules = chains.has(target) ? nft.rules(target)! : null;
      if (rules === null || (rules.length === 0 && target.includes("/"))) {
        out.push(`${line.split(" ").slice(0, 5).join(" ")} -> ${target}`);
      }
    }
  }
  return out;
}

test("mergeElements merges each container's element lines in place, losslessly", () => {
  const lines = [
    "flush map ip kube-proxy service-ips",
    "add element ip kube-proxy cluster-ips { 172.30.0.1 }",
    'add element ip kube-proxy no-endpoint-services { 172.30.0.2 . tcp . 80 comment "ns/a:p" : goto reject-chain }',
    "add element ip kube-proxy cluster-ips { 172.30.0.2 }",
    "add element ip kube-proxy cluster-ips { 172.30.0.3 }",
    // A container whose name starts with another's, right after it.
    "add element ip kube-proxy cluster-ips-b { 10.0.0.1 }",
    "add element ip kube-proxy cluster-ips { 172.30.0.4 }",
    "flush chain ip kube-proxy service-X-ns/a/tcp/p",
  ];
  const merged = mergeElements(lines);
  assert.deepEqual(merged, [
    "flush map ip kube-proxy service-ips",
    "add element ip kube-proxy cluster-ips { 172.30.0.1, 172.30.0.2, 172.30.0.3, 172.30.0.4 }",
    'add element ip kube-proxy no-endpoint-services { 172.30.0.2 . tcp . 80 comment "ns/a:p" : goto reject-chain }',
    "add element ip kube-proxy cluster-ips-b { 10.0.0.1 }",
    "flush chain ip kube-proxy service-X-ns/a/tcp/p",
  ]);
  assert.deepEqual(
    expandElementLists(merged.join("\n")).split("\n").sort(),
    [...lines].sort(),
  );
});

for (const existing of [false, true]) {
  test(`bounded first sync (${existing ? "over an existing table" : "into an empty table"}): the split sequence leaves the single transaction's table and never jumps into an empty chain`, () => {
    const rnd = mulberry32(existing ? 21 : 22);
    const before = new Cluster(rnd);
    for (let i = 0; i < 40; i++) before.set(i, rnd() < 0.7 ? 0 : 1);
    const after = new Cluster(rnd);
    for (let i = 0; i < 60; i++) after.set(i, rnd() < 0.7 ? 0 : 1);

    const single = new FakeNftTable("ip", "kube-proxy");
    const split = new FakeNftTable("ip", "kube-proxy");
    if (existing) {
      const input = before.input();
      const tx = renderNFTablesFullSync({ ...input, services: input.services.values() }).transaction;
      single.run(tx);
      split.run(tx);
    }
    const input = after.input();
    const rendered = renderNFTablesFullSync({
      ...input,
      services: input.services.values(),
      firstSync: true,
      existingChains: existing ? single.chains() : null,
      existingSets: existing ? single.sets() : null,
    });
    const full = rendered.transaction;
    assert.equal(joinTransactionChunks(rendered.transactionChunks), full);
    single.run(full);

    const parts = splitNFTablesFullSync(full, { servicePortsPerTransaction: 7 });
    assert.ok(parts.length >= 5, `${parts.length} transactions`);
    // The same transactions from the text cut into chunks of whole lines anywhere (the renderer's are
    // 4096 lines each): 1 line per chunk, a few, and every chunk boundary around the last service line.
    const lines = full.slice(0, -1).split("\n");
    for (const per of [1, 2, 37, 500, lines.length]) {
      const chunks: string[] = [];
      for (let i = 0; i < lines.length; i += per) chunks.push(lines.slice(i, i + per).join("\n"));
      assert.deepEqual(
        splitNFTablesFullSync(chunks, { servicePortsPerTransaction: 7 }),
        parts,
        `${per} per chunk`,
      );
      assert.deepEqual(splitNFTablesFullSync(chunks, { servicePortsPerTransaction: 10_000 }), [full]);
    }
    for (const [i, part] of parts.entries()) {
      split.run(expandElementLists(part));
      assert.deepEqual(danglingJumps(split), [], `after transaction ${i + 1} of ${parts.length}`);
    }
    assert.equal(sortNFTablesTransaction(split.dump()), sortNFTablesTransaction(single.dump()));
    assert.deepEqual(splitNFTablesFullSync(full, { servicePortsPerTransaction: 10_000 }), [full]);
  });
}

test("bounded first sync, adaptive bound: chunks shrink as the table grows, and the result is the same", () => {
  const rnd = mulberry32(31);
  const cluster = new Cluster(rnd);
  for (let i = 0; i < 80; i++) cluster.set(i, 0);
  const input = cluster.input();
  const full = renderNFTablesFullSync({ ...input, services: input.services.values() }).transaction;
  const single = new FakeNftTable("ip", "kube-proxy");
  single.run(full);
  // c × (written + c) ≤ 400: 20 service ports first, then fewer as the table fills.
  const parts = splitNFTablesFullSync(full, { budget: 400 });
  const chunks = parts.slice(1, -1).map((p) => p.split("\n").filter((l) => l.startsWith("add chain")).length);
  assert.ok(chunks.length >= 3, `${chunks.length} chunks`);
  for (let i = 1; i < chunks.length - 1; i++) assert.ok(chunks[i] <= chunks[i - 1], `chunk sizes ${chunks}`);
  const split = new FakeNftTable("ip", "kube-proxy");
  for (const part of parts) {
    split.run(expandElementLists(part));
    assert.deepEqual(danglingJumps(split), []);
  }
  assert.equal(sortNFTablesTransaction(split.dump()), sortNFTablesTransaction(single.dump()));
});

test("adaptive chunks: c × (written + c) within the budget, at most FIRST_SYNC_MAX_CHUNK, at least 25", () => {
  assert.equal(FIRST_SYNC_MAX_CHUNK, 400);
  // Into an empty table the default budget alone would allow 1000.
  assert.equal(adaptiveChunk(0, FIRST_SYNC_CHUNK_BUDGET), FIRST_SYNC_MAX_CHUNK);
  assert.equal(adaptiveChunk(1000, FIRST_SYNC_CHUNK_BUDGET), FIRST_SYNC_MAX_CHUNK);
  for (const written of [2500, 5000, 13000]) {
    const c = adaptiveChunk(written, FIRST_SYNC_CHUNK_BUDGET);
    assert.ok(
      c * (written + c) <= FIRST_SYNC_CHUNK_BUDGET && (c + 1) * (written + c + 1) > FIRST_SYNC_CHUNK_BUDGET,
    );
  }
  assert.equal(adaptiveChunk(5000, FIRST_SYNC_CHUNK_BUDGET), 192);
  assert.equal(adaptiveChunk(1_000_000, FIRST_SYNC_CHUNK_BUDGET), 25);
  assert.equal(adaptiveChunk(0, 400), 25, "never under 25");
});

for (const seed of [41, 42, 43, 44]) {
  test(`bounded first sync rendered on demand (seed ${seed}): the same transactions as the split of the whole text, the same cache after`, () => {
    const rnd = mulberry32(seed);
    const before = new Cluster(rnd);
    for (let i = 0; i < 30; i++) before.set(i, rnd() < 0.7 ? 0 : 1);
    const after = new Cluster(rnd);
    for (let i = 0; i < 50; i++) if (rnd() < 0.9) after.set(i, rnd() < 0.7 ? 0 : 1);
    // An existing table with chains the new state no longer uses: stale flushes and set deletions.
    const old = new FakeNftTable("ip", "kube-proxy");
    const oldInput = before.input();
    old.run(renderNFTablesFullSync({ ...oldInput, services: oldInput.services.values() }).transaction);
    const options: FirstSyncSplitOptions[] = [
      { servicePortsPerTransaction: 1 },
      { servicePortsPerTransaction: 7 },
      { servicePortsPerTransaction: 10_000 },
      { budget: 400 },
      { budget: 400, existingServicePorts: 30 },
      {},
    ];
    for (const existing of [false, true]) {
      const input: NftIncrementalInput = {
        ...after.input(),
        firstSync: !existing,
        existingChains: existing ? old.chains() : null,
        existingSets: existing ? old.sets() : null,
      };
      const plain = new NftIncrementalRenderer();
      const whole = plain.sync(input, null);
      assert.equal(whole.deferred, null);
      for (const opts of options) {
        const onDemand = new NftIncrementalRenderer();
        const res = onDemand.sync(input, null, { deferServicePortChains: true });
        assert.ok(res.deferred !== null);
        let splitSeen = 0;
        let serviceLinesRead = 0;
        const deferred = res.deferred;
        const counted = {
          ...deferred,
          *serviceLines() {
            for (const line of deferred.serviceLines()) {
              serviceLinesRead++;
              yield line;
            }
          },
        };
        const parts = [
          ...deferredFirstSyncTransactions(counted, { ...opts, onSplit: () => splitSeen++ }),
        ];
        const expected = splitNFTablesFullSync(whole.transaction, opts);
        assert.deepEqual(parts, expected, `${JSON.stringify(opts)}, existing ${existing}`);
        assert.equal(splitSeen, expected.length > 1 ? 1 : 0);
        // A table that fits in the first chunk is rendered once, as the whole transaction.
        // (Up to 50 service ports here; the default first chunk is FIRST_SYNC_MAX_CHUNK.)
        const fits = opts.servicePortsPerTransaction === 10_000 || Object.keys(opts).length === 0;
        if (fits) assert.equal(serviceLinesRead, 0, JSON.stringify(opts));
        if (expected.length > 1) assert.ok(serviceLinesRead > 0);
        assert.equal(res.transaction, whole.transaction);
        assert.deepEqual(res.staleChains, whole.staleChains);
        // The rest holds no service port's chain: a tenth of the text at most here.
        assert.ok(joinTransactionChunks(res.transactionChunks).length < whole.transaction.length / 2);
        // The cache is the same: the same incremental transactions follow.
        const next = new Cluster(mulberry32(seed + 100));
        for (const [k, v] of after.services) next.services.set(k, v);
        for (const [k, v] of after.endpoints) next.endpoints.set(k, v);
        for (let i = 0; i < 15; i++) next.mutate(50);
        const changed = [...next.changed];
        const a = onDemand.sync({ ...next.input(), firstSync: false }, changed);
        const b = new NftIncrementalRenderer();
        b.sync(input, null);
        assert.equal(a.transaction, b.sync({ ...next.input(), firstSync: false }, changed).transaction);
        assert.deepEqual(onDemand.elementCounts(), b.elementCounts());
        assert.deepEqual(onDemand.staleChains(), b.staleChains());
      }
    }
  });
}

test("a deferred full sync keeps of the chains in use only the stale ones used again, and forgets those", () => {
  const cluster = new Cluster(mulberry32(23));
  for (let i = 0; i < 12; i++) cluster.set(i, 0);
  const r = new NftIncrementalRenderer();
  r.sync(cluster.input(), null);
  // A service port with endpoints goes: its chains are flushed as stale by the partial sync.
  const key = [...cluster.services.keys()].find((k) => (cluster.endpoints.get(k) ?? []).length > 0)!;
  const svc = cluster.services.get(key)!;
  const eps = cluster.endpoints.get(key)!;
  cluster.services.delete(key);
  cluster.endpoints.delete(key);
  r.sync(cluster.input(), [key]);
  const stale = r.staleChains();
  assert.ok(stale.length >= 2, stale.join(" "));
  // It comes back unchanged; a full sync as the agent renders it (deferred) uses its chains again.
  cluster.services.set(key, svc);
  cluster.endpoints.set(key, eps);
  const input = { ...cluster.input(), firstSync: false };
  r.sync(input, null, { deferServicePortChains: true });
  for (const c of stale) assert.equal(r.isStale(c), false, c);
  assert.deepEqual(r.staleChains(), []);
  // The render behind it reports in use only the chains asked about; rendered whole, every one.
  const all = { ...input, services: cluster.services.values() };
  const asked = new Set([...stale, "service-NOTUSED-ns/gone/tcp/http"]);
  const deferred = renderNFTablesSync(all, null, null, {
    deferServicePortChains: true,
    chainsOfInterest: asked,
  });
  assert.deepEqual(deferred.activeChains, stale);
  const none = renderNFTablesSync(all, null, null, { deferServicePortChains: true });
  assert.deepEqual(none.activeChains, []);
  const whole = renderNFTablesFullSync({ ...input, services: cluster.services.values() });
  assert.ok(whole.activeChains.length > stale.length * 5, `${whole.activeChains.length} chains`);
  for (const c of stale) assert.ok(whole.activeChains.includes(c), c);
});
