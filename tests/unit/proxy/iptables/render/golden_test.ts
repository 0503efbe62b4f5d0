import { test } from "node:test";
import assert from "node:assert/strict";
import {
  checkIptablesRuleJumps,
  countRules,
  sortIptablesRules,
} from "../../../../support/iptables_canonical.ts";
import { newNoOpLocalDetector } from "../../../../../lib/proxy/iptables/local_detector.ts";
import { renderIptablesRules } from "../../../../../lib/proxy/iptables/render/render.ts";
import {
  checkPacketFlows,
  dedent,
  FakeProxier,
  type FakeProxierOptions,
  lineDiff,
  makeEndpoint,
  makeServicePort,
  TEST_EXTERNAL_CLIENT,
  TEST_NODE_IP,
  TEST_NODE_IPS,
  TEST_NODE_NAME,
  withRealMark,
} from "../../../../support/tracer.ts";

/** TestOverallIPTablesRules: six services of every kind (upstream proxier_test.go). */
function overallFixture(p: FakeProxier): void {
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
  // Type NodePort without an allocated nodePort, with an external IP.
  const svc4 = makeServicePort("ns4", "svc4", { clusterIP: "172.30.0.44", externalIPs: ["192.168.99.33"] });
  // LoadBalancer, eTP=Cluster, source range, ClientIP affinity (its healthCheckNodePort is not
  // programmed: the service-port builder keeps it only for eTP=Local).
  const svc5 = makeServicePort("ns5", "svc5", {
    clusterIP: "172.30.0.45",
    nodePort: 3002,
    loadBalancerVIPs: ["5.6.7.8"],
    loadBalancerSourceRanges: ["203.0.113.0/25"],
    stickyMaxAgeSeconds: 10800,
  });
  const svc6 = makeServicePort("ns6", "svc6", { clusterIP: "172.30.0.46" });
  for (const s of [svc1, svc2, svc3, svc4, svc5, svc6]) p.setService(s);
  p.setEndpoints(svc1, [makeEndpoint("10.180.0.1", 80)]);
  p.setEndpoints(svc2, [makeEndpoint("10.180.0.2", 80)]);
  p.setEndpoints(svc3, [makeEndpoint("10.180.0.3", 80)]);
  p.setEndpoints(svc4, [
    makeEndpoint("10.180.0.4", 80),
    makeEndpoint("10.180.0.5", 80, { nodeName: TEST_NODE_NAME }),
  ]);
  p.setEndpoints(svc5, [makeEndpoint("10.180.0.3", 80)]);
}

