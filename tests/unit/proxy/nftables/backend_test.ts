/**
 * The nftables backend (lib/proxy/nftables/backend.ts) against a fake table: full then partial syncs
 * leave the table a fresh full sync would build, partial syncs read nothing from the kernel, stale
 * chains are deleted over a second later, the drift fingerprint notices a flushed `services` chain, a
 * flushed map and a deleted table, a failed transaction makes the next sync full, and --dry-run prints.
 * A one-endpoint partial sync renders only that service port (the incremental renderer's payload); a
 * first sync into an empty or foreign table goes as bounded transactions and leaves the single one's table.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { expandElementLists, FakeNftTable } from "../../../support/nft_fake.ts";
import { sortNFTablesTransaction } from "../../../support/nft_canonical.ts";
import { makeEndpoint, makeServicePort, TEST_NODE_NAME } from "../../../support/tracer.ts";
import {
  NftablesBackend,
  type NftablesHost,
  nftLocalDetector,
  serviceOfKey,
} from "../../../../lib/proxy/nftables/backend.ts";
import { NftIncrementalRenderer } from "../../../../lib/proxy/nftables/render/incremental.ts";
import type { FirstSyncSplitOptions } from "../../../../lib/proxy/nftables/render/incremental_first_sync.ts";
import { createNftDryRunHost } from "../../../../lib/proxy/nftables/dry_run_host.ts";
import { compareMapSizes, compareRuleCounts } from "../../../../lib/proxy/nftables/drift.ts";
import { ServicePortMap } from "../../../../lib/proxy/service_change_tracker.ts";
import { EndpointsMap } from "../../../../lib/proxy/endpoints_change_tracker.ts";
import type { ProxyState } from "../../../../lib/proxy/provider.ts";
import type { EndpointInfo, ServicePortInfo } from "../../../../lib/proxy/types.ts";
import { servicePortKey } from "../../../../lib/proxy/types.ts";
import {
  type NftTransactionText,
  transactionString,
} from "../../../../lib/proxy/nftables/render/transaction.ts";
import { createKubeProxyMetrics } from "../../../../lib/metrics/kubeproxy.ts";
import { Registry } from "../../../../lib/metrics/registry.ts";
import { newNodePortAddresses } from "../../../../lib/proxy/nodeport_addresses.ts";
import { detectLocalByCIDR } from "../../../../lib/proxy/local_detect.ts";
import { NftGenerationTracker } from "../../../../lib/proxy/nftables/generation.ts";

/** A host over a FakeNftTable that records what it was asked. */
class FakeHost implements NftablesHost {
  readonly table = new FakeNftTable("ip", "kube-proxy");
  readonly applied: string[] = [];
  lists = 0;
  driftReads = 0;
  failNext = false;
  /** Set: the transaction after this many more succeeded fails (a bounded sequence failing mid-way). */
  failAfter: number | null = null;
  /** The kernel's generation id: moved by every commit, ours (apply) or foreign ({@link foreign}). */
  generation = 1;
  /** Set: transactions go through a tracker of the generation id, as the real host's do. */
  readonly tracker: NftGenerationTracker | null;
  constructor(withGeneration = false) {
    this.tracker = withGeneration ? new NftGenerationTracker({ read: () => this.generation }) : null;
  }
  /** What each apply was handed (a full sync not split: its chunks, never joined). */
  readonly received: NftTransactionText[] = [];
  apply(transaction: NftTransactionText): Promise<void> {
    this.received.push(transaction);
    // Recorded as the text nft would read.
    const tx = transactionString(transaction);
    return this.tracker === null ? this.#apply(tx) : this.tracker.commit(() => this.#apply(tx));
  }
  #apply(tx: string): Promise<void> {
    if (this.failAfter !== null && this.failAfter-- === 0) {
      this.failAfter = null;
      this.failNext = true;
    }
    if (this.failNext) {
      this.failNext = false;
      return Promise.reject(new Error("nft -f -: exit status 1: Error: injected"));
    }
    this.applied.push(tx);
    this.table.run(expandElementLists(tx));
    this.generation++;
    return Promise.resolve();
  }
  /** A commit by someone else: `commands` on our table ("" for one on another table). */
  foreign(commands: string): void {
    if (commands !== "") this.table.run(commands);
    this.generation++;
  }
  foreignCommits(): Promise<number | null> {
    return this.tracker?.foreignCommits() ?? Promise.resolve(null);
  }
  listObjects() {
    this.lists++;
    return Promise.resolve(
      this.table.exists() ? { chains: this.table.chains(), sets: this.table.sets() } : null,
    );
  }
  checkDrift(expected: ReadonlyMap<string, number>, maps: ReadonlyMap<string, number>) {
    this.driftReads++;
    if (!this.table.exists()) return Promise.resolve("table ip kube-proxy is gone");
    const listed = new Map<string, number>();
    for (const chain of expected.keys()) {
      const rules = this.table.rules(chain);
      if (rules !== null) listed.set(chain, rules.length);
    }
    const sizes = new Map([...maps.keys()].map((m) => [m, this.table.elements(m)?.length ?? 0]));
    const diffs = [...compareRuleCounts(expected, listed), ...compareMapSizes(maps, sizes)];
    return Promise.resolve(diffs.length === 0 ? null : diffs.join("; "));
  }
}

