/**
 * The proof of the netlink writer: every transaction of a small cluster's life (first full sync, a
 * repeated full sync, partial syncs adding and removing endpoints and a service, stale-chain deletion),
 * in both families and with every kind of service port (ClusterIP, NodePort, LoadBalancer with source
 * ranges, externalIPs, eTP/iTP Local, ClientIP affinity, no endpoints), is applied through our netlink
 * batches in one network namespace and through `nft -f -` in another; `nft list ruleset` must print the
 * same bytes after each step. Also: a statement the encoder does not know falls back to nft, and a
 * refused statement is named in the error. Needs root, nft and Bun (bun:ffi); skipped otherwise.
 */
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { accessSync, constants } from "node:fs";
import { type Netns, NetnsScope, netnsUnavailableReason } from "../../../../support/netns.ts";
import { FakeNftProxier, nftFakeProxierInput } from "../../../../support/nft_fixtures.ts";
import { makeEndpoint, makeServicePort, TEST_NODE_NAME } from "../../../../support/tracer.ts";
import type { IPFamily } from "../../../../../lib/proxy/types.ts";
import type { NftRenderInput } from "../../../../../lib/proxy/nftables/render/render.ts";
import { newNodePortAddresses } from "../../../../../lib/proxy/nodeport_addresses.ts";
import { TEST_NODE_IP, TEST_NODE_IPV6 } from "../../../../support/tracer.ts";
import { NftTransactionError, openNftSession } from "../../../../../lib/proxy/nftables/nft_session.ts";

const NFT = "/usr/sbin/nft";

function unavailable(): string {
  if (typeof (globalThis as { Bun?: unknown }).Bun === "undefined") return "the netlink writer needs Bun";
  try {
    accessSync(NFT, constants.X_OK);
  } catch {
    return `${NFT} not found`;
  }
  return netnsUnavailableReason();
}

const skip = unavailable();
const env = new NetnsScope("nftnl");
after(() => env.cleanup());

/** Both namespaces of one comparison and a netlink session in the first. */
async function pair(tag: string) {
  const viaNetlink = await env.create(`${tag}n`);
  const viaNft = await env.create(`${tag}f`);
  const session = await openNftSession({
    netnsPath: `/var/run/netns/${viaNetlink.name}`,
    libnftables: false,
  });
  assert.notEqual(session.netlink, null, "a netlink socket opens under Bun as root");
  return { viaNetlink, viaNft, session };
}

async function ruleset(ns: Netns): Promise<string> {
  return await ns.execOk([NFT, "list", "ruleset"]);
}

/**
 * Applies `tx` both ways and compares the rulesets; the netlink side must not have fallen back. `chunked`:
 * netlink gets it as chunks of whole lines without their last newline (as a full sync's are handed over).
 */
async function applyBoth(
  p: Awaited<ReturnType<typeof pair>>,
  tx: string,
  step: string,
  chunked = false,
): Promise<void> {
  if (tx === "") return;
  const before = p.session.counts["netlink"];
  const lines = tx.slice(0, -1).split("\n");
  const chunks: string[] = [];
  for (let i = 0; i < lines.length; i += 3) chunks.push(lines.slice(i, i + 3).join("\n"));
  await p.session.run(chunked ? chunks : tx);
  assert.equal(p.session.counts["netlink"], before + 1, `${step}: went through netlink`);
  const r = await p.viaNft.exec([NFT, "-f", "-"], { input: tx, timeoutMs: 30_000 });
  assert.equal(r.code, 0, `${step}: nft -f - failed: ${r.stderr}`);
  assert.equal(await ruleset(p.viaNetlink), await ruleset(p.viaNft), `${step}: rulesets differ`);
}

/**
 * Renderer settings: upstream's fake proxier, or the other statement forms: local traffic by interface
 * name (exact or prefix), two ServiceCIDRs, NodePorts on every local address, and (in `cluster`) two
 * source ranges, one holding the node IP (the LB VIP joins the allowed sources).
 */
function settings(family: IPFamily, variant: "upstream" | "other forms", prefix = false): NftRenderInput {
  const base = nftFakeProxierInput(family);
  if (variant === "upstream") return base;
  const v6 = family === "IPv6";
  return {
    ...base,
    localDetector: prefix ? { mode: "InterfaceNamePrefix", prefix: "veth" } : {
      mode: "BridgeInterface",
      interfaceName: "cbr0",
    },
    serviceCIDRs: v6 ? ["fd00:10:96::/112", "fd00:10:97::/112"] : ["172.30.0.0/16", "10.96.0.0/12"],
    nodePortAddresses: newNodePortAddresses(family, []),
  };
}

