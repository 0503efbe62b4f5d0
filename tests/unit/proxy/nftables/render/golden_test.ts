/**
 * Upstream's full-ruleset goldens for the nftables proxier (pkg/proxy/nftables/proxier_test.go:
 * TestOverallNFTablesRules, TestSyncProxyRulesRepeated), transcribed: the renderer's full-sync
 * transaction, applied to a fake table, must dump to upstream's expected table after upstream's
 * canonical sort.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { dedentNft, sortNFTablesTransaction } from "../../../../support/nft_canonical.ts";
import { FakeNftTable } from "../../../../support/nft_fake.ts";
import { FakeNftProxier, type NftCluster, syncInto } from "../../../../support/nft_fixtures.ts";
import { makeEndpoint, makeServicePort, TEST_NODE_NAME } from "../../../../support/tracer.ts";

/** Upstream's fake proxier uses mark "0x4000"; a real one formats 1<<14 with %#08x. */
function withRealMark(golden: string): string {
  return golden.replaceAll("0x4000", "0x00004000");
}

function assertTableEqual(expected: string, actual: string): void {
  assert.equal(sortNFTablesTransaction(actual), sortNFTablesTransaction(withRealMark(dedentNft(expected))));
}

/** Upstream baseRules: the fixed table content with NewFakeProxier's settings. */
const BASE_RULES = `
  add table ip kube-proxy { comment "rules for kube-proxy" ; }

  add set ip kube-proxy cluster-ips { type ipv4_addr ; comment "Active ClusterIPs" ; }
  add set ip kube-proxy nodeport-ips { type ipv4_addr ; comment "IPs that accept NodePort traffic" ; }

  add map ip kube-proxy firewall-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "destinations that are subject to LoadBalancerSourceRanges" ; }
  add map ip kube-proxy no-endpoint-nodeports { type inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to service nodeports with no endpoints" ; }
  add map ip kube-proxy no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; comment "vmap to drop or reject packets to services with no endpoints" ; }
  add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }
  add map ip kube-proxy service-nodeports { type inet_proto . inet_service : verdict ; comment "NodePort traffic" ; }

  add chain ip kube-proxy cluster-ips-check
  add chain ip kube-proxy filter-prerouting-pre-dnat { type filter hook prerouting priority -110 ; }
  add chain ip kube-proxy filter-output-pre-dnat { type filter hook output priority -110 ; }
  add chain ip kube-proxy filter-forward { type filter hook forward priority 0 ; }
  add chain ip kube-proxy filter-input { type filter hook input priority 0 ; }
  add chain ip kube-proxy filter-output { type filter hook output priority 0 ; }
  add chain ip kube-proxy firewall-check
  add chain ip kube-proxy mark-for-masquerade
  add chain ip kube-proxy masquerading
  add chain ip kube-proxy nat-output { type nat hook output priority -100 ; }
  add chain ip kube-proxy nat-postrouting { type nat hook postrouting priority 100 ; }
  add chain ip kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
  add chain ip kube-proxy nodeport-endpoints-check
  add chain ip kube-proxy reject-chain { comment "helper for @no-endpoint-services / @no-endpoint-nodeports" ; }
  add chain ip kube-proxy services
  add chain ip kube-proxy service-endpoints-check

  add rule ip kube-proxy cluster-ips-check ip daddr @cluster-ips reject comment "Reject traffic to invalid ports of ClusterIPs"
  add rule ip kube-proxy cluster-ips-check ip daddr { 172.30.0.0/16 } drop comment "Drop traffic to unallocated ClusterIPs"
  add rule ip kube-proxy filter-prerouting-pre-dnat ct state new jump firewall-check
  add rule ip kube-proxy filter-forward ct state new jump service-endpoints-check
  add rule ip kube-proxy filter-forward ct state new jump cluster-ips-check
  add rule ip kube-proxy filter-input ct state new jump nodeport-endpoints-check
  add rule ip kube-proxy filter-input ct state new jump service-endpoints-check
  add rule ip kube-proxy filter-output ct state new jump service-endpoints-check
  add rule ip kube-proxy filter-output-pre-dnat ct state new jump firewall-check
  add rule ip kube-proxy filter-output ct state new jump cluster-ips-check
  add rule ip kube-proxy firewall-check ip daddr . meta l4proto . th dport vmap @firewall-ips
  add rule ip kube-proxy mark-for-masquerade mark set mark or 0x4000
  add rule ip kube-proxy masquerading mark and 0x4000 == 0 return
  add rule ip kube-proxy masquerading mark set mark xor 0x4000
  add rule ip kube-proxy masquerading masquerade fully-random
  add rule ip kube-proxy nat-output jump services
  add rule ip kube-proxy nat-postrouting jump masquerading
  add rule ip kube-proxy nat-prerouting jump services
  add rule ip kube-proxy nodeport-endpoints-check ip daddr @nodeport-ips meta l4proto . th dport vmap @no-endpoint-nodeports
  add rule ip kube-proxy reject-chain reject
  add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips
  add rule ip kube-proxy services ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports

  add element ip kube-proxy nodeport-ips { 192.168.0.2 }
  add rule ip kube-proxy service-endpoints-check ip daddr . meta l4proto . th dport vmap @no-endpoint-services
`;