const OVERALL_EXPECTED = dedent(`
    *filter
    :KUBE-NODEPORTS - [0:0]
    :KUBE-SERVICES - [0:0]
    :KUBE-EXTERNAL-SERVICES - [0:0]
    :KUBE-FIREWALL - [0:0]
    :KUBE-FORWARD - [0:0]
    :KUBE-PROXY-FIREWALL - [0:0]
    -A KUBE-NODEPORTS -m comment --comment "ns2/svc2:p80 health check node port" -m tcp -p tcp --dport 30000 -j ACCEPT
    -A KUBE-SERVICES -m comment --comment "ns6/svc6:p80 has no endpoints" -m tcp -p tcp -d 172.30.0.46 --dport 80 -j REJECT
    -A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m tcp -p tcp -d 192.168.99.22 --dport 80 -j DROP
    -A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j DROP
    -A KUBE-EXTERNAL-SERVICES -m comment --comment "ns2/svc2:p80 has no local endpoints" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 3001 -j DROP
    -A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
    -A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP
    -A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
    -A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
    -A KUBE-PROXY-FIREWALL -m comment --comment "ns5/svc5:p80 traffic not accepted by KUBE-FW-NUKIZ6OKUXPJNT4C" -m tcp -p tcp -d 5.6.7.8 --dport 80 -j DROP
    COMMIT
    *nat
    :KUBE-NODEPORTS - [0:0]
    :KUBE-SERVICES - [0:0]
    :KUBE-EXT-4SW47YFZTEDKD3PK - [0:0]
    :KUBE-EXT-GNZBNJ2PO5MGZ6GT - [0:0]
    :KUBE-EXT-NUKIZ6OKUXPJNT4C - [0:0]
    :KUBE-EXT-X27LE4BHSL4DOUIK - [0:0]
    :KUBE-FW-NUKIZ6OKUXPJNT4C - [0:0]
    :KUBE-MARK-MASQ - [0:0]
    :KUBE-POSTROUTING - [0:0]
    :KUBE-SEP-C6EBXVWJJZMIWKLZ - [0:0]
    :KUBE-SEP-I77PXRDZVX7PMWMN - [0:0]
    :KUBE-SEP-OYPFS5VJICHGATKP - [0:0]
    :KUBE-SEP-RS4RBKLTHTF2IUXJ - [0:0]
    :KUBE-SEP-SXIVWICOYRO3J4NJ - [0:0]
    :KUBE-SEP-UKSFD7AGPMPPLUHC - [0:0]
    :KUBE-SVC-4SW47YFZTEDKD3PK - [0:0]
    :KUBE-SVC-GNZBNJ2PO5MGZ6GT - [0:0]
    :KUBE-SVC-NUKIZ6OKUXPJNT4C - [0:0]
    :KUBE-SVC-X27LE4BHSL4DOUIK - [0:0]
    :KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
    -A KUBE-NODEPORTS -m comment --comment ns2/svc2:p80 -m tcp -p tcp -d 127.0.0.0/8 --dport 3001 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
    -A KUBE-NODEPORTS -m comment --comment ns2/svc2:p80 -m tcp -p tcp --dport 3001 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
    -A KUBE-NODEPORTS -m comment --comment ns3/svc3:p80 -m tcp -p tcp -d 127.0.0.0/8 --dport 3003 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-EXT-X27LE4BHSL4DOUIK
    -A KUBE-NODEPORTS -m comment --comment ns3/svc3:p80 -m tcp -p tcp --dport 3003 -j KUBE-EXT-X27LE4BHSL4DOUIK
    -A KUBE-NODEPORTS -m comment --comment ns5/svc5:p80 -m tcp -p tcp -d 127.0.0.0/8 --dport 3002 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-EXT-NUKIZ6OKUXPJNT4C
    -A KUBE-NODEPORTS -m comment --comment ns5/svc5:p80 -m tcp -p tcp --dport 3002 -j KUBE-EXT-NUKIZ6OKUXPJNT4C
    -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
    -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 80 -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
    -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 external IP" -m tcp -p tcp -d 192.168.99.22 --dport 80 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
    -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 loadbalancer IP" -m tcp -p tcp -d 1.2.3.4 --dport 80 -j KUBE-EXT-GNZBNJ2PO5MGZ6GT
    -A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
    -A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 -j KUBE-SVC-4SW47YFZTEDKD3PK
    -A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 external IP" -m tcp -p tcp -d 192.168.99.33 --dport 80 -j KUBE-EXT-4SW47YFZTEDKD3PK
    -A KUBE-SERVICES -m comment --comment "ns5/svc5:p80 cluster IP" -m tcp -p tcp -d 172.30.0.45 --dport 80 -j KUBE-SVC-NUKIZ6OKUXPJNT4C
    -A KUBE-SERVICES -m comment --comment "ns5/svc5:p80 loadbalancer IP" -m tcp -p tcp -d 5.6.7.8 --dport 80 -j KUBE-FW-NUKIZ6OKUXPJNT4C
    -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
    -A KUBE-EXT-4SW47YFZTEDKD3PK -m comment --comment "masquerade traffic for ns4/svc4:p80 external destinations" -j KUBE-MARK-MASQ
    -A KUBE-EXT-4SW47YFZTEDKD3PK -j KUBE-SVC-4SW47YFZTEDKD3PK
    -A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "pod traffic for ns2/svc2:p80 external destinations" -s 10.0.0.0/8 -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
    -A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "masquerade LOCAL traffic for ns2/svc2:p80 external destinations" -m addrtype --src-type LOCAL -j KUBE-MARK-MASQ
    -A KUBE-EXT-GNZBNJ2PO5MGZ6GT -m comment --comment "route LOCAL traffic for ns2/svc2:p80 external destinations" -m addrtype --src-type LOCAL -j KUBE-SVC-GNZBNJ2PO5MGZ6GT
    -A KUBE-EXT-NUKIZ6OKUXPJNT4C -m comment --comment "masquerade traffic for ns5/svc5:p80 external destinations" -j KUBE-MARK-MASQ
    -A KUBE-EXT-NUKIZ6OKUXPJNT4C -j KUBE-SVC-NUKIZ6OKUXPJNT4C
    -A KUBE-EXT-X27LE4BHSL4DOUIK -m comment --comment "masquerade traffic for ns3/svc3:p80 external destinations" -j KUBE-MARK-MASQ
    -A KUBE-EXT-X27LE4BHSL4DOUIK -j KUBE-SVC-X27LE4BHSL4DOUIK
    -A KUBE-FW-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 loadbalancer IP" -s 203.0.113.0/25 -j KUBE-EXT-NUKIZ6OKUXPJNT4C
    -A KUBE-FW-NUKIZ6OKUXPJNT4C -m comment --comment "other traffic to ns5/svc5:p80 will be dropped by KUBE-PROXY-FIREWALL"
    -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
    -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
    -A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
    -A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
    -A KUBE-SEP-C6EBXVWJJZMIWKLZ -m comment --comment ns4/svc4:p80 -s 10.180.0.5 -j KUBE-MARK-MASQ
    -A KUBE-SEP-C6EBXVWJJZMIWKLZ -m comment --comment ns4/svc4:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.5:80
    -A KUBE-SEP-I77PXRDZVX7PMWMN -m comment --comment ns5/svc5:p80 -s 10.180.0.3 -j KUBE-MARK-MASQ
    -A KUBE-SEP-I77PXRDZVX7PMWMN -m comment --comment ns5/svc5:p80 -m recent --name KUBE-SEP-I77PXRDZVX7PMWMN --set -m tcp -p tcp -j DNAT --to-destination 10.180.0.3:80
    -A KUBE-SEP-OYPFS5VJICHGATKP -m comment --comment ns3/svc3:p80 -s 10.180.0.3 -j KUBE-MARK-MASQ
    -A KUBE-SEP-OYPFS5VJICHGATKP -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.3:80
    -A KUBE-SEP-RS4RBKLTHTF2IUXJ -m comment --comment ns2/svc2:p80 -s 10.180.0.2 -j KUBE-MARK-MASQ
    -A KUBE-SEP-RS4RBKLTHTF2IUXJ -m comment --comment ns2/svc2:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.2:80
    -A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -s 10.180.0.1 -j KUBE-MARK-MASQ
    -A KUBE-SEP-SXIVWICOYRO3J4NJ -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.1:80
    -A KUBE-SEP-UKSFD7AGPMPPLUHC -m comment --comment ns4/svc4:p80 -s 10.180.0.4 -j KUBE-MARK-MASQ
    -A KUBE-SEP-UKSFD7AGPMPPLUHC -m comment --comment ns4/svc4:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.4:80
    -A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
    -A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.180.0.4:80" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-UKSFD7AGPMPPLUHC
    -A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.180.0.5:80" -j KUBE-SEP-C6EBXVWJJZMIWKLZ
    -A KUBE-SVC-GNZBNJ2PO5MGZ6GT -m comment --comment "ns2/svc2:p80 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
    -A KUBE-SVC-GNZBNJ2PO5MGZ6GT -m comment --comment "ns2/svc2:p80 -> 10.180.0.2:80" -j KUBE-SEP-RS4RBKLTHTF2IUXJ
    -A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 cluster IP" -m tcp -p tcp -d 172.30.0.45 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
    -A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 -> 10.180.0.3:80" -m recent --name KUBE-SEP-I77PXRDZVX7PMWMN --rcheck --seconds 10800 --reap -j KUBE-SEP-I77PXRDZVX7PMWMN
    -A KUBE-SVC-NUKIZ6OKUXPJNT4C -m comment --comment "ns5/svc5:p80 -> 10.180.0.3:80" -j KUBE-SEP-I77PXRDZVX7PMWMN
    -A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
    -A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.180.0.3:80" -j KUBE-SEP-OYPFS5VJICHGATKP
    -A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
    -A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.180.0.1:80" -j KUBE-SEP-SXIVWICOYRO3J4NJ
    COMMIT
`);

