/**
 * Service CIDRs into the nftables mode: the Proxier keeps its family's CIDRs from onServiceCIDRsChanged
 * and asks for a sync; the backend writes upstream's "Drop traffic to unallocated ClusterIPs" rule from
 * them; a change of the CIDRs alone is a partial sync that rewrites only the `cluster-ips-check` chain and
 * leaves the table a fresh full sync writes; the drift fingerprint follows it.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { expandElementLists, FakeNftTable } from "../../../support/nft_fake.ts";
import { sortNFTablesTransaction } from "../../../support/nft_canonical.ts";
import { nftFakeProxierInput } from "../../../support/nft_fixtures.ts";
import { makeEndpoint, makeServicePort } from "../../../support/tracer.ts";
import type { EndpointSlice, Service } from "../../../../lib/k8s/objects.ts";
import { Proxier } from "../../../../lib/proxy/proxier.ts";
import { NftablesBackend, type NftablesHost } from "../../../../lib/proxy/nftables/backend.ts";
import { NftIncrementalRenderer } from "../../../../lib/proxy/nftables/render/incremental.ts";
import { renderNFTablesFullSync } from "../../../../lib/proxy/nftables/render/render.ts";
import { servicePortKey } from "../../../../lib/proxy/types.ts";
import {
  type NftTransactionText,
  transactionString,
} from "../../../../lib/proxy/nftables/render/transaction.ts";
import { FakeClock } from "../../../../lib/runtime/clock.ts";
import { Registry } from "../../../../lib/metrics/registry.ts";
import { createKubeProxyMetrics } from "../../../../lib/metrics/kubeproxy.ts";
import { detectLocalByCIDR } from "../../../../lib/proxy/local_detect.ts";
import type { IPFamily } from "../../../../lib/proxy/types.ts";

const quiet = { info() {}, warn() {}, error() {}, debug() {} };

/** A host over a FakeNftTable. */
class FakeHost implements NftablesHost {
  readonly applied: string[] = [];
  constructor(readonly table: FakeNftTable) {}
  apply(transaction: NftTransactionText): Promise<void> {
    const tx = transactionString(transaction);
    this.applied.push(tx);
    this.table.run(expandElementLists(tx));
    return Promise.resolve();
  }
  listObjects() {
    return Promise.resolve(
      this.table.exists() ? { chains: this.table.chains(), sets: this.table.sets() } : null,
    );
  }
  foreignCommits(): Promise<number | null> {
    return Promise.resolve(null);
  }
  checkDrift(expected: ReadonlyMap<string, number>): Promise<string | null> {
    const diffs: string[] = [];
    for (const [chain, n] of expected) {
      const have = this.table.rules(chain)?.length ?? -1;
      if (have !== n) diffs.push(`${chain}: ${have} rules, want ${n}`);
    }
    return Promise.resolve(diffs.length === 0 ? null : diffs.join("; "));
  }
}

function newProxier(family: IPFamily) {
  const host = new FakeHost(new FakeNftTable(family === "IPv6" ? "ip6" : "ip", "kube-proxy"));
  const metrics = createKubeProxyMetrics(new Registry(), { mode: "nftables" });
  const backend = new NftablesBackend({
    family,
    nodeName: "node-a",
    host,
    log: quiet,
    metrics,
    masqueradeAll: false,
    masqueradeBit: 14,
    nodePortAddresses: [],
    preferSameTrafficDistribution: true,
    nodeIPs: () => [family === "IPv6" ? "fd00::2" : "192.168.0.2"],
    primaryNodeIP: () => (family === "IPv6" ? "fd00::2" : "192.168.0.2"),
  });
  const p = new Proxier({
    family,
    nodeName: "node-a",
    provider: backend,
    clock: new FakeClock(),
    log: quiet,
    metrics,
    health: { queuedUpdate: () => {}, updated: () => {} },
    minSyncPeriodMs: 0,
    syncPeriodMs: 30000,
    localDetection: () => detectLocalByCIDR(family === "IPv6" ? "fd00:10::/64" : "10.0.0.0/8"),
  });
  return { p, host, backend };
}

const svc: Service = {
  metadata: { namespace: "ns1", name: "web", resourceVersion: "1" },
  spec: {
    type: "ClusterIP",
    clusterIP: "172.30.0.41",
    clusterIPs: ["172.30.0.41"],
    ports: [{ name: "p", protocol: "TCP", port: 80, targetPort: 80 }],
  },
};
const slice: EndpointSlice = {
  metadata: { namespace: "ns1", name: "web-x", labels: { "kubernetes.io/service-name": "web" } },
  addressType: "IPv4",
  endpoints: [{ addresses: ["10.0.1.1"], conditions: { ready: true } }],
  ports: [{ name: "p", protocol: "TCP", port: 80 }],
};

const dropRules = (dump: string) => dump.split("\n").filter((l) => l.includes("Drop traffic to unallocated"));