/** TestOverallNFTablesRules' six services. */
function overallCluster(): NftCluster {
  const svc1 = makeServicePort("ns1", "svc1", { clusterIP: "172.30.0.41" });
  // LoadBalancer, eTP=Local; its endpoint has no nodeName, so it is not local.
  const svc2 = makeServicePort("ns2", "svc2", {
    clusterIP: "172.30.0.42",
    nodePort: 3001,
    loadBalancerVIPs: ["1.2.3.4"],
    externalIPs: ["192.168.99.22"],
    healthCheckNodePort: 30000,
    externalPolicyLocal: true,
  });
  const svc3 = makeServicePort("ns3", "svc3", { clusterIP: "172.30.0.43", nodePort: 3003 });
  // Type NodePort without an allocated nodePort (the fake does not allocate one), with an external IP.
  const svc4 = makeServicePort("ns4", "svc4", { clusterIP: "172.30.0.44", externalIPs: ["192.168.99.33"] });
  // LoadBalancer, eTP=Cluster, source range " 203.0.113.0/25" (trimmed by the service-port builder),
  // ClientIP affinity.
  const svc5 = makeServicePort("ns5", "svc5", {
    clusterIP: "172.30.0.45",
    nodePort: 3002,
    loadBalancerVIPs: ["5.6.7.8"],
    loadBalancerSourceRanges: ["203.0.113.0/25"],
    stickyMaxAgeSeconds: 10800,
  });
  const svc6 = makeServicePort("ns6", "svc6", { clusterIP: "172.30.0.46" });
  return {
    services: [svc1, svc2, svc3, svc4, svc5, svc6],
    endpoints: [
      [svc1, [makeEndpoint("10.180.0.1", 80)]],
      [svc2, [makeEndpoint("10.180.0.2", 80)]],
      [svc3, [makeEndpoint("10.180.0.3", 80)]],
      [svc4, [makeEndpoint("10.180.0.4", 80), makeEndpoint("10.180.0.5", 80, { nodeName: TEST_NODE_NAME })]],
      [svc5, [makeEndpoint("10.180.0.3", 80)]],
    ],
  };
}