function setup(firstSyncSplit?: FirstSyncSplitOptions, host = new FakeHost()) {
  let now = 1_000_000;
  const registry = new Registry();
  const metrics = createKubeProxyMetrics(registry, { mode: "nftables" });
  const warnings: string[] = [];
  const backend = new NftablesBackend({
    family: "IPv4",
    nodeName: TEST_NODE_NAME,
    host,
    log: { info: () => {}, warn: (m) => warnings.push(m) },
    metrics,
    masqueradeAll: false,
    masqueradeBit: 14,
    nodePortAddresses: [],
    preferSameTrafficDistribution: true,
    nodeIPs: () => ["192.168.0.2"],
    primaryNodeIP: () => "192.168.0.2",
    now: () => now,
    firstSyncSplit,
  });
  return { host, backend, registry, metrics, warnings, advance: (ms: number) => (now += ms) };
}

function state(cluster: [ServicePortInfo, EndpointInfo[]][], changed: string[] = []): ProxyState {
  const services = new ServicePortMap();
  const endpoints = new EndpointsMap();
  for (const [svc, eps] of cluster) {
    services.set(servicePortKey(svc.name), svc);
    endpoints.set(servicePortKey(svc.name), eps);
  }
  return {
    family: "IPv4",
    services,
    endpoints,
    changedServices: new Set(changed),
    nodeLabels: {},
    localDetection: detectLocalByCIDR("10.0.0.0/8"),
  };
}

const svcA = makeServicePort("ns1", "svc1", { clusterIP: "172.30.0.41", nodePort: 3001 });
const svcB = makeServicePort("ns2", "svc2", { clusterIP: "172.30.0.42", stickyMaxAgeSeconds: 10800 });
const keyA = servicePortKey(svcA.name);
const keyB = servicePortKey(svcB.name);

/** The table a fresh process's full sync builds for the same state. */
async function freshDump(s: ProxyState): Promise<string> {
  const f = setup();
  await f.backend.sync(s, { full: true });
  return sortNFTablesTransaction(f.host.table.dump());
}