test("TestOverallIPTablesRules: output equals upstream's golden after canonical sort", () => {
  const p = new FakeProxier();
  overallFixture(p);
  const sync = p.sync();
  assert.equal(sync.error, null);
  const expected = withRealMark(OVERALL_EXPECTED);
  const actual = sortIptablesRules(sync.result.payload);
  assert.equal(lineDiff(expected, actual), null);
  assert.equal(checkIptablesRuleJumps(expected), null);
  assert.equal(checkIptablesRuleJumps(sync.result.payload), null);
  // sync_proxy_rules_iptables_total{table="nat"} equals the number of nat rules.
  assert.equal(sync.result.rulesTotal.nat, countRules(sync.result.payload, "nat"));
  assert.equal(sync.result.rulesTotal.filter, countRules(sync.result.payload, "filter"));
  assert.deepEqual(sync.result.warnings, []);
  // ns2's only endpoint is remote and eTP=Local: one service port without local endpoints.
  assert.deepEqual(sync.result.noLocalEndpoints, { internal: 0, external: 1 });
});

test("TestOverallIPTablesRules: activeNatChains lists exactly the declared per-service chains", () => {
  const p = new FakeProxier();
  overallFixture(p);
  const { result } = p.sync();
  const declared = [...result.payload.matchAll(/^:(KUBE-(?:SVC|SVL|EXT|FW|SEP)-[A-Z0-9]{16}) /gm)].map((m) =>
    m[1]
  );
  assert.deepEqual([...result.activeNatChains].sort(), declared.sort());
  assert.equal(declared.length, 16); // 4 EXT, 1 FW, 5 SVC, 6 SEP
});

test("render is deterministic: same input twice, and maps filled in another order, give the same bytes", () => {
  const a = new FakeProxier();
  overallFixture(a);
  const first = a.sync().result.payload;
  const again = renderIptablesRules({
    ...a.settings,
    services: a.services,
    endpoints: a.endpoints,
    full: true,
    changedServices: new Set(),
    existingNatChains: null,
  }).payload;
  const reversed = renderIptablesRules({
    ...a.settings,
    services: new Map([...a.services].reverse()),
    endpoints: new Map([...a.endpoints].reverse().map(([k, v]) => [k, [...v].reverse()])),
    full: true,
    changedServices: new Set(),
    existingNatChains: null,
  }).payload;
  assert.equal(again, first);
  assert.equal(reversed, first);
});