const OVERALL_SERVICES = `
  # svc1
  add chain ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80
  add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 ip daddr 172.30.0.41 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
  add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 numgen random mod 1 vmap { 0 : goto endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 }

  add chain ip kube-proxy endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80
  add rule ip kube-proxy endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 ip saddr 10.180.0.1 jump mark-for-masquerade
  add rule ip kube-proxy endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 meta l4proto tcp dnat to 10.180.0.1:80

  add element ip kube-proxy cluster-ips { 172.30.0.41 }
  add element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80 }

  # svc2
  add chain ip kube-proxy service-42NFTM6N-ns2/svc2/tcp/p80
  add rule ip kube-proxy service-42NFTM6N-ns2/svc2/tcp/p80 ip daddr 172.30.0.42 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
  add rule ip kube-proxy service-42NFTM6N-ns2/svc2/tcp/p80 numgen random mod 1 vmap { 0 : goto endpoint-SGOXE6O3-ns2/svc2/tcp/p80__10.180.0.2/80 }
  add chain ip kube-proxy external-42NFTM6N-ns2/svc2/tcp/p80
  add rule ip kube-proxy external-42NFTM6N-ns2/svc2/tcp/p80 ip saddr 10.0.0.0/8 goto service-42NFTM6N-ns2/svc2/tcp/p80 comment "short-circuit pod traffic"
  add rule ip kube-proxy external-42NFTM6N-ns2/svc2/tcp/p80 fib saddr type local jump mark-for-masquerade comment "masquerade local traffic"
  add rule ip kube-proxy external-42NFTM6N-ns2/svc2/tcp/p80 fib saddr type local goto service-42NFTM6N-ns2/svc2/tcp/p80 comment "short-circuit local traffic"
  add chain ip kube-proxy endpoint-SGOXE6O3-ns2/svc2/tcp/p80__10.180.0.2/80
  add rule ip kube-proxy endpoint-SGOXE6O3-ns2/svc2/tcp/p80__10.180.0.2/80 ip saddr 10.180.0.2 jump mark-for-masquerade
  add rule ip kube-proxy endpoint-SGOXE6O3-ns2/svc2/tcp/p80__10.180.0.2/80 meta l4proto tcp dnat to 10.180.0.2:80

  add element ip kube-proxy cluster-ips { 172.30.0.42 }
  add element ip kube-proxy service-ips { 172.30.0.42 . tcp . 80 : goto service-42NFTM6N-ns2/svc2/tcp/p80 }
  add element ip kube-proxy service-ips { 192.168.99.22 . tcp . 80 : goto external-42NFTM6N-ns2/svc2/tcp/p80 }
  add element ip kube-proxy service-ips { 1.2.3.4 . tcp . 80 : goto external-42NFTM6N-ns2/svc2/tcp/p80 }
  add element ip kube-proxy service-nodeports { tcp . 3001 : goto external-42NFTM6N-ns2/svc2/tcp/p80 }

  add element ip kube-proxy no-endpoint-nodeports { tcp . 3001 comment "ns2/svc2:p80" : drop }
  add element ip kube-proxy no-endpoint-services { 1.2.3.4 . tcp . 80 comment "ns2/svc2:p80" : drop }
  add element ip kube-proxy no-endpoint-services { 192.168.99.22 . tcp . 80 comment "ns2/svc2:p80" : drop }

  # svc3
  add chain ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80
  add rule ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80 ip daddr 172.30.0.43 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
  add rule ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80 numgen random mod 1 vmap { 0 : goto endpoint-UEIP74TE-ns3/svc3/tcp/p80__10.180.0.3/80 }
  add chain ip kube-proxy external-4AT6LBPK-ns3/svc3/tcp/p80
  add rule ip kube-proxy external-4AT6LBPK-ns3/svc3/tcp/p80 jump mark-for-masquerade
  add rule ip kube-proxy external-4AT6LBPK-ns3/svc3/tcp/p80 goto service-4AT6LBPK-ns3/svc3/tcp/p80
  add chain ip kube-proxy endpoint-UEIP74TE-ns3/svc3/tcp/p80__10.180.0.3/80
  add rule ip kube-proxy endpoint-UEIP74TE-ns3/svc3/tcp/p80__10.180.0.3/80 ip saddr 10.180.0.3 jump mark-for-masquerade
  add rule ip kube-proxy endpoint-UEIP74TE-ns3/svc3/tcp/p80__10.180.0.3/80 meta l4proto tcp dnat to 10.180.0.3:80

  add element ip kube-proxy cluster-ips { 172.30.0.43 }
  add element ip kube-proxy service-ips { 172.30.0.43 . tcp . 80 : goto service-4AT6LBPK-ns3/svc3/tcp/p80 }
  add element ip kube-proxy service-nodeports { tcp . 3003 : goto external-4AT6LBPK-ns3/svc3/tcp/p80 }

  # svc4
  add chain ip kube-proxy service-LAUZTJTB-ns4/svc4/tcp/p80
  add rule ip kube-proxy service-LAUZTJTB-ns4/svc4/tcp/p80 ip daddr 172.30.0.44 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
  add rule ip kube-proxy service-LAUZTJTB-ns4/svc4/tcp/p80 numgen random mod 2 vmap { 0 : goto endpoint-UNZV3OEC-ns4/svc4/tcp/p80__10.180.0.4/80 , 1 : goto endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80 }
  add chain ip kube-proxy external-LAUZTJTB-ns4/svc4/tcp/p80
  add rule ip kube-proxy external-LAUZTJTB-ns4/svc4/tcp/p80 jump mark-for-masquerade
  add rule ip kube-proxy external-LAUZTJTB-ns4/svc4/tcp/p80 goto service-LAUZTJTB-ns4/svc4/tcp/p80
  add chain ip kube-proxy endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80
  add rule ip kube-proxy endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80 ip saddr 10.180.0.5 jump mark-for-masquerade
  add rule ip kube-proxy endpoint-5RFCDDV7-ns4/svc4/tcp/p80__10.180.0.5/80 meta l4proto tcp dnat to 10.180.0.5:80
  add chain ip kube-proxy endpoint-UNZV3OEC-ns4/svc4/tcp/p80__10.180.0.4/80
  add rule ip kube-proxy endpoint-UNZV3OEC-ns4/svc4/tcp/p80__10.180.0.4/80 ip saddr 10.180.0.4 jump mark-for-masquerade
  add rule ip kube-proxy endpoint-UNZV3OEC-ns4/svc4/tcp/p80__10.180.0.4/80 meta l4proto tcp dnat to 10.180.0.4:80

  add element ip kube-proxy cluster-ips { 172.30.0.44 }
  add element ip kube-proxy service-ips { 172.30.0.44 . tcp . 80 : goto service-LAUZTJTB-ns4/svc4/tcp/p80 }
  add element ip kube-proxy service-ips { 192.168.99.33 . tcp . 80 : goto external-LAUZTJTB-ns4/svc4/tcp/p80 }

  # svc5
  add set ip kube-proxy affinity-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80 { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }
  add chain ip kube-proxy service-HVFWP5L3-ns5/svc5/tcp/p80
  add rule ip kube-proxy service-HVFWP5L3-ns5/svc5/tcp/p80 ip daddr 172.30.0.45 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
  add rule ip kube-proxy service-HVFWP5L3-ns5/svc5/tcp/p80 ip saddr @affinity-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80 goto endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80
  add rule ip kube-proxy service-HVFWP5L3-ns5/svc5/tcp/p80 numgen random mod 1 vmap { 0 : goto endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80 }
  add chain ip kube-proxy external-HVFWP5L3-ns5/svc5/tcp/p80
  add rule ip kube-proxy external-HVFWP5L3-ns5/svc5/tcp/p80 jump mark-for-masquerade
  add rule ip kube-proxy external-HVFWP5L3-ns5/svc5/tcp/p80 goto service-HVFWP5L3-ns5/svc5/tcp/p80

  add chain ip kube-proxy endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80
  add rule ip kube-proxy endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80 ip saddr 10.180.0.3 jump mark-for-masquerade
  add rule ip kube-proxy endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80 update @affinity-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80 { ip saddr }
  add rule ip kube-proxy endpoint-GTK6MW7G-ns5/svc5/tcp/p80__10.180.0.3/80 meta l4proto tcp dnat to 10.180.0.3:80

  add chain ip kube-proxy firewall-HVFWP5L3-ns5/svc5/tcp/p80
  add rule ip kube-proxy firewall-HVFWP5L3-ns5/svc5/tcp/p80 ip saddr != { 203.0.113.0/25 } drop

  add element ip kube-proxy cluster-ips { 172.30.0.45 }
  add element ip kube-proxy service-ips { 172.30.0.45 . tcp . 80 : goto service-HVFWP5L3-ns5/svc5/tcp/p80 }
  add element ip kube-proxy service-ips { 5.6.7.8 . tcp . 80 : goto external-HVFWP5L3-ns5/svc5/tcp/p80 }
  add element ip kube-proxy service-nodeports { tcp . 3002 : goto external-HVFWP5L3-ns5/svc5/tcp/p80 }
  add element ip kube-proxy firewall-ips { 5.6.7.8 . tcp . 80 : goto firewall-HVFWP5L3-ns5/svc5/tcp/p80 }

  # svc6
  add element ip kube-proxy cluster-ips { 172.30.0.46 }
  add element ip kube-proxy no-endpoint-services { 172.30.0.46 . tcp . 80 comment "ns6/svc6:p80" : goto reject-chain }
`;