function cluster(family: IPFamily, variant: "upstream" | "other forms" = "upstream") {
  const v6 = family === "IPv6";
  const ip = (v4: string, n6: string) => (v6 ? n6 : v4);
  const web = makeServicePort("ns1", "web", { clusterIP: ip("172.30.0.41", "fd00:10:96::41") });
  const lb = makeServicePort("ns2", "lb", {
    clusterIP: ip("172.30.0.42", "fd00:10:96::42"),
    nodePort: 3001,
    loadBalancerVIPs: [ip("1.2.3.4", "2001:db8:5::4")],
    loadBalancerSourceRanges: variant === "upstream" ? [ip("203.0.113.0/25", "2001:db8:7::/64")] : [
      ip("203.0.113.0/25", "2001:db8:7::/64"),
      v6 ? `${TEST_NODE_IPV6}/128` : `${TEST_NODE_IP}/24`,
      ip("203.0.113.128/25", "2001:db8:7:1::/64"),
    ],
    externalIPs: [ip("192.168.99.22", "2001:db8:99::22")],
    externalPolicyLocal: true,
    stickyMaxAgeSeconds: 10800,
  });
  const dns = makeServicePort("ns3", "dns", {
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
  const eps = {
    web: [makeEndpoint(ip("10.180.0.1", "fd00:10::1"), 80), makeEndpoint(ip("10.180.1.1", "fd00:10::2"), 80)],
    lb: [
      makeEndpoint(ip("10.180.0.2", "fd00:10::3"), 8080, local),
      makeEndpoint(ip("10.180.1.2", "fd00:10::4"), 8080),
    ],
    dns: [makeEndpoint(ip("10.180.0.3", "fd00:10::5"), 53, local)],
    extra: makeEndpoint(ip("10.180.2.9", "fd00:10::9"), 80),
  };
  return { web, lb, dns, empty, eps };
}

const cases = [
  ["IPv4", "upstream", false],
  ["IPv6", "upstream", false],
  ["IPv4", "other forms", false],
  ["IPv6", "other forms", true],
] as const;
for (const [family, variant, prefix] of cases) {
  test(`netlink batches and nft -f - leave equal rulesets: full and partial syncs (${family}, ${variant})`, {
    skip: skip || false,
  }, async () => {
    const p = await pair(`${family === "IPv6" ? "6" : "4"}${variant === "upstream" ? "u" : "o"}`);
    try {
      const c = cluster(family, variant);
      const input = settings(family, variant, prefix);
      const fp = new FakeNftProxier(input, true);
      const sync = async (step: string, chunked = false) => {
        const r = fp.sync();
        await applyBoth(p, fp.lastDeletion, `${step} (stale deletion)`);
        await applyBoth(p, r.transaction, step, chunked);
        return r;
      };
      for (const s of [c.web, c.lb, c.dns, c.empty]) fp.setService(s);
      fp.setEndpoints(c.web, c.eps.web);
      fp.setEndpoints(c.lb, c.eps.lb);
      fp.setEndpoints(c.dns, c.eps.dns);
      const first = await sync("first full sync", true);
      assert.match(first.transaction, /^add table /m);
      if (variant !== "upstream") {
        // The forms this variant is for.
        assert.match(first.transaction, /iifname /);
        assert.match(first.transaction, /saddr != \{ [^}]*,/);
        assert.match(first.transaction, /daddr \{ [^}]*,[^}]*\} drop/);
        assert.match(first.transaction, /fib daddr type local/);
      }
      // One endpoint added, then removed: endpoint chains, the service chain's numgen vmap, map elements.
      fp.setEndpoints(c.web, [...c.eps.web, c.eps.extra]);
      const added = await sync("one endpoint added");
      assert.ok(!added.transaction.includes("add table"), "a partial sync");
      fp.setEndpoints(c.web, c.eps.web);
      await sync("one endpoint removed");
      // A service goes away (chains flushed as stale, affinity sets deleted), then its chains are deleted.
      fp.deleteService(c.lb);
      await sync("service removed");
      fp.ageStaleChains();
      await sync("stale chains deleted");
      assert.match(fp.lastDeletion, /^delete chain /m);
      // A service with no endpoints gets some: no-endpoint elements replaced.
      fp.setEndpoints(c.empty, [c.eps.extra]);
      await sync("endpoints for an empty service");
      // A fresh process's full sync over the existing table (base chains re-created).
      const again = new FakeNftProxier(input, false);
      for (const s of [c.web, c.dns, c.empty]) again.setService(s);
      again.setEndpoints(c.web, c.eps.web);
      again.setEndpoints(c.dns, c.eps.dns);
      again.setEndpoints(c.empty, [c.eps.extra]);
      await applyBoth(p, again.sync().transaction, "full sync by a new process");
      assert.equal(p.session.fallbacks, 0);
      // An agent restart: a new session names its anonymous sets apart from the old one's, still in the
      // table (the same names would collide), and its full sync and a partial one commit through netlink.
      const restarted = await openNftSession({
        netnsPath: `/var/run/netns/${p.viaNetlink.name}`,
        libnftables: false,
      });
      try {
        const third = new FakeNftProxier(input, false);
        for (const s of [c.web, c.dns, c.empty]) third.setService(s);
        third.setEndpoints(c.web, c.eps.web);
        third.setEndpoints(c.dns, c.eps.dns);
        third.setEndpoints(c.empty, [c.eps.extra]);
        const q = { ...p, session: restarted };
        await applyBoth(q, third.sync().transaction, "full sync after a restart");
        third.setEndpoints(c.web, [...c.eps.web, c.eps.extra]);
        await applyBoth(q, third.sync().transaction, "partial sync after a restart");
        assert.equal(restarted.refusedBatches, 0);
        assert.equal(restarted.fallbacks, 0);
      } finally {
        await restarted.close();
      }
    } finally {
      await p.session.close();
    }
  });
}