test("TestTracePacket scenarios S1-S7 over the TestOverallIPTablesRules rules", () => {
  const p = new FakeProxier();
  overallFixture(p);
  assert.equal(p.sync().error, null);
  const failures = checkPacketFlows(p.ipt, TEST_NODE_IPS, [
    { name: "S1 no match", sourceIP: "10.0.0.2", destIP: "10.0.0.3", destPort: 80, output: "" },
    {
      name: "S2 single endpoint",
      sourceIP: "10.0.0.2",
      destIP: "172.30.0.41",
      destPort: 80,
      output: "10.180.0.1:80",
    },
    {
      name: "S3 multiple endpoints",
      sourceIP: "10.0.0.2",
      destIP: "172.30.0.44",
      destPort: 80,
      output: "10.180.0.4:80, 10.180.0.5:80",
    },
    {
      name: "S4 LOCAL, KUBE-MARK-MASQ",
      sourceIP: TEST_NODE_IP,
      destIP: "192.168.99.22",
      destPort: 80,
      output: "10.180.0.2:80",
      masq: true,
    },
    {
      name: "S5 DROP",
      sourceIP: TEST_EXTERNAL_CLIENT,
      destIP: "192.168.99.22",
      destPort: 80,
      output: "DROP",
    },
    {
      name: "S6 ACCEPT (NodePortHealthCheck)",
      sourceIP: TEST_NODE_IP,
      destIP: TEST_NODE_IP,
      destPort: 30000,
      output: "ACCEPT",
    },
    { name: "S7 REJECT", sourceIP: "10.0.0.2", destIP: "172.30.0.46", destPort: 80, output: "REJECT" },
  ]);
  assert.deepEqual(failures, []);
});

const FILTER_BASE = `
*filter
:KUBE-NODEPORTS - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-FIREWALL - [0:0]
:KUBE-FORWARD - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
@@FILTER@@-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP
-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT
-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
COMMIT
`;
const NAT_FIXED = `-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE
`;
const NODEPORTS_LAST =
  `-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\n`;

/** Builds an upstream-style expected text from its parts (filter extras, nat chains, nat rules). */
function expectedText(filterExtra: string, natChains: string[], natRules: string): string {
  const chains = [":KUBE-NODEPORTS - [0:0]", ":KUBE-SERVICES - [0:0]", ...natChains].join("\n");
  return withRealMark(
    FILTER_BASE.replace(/^\n/, "").replace("@@FILTER@@", filterExtra) + "*nat\n" + chains + "\n" + natRules +
      "COMMIT\n",
  );
}