test("TestOverallNFTablesRules: full sync equals upstream's golden", () => {
  const nft = new FakeNftTable("ip", "kube-proxy");
  syncInto(nft, overallCluster());
  assertTableEqual(BASE_RULES + OVERALL_SERVICES, nft.dump());
});

test("TestOverallNFTablesRules: a second full sync (not the first) leaves the same table", () => {
  const nft = new FakeNftTable("ip", "kube-proxy");
  syncInto(nft, overallCluster());
  const second = syncInto(nft, overallCluster());
  assert.ok(!second.transaction.includes("delete chain"), "base chains are recreated only on the first sync");
  assert.deepEqual(second.staleChains, []);
  assertTableEqual(BASE_RULES + OVERALL_SERVICES, nft.dump());
});

test("full sync output is deterministic whatever the input order", () => {
  const c = overallCluster();
  const a = syncInto(new FakeNftTable("ip", "kube-proxy"), c);
  const b = syncInto(new FakeNftTable("ip", "kube-proxy"), {
    services: [...c.services].reverse(),
    endpoints: [...c.endpoints].reverse().map(([s, eps]) => [s, [...eps].reverse()] as const),
  });
  assert.equal(a.transaction, b.transaction);
});

// TestSyncProxyRulesRepeated: upstream's expected tables after each step are built from the same lines,
// so they are assembled here from named pieces, each transcribed once.