test("a command of more elements than one netlink message holds (64 KiB) is split, same ruleset", {
  skip: skip || false,
}, async () => {
  const p = await pair("big");
  try {
    const elements = Array.from(
      { length: 1500 },
      (_, k) => `10.${k >> 8}.${k & 255}.1 . tcp . 80 : goto service-${"x".repeat(40)}`,
    );
    const tx = [
      "add table ip kube-proxy",
      `add chain ip kube-proxy service-${"x".repeat(40)}`,
      "add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }",
      `add element ip kube-proxy service-ips { ${elements.join(", ")} }`,
      "",
    ].join("\n");
    assert.ok(tx.length > 100_000);
    await applyBoth(p, tx, "large element command");
  } finally {
    await p.session.close();
  }
});

test("the encoder's large buffer is kept while transactions follow each other, dropped once idle", {
  skip: skip || false,
}, async () => {
  const ns = await env.create("trim");
  const session = await openNftSession({
    netnsPath: `/var/run/netns/${ns.name}`,
    commandPrefix: ns.prefix,
    libnftables: false,
  });
  try {
    const chain = `service-${"x".repeat(40)}`;
    const big = (n: number) => {
      const elements = Array.from(
        { length: 12000 },
        (_, k) => `10.${n}.${k >> 8}.${k & 255} . tcp . 80 : goto ${chain}`,
      );
      return `add element ip kube-proxy service-ips { ${elements.join(", ")} }\n`;
    };
    await session.run(
      `add table ip kube-proxy\nadd chain ip kube-proxy ${chain}\n` +
        "add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; }\n",
    );
    await session.run(big(1));
    const held = session.retainedBytes;
    assert.ok(held > 1024 * 1024, `${held} bytes held after a large batch`);
    // The next transaction comes soon: the buffer is still there for it.
    await new Promise((r) => setTimeout(r, 100));
    await session.run(big(2));
    assert.equal(session.retainedBytes, held);
    await new Promise((r) => setTimeout(r, 1500));
    assert.ok(session.retainedBytes < 1024 * 1024, `${session.retainedBytes} bytes held once idle`);
    // And it still works, the buffer grown again as needed.
    await session.run(big(3));
    assert.equal(session.counts["netlink"], 4, "every transaction went through netlink");
    const listed = await ns.execOk([NFT, "list", "map", "ip", "kube-proxy", "service-ips"]);
    assert.match(listed, /10\.3\.46\.223 \. tcp \. 80 : goto service-x/);
  } finally {
    await session.close();
  }
});