test("TestSyncProxyRulesRepeated: full sync, partial syncs, stale chains, failed partial then full", () => {
  const p = new FakeProxier();
  const svc1 = makeServicePort("ns1", "svc1", { clusterIP: "172.30.0.41" });
  const svc2 = makeServicePort("ns2", "svc2", { clusterIP: "172.30.0.42", port: "p8080", portNumber: 8080 });
  p.setService(svc1).setService(svc2);
  p.setEndpoints(svc1, [makeEndpoint("10.0.1.1", 80)]);
  p.setEndpoints(svc2, [makeEndpoint("10.0.2.1", 8080)]);

  const step = (label: string, expected: string, consistent: boolean) => {
    const s = p.lastSync!;
    assert.equal(s.error, null, label);
    assert.equal(lineDiff(expected, sortIptablesRules(s.result.payload)), null, label);
    if (consistent) assert.equal(checkIptablesRuleJumps(expected), null, label);
    assert.equal(s.result.rulesWritten.nat, countRules(expected, "nat"), `${label}: rules written`);
  };

  // 1. Initial full sync.
  p.sync();
  assert.equal(p.lastSync!.full, true);
  step(
    "initial",
    expectedText(
      "",
      [
        ":KUBE-MARK-MASQ - [0:0]",
        ":KUBE-POSTROUTING - [0:0]",
        ":KUBE-SEP-SNQ3ZNILQDEJNDQO - [0:0]",
        ":KUBE-SEP-UHEGFW77JX3KXTOV - [0:0]",
        ":KUBE-SVC-2VJB64SDSIJUP5T6 - [0:0]",
        ":KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]",
      ],
      `-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "ns2/svc2:p8080 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 8080 -j KUBE-SVC-2VJB64SDSIJUP5T6
${NODEPORTS_LAST}${NAT_FIXED}-A KUBE-SEP-SNQ3ZNILQDEJNDQO -m comment --comment ns1/svc1:p80 -s 10.0.1.1 -j KUBE-MARK-MASQ
-A KUBE-SEP-SNQ3ZNILQDEJNDQO -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.1.1:80
-A KUBE-SEP-UHEGFW77JX3KXTOV -m comment --comment ns2/svc2:p8080 -s 10.0.2.1 -j KUBE-MARK-MASQ
-A KUBE-SEP-UHEGFW77JX3KXTOV -m comment --comment ns2/svc2:p8080 -m tcp -p tcp -j DNAT --to-destination 10.0.2.1:8080
-A KUBE-SVC-2VJB64SDSIJUP5T6 -m comment --comment "ns2/svc2:p8080 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 8080 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-2VJB64SDSIJUP5T6 -m comment --comment "ns2/svc2:p8080 -> 10.0.2.1:8080" -j KUBE-SEP-UHEGFW77JX3KXTOV
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.0.1.1:80" -j KUBE-SEP-SNQ3ZNILQDEJNDQO
`,
    ),
    true,
  );
  let rulesTotal = p.lastSync!.result.rulesWritten.nat;
  assert.equal(p.lastSync!.result.rulesTotal.nat, rulesTotal);

  // 2. Add a service and its endpoints: only its SVC and SEP chains are written.
  const svc3 = makeServicePort("ns3", "svc3", { clusterIP: "172.30.0.43" });
  p.setService(svc3).setEndpoints(svc3, [makeEndpoint("10.0.3.1", 80)]);
  p.sync();
  assert.equal(p.lastSync!.full, false);
  step(
    "add svc3",
    expectedText(
      "",
      [
        ":KUBE-MARK-MASQ - [0:0]",
        ":KUBE-POSTROUTING - [0:0]",
        ":KUBE-SEP-BSWRHOQ77KEXZLNL - [0:0]",
        ":KUBE-SVC-X27LE4BHSL4DOUIK - [0:0]",
      ],
      `-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "ns2/svc2:p8080 cluster IP" -m tcp -p tcp -d 172.30.0.42 --dport 8080 -j KUBE-SVC-2VJB64SDSIJUP5T6
-A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
${NODEPORTS_LAST}${NAT_FIXED}-A KUBE-SEP-BSWRHOQ77KEXZLNL -m comment --comment ns3/svc3:p80 -s 10.0.3.1 -j KUBE-MARK-MASQ
-A KUBE-SEP-BSWRHOQ77KEXZLNL -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.3.1:80
-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.0.3.1:80" -j KUBE-SEP-BSWRHOQ77KEXZLNL
`,
    ),
    false,
  );
  rulesTotal += 5; // 1 KUBE-SERVICES, 2 KUBE-SVC, 2 KUBE-SEP
  assert.equal(p.lastSync!.result.rulesTotal.nat, rulesTotal);

  // 3. Delete a service: its chains are flushed and deleted; others are not rewritten.
  p.deleteService("ns2", "svc2");
  p.sync();
  step(
    "delete svc2",
    expectedText(
      "",
      [
        ":KUBE-MARK-MASQ - [0:0]",
        ":KUBE-POSTROUTING - [0:0]",
        ":KUBE-SEP-UHEGFW77JX3KXTOV - [0:0]",
        ":KUBE-SVC-2VJB64SDSIJUP5T6 - [0:0]",
      ],
      `-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
${NODEPORTS_LAST}${NAT_FIXED}-X KUBE-SEP-UHEGFW77JX3KXTOV
-X KUBE-SVC-2VJB64SDSIJUP5T6
`,
    ),
    false,
  );
  rulesTotal -= 5;
  assert.equal(p.lastSync!.result.rulesTotal.nat, rulesTotal);
  assert.deepEqual(p.lastSync!.result.staleChains, [
    "KUBE-SEP-UHEGFW77JX3KXTOV",
    "KUBE-SVC-2VJB64SDSIJUP5T6",
  ]);

  // 4. Add a service without endpoints: only a filter REJECT rule.
  const svc4 = makeServicePort("ns4", "svc4", { clusterIP: "172.30.0.44" });
  p.setService(svc4);
  p.sync();
  step(
    "add svc4 without endpoints",
    expectedText(
      `-A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 has no endpoints" -m tcp -p tcp -d 172.30.0.44 --dport 80 -j REJECT\n`,
      [":KUBE-MARK-MASQ - [0:0]", ":KUBE-POSTROUTING - [0:0]"],
      `-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
${NODEPORTS_LAST}${NAT_FIXED}`,
    ),
    false,
  );
  assert.equal(p.lastSync!.result.rulesTotal.nat, rulesTotal);

  // 5. Add its endpoints.
  p.setEndpoints(svc4, [makeEndpoint("10.0.4.1", 80)]);
  p.sync();
  step(
    "add svc4 endpoints",
    expectedText(
      "",
      [
        ":KUBE-MARK-MASQ - [0:0]",
        ":KUBE-POSTROUTING - [0:0]",
        ":KUBE-SEP-AYCN5HPXMIRJNJXU - [0:0]",
        ":KUBE-SVC-4SW47YFZTEDKD3PK - [0:0]",
      ],
      `-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
-A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 -j KUBE-SVC-4SW47YFZTEDKD3PK
${NODEPORTS_LAST}${NAT_FIXED}-A KUBE-SEP-AYCN5HPXMIRJNJXU -m comment --comment ns4/svc4:p80 -s 10.0.4.1 -j KUBE-MARK-MASQ
-A KUBE-SEP-AYCN5HPXMIRJNJXU -m comment --comment ns4/svc4:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.4.1:80
-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-4SW47YFZTEDKD3PK -m comment --comment "ns4/svc4:p80 -> 10.0.4.1:80" -j KUBE-SEP-AYCN5HPXMIRJNJXU
`,
    ),
    false,
  );
  rulesTotal += 5;
  assert.equal(p.lastSync!.result.rulesTotal.nat, rulesTotal);

  // 6. Change an endpoint of svc3: its SVC and SEP chains are rewritten, the old SEP deleted.
  p.setEndpoints(svc3, [makeEndpoint("10.0.3.2", 80)]);
  p.sync();
  const svc3Head =
    `-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
-A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" -m tcp -p tcp -d 172.30.0.44 --dport 80 -j KUBE-SVC-4SW47YFZTEDKD3PK
${NODEPORTS_LAST}${NAT_FIXED}`;
  step(
    "change svc3 endpoint",
    expectedText(
      "",
      [
        ":KUBE-MARK-MASQ - [0:0]",
        ":KUBE-POSTROUTING - [0:0]",
        ":KUBE-SEP-BSWRHOQ77KEXZLNL - [0:0]",
        ":KUBE-SEP-DKCFIS26GWF2WLWC - [0:0]",
        ":KUBE-SVC-X27LE4BHSL4DOUIK - [0:0]",
      ],
      `${svc3Head}-A KUBE-SEP-DKCFIS26GWF2WLWC -m comment --comment ns3/svc3:p80 -s 10.0.3.2 -j KUBE-MARK-MASQ
-A KUBE-SEP-DKCFIS26GWF2WLWC -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.3.2:80
-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.0.3.2:80" -j KUBE-SEP-DKCFIS26GWF2WLWC
-X KUBE-SEP-BSWRHOQ77KEXZLNL
`,
    ),
    false,
  );
  assert.equal(p.lastSync!.result.rulesTotal.nat, rulesTotal);

  // 7. Add an endpoint to svc3.
  p.setEndpoints(svc3, [makeEndpoint("10.0.3.2", 80), makeEndpoint("10.0.3.3", 80)]);
  p.sync();
  step(
    "add svc3 endpoint",
    expectedText(
      "",
      [
        ":KUBE-MARK-MASQ - [0:0]",
        ":KUBE-POSTROUTING - [0:0]",
        ":KUBE-SEP-DKCFIS26GWF2WLWC - [0:0]",
        ":KUBE-SEP-JVVZVJ7BSEPPRNBS - [0:0]",
        ":KUBE-SVC-X27LE4BHSL4DOUIK - [0:0]",
      ],
      `${svc3Head}-A KUBE-SEP-DKCFIS26GWF2WLWC -m comment --comment ns3/svc3:p80 -s 10.0.3.2 -j KUBE-MARK-MASQ
-A KUBE-SEP-DKCFIS26GWF2WLWC -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.3.2:80
-A KUBE-SEP-JVVZVJ7BSEPPRNBS -m comment --comment ns3/svc3:p80 -s 10.0.3.3 -j KUBE-MARK-MASQ
-A KUBE-SEP-JVVZVJ7BSEPPRNBS -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.3.3:80
-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.0.3.2:80" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-DKCFIS26GWF2WLWC
-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.0.3.3:80" -j KUBE-SEP-JVVZVJ7BSEPPRNBS
`,
    ),
    false,
  );
  rulesTotal += 3;
  assert.equal(p.lastSync!.result.rulesTotal.nat, rulesTotal);

  // 8. Sync with no changes: no per-service chains at all.
  p.sync();
  step(
    "no changes",
    expectedText("", [":KUBE-MARK-MASQ - [0:0]", ":KUBE-POSTROUTING - [0:0]"], svc3Head),
    false,
  );
  assert.equal(p.lastSync!.result.rulesTotal.nat, rulesTotal);

  // 9. A foreign jump into svc4's endpoint chain makes the partial sync that deletes svc4 fail...
  p.ipt.appendRule("nat", "-A KUBE-SVC-X27LE4BHSL4DOUIK -j KUBE-SEP-AYCN5HPXMIRJNJXU");
  p.deleteService("ns4", "svc4");
  const failed = p.sync();
  assert.equal(failed.full, false);
  assert.equal(failed.ok, false);
  assert.match(failed.error!, /KUBE-SEP-AYCN5HPXMIRJNJXU is still referenced/);
  assert.ok(p.ipt.chains("nat").has("KUBE-SEP-AYCN5HPXMIRJNJXU"), "a failed restore changes nothing");
  assert.equal(p.needFullSync, true);

  // ...and the retry is a full sync, which rewrites svc3's chain and so can delete svc4's.
  const retry = p.sync();
  assert.equal(retry.full, true);
  step(
    "full resync after failure",
    expectedText(
      "",
      [
        ":KUBE-MARK-MASQ - [0:0]",
        ":KUBE-POSTROUTING - [0:0]",
        ":KUBE-SEP-AYCN5HPXMIRJNJXU - [0:0]",
        ":KUBE-SEP-DKCFIS26GWF2WLWC - [0:0]",
        ":KUBE-SEP-JVVZVJ7BSEPPRNBS - [0:0]",
        ":KUBE-SEP-SNQ3ZNILQDEJNDQO - [0:0]",
        ":KUBE-SVC-4SW47YFZTEDKD3PK - [0:0]",
        ":KUBE-SVC-X27LE4BHSL4DOUIK - [0:0]",
        ":KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]",
      ],
      `-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 -j KUBE-SVC-X27LE4BHSL4DOUIK
${NODEPORTS_LAST}${NAT_FIXED}-A KUBE-SEP-DKCFIS26GWF2WLWC -m comment --comment ns3/svc3:p80 -s 10.0.3.2 -j KUBE-MARK-MASQ
-A KUBE-SEP-DKCFIS26GWF2WLWC -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.3.2:80
-A KUBE-SEP-JVVZVJ7BSEPPRNBS -m comment --comment ns3/svc3:p80 -s 10.0.3.3 -j KUBE-MARK-MASQ
-A KUBE-SEP-JVVZVJ7BSEPPRNBS -m comment --comment ns3/svc3:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.3.3:80
-A KUBE-SEP-SNQ3ZNILQDEJNDQO -m comment --comment ns1/svc1:p80 -s 10.0.1.1 -j KUBE-MARK-MASQ
-A KUBE-SEP-SNQ3ZNILQDEJNDQO -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.1.1:80
-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 cluster IP" -m tcp -p tcp -d 172.30.0.43 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.0.3.2:80" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-DKCFIS26GWF2WLWC
-A KUBE-SVC-X27LE4BHSL4DOUIK -m comment --comment "ns3/svc3:p80 -> 10.0.3.3:80" -j KUBE-SEP-JVVZVJ7BSEPPRNBS
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 -> 10.0.1.1:80" -j KUBE-SEP-SNQ3ZNILQDEJNDQO
-X KUBE-SEP-AYCN5HPXMIRJNJXU
-X KUBE-SVC-4SW47YFZTEDKD3PK
`,
    ),
    false,
  );
  rulesTotal -= 5;
  assert.equal(p.lastSync!.result.rulesTotal.nat, rulesTotal);
  assert.ok(!p.ipt.chains("nat").has("KUBE-SEP-AYCN5HPXMIRJNJXU"));
});