const SVC1 = `
  add chain ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80
  add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 ip daddr 172.30.0.41 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
  add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 numgen random mod 1 vmap { 0 : goto endpoint-5TPGNJF2-ns1/svc1/tcp/p80__10.0.1.1/80 }
  add chain ip kube-proxy endpoint-5TPGNJF2-ns1/svc1/tcp/p80__10.0.1.1/80
  add rule ip kube-proxy endpoint-5TPGNJF2-ns1/svc1/tcp/p80__10.0.1.1/80 ip saddr 10.0.1.1 jump mark-for-masquerade
  add rule ip kube-proxy endpoint-5TPGNJF2-ns1/svc1/tcp/p80__10.0.1.1/80 meta l4proto tcp dnat to 10.0.1.1:80
`;
const SVC2 = `
  add chain ip kube-proxy service-MHHHYRWA-ns2/svc2/tcp/p8080
  add rule ip kube-proxy service-MHHHYRWA-ns2/svc2/tcp/p8080 ip daddr 172.30.0.42 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
  add rule ip kube-proxy service-MHHHYRWA-ns2/svc2/tcp/p8080 numgen random mod 1 vmap { 0 : goto endpoint-7RVP4LUQ-ns2/svc2/tcp/p8080__10.0.2.1/8080 }
  add chain ip kube-proxy endpoint-7RVP4LUQ-ns2/svc2/tcp/p8080__10.0.2.1/8080
  add rule ip kube-proxy endpoint-7RVP4LUQ-ns2/svc2/tcp/p8080__10.0.2.1/8080 ip saddr 10.0.2.1 jump mark-for-masquerade
  add rule ip kube-proxy endpoint-7RVP4LUQ-ns2/svc2/tcp/p8080__10.0.2.1/8080 meta l4proto tcp dnat to 10.0.2.1:8080
`;
const SVC2_STALE = `
  add chain ip kube-proxy service-MHHHYRWA-ns2/svc2/tcp/p8080
  add chain ip kube-proxy endpoint-7RVP4LUQ-ns2/svc2/tcp/p8080__10.0.2.1/8080
`;
const SVC3 = `
  add chain ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80
  add rule ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80 ip daddr 172.30.0.43 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
  add rule ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80 numgen random mod 1 vmap { 0 : goto endpoint-2OCDJSZQ-ns3/svc3/tcp/p80__10.0.3.1/80 }
  add chain ip kube-proxy endpoint-2OCDJSZQ-ns3/svc3/tcp/p80__10.0.3.1/80
  add rule ip kube-proxy endpoint-2OCDJSZQ-ns3/svc3/tcp/p80__10.0.3.1/80 ip saddr 10.0.3.1 jump mark-for-masquerade
  add rule ip kube-proxy endpoint-2OCDJSZQ-ns3/svc3/tcp/p80__10.0.3.1/80 meta l4proto tcp dnat to 10.0.3.1:80
`;
const SVC3_MOVED = `
  add chain ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80
  add rule ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80 ip daddr 172.30.0.43 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
  add rule ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80 numgen random mod 1 vmap { 0 : goto endpoint-SWWHDC7X-ns3/svc3/tcp/p80__10.0.3.2/80 }
  add chain ip kube-proxy endpoint-2OCDJSZQ-ns3/svc3/tcp/p80__10.0.3.1/80
  add chain ip kube-proxy endpoint-SWWHDC7X-ns3/svc3/tcp/p80__10.0.3.2/80
  add rule ip kube-proxy endpoint-SWWHDC7X-ns3/svc3/tcp/p80__10.0.3.2/80 ip saddr 10.0.3.2 jump mark-for-masquerade
  add rule ip kube-proxy endpoint-SWWHDC7X-ns3/svc3/tcp/p80__10.0.3.2/80 meta l4proto tcp dnat to 10.0.3.2:80
`;
const SVC3_TWO = `
  add chain ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80
  add rule ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80 ip daddr 172.30.0.43 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
  add rule ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80 numgen random mod 2 vmap { 0 : goto endpoint-SWWHDC7X-ns3/svc3/tcp/p80__10.0.3.2/80 , 1 : goto endpoint-TQ2QKHCZ-ns3/svc3/tcp/p80__10.0.3.3/80 }
  add chain ip kube-proxy endpoint-SWWHDC7X-ns3/svc3/tcp/p80__10.0.3.2/80
  add rule ip kube-proxy endpoint-SWWHDC7X-ns3/svc3/tcp/p80__10.0.3.2/80 ip saddr 10.0.3.2 jump mark-for-masquerade
  add rule ip kube-proxy endpoint-SWWHDC7X-ns3/svc3/tcp/p80__10.0.3.2/80 meta l4proto tcp dnat to 10.0.3.2:80
  add chain ip kube-proxy endpoint-TQ2QKHCZ-ns3/svc3/tcp/p80__10.0.3.3/80
  add rule ip kube-proxy endpoint-TQ2QKHCZ-ns3/svc3/tcp/p80__10.0.3.3/80 ip saddr 10.0.3.3 jump mark-for-masquerade
  add rule ip kube-proxy endpoint-TQ2QKHCZ-ns3/svc3/tcp/p80__10.0.3.3/80 meta l4proto tcp dnat to 10.0.3.3:80
`;
const SVC3_EMPTIED = `
  add chain ip kube-proxy service-4AT6LBPK-ns3/svc3/tcp/p80
  add chain ip kube-proxy endpoint-SWWHDC7X-ns3/svc3/tcp/p80__10.0.3.2/80
  add chain ip kube-proxy endpoint-TQ2QKHCZ-ns3/svc3/tcp/p80__10.0.3.3/80
`;
const SVC4 = `
  add chain ip kube-proxy service-LAUZTJTB-ns4/svc4/tcp/p80
  add rule ip kube-proxy service-LAUZTJTB-ns4/svc4/tcp/p80 ip daddr 172.30.0.44 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
  add rule ip kube-proxy service-LAUZTJTB-ns4/svc4/tcp/p80 numgen random mod 1 vmap { 0 : goto endpoint-WAHRBT2B-ns4/svc4/tcp/p80__10.0.4.1/80 }
  add chain ip kube-proxy endpoint-WAHRBT2B-ns4/svc4/tcp/p80__10.0.4.1/80
  add rule ip kube-proxy endpoint-WAHRBT2B-ns4/svc4/tcp/p80__10.0.4.1/80 ip saddr 10.0.4.1 jump mark-for-masquerade
  add rule ip kube-proxy endpoint-WAHRBT2B-ns4/svc4/tcp/p80__10.0.4.1/80 meta l4proto tcp dnat to 10.0.4.1:80
`;
const CIP = (n: number) => `add element ip kube-proxy cluster-ips { 172.30.0.${n} }\n`;
const SIP1 =
  "add element ip kube-proxy service-ips { 172.30.0.41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80 }\n";