describe("NftablesBackend", () => {
  it('nodePortAddresses "primary" follows the primary node IP (every address until it is known)', async () => {
    let primary: string | null = null;
    const host = new FakeHost();
    const backend = new NftablesBackend({
      family: "IPv4",
      nodeName: TEST_NODE_NAME,
      host,
      log: { info: () => {}, warn: () => {} },
      metrics: createKubeProxyMetrics(new Registry(), { mode: "nftables" }),
      masqueradeAll: false,
      masqueradeBit: 14,
      nodePortAddresses: ["primary"],
      preferSameTrafficDistribution: true,
      nodeIPs: () => ["192.168.0.2", "192.168.0.3"],
      primaryNodeIP: () => primary,
      now: () => 1_000_000,
    });
    const nodePortIPs = () =>
      host.applied.join("\n").split("\n").filter((l) => l.includes("nodeport-ips") && l.includes("element"));
    await backend.sync(state([[svcA, []]]), { full: true });
    assert.deepEqual(
      nodePortIPs(),
      [],
      "no primary IP yet: every local address (no nodeport-ips set elements)",
    );
    primary = "192.168.0.3";
    await backend.sync(state([[svcA, []]]), { full: false });
    const lines = nodePortIPs();
    assert.ok(lines.some((l) => l.includes("192.168.0.3")), lines.join("\n"));
    assert.ok(!lines.some((l) => l.includes("192.168.0.2")), lines.join("\n"));
  });

  it("serviceOfKey: namespace/name of a service port key", () => {
    assert.equal(serviceOfKey("ns1/svc1:p80/TCP"), "ns1/svc1");
    assert.equal(serviceOfKey("ns1/svc1/UDP"), "ns1/svc1");
  });

  it("partial syncs write only the change, read nothing, and end where a full sync would", async () => {
    const { host, backend } = setup();
    const s1 = state([[svcA, [makeEndpoint("10.180.0.1", 80)]], [svcB, [makeEndpoint("10.180.0.2", 80)]]]);
    const first = await backend.sync(s1, { full: false }); // no previous state: full regardless
    assert.equal(first.kind, "full");
    assert.equal(host.lists, 1);
    assert.match(host.applied[0], /^add table ip kube-proxy/);

    const s2 = state([
      [svcA, [makeEndpoint("10.180.0.1", 80), makeEndpoint("10.180.0.3", 80)]],
      [svcB, [makeEndpoint("10.180.0.2", 80)]],
    ], [keyA]);
    const second = await backend.sync(s2, { full: false });
    assert.equal(second.kind, "partial");
    assert.equal(host.lists, 1, "a partial sync lists nothing");
    const tx = host.applied[1];
    assert.doesNotMatch(tx, /add table|svc2/, tx);
    assert.match(tx, /10\.180\.0\.3/);
    assert.equal(sortNFTablesTransaction(host.table.dump()), await freshDump(s2));
  });

  it("a removed service's chains are flushed, then deleted by the first sync over a second later", async () => {
    const { host, backend, advance } = setup();
    await backend.sync(
      state([[svcA, [makeEndpoint("10.180.0.1", 80)]], [svcB, [makeEndpoint("10.180.0.2", 80)]]]),
      {
        full: true,
      },
    );
    const svcBChains = () => host.table.chains().filter((c) => c.includes("ns2/svc2"));
    assert.ok(svcBChains().length >= 2);
    const onlyA = state([[svcA, [makeEndpoint("10.180.0.1", 80)]]], [keyB]);
    await backend.sync(onlyA, { full: false });
    assert.ok(svcBChains().length >= 2, "flushed, not yet deleted");
    for (const c of svcBChains()) assert.deepEqual(host.table.rules(c), []);
    advance(500);
    await backend.sync(state([[svcA, [makeEndpoint("10.180.0.1", 80)]]]), { full: false });
    assert.ok(svcBChains().length >= 2, "still there within the second");
    advance(600);
    await backend.sync(state([[svcA, [makeEndpoint("10.180.0.1", 80)]]]), { full: false });
    assert.deepEqual(svcBChains(), []);
    assert.ok(host.applied.some((t) => /^delete chain ip kube-proxy .*ns2\/svc2/m.test(t)));
    assert.equal(sortNFTablesTransaction(host.table.dump()), await freshDump(onlyA));
  });

  it("a service back within the second keeps its chains: they are not deleted as stale", async () => {
    const { host, backend, advance, metrics } = setup();
    const both = () =>
      state([[svcA, [makeEndpoint("10.180.0.1", 80)]], [svcB, [makeEndpoint("10.180.0.2", 80)]]]);
    await backend.sync(both(), { full: true });
    await backend.sync(state([[svcA, [makeEndpoint("10.180.0.1", 80)]]], [keyB]), { full: false });
    advance(500);
    const back = both();
    await backend.sync({ ...back, changedServices: new Set([keyB]) }, { full: false });
    advance(600);
    await backend.sync(back, { full: false });
    assert.equal(metrics.nftablesCleanupFailuresTotal.get({ ip_family: "IPv4" }), 0);
    assert.ok(!host.applied.some((t) => /^delete chain .*ns2\/svc2/m.test(t)), "svc2's chains were deleted");
    assert.equal(sortNFTablesTransaction(host.table.dump()), await freshDump(back));
  });

  it("drift: a flushed services chain, a flushed map and a deleted table are reported; a full sync repairs", async () => {
    const { host, backend } = setup();
    const s = state([[svcA, [makeEndpoint("10.180.0.1", 80)]]]);
    await backend.sync(s, { full: true });
    assert.equal(await backend.checkDrift(), null);

    host.table.run("flush chain ip kube-proxy services\n");
    assert.match(String(await backend.checkDrift()), /chain services has 0 rules, expected 2/);
    await backend.sync(s, { full: true });
    assert.equal(await backend.checkDrift(), null);

    host.table.run("flush map ip kube-proxy service-ips\n");
    assert.match(String(await backend.checkDrift()), /map service-ips has 0 elements, expected 1/);
    await backend.sync(s, { full: true });
    assert.equal(await backend.checkDrift(), null);

    host.table.run("delete table ip kube-proxy\n");
    assert.match(String(await backend.checkDrift()), /gone/);
    await backend.sync(s, { full: true });
    assert.equal(await backend.checkDrift(), null);
    assert.equal(sortNFTablesTransaction(host.table.dump()), await freshDump(s));
  });

  it("drift with the generation id: reads the table only after a foreign commit; repairs as before", async () => {
    const { host, backend } = setup(undefined, new FakeHost(true));
    const s = state([[svcA, [makeEndpoint("10.180.0.1", 80)]]]);
    await backend.sync(s, { full: true });
    // Our own commits (full, then partial) leave the table known good: no read at all.
    await backend.sync(state([[svcA, [makeEndpoint("10.180.0.2", 80)]]], [keyA]), { full: false });
    assert.equal(await backend.checkDrift(), null);
    assert.equal(await backend.checkDrift(), null);
    assert.equal(host.driftReads, 0);

    // A foreign commit to another table: one read, no drift, and the next check is free again.
    host.foreign("");
    assert.equal(await backend.checkDrift(), null);
    assert.equal(await backend.checkDrift(), null);
    assert.equal(host.driftReads, 1);

    const back = state([[svcA, [makeEndpoint("10.180.0.2", 80)]]]);
    for (
      const [commands, reason] of [
        ["flush chain ip kube-proxy services\n", /chain services has 0 rules, expected 2/],
        ["flush map ip kube-proxy service-ips\n", /map service-ips has 0 elements, expected 1/],
        ["delete table ip kube-proxy\n", /gone/],
      ] as const
    ) {
      host.foreign(commands);
      assert.match(String(await backend.checkDrift()), reason);
      // Until a sync repairs it, every check reads and reports again.
      assert.match(String(await backend.checkDrift()), reason);
      await backend.sync(back, { full: true });
      const reads: number = host.driftReads;
      assert.equal(await backend.checkDrift(), null);
      assert.equal(host.driftReads, reads, "a clean full sync leaves the table known good");
    }
    assert.equal(sortNFTablesTransaction(host.table.dump()), await freshDump(back));
  });

  it("drift with the generation id: a foreign commit during a full sync is checked afterwards", async () => {
    const host = new FakeHost(true);
    const { backend } = setup(undefined, host);
    const s = state([[svcA, [makeEndpoint("10.180.0.1", 80)]]]);
    await backend.sync(s, { full: true });
    const apply = host.apply.bind(host);
    host.apply = (tx) => {
      // Someone flushes the chain right after our commit, before the tracker looks again.
      return apply(tx).then(() => host.foreign("flush chain ip kube-proxy services\n"));
    };
    await backend.sync(s, { full: true });
    host.apply = apply;
    assert.match(String(await backend.checkDrift()), /chain services has 0 rules, expected 2/);
  });

  it("a failed transaction counts a sync failure and makes the next sync full", async () => {
    const { host, backend, metrics } = setup();
    const s = state([[svcA, [makeEndpoint("10.180.0.1", 80)]]]);
    await backend.sync(s, { full: true });
    host.failNext = true;
    await assert.rejects(backend.sync(state([[svcA, []]], [keyA]), { full: false }), /injected/);
    assert.equal(metrics.nftablesSyncFailuresTotal.get({ ip_family: "IPv4" }), 1);
    const next = await backend.sync(state([[svcA, []]], [keyA]), { full: false });
    assert.equal(next.kind, "full");
  });

  it("a one-endpoint partial sync renders only that service port: the incremental renderer's payload", async () => {
    const { host, backend, advance } = setup();
    const cluster: [ServicePortInfo, EndpointInfo[]][] = [];
    for (let i = 0; i < 30; i++) {
      const svc = makeServicePort("ns", `svc${i}`, { clusterIP: `172.30.1.${i}`, nodePort: 30000 + i });
      cluster.push([svc, [makeEndpoint(`10.180.1.${i}`, 80), makeEndpoint(`10.180.2.${i}`, 80)]]);
    }
    const s1 = state(cluster);
    await backend.sync(s1, { full: true });
    assert.equal(backend.renderWork.servicePortsRendered, 30);

    const changed = cluster.map(([svc, eps]): [ServicePortInfo, EndpointInfo[]] => [svc, [...eps]]);
    changed[7][1] = [makeEndpoint("10.180.1.7", 80), makeEndpoint("10.180.3.7", 80)];
    const key7 = servicePortKey(changed[7][0].name);
    const s2 = state(changed, [key7]);
    const out = await backend.sync(s2, { full: false });
    assert.equal(out.kind, "partial");
    assert.equal(backend.renderWork.servicePortsRendered, 31, "only the changed service port is rendered");
    assert.equal(host.lists, 1, "a partial sync lists nothing");

    // The same two syncs through the incremental renderer on its own.
    const r = new NftIncrementalRenderer();
    const input = (s: ProxyState, existing: boolean) => ({
      family: "IPv4" as const,
      services: s.services,
      endpoints: s.endpoints,
      nodeName: TEST_NODE_NAME,
      nodeLabels: {},
      nodeIP: "192.168.0.2",
      nodePortAddresses: newNodePortAddresses("IPv4", []),
      localAddresses: ["192.168.0.2"],
      serviceCIDRs: [],
      masqueradeBit: 14,
      masqueradeAll: false,
      localDetector: nftLocalDetector(s.localDetection),
      firstSync: true,
      existingChains: existing ? [] : null,
      existingSets: existing ? [] : null,
      preferSameTrafficDistribution: true,
    });
    assert.equal(r.sync(input(s1, false), null).transaction, host.applied[0]);
    const expected = r.sync(input(s2, true), [key7]).transaction;
    assert.equal(host.applied[1], expected);
    assert.match(expected, /10\.180\.3\.7/);
    assert.doesNotMatch(expected, /svc8|10\.180\.1\.8/);
    // Once the replaced endpoint's chain is deleted, the table a fresh full sync writes.
    advance(1100);
    await backend.sync(state(changed), { full: false });
    assert.equal(backend.renderWork.servicePortsRendered, 31);
    assert.equal(sortNFTablesTransaction(host.table.dump()), await freshDump(s2));
  });

  for (const foreign of [false, true]) {
    it(`a first sync into ${foreign ? "a foreign" : "an empty"} table goes as bounded transactions, same table`, async () => {
      const cluster: [ServicePortInfo, EndpointInfo[]][] = [];
      for (let i = 0; i < 40; i++) {
        const svc = makeServicePort(`ns${i % 3}`, `svc${i}`, {
          clusterIP: `172.30.2.${i}`,
          nodePort: i % 2 === 0 ? 31000 + i : 0,
          stickyMaxAgeSeconds: i % 5 === 0 ? 10800 : 0,
        });
        cluster.push([
          svc,
          i % 7 === 0 ? [] : [makeEndpoint(`10.181.0.${i}`, 80), makeEndpoint(`10.181.1.${i}`, 80)],
        ]);
      }
      const s = state(cluster);
      // A foreign table: what another process left (other services, some the same).
      const older = state(cluster.slice(20).concat([[svcA, [makeEndpoint("10.180.0.1", 80)]]]));
      const tables = async (split: FirstSyncSplitOptions) => {
        const host = new FakeHost();
        if (foreign) await setup(undefined, host).backend.sync(older, { full: true });
        const before = host.applied.length;
        const f = setup(split, host);
        const out = await f.backend.sync(s, { full: true });
        return { host, out, txs: host.applied.length - before };
      };
      const single = await tables({ servicePortsPerTransaction: 10_000 });
      const bounded = await tables({ servicePortsPerTransaction: 7 });
      assert.equal(single.txs, 1);
      assert.ok(bounded.txs >= 5, `${bounded.txs} transactions`);
      assert.equal(bounded.out.kind, "full");
      assert.equal(
        sortNFTablesTransaction(bounded.host.table.dump()),
        sortNFTablesTransaction(single.host.table.dump()),
      );
      if (!foreign) assert.equal(sortNFTablesTransaction(bounded.host.table.dump()), await freshDump(s));
    });
  }

  it("a later full sync (hourly, drift repair) over its own table goes as bounded transactions too, same table", async () => {
    const cluster = (endpointOctet: number, count: number): [ServicePortInfo, EndpointInfo[]][] =>
      Array.from({ length: count }, (_, i) => [
        makeServicePort(`ns${i % 3}`, `svc${i}`, {
          clusterIP: `172.30.3.${i}`,
          nodePort: i % 2 === 0 ? 32000 + i : 0,
          stickyMaxAgeSeconds: i % 5 === 0 ? 10800 : 0,
        }),
        i % 7 === 0
          ? []
          : [makeEndpoint(`10.182.${endpointOctet}.${i}`, 80), makeEndpoint(`10.182.9.${i}`, 80)],
      ]);
    const s1 = state(cluster(0, 40));
    // Endpoints moved, the last five Services gone: the later full sync also flushes stale chains.
    const s2 = state(cluster(1, 35));
    const run = async (split: FirstSyncSplitOptions) => {
      const f = setup(split);
      await f.backend.sync(s1, { full: true });
      const before = f.host.applied.length;
      f.advance(60_000);
      const out = await f.backend.sync(s2, { full: true });
      return { ...f, out, txs: f.host.applied.length - before };
    };
    const single = await run({ servicePortsPerTransaction: 10_000 });
    const bounded = await run({ servicePortsPerTransaction: 7 });
    assert.equal(single.txs, 1);
    assert.ok(bounded.txs >= 5, `${bounded.txs} transactions`);
    assert.equal(bounded.out.kind, "full");
    // The chunks write only service ports' chains; the maps change in the last transaction alone.
    for (const tx of bounded.host.applied.slice(-bounded.txs + 1, -1)) {
      assert.doesNotMatch(tx, /^(add|flush) (map|element) /m, "a chunk leaves the dispatch maps alone");
    }
    assert.equal(
      sortNFTablesTransaction(bounded.host.table.dump()),
      sortNFTablesTransaction(single.host.table.dump()),
    );
    // Once the stale chains are deleted, the table a fresh process writes; partial syncs go on from there.
    bounded.advance(1100);
    assert.equal((await bounded.backend.sync(s2, { full: false })).kind, "partial");
    assert.equal(sortNFTablesTransaction(bounded.host.table.dump()), await freshDump(s2));
  });

  it("a failed bounded first sync makes the next sync full and one transaction", async () => {
    const { host, backend, metrics, advance } = setup({ servicePortsPerTransaction: 1 });
    const s = state([[svcA, [makeEndpoint("10.180.0.1", 80)]], [svcB, [makeEndpoint("10.180.0.2", 80)]]]);
    host.failNext = true;
    await assert.rejects(backend.sync(s, { full: false }), /injected/);
    assert.equal(metrics.nftablesSyncFailuresTotal.get({ ip_family: "IPv4" }), 1);
    const next = await backend.sync(s, { full: false });
    assert.equal(next.kind, "full");
    assert.equal(host.applied.length, 1, "one transaction");
    // Handed over as the render's chunks of lines, not joined into one string.
    assert.ok(Array.isArray(host.received.at(-1)), "chunks");
    assert.equal(sortNFTablesTransaction(host.table.dump()), await freshDump(s));
    // Then partial syncs again.
    const s2 = state([[svcA, [makeEndpoint("10.180.0.9", 80)]], [svcB, [makeEndpoint("10.180.0.2", 80)]]], [
      keyA,
    ]);
    assert.equal((await backend.sync(s2, { full: false })).kind, "partial");
    advance(1100);
    await backend.sync(s2, { full: false });
    assert.equal(sortNFTablesTransaction(host.table.dump()), await freshDump(s2));
  });

  it("a bounded first sync failing mid-way: the transactions before stay, the next sync is one full transaction", async () => {
    const { host, backend } = setup({ servicePortsPerTransaction: 1 });
    const s = state([
      [svcA, [makeEndpoint("10.180.0.1", 80)]],
      [svcB, [makeEndpoint("10.180.0.2", 80)]],
    ]);
    host.failAfter = 2; // the prelude and the first service port's chunk, then a failure
    await assert.rejects(backend.sync(s, { full: false }), /injected/);
    assert.equal(host.applied.length, 2);
    assert.match(host.applied[0], /^add table ip kube-proxy/);
    assert.match(host.applied[1], /^add chain ip kube-proxy endpoint-\S+ns1\/svc1\//);
    const next = await backend.sync(s, { full: false });
    assert.equal(next.kind, "full");
    assert.equal(host.applied.length, 3, "one transaction");
    assert.equal(next.bytes, host.applied[2].length);
    assert.equal(sortNFTablesTransaction(host.table.dump()), await freshDump(s));
  });

  it("--dry-run prints the transaction", async () => {
    const out: string[] = [];
    const registry = new Registry();
    const backend = new NftablesBackend({
      family: "IPv4",
      nodeName: TEST_NODE_NAME,
      host: createNftDryRunHost("IPv4", (t) => out.push(t)),
      log: { info: () => {}, warn: () => {} },
      metrics: createKubeProxyMetrics(registry, { mode: "nftables" }),
      masqueradeAll: false,
      masqueradeBit: 14,
      nodePortAddresses: [],
      preferSameTrafficDistribution: true,
      nodeIPs: () => [],
      primaryNodeIP: () => null,
    });
    await backend.sync(state([[svcA, [makeEndpoint("10.180.0.1", 80)]]]), { full: true });
    const text = out.join("");
    assert.match(text, /^# nft -f - <<EOF \(IPv4\)\nadd table ip kube-proxy/);
    assert.match(
      text,
      /add element ip kube-proxy service-ips \{ 172\.30\.0\.41 \. tcp \. 80 : goto service-/,
    );
    assert.match(text, /# EOF\n$/);
    assert.equal(await backend.checkDrift(), null);
  });

  it("nftables mode registers upstream's nftables families instead of the iptables-only ones", () => {
    const registry = new Registry();
    const m = createKubeProxyMetrics(registry, { mode: "nftables" });
    const names = registry.names();
    for (
      const n of [
        "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
        "kubeproxy_sync_proxy_rules_nftables_cleanup_failures_total",
        "kubeproxy_sync_full_proxy_rules_duration_seconds",
        "kubeproxy_sync_partial_proxy_rules_duration_seconds",
        "kubeproxy_sync_proxy_rules_no_local_endpoints_total",
      ]
    ) assert.ok(names.includes(n), n);
    for (
      const n of [
        "kubeproxy_sync_proxy_rules_iptables_restore_failures_total",
        "kubeproxy_sync_proxy_rules_iptables_total",
        "kubeproxy_iptables_ct_state_invalid_dropped_packets_total",
      ]
    ) assert.ok(!names.includes(n), n);
    m.iptablesRestoreFailuresTotal.inc({ ip_family: "IPv4" }); // still writable, never served
    assert.doesNotMatch(registry.metrics(), /iptables_restore/);
    const iptables = new Registry();
    createKubeProxyMetrics(iptables);
    assert.ok(!iptables.names().includes("kubeproxy_sync_proxy_rules_nftables_sync_failures_total"));
  });
});