/** Upstream countEndpointsAndComments: the DNAT line for matchEndpoint, #DNAT lines, #with comments. */
function countEndpointsAndComments(payload: string, matchEndpoint: string): [string, number, number] {
  let matched = "";
  let endpoints = 0;
  let comments = 0;
  for (const line of payload.split("\n")) {
    if (line.startsWith("-A KUBE-SEP-") && line.includes("-j DNAT")) {
      endpoints++;
      if (line.includes("--comment")) comments++;
      if (line.includes(matchEndpoint)) matched = line;
    }
  }
  return [matched, endpoints, comments];
}

test("TestSyncProxyRulesLargeClusterMode: comments dropped above 1000 endpoints, throttled stale cleanup", () => {
  const p = new FakeProxier({ masqueradeAll: true });
  const svc1 = makeServicePort("ns1", "svc1", { clusterIP: "172.30.0.41" });
  const svc2 = makeServicePort("ns2", "svc2", { clusterIP: "172.30.0.42", port: "p8080", portNumber: 8080 });
  const svc3 = makeServicePort("ns3", "svc3", { clusterIP: "172.30.0.43", port: "p8081", portNumber: 8081 });
  p.setService(svc1).setService(svc2).setService(svc3);
  const half = 1000 / 2 - 1;
  p.setEndpoints(
    svc1,
    Array.from({ length: half }, (_, i) => makeEndpoint(`10.0.${i % 256}.${Math.floor(i / 256)}`, 80)),
  );
  p.setEndpoints(
    svc2,
    Array.from({ length: half }, (_, i) => makeEndpoint(`10.1.${i % 256}.${Math.floor(i / 256)}`, 8080)),
  );
  let expectedEndpoints = 2 * half;

  let s = p.sync();
  assert.equal(s.error, null);
  assert.equal(s.result.largeClusterMode, false);
  let [first, n, comments] = countEndpointsAndComments(s.result.payload, "10.0.0.0");
  assert.equal(
    first,
    "-A KUBE-SEP-DKGQUZGBKLTPAR56 -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination 10.0.0.0:80",
  );
  assert.equal(n, expectedEndpoints);
  assert.equal(comments, n);

  // Crossing the threshold does not force a full sync: only svc3 is written, without comments.
  p.setEndpoints(svc3, ["203.0.113.4", "203.0.113.8", "203.0.113.12"].map((ip) => makeEndpoint(ip, 8081)));
  s = p.sync();
  assert.equal(s.result.largeClusterMode, true);
  [first, n, comments] = countEndpointsAndComments(s.result.payload, "203.0.113.4");
  assert.equal(first, "-A KUBE-SEP-RUVVH7YV3PHQBDOS -m tcp -p tcp -j DNAT --to-destination 203.0.113.4:8081");
  assert.equal(n, 3);
  assert.equal(comments, 0);
  assert.ok(!/-A KUBE-SVC-[A-Z0-9]+ -m comment --comment "ns3\/svc3:p8081 ->/.test(s.result.payload));

  // A forced full sync rewrites the older services without comments too.
  s = p.sync(true);
  expectedEndpoints += 3;
  [first, n, comments] = countEndpointsAndComments(s.result.payload, "10.0.0.0");
  assert.equal(first, "-A KUBE-SEP-DKGQUZGBKLTPAR56 -m tcp -p tcp -j DNAT --to-destination 10.0.0.0:80");
  assert.equal(n, expectedEndpoints);
  assert.equal(comments, 0);

  const svc4 = makeServicePort("ns4", "svc4", { clusterIP: "172.30.0.44", port: "p8082", portNumber: 8082 });
  p.setService(svc4).setEndpoints(svc4, [makeEndpoint("10.4.0.1", 8082)]);
  s = p.sync();
  const [svc4Endpoint, n4] = countEndpointsAndComments(s.result.payload, "10.4.0.1");
  assert.equal(
    svc4Endpoint,
    "-A KUBE-SEP-SU5STNODRYEWJAUF -m tcp -p tcp -j DNAT --to-destination 10.4.0.1:8082",
  );
  assert.equal(n4, 1);

  // Within syncPeriod of the last cleanup the caller skips the iptables-save: no deletions.
  p.cleanupStaleChains = false;
  p.deleteService("ns4", "svc4");
  s = p.sync();
  assert.equal(countEndpointsAndComments(s.result.payload, "10.4.0.1")[1], 0);
  assert.ok(!s.result.payload.includes("-X "));
  assert.ok(p.ipt.chains("nat").has("KUBE-SVC-EBDQOQU5SJFXRIL3"));

  // Later the stale chains go.
  p.cleanupStaleChains = true;
  s = p.sync();
  assert.ok(s.result.payload.includes("-X KUBE-SVC-EBDQOQU5SJFXRIL3"));
  assert.ok(s.result.payload.includes("-X KUBE-SEP-SU5STNODRYEWJAUF"));
  assert.ok(!p.ipt.chains("nat").has("KUBE-SVC-EBDQOQU5SJFXRIL3"));

  s = p.sync(true);
  assert.equal(countEndpointsAndComments(s.result.payload, "10.0.0.0")[1], expectedEndpoints);
});

test("partial sync counts the rules of unchanged service ports in rulesTotal (large input)", () => {
  const p = new FakeProxier();
  for (let i = 0; i < 50; i++) {
    const svc = makeServicePort(`ns${i}`, `svc${i}`, { clusterIP: `172.30.1.${i + 1}`, nodePort: 30000 + i });
    p.setService(svc).setEndpoints(svc, [makeEndpoint(`10.2.${i}.1`, 80), makeEndpoint(`10.2.${i}.2`, 80)]);
  }
  const full = p.sync().result;
  const totalAfterFull = countRules(full.payload, "nat");
  assert.equal(full.rulesTotal.nat, totalAfterFull);
  const none = p.sync().result;
  assert.equal(none.rulesTotal.nat, totalAfterFull);
  assert.ok(none.rulesWritten.nat < totalAfterFull);
});

test("an unchanged service port counts exactly the rules and chains it would write (count path = write path)", () => {
  const variants: FakeProxierOptions[] = [
    {},
    { localDetector: newNoOpLocalDetector() },
    { masqueradeAll: true },
    { primaryNodeIP: null },
  ];
  for (const options of variants) {
    const p = new FakeProxier(options);
    overallFixture(p);
    // Extra shapes: SVL with affinity and FW ranges admitting the node, iTP=Local, eTP=Local with local endpoints.
    const lb = makeServicePort("ns7", "svc7", {
      clusterIP: "172.30.0.47",
      nodePort: 3007,
      loadBalancerVIPs: ["1.2.3.7", "1.2.3.8"],
      loadBalancerSourceRanges: ["192.168.0.0/24", "203.0.113.0/25"],
      externalPolicyLocal: true,
      healthCheckNodePort: 30007,
      stickyMaxAgeSeconds: 60,
    });
    const itp = makeServicePort("ns8", "svc8", {
      clusterIP: "172.30.0.48",
      internalPolicyLocal: true,
      stickyMaxAgeSeconds: 30,
    });
    p.setService(lb).setService(itp);
    p.setEndpoints(lb, [
      makeEndpoint("10.180.7.1", 80, { nodeName: TEST_NODE_NAME }),
      makeEndpoint("10.180.7.2", 80),
    ]);
    p.setEndpoints(itp, [
      makeEndpoint("10.180.8.1", 80, { nodeName: TEST_NODE_NAME }),
      makeEndpoint("10.180.8.2", 80),
    ]);
    const full = p.sync().result;
    const partial = p.sync().result;
    assert.equal(p.lastSync!.full, false);
    assert.equal(partial.rulesTotal.nat, full.rulesTotal.nat, JSON.stringify(options));
    assert.equal(partial.rulesTotal.nat, countRules(full.payload, "nat"));
    assert.deepEqual([...partial.activeNatChains].sort(), [...full.activeNatChains].sort());
    assert.deepEqual(partial.staleChains, []);
  }
});