const SIP2 =
  "add element ip kube-proxy service-ips { 172.30.0.42 . tcp . 8080 : goto service-MHHHYRWA-ns2/svc2/tcp/p8080 }\n";
const SIP3 =
  "add element ip kube-proxy service-ips { 172.30.0.43 . tcp . 80 : goto service-4AT6LBPK-ns3/svc3/tcp/p80 }\n";
const SIP4 =
  "add element ip kube-proxy service-ips { 172.30.0.44 . tcp . 80 : goto service-LAUZTJTB-ns4/svc4/tcp/p80 }\n";
const NOEP3 =
  `add element ip kube-proxy no-endpoint-services { 172.30.0.43 . tcp . 80 comment "ns3/svc3:p80" : goto reject-chain }\n`;
const NOEP4 =
  `add element ip kube-proxy no-endpoint-services { 172.30.0.44 . tcp . 80 comment "ns4/svc4:p80" : goto reject-chain }\n`;

for (const partial of [false, true]) {
  test(`TestSyncProxyRulesRepeated (${partial ? "partial" : "full"} syncs): each step's table equals upstream's golden`, () => {
    const fp = new FakeNftProxier(undefined, partial);
    const svc1 = makeServicePort("ns1", "svc1", { clusterIP: "172.30.0.41" });
    const svc2 = makeServicePort("ns2", "svc2", {
      clusterIP: "172.30.0.42",
      port: "p8080",
      portNumber: 8080,
    });
    const svc3 = makeServicePort("ns3", "svc3", { clusterIP: "172.30.0.43" });
    const svc4 = makeServicePort("ns4", "svc4", { clusterIP: "172.30.0.44" });
    // Upstream's operation counts of each partial sync's transaction (-1: not checked).
    const step = (expected: string, operations = -1) => {
      fp.sync();
      assertTableEqual(BASE_RULES + expected, fp.nft.dump());
      if (partial && operations >= 0) assert.equal(fp.lastOperations, operations, "transaction operations");
    };

    fp.setService(svc1);
    fp.setService(svc2);
    fp.setEndpoints(svc1, [makeEndpoint("10.0.1.1", 80)]);
    fp.setEndpoints(svc2, [makeEndpoint("10.0.2.1", 8080)]);
    step(CIP(41) + CIP(42) + SIP1 + SIP2 + SVC1 + SVC2);

    // Add a new service and its endpoints.
    fp.setService(svc3);
    fp.setEndpoints(svc3, [makeEndpoint("10.0.3.1", 80)]);
    step(CIP(41) + CIP(42) + CIP(43) + SIP1 + SIP2 + SIP3 + SVC1 + SVC2 + SVC3, 10);

    // Delete a service; its chains are flushed, but not immediately deleted.
    fp.deleteService(svc2);
    step(CIP(41) + CIP(43) + SIP1 + SIP3 + SVC1 + SVC2_STALE + SVC3, 4);

    // Once aged, the stale chains are deleted.
    fp.ageStaleChains();
    step(CIP(41) + CIP(43) + SIP1 + SIP3 + SVC1 + SVC3, 0);

    // Add a service, sync, then add its endpoints.
    fp.setService(svc4);
    step(CIP(41) + CIP(43) + CIP(44) + SIP1 + SIP3 + SVC1 + SVC3 + NOEP4, 2);
    fp.setEndpoints(svc4, [makeEndpoint("10.0.4.1", 80)]);
    step(CIP(41) + CIP(43) + CIP(44) + SIP1 + SIP3 + SIP4 + SVC1 + SVC3 + SVC4, 10);

    // Change an endpoint of an existing service: the old endpoint chain is not deleted yet.
    fp.setEndpoints(svc3, [makeEndpoint("10.0.3.2", 80)]);
    step(CIP(41) + CIP(43) + CIP(44) + SIP1 + SIP3 + SIP4 + SVC1 + SVC3_MOVED + SVC4, 9);

    // Age it, and add an endpoint to the service.
    fp.ageStaleChains();
    fp.setEndpoints(svc3, [makeEndpoint("10.0.3.2", 80), makeEndpoint("10.0.3.3", 80)]);
    const full = CIP(41) + CIP(43) + CIP(44) + SIP1 + SIP3 + SIP4 + SVC1 + SVC3_TWO + SVC4;
    step(full, 12);

    // Empty a service's endpoints: its chains are flushed, but not immediately deleted.
    fp.setEndpoints(svc3, []);
    step(CIP(41) + CIP(43) + CIP(44) + SIP1 + NOEP3 + SIP4 + SVC1 + SVC3_EMPTIED + SVC4, 5);
    assert.deepEqual([...fp.staleChains.keys()].sort(), [
      "endpoint-SWWHDC7X-ns3/svc3/tcp/p80__10.0.3.2/80",
      "endpoint-TQ2QKHCZ-ns3/svc3/tcp/p80__10.0.3.3/80",
      "service-4AT6LBPK-ns3/svc3/tcp/p80",
    ]);

    // Restore them at once: the chains are refilled and no longer stale.
    fp.setEndpoints(svc3, [makeEndpoint("10.0.3.2", 80), makeEndpoint("10.0.3.3", 80)]);
    step(full, 14);
    assert.equal(fp.staleChains.size, 0);

    // Empty, sync, age, restore, sync: the chains are deleted first, then recreated.
    fp.setEndpoints(svc3, []);
    fp.sync();
    fp.ageStaleChains();
    fp.setEndpoints(svc3, [makeEndpoint("10.0.3.2", 80), makeEndpoint("10.0.3.3", 80)]);
    step(full);

    // No changes: the same table.
    step(full, 0);
  });
}