test("a statement the netlink encoder does not know falls back to nft, with the same result", {
  skip: skip || false,
}, async () => {
  const ns = await env.create("fb");
  const session = await openNftSession({ netnsPath: `/var/run/netns/${ns.name}`, libnftables: false });
  // `nft -f -` runs inside the namespace through the command prefix.
  const fallbacks: string[] = [];
  const s2 = await openNftSession({
    netnsPath: `/var/run/netns/${ns.name}`,
    libnftables: false,
    commandPrefix: ns.prefix,
    nftPath: NFT,
    onFallback: (r) => fallbacks.push(r),
  });
  try {
    await s2.run("add table ip kube-proxy\nadd chain ip kube-proxy c\n");
    assert.equal(s2.counts["netlink"], 1);
    await s2.run("add rule ip kube-proxy c oifname eth0 drop\n");
    assert.equal(s2.fallbacks, 1);
    assert.equal(s2.counts["nft -f -"], 1);
    assert.match(fallbacks[0], /oifname/);
    assert.match(await ns.execOk([NFT, "list", "chain", "ip", "kube-proxy", "c"]), /oifname "eth0" drop/);
  } finally {
    await session.close();
    await s2.close();
  }
});

test("a batch the kernel refuses changes nothing, names its statement and is retried through nft", {
  skip: skip || false,
}, async () => {
  const ns = await env.create("err");
  const reasons: string[] = [];
  const session = await openNftSession({
    netnsPath: `/var/run/netns/${ns.name}`,
    libnftables: false,
    commandPrefix: ns.prefix,
    nftPath: NFT,
    onFallback: (r) => reasons.push(r),
  });
  try {
    await session.run("add table ip kube-proxy\n");
    const err = await session.run(
      "add chain ip kube-proxy a\nadd rule ip kube-proxy absent jump a\n",
    ).then(() => null, (e) => e);
    // The netlink refusal named the statement and its errno; nft, asked next, refused it too.
    assert.equal(session.refusedBatches, 1);
    assert.match(reasons[0], /No such file or directory \(errno 2\): add rule ip kube-proxy absent jump a/);
    assert.ok(err instanceof NftTransactionError, String(err));
    assert.equal(err.writer, "nft -f -");
    assert.ok(err.notFound, err.message);
    assert.doesNotMatch(await ns.execOk([NFT, "list", "ruleset"]), /chain a/);
    // The session stays usable.
    await session.run("add chain ip kube-proxy b\n");
    assert.equal(session.counts["netlink"], 2);
  } finally {
    await session.close();
  }
});

test(
  "an anonymous set name that meets a live set of the table is refused (EEXIST), not taken; another session's token passes",
  {
    skip: skip || false,
  },
  async () => {
    const ns = await env.create("anon");
    const reasons: string[] = [];
    const open = (token: string) =>
      openNftSession({
        netnsPath: `/var/run/netns/${ns.name}`,
        libnftables: false,
        commandPrefix: ns.prefix,
        nftPath: NFT,
        anonymousSetToken: token,
        onRefused: (r) => reasons.push(r),
      });
    const first = await open("kdup");
    const same = await open("kdup");
    const other = await open("kother");
    const vmap = (chain: string) =>
      `add rule ip kube-proxy ${chain} numgen random mod 2 vmap { 0 : goto ep0 , 1 : goto ep1 }\n`;
    try {
      await first.run(
        "add table ip kube-proxy\n" +
          ["a", "b", "c", "d", "x", "ep0", "ep1"].map((c) => `add chain ip kube-proxy ${c}\n`).join("") +
          vmap("a") + vmap("x"),
      );
      assert.equal(first.counts["netlink"], 1);
      // The same token names its first map as the first session did: the kernel refuses, nft writes it.
      await same.run(vmap("b"));
      assert.equal(same.refusedBatches, 1);
      assert.match(reasons[0], /File exists \(errno 17\)/);
      assert.equal(same.counts["nft -f -"], 1);
      // After the refusal the session names with a token of its own (its next name under the old token
      // would meet the first session's second map): through netlink again.
      await same.run(vmap("d"));
      assert.equal(same.refusedBatches, 1);
      assert.equal(same.counts["netlink"], 1);
      // A token of its own: through netlink.
      await other.run(vmap("c"));
      assert.equal(other.refusedBatches, 0);
      assert.equal(other.counts["netlink"], 1);
      const listed = await ns.execOk([NFT, "list", "ruleset"]);
      for (const c of ["a", "b", "c", "d"]) {
        assert.match(
          listed,
          new RegExp(`chain ${c} \\{\\n\\s+numgen random mod 2 vmap \\{ 0 : goto ep0, 1 : goto ep1 \\}`),
        );
      }
      // Anonymous sets stay out of the listing whatever their names.
      assert.doesNotMatch(listed, /__map|__set/);
    } finally {
      await first.close();
      await same.close();
      await other.close();
    }
  },
);
