/**
 * The rendered transactions are real nft syntax: `nft -c -f -` (check mode) accepts a small cluster's
 * full sync for both families, and the kernel takes it for real, again on a later sync, and when a
 * service goes away, inside a fresh network namespace. Skipped when not root or without nft.
 */
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { accessSync, constants } from "node:fs";
import { type Netns, NetnsScope, netnsUnavailableReason } from "../../../../support/netns.ts";
import { FakeNftTable } from "../../../../support/nft_fake.ts";
import {
  FakeNftProxier,
  type NftCluster,
  nftFakeProxierInput,
  syncInto,
} from "../../../../support/nft_fixtures.ts";
import { makeEndpoint, makeServicePort, TEST_NODE_NAME } from "../../../../support/tracer.ts";
import type { IPFamily } from "../../../../../lib/proxy/types.ts";

const NFT = "/usr/sbin/nft";

function nftUnavailableReason(): string {
  try {
    accessSync(NFT, constants.X_OK);
  } catch {
    return `${NFT} not found`;
  }
  return netnsUnavailableReason();
}

const skip = nftUnavailableReason();
const env = new NetnsScope("nftchk");
after(() => env.cleanup());

/** A cluster with every kind of service port, in `family`. */
function smallCluster(family: IPFamily): NftCluster {
  const v6 = family === "IPv6";
  const ip = (v4: string, n6: string) => (v6 ? n6 : v4);
  const clusterIP = makeServicePort("ns1", "web", { clusterIP: ip("172.30.0.41", "fd00:10:96::41") });
  const lb = makeServicePort("ns2", "lb", {
    clusterIP: ip("172.30.0.42", "fd00:10:96::42"),
    nodePort: 3001,
    loadBalancerVIPs: [ip("1.2.3.4", "2001:db8:5::4")],
    loadBalancerSourceRanges: [ip("203.0.113.0/25", "2001:db8:7::/64")],
    externalIPs: [ip("192.168.99.22", "2001:db8:99::22")],
    externalPolicyLocal: true,
    stickyMaxAgeSeconds: 10800,
  });
  const udp = makeServicePort("ns3", "dns", {
    clusterIP: ip("172.30.0.43", "fd00:10:96::43"),
    protocol: "UDP",
    port: "dns",
    portNumber: 53,
    internalPolicyLocal: true,
  });
  const empty = makeServicePort("ns4", "empty", {
    clusterIP: ip("172.30.0.44", "fd00:10:96::44"),
    nodePort: 3004,
  });
  const local = { nodeName: TEST_NODE_NAME };
  return {
    services: [clusterIP, lb, udp, empty],
    endpoints: [
      [clusterIP, [
        makeEndpoint(ip("10.180.0.1", "fd00:10::1"), 80),
        makeEndpoint(ip("10.180.1.1", "fd00:10::2"), 80),
      ]],
      [lb, [
        makeEndpoint(ip("10.180.0.2", "fd00:10::3"), 8080, local),
        makeEndpoint(ip("10.180.1.2", "fd00:10::4"), 8080),
      ]],
      [udp, [makeEndpoint(ip("10.180.0.3", "fd00:10::5"), 53, local)]],
    ],
  };
}

/** Renders with upstream's fake-proxier settings for `family` into a fake, returning the transaction. */
function render(nft: FakeNftTable, family: IPFamily, cluster: NftCluster): string {
  return syncInto(nft, cluster, nftFakeProxierInput(family)).transaction;
}

async function nft(ns: Netns, args: readonly string[], input: string): Promise<void> {
  const r = await ns.exec([NFT, ...args], { input, timeoutMs: 30_000 });
  assert.equal(r.code, 0, `nft ${args.join(" ")} failed: ${r.stderr}\n--- transaction ---\n${input}`);
}

for (const family of ["IPv4", "IPv6"] as const) {
  const nftFamily = family === "IPv6" ? "ip6" : "ip";

  test(`nft -c accepts a full sync (${family})`, { skip: skip || false }, async () => {
    const ns = await env.create(`c${nftFamily}`);
    await nft(
      ns,
      ["-c", "-f", "-"],
      render(new FakeNftTable(nftFamily, "kube-proxy"), family, smallCluster(family)),
    );
  });

  test(`the kernel takes a first sync, a later one, and one without a service (${family})`, {
    skip: skip || false,
  }, async () => {
    const ns = await env.create(`k${nftFamily}`);
    const fake = new FakeNftTable(nftFamily, "kube-proxy");
    const cluster = smallCluster(family);
    await nft(ns, ["-f", "-"], render(fake, family, cluster));
    await nft(ns, ["-f", "-"], render(fake, family, cluster));
    // Drop the LoadBalancer service: its chains are flushed as stale, its affinity sets deleted.
    const smaller = {
      services: cluster.services.filter((s) => s.name.name !== "lb"),
      endpoints: cluster.endpoints.filter(([s]) => s.name.name !== "lb"),
    };
    const tx = render(fake, family, smaller);
    assert.match(tx, /^delete set .* affinity-/m);
    assert.match(tx, /^flush chain .* external-/m);
    await nft(ns, ["-f", "-"], tx);
    const listed = await ns.execOk([NFT, "list", "chains", nftFamily]);
    for (const chain of fake.chains()) {
      assert.ok(listed.includes(`chain ${chain} {`), `kernel lacks chain ${chain}`);
    }
  });
}

for (const family of ["IPv4", "IPv6"] as const) {
  test(
    `the kernel takes partial syncs: endpoints changed, a service removed, stale chains deleted (${family})`,
    {
      skip: skip || false,
    },
    async () => {
      const ns = await env.create(`p${family === "IPv6" ? "6" : "4"}`);
      const fp = new FakeNftProxier(nftFakeProxierInput(family), true);
      const cluster = smallCluster(family);
      for (const s of cluster.services) fp.setService(s);
      for (const [s, eps] of cluster.endpoints) fp.setEndpoints(s, eps);
      const apply = async () => {
        const r = fp.sync();
        if (fp.lastDeletion !== "") await nft(ns, ["-f", "-"], fp.lastDeletion);
        await nft(ns, ["-f", "-"], r.transaction);
        return r;
      };
      await apply();
      const [web, lb] = cluster.services;
      fp.setEndpoints(web, [cluster.endpoints[0][1][0]]);
      fp.deleteService(lb);
      const r = await apply();
      assert.ok(r.staleChains.length > 0);
      assert.ok(!r.transaction.includes("add table"), "a partial sync leaves the fixed part alone");
      fp.ageStaleChains();
      await apply();
      assert.match(fp.lastDeletion, /^delete chain /m);
      const listed = await ns.execOk([NFT, "list", "table", family === "IPv6" ? "ip6" : "ip", "kube-proxy"]);
      for (const chain of fp.nft.chains()) {
        assert.ok(listed.includes(`chain ${chain} {`), `kernel lacks chain ${chain}`);
      }
      assert.ok(!listed.includes("external-"), "the removed LoadBalancer's chains are gone");
    },
  );
}

test(
  "nft -c rejects a transaction with a broken rule (the check can fail)",
  { skip: skip || false },
  async () => {
    const ns = await env.create("bad");
    const tx = render(new FakeNftTable("ip", "kube-proxy"), "IPv4", smallCluster("IPv4"))
      .replace("masquerade fully-random", "masquerade fully-randomly");
    const r = await ns.exec([NFT, "-c", "-f", "-"], { input: tx, timeoutMs: 30_000 });
    assert.notEqual(r.code, 0);
  },
);