test("TestSyncProxyRulesStartup: a first full sync over an older table equals upstream's golden", () => {
  const fp = new FakeNftProxier();
  // Part of the desired state is already in the kernel (upstream loads it with nft.ParseDump).
  fp.nft.run(
    sortNFTablesTransaction(
      withRealMark(dedentNft(BASE_RULES + SVC1 + SVC2 + CIP(41) + CIP(42) + SIP1 + SIP2)),
    ),
  );

  // The desired state differs: svc1 has a second endpoint, svc3 is new (and has no endpoints).
  const svc1 = makeServicePort("ns1", "svc1", { clusterIP: "172.30.0.41" });
  const svc2 = makeServicePort("ns2", "svc2", { clusterIP: "172.30.0.42", port: "p8080", portNumber: 8080 });
  const svc3 = makeServicePort("ns3", "svc3", { clusterIP: "172.30.0.43" });
  for (const s of [svc1, svc2, svc3]) fp.setService(s);
  fp.setEndpoints(svc1, [makeEndpoint("10.0.1.1", 80), makeEndpoint("10.0.1.2", 80)]);
  fp.setEndpoints(svc2, [makeEndpoint("10.0.2.1", 8080)]);
  const result = fp.sync();
  assert.match(
    result.transaction,
    /^delete chain ip kube-proxy nat-prerouting$/m,
    "base chains are recreated",
  );

  assertTableEqual(
    BASE_RULES + CIP(41) + CIP(42) + CIP(43) + SIP1 + SIP2 + NOEP3 + `
    add chain ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80
    add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 ip daddr 172.30.0.41 ip saddr != 10.0.0.0/8 jump mark-for-masquerade
    add rule ip kube-proxy service-ULMVA6XW-ns1/svc1/tcp/p80 numgen random mod 2 vmap { 0 : goto endpoint-5TPGNJF2-ns1/svc1/tcp/p80__10.0.1.1/80 , 1 : goto endpoint-ZCZBVNAZ-ns1/svc1/tcp/p80__10.0.1.2/80 }
    add chain ip kube-proxy endpoint-5TPGNJF2-ns1/svc1/tcp/p80__10.0.1.1/80
    add rule ip kube-proxy endpoint-5TPGNJF2-ns1/svc1/tcp/p80__10.0.1.1/80 ip saddr 10.0.1.1 jump mark-for-masquerade
    add rule ip kube-proxy endpoint-5TPGNJF2-ns1/svc1/tcp/p80__10.0.1.1/80 meta l4proto tcp dnat to 10.0.1.1:80
    add chain ip kube-proxy endpoint-ZCZBVNAZ-ns1/svc1/tcp/p80__10.0.1.2/80
    add rule ip kube-proxy endpoint-ZCZBVNAZ-ns1/svc1/tcp/p80__10.0.1.2/80 ip saddr 10.0.1.2 jump mark-for-masquerade
    add rule ip kube-proxy endpoint-ZCZBVNAZ-ns1/svc1/tcp/p80__10.0.1.2/80 meta l4proto tcp dnat to 10.0.1.2:80
    ` + SVC2,
    fp.nft.dump(),
  );
});

