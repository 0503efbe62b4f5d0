/**
 * Renderer inputs beyond upstream's goldens: bad values are left out with one line naming the field,
 * nodePortAddresses matching every address (no nodeport-ips set), localhost NodePorts (unsupported in
 * nftables mode, as upstream), masqueradeAll and IPv6.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { newNodePortAddresses } from "../../../../../lib/proxy/nodeport_addresses.ts";
import type { ServicePortInfo } from "../../../../../lib/proxy/types.ts";
import { renderNFTablesFullSync } from "../../../../../lib/proxy/nftables/render/render.ts";
import { FakeNftTable } from "../../../../support/nft_fake.ts";
import { nftFakeProxierInput, syncInto } from "../../../../support/nft_fixtures.ts";
import { makeEndpoint, makeServicePort } from "../../../../support/tracer.ts";

const good = makeServicePort("ns1", "good", { clusterIP: "172.30.0.41" });

test("a service port with a bad value is skipped with a warning; the others are written", () => {
  const bad: ServicePortInfo = {
    ...makeServicePort("ns1", "bad", { clusterIP: "172.30.0.42" }),
    clusterIP: "172.30.0.42\nflush ruleset",
  };
  const badEp = makeServicePort("ns1", "badep", { clusterIP: "172.30.0.43" });
  const nft = new FakeNftTable("ip", "kube-proxy");
  const r = syncInto(nft, {
    services: [good, bad, badEp],
    endpoints: [
      [good, [makeEndpoint("10.0.1.1", 80)]],
      [badEp, [{ ...makeEndpoint("10.0.1.2", 80), ip: "10.0.1.2 }" }]],
    ],
  });
  assert.deepEqual(r.skippedServices, ["ns1/bad:p80/TCP", "ns1/badep:p80/TCP"]);
  assert.equal(r.warnings.length, 2);
  assert.match(
    r.warnings[0],
    /^service port ns1\/bad:p80 skipped: spec\.clusterIP "172\.30\.0\.42\\nflush ruleset"/,
  );
  assert.match(r.warnings[1], /^service port ns1\/badep:p80 skipped: endpoint address "10\.0\.1\.2 }"/);
  assert.ok(!r.transaction.includes("flush ruleset") && !r.transaction.includes("172.30.0.43"));
  assert.ok(nft.dump().includes("add element ip kube-proxy cluster-ips { 172.30.0.41 }"));
});

test("existing chain names nft could not have listed are ignored, not written", () => {
  const r = renderNFTablesFullSync({
    ...nftFakeProxierInput(),
    services: [good],
    endpoints: new Map(),
    existingChains: ["service-X-ns/a/tcp/p", "bad name/x", "bad\nname/y"],
    existingSets: ["affinity-X-ns/a/tcp/p__1.2.3.4/80"],
  });
  assert.match(r.transaction, /^flush chain ip kube-proxy service-X-ns\/a\/tcp\/p$/m);
  assert.match(r.transaction, /^delete set ip kube-proxy affinity-X-ns\/a\/tcp\/p__1\.2\.3\.4\/80$/m);
  assert.ok(!r.transaction.includes("bad"));
  assert.equal(r.warnings.filter((w) => w.startsWith("existing chain name")).length, 2);
  assert.deepEqual(r.staleChains, ["service-X-ns/a/tcp/p"]);
});

test("nodePortAddresses matching every address: no nodeport-ips set, NodePorts on local non-loopback addresses", () => {
  const nft = new FakeNftTable("ip", "kube-proxy");
  const svc = makeServicePort("ns1", "np", { clusterIP: "172.30.0.41", nodePort: 3001 });
  const r = syncInto(nft, { services: [svc], endpoints: [] }, {
    ...nftFakeProxierInput(),
    nodePortAddresses: newNodePortAddresses("IPv4", []),
  });
  assert.match(
    r.transaction,
    /^add set ip kube-proxy nodeport-ips .*\ndelete set ip kube-proxy nodeport-ips$/m,
  );
  const dump = nft.dump();
  assert.ok(!dump.includes("nodeport-ips"));
  assert.ok(
    dump.includes(
      "add rule ip kube-proxy services fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports",
    ),
  );
  assert.ok(
    dump.includes(
      "add rule ip kube-proxy nodeport-endpoints-check ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @no-endpoint-nodeports",
    ),
  );
  assert.ok(
    dump.includes(
      `add element ip kube-proxy no-endpoint-nodeports { tcp . 3001 comment "ns1/np:p80" : goto reject-chain }`,
    ),
  );
});

test("localhost in nodePortAddresses is not supported: reported and left out of nodeport-ips", () => {
  const nft = new FakeNftTable("ip", "kube-proxy");
  const r = syncInto(nft, { services: [], endpoints: [] }, {
    ...nftFakeProxierInput(),
    nodePortAddresses: newNodePortAddresses("IPv4", ["127.0.0.0/8", "192.168.0.0/24"]),
  });
  assert.deepEqual(r.warnings, [
    "--nodeport-addresses includes localhost but localhost NodePorts are not supported: address 127.0.0.1",
  ]);
  const elements = nft.dump().split("\n").filter((l) =>
    l.startsWith("add element ip kube-proxy nodeport-ips")
  );
  // Of the local addresses 127.0.0.1, 192.168.0.2, 192.168.1.2 and 192.168.99.11, only this one.
  assert.deepEqual(elements, ["add element ip kube-proxy nodeport-ips { 192.168.0.2 }"]);
});

test("masqueradeAll marks all ClusterIP traffic; no detector means no masquerade rule and no short-circuit", () => {
  const svc = makeServicePort("ns1", "lb", {
    clusterIP: "172.30.0.41",
    nodePort: 3001,
    externalPolicyLocal: true,
  });
  const cluster = {
    services: [svc],
    endpoints: [[svc, [makeEndpoint("10.0.1.1", 80, { nodeName: "test-node" })]]] as const,
  };
  const all =
    syncInto(new FakeNftTable("ip", "kube-proxy"), { ...cluster, endpoints: [...cluster.endpoints] }, {
      ...nftFakeProxierInput(),
      masqueradeAll: true,
    }).transaction;
  assert.match(all, /^add rule ip kube-proxy service-\S+ ip daddr 172\.30\.0\.41 jump mark-for-masquerade$/m);
  const none =
    syncInto(new FakeNftTable("ip", "kube-proxy"), { ...cluster, endpoints: [...cluster.endpoints] }, {
      ...nftFakeProxierInput(),
      localDetector: { mode: "None" },
    }).transaction;
  assert.ok(!/ip daddr 172\.30\.0\.41/.test(none));
  assert.ok(!none.includes("short-circuit pod traffic"));
  assert.ok(none.includes(`comment "short-circuit local traffic"`));
});

test("IPv6: ip6 matches and ipv6_addr sets, DNAT to a bracketed endpoint", () => {
  const svc = makeServicePort("ns1", "v6", { clusterIP: "fd00:10:96::41", stickyMaxAgeSeconds: 60 });
  const nft = new FakeNftTable("ip6", "kube-proxy");
  const r = syncInto(
    nft,
    { services: [svc], endpoints: [[svc, [makeEndpoint("fd00:10::1", 80)]]] },
    nftFakeProxierInput("IPv6"),
  );
  const dump = nft.dump();
  assert.ok(dump.includes("add rule ip6 kube-proxy cluster-ips-check ip6 daddr { fd00:10:96::/112 } drop"));
  assert.ok(dump.includes("add element ip6 kube-proxy nodeport-ips { 2001:db8::1 }"));
  assert.match(
    dump,
    /^add rule ip6 kube-proxy service-\S+ ip6 daddr fd00:10:96::41 ip6 saddr != fd00:10::\/64 jump mark-for-masquerade$/m,
  );
  assert.match(
    dump,
    /^add set ip6 kube-proxy affinity-\S+__fd00.10..1\/80 \{ type ipv6_addr ; flags dynamic,timeout ; timeout 60s ; \}$/m,
  );
  assert.match(dump, /^add rule ip6 kube-proxy endpoint-\S+ update @affinity-\S+ \{ ip6 saddr \}$/m);
  assert.match(
    dump,
    /^add rule ip6 kube-proxy endpoint-\S+__fd00.10..1\/80 meta l4proto tcp dnat to \[fd00:10::1\]:80$/m,
  );
  assert.deepEqual(r.warnings, []);
});

test("an endpoint listed twice gets one chain and no dangling jump", () => {
  const svc = makeServicePort("ns1", "dup", { clusterIP: "172.30.0.41", stickyMaxAgeSeconds: 30 });
  const r = syncInto(new FakeNftTable("ip", "kube-proxy"), {
    services: [svc],
    endpoints: [[svc, [makeEndpoint("10.0.1.1", 80), makeEndpoint("10.0.1.1", 80)]]],
  });
  assert.equal(r.activeChains.filter((c) => c.startsWith("endpoint-")).length, 1);
  assert.equal((r.transaction.match(/^add set .* affinity-/gm) ?? []).length, 1);
  assert.equal((r.transaction.match(/dnat to 10\.0\.1\.1:80$/gm) ?? []).length, 1);
  assert.ok(!r.transaction.includes("undefined"));
});