test("the Proxier feeds its family's service CIDRs to the nftables backend; a change is a partial sync of one chain", async () => {
  const { p, host, backend } = newProxier("IPv4");
  p.onServiceAdd(svc);
  p.onEndpointSliceAdd(slice);
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  await p.syncProxyRules();
  assert.deepEqual(dropRules(host.table.dump()), [], "no ServiceCIDRs yet: no drop rule (as upstream)");

  // Both families arrive; the IPv4 proxier keeps the IPv4 one.
  p.onServiceCIDRsChanged(["172.30.0.0/16", "fd00:10:96::/112"]);
  await p.syncProxyRules();
  assert.equal(host.applied.length, 2);
  const partial = host.applied[1];
  assert.doesNotMatch(partial, /^add table/m, "a partial sync, not a full one");
  assert.equal(
    partial,
    "flush chain ip kube-proxy cluster-ips-check\n" +
      'add rule ip kube-proxy cluster-ips-check ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"\n' +
      'add rule ip kube-proxy cluster-ips-check ip daddr { 172.30.0.0/16 } drop comment "Drop traffic to unallocated ClusterIPs"\n',
  );
  assert.deepEqual(dropRules(host.table.dump()), [
    'add rule ip kube-proxy cluster-ips-check ip daddr { 172.30.0.0/16 } drop comment "Drop traffic to unallocated ClusterIPs"',
  ]);
  // The drift fingerprint follows the rewritten chain (2 rules now, 1 after the full sync).
  assert.equal(await backend.checkDrift(), null);

  // Only the other family's CIDR changes: nothing to do for IPv4.
  p.onServiceCIDRsChanged(["172.30.0.0/16", "fd00:10:97::/112"]);
  await p.syncProxyRules();
  assert.equal(host.applied.length, 2, "no transaction for another family's change");

  // The last ServiceCIDR goes: the drop rule goes.
  p.onServiceCIDRsChanged([]);
  await p.syncProxyRules();
  assert.deepEqual(dropRules(host.table.dump()), []);
  assert.equal(await backend.checkDrift(), null);
});

test("an IPv6 proxier writes only the IPv6 CIDRs", async () => {
  const { p, host } = newProxier("IPv6");
  p.onServiceCIDRsChanged(["172.30.0.0/16", "fd00:10:96::/112"]);
  p.onServicesSynced();
  p.onEndpointSlicesSynced();
  await p.syncProxyRules();
  assert.deepEqual(dropRules(host.table.dump()), [
    'add rule ip6 kube-proxy cluster-ips-check ip6 daddr { fd00:10:96::/112 } drop comment "Drop traffic to unallocated ClusterIPs"',
  ]);
});

test("incremental renderer: CIDR changes between service changes leave the table a fresh full sync writes", () => {
  const base = { ...nftFakeProxierInput(), serviceCIDRs: [] as string[] };
  const a = makeServicePort("ns1", "a", { clusterIP: "172.30.0.10" });
  const b = makeServicePort("ns1", "b", { clusterIP: "172.31.0.10" });
  const services = new Map([[servicePortKey(a.name), a]]);
  const endpoints = new Map([[servicePortKey(a.name), [makeEndpoint("10.0.0.1", 80)]]]);
  const r = new NftIncrementalRenderer();
  const table = new FakeNftTable("ip", "kube-proxy");
  const step = (serviceCIDRs: string[], changed: string[] | null) => {
    const input = { ...base, services, endpoints, serviceCIDRs };
    const res = r.sync(input, changed);
    table.run(res.transaction);
    // Stale chains are deleted by a later sync; do it before comparing.
    table.run(r.staleChainDeletion({ family: "IPv4" }));
    const fresh = new FakeNftTable("ip", "kube-proxy");
    fresh.run(renderNFTablesFullSync({ ...input, services: services.values() }).transaction);
    assert.equal(sortNFTablesTransaction(table.dump()), sortNFTablesTransaction(fresh.dump()));
    return res;
  };
  assert.equal(step([], null).full, true);
  let res = step(["172.30.0.0/16"], []);
  assert.equal(res.full, false);
  assert.equal(res.serviceCIDRsRewritten, true);
  // A service change with the same CIDRs does not touch the chain.
  services.set(servicePortKey(b.name), b);
  res = step(["172.30.0.0/16"], [servicePortKey(b.name)]);
  assert.equal(res.serviceCIDRsRewritten, false);
  assert.doesNotMatch(res.transaction, /cluster-ips-check/);
  // A second CIDR (written in normalised, given order) together with a service change.
  services.delete(servicePortKey(a.name));
  res = step(["172.30.0.0/16", "172.31.0.0/16"], [servicePortKey(a.name)]);
  assert.equal(res.full, false);
  assert.match(res.transaction, /ip daddr \{ 172\.30\.0\.0\/16,172\.31\.0\.0\/16 \} drop/);
  assert.equal(step([], []).serviceCIDRsRewritten, true);
});