/** TestNoEndpointsMetric: one NodePort service port, endpoints ready, on this node or not. */
test("TestNoEndpointsMetric: services without local endpoints are counted per traffic policy", () => {
  const cases: Array<
    { name: string; itp: boolean; etp: boolean; nodes: string[]; internal: number; external: number }
  > = [
    {
      name: "iTP set, local endpoints",
      itp: true,
      etp: false,
      nodes: [TEST_NODE_NAME, "node1", "node2"],
      internal: 0,
      external: 0,
    },
    {
      name: "eTP set, local endpoints",
      itp: false,
      etp: true,
      nodes: [TEST_NODE_NAME, "node1", "node2"],
      internal: 0,
      external: 0,
    },
    {
      name: "both set, local endpoints",
      itp: true,
      etp: true,
      nodes: [TEST_NODE_NAME, "node1", "node2"],
      internal: 0,
      external: 0,
    },
    {
      name: "iTP set, no local endpoints",
      itp: true,
      etp: false,
      nodes: ["node0", "node1", "node2"],
      internal: 1,
      external: 0,
    },
    {
      name: "eTP set, no local endpoints",
      itp: false,
      etp: true,
      nodes: ["node0", "node1", "node2"],
      internal: 0,
      external: 1,
    },
    {
      name: "both set, no local endpoints",
      itp: true,
      etp: true,
      nodes: ["node0", "node1", "node2"],
      internal: 1,
      external: 1,
    },
    { name: "both set, no endpoints at all", itp: true, etp: true, nodes: [], internal: 0, external: 0 },
  ];
  for (const c of cases) {
    const svc = makeServicePort("ns1", "svc1", {
      clusterIP: "172.30.1.1",
      port: "",
      nodePort: 123,
      internalPolicyLocal: c.itp,
      externalPolicyLocal: c.etp,
    });
    const eps = c.nodes.map((n, i) => makeEndpoint(`10.0.1.${i + 1}`, 80, { nodeName: n }));
    const r = syncInto(new FakeNftTable("ip", "kube-proxy"), { services: [svc], endpoints: [[svc, eps]] });
    assert.equal(r.noLocalEndpointsInternal, c.internal, `${c.name}: internal`);
    assert.equal(r.noLocalEndpointsExternal, c.external, `${c.name}: external`);
  }
});
