/**
 * The pure IPVS state model (lib/proxy/ipvs/state.ts) against the expectations of upstream's IPVS
 * proxier tests (pkg/proxy/ipvs/proxier_test.go at v1.34; each test names the upstream test it follows)
 * plus the endpoint choice, affinity, schedulers and IPv6 names.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { computeIpvsState, type IpvsModelInput, virtualServerKey } from "../../../../lib/proxy/ipvs/state.ts";
import { ipsetName } from "../../../../lib/proxy/ipvs/ipsets.ts";
import { masqueradeMark } from "../../../../lib/proxy/ipvs/iptables_rules.ts";
import { newNodePortAddresses } from "../../../../lib/proxy/nodeport_addresses.ts";
import { newDetectLocalByCIDR, newNoOpLocalDetector } from "../../../../lib/proxy/iptables/local_detector.ts";
import type { EndpointInfo, ServicePortInfo } from "../../../../lib/proxy/types.ts";
import { servicePortKey } from "../../../../lib/proxy/types.ts";
import { makeEndpoint, makeServicePort, TEST_NODE_NAME } from "../../../support/tracer.ts";

const NODE_IP = "100.101.102.103";

function input(
  services: ServicePortInfo[],
  endpoints: [ServicePortInfo, EndpointInfo[]][] = [],
  over: Partial<IpvsModelInput> = {},
): IpvsModelInput {
  return {
    family: "IPv4",
    services,
    endpoints: new Map(endpoints.map(([s, eps]) => [servicePortKey(s.name), eps])),
    nodeName: TEST_NODE_NAME,
    nodeLabels: {},
    nodeIP: NODE_IP,
    nodeAddresses: ["127.0.0.1", NODE_IP, "fe80::1"],
    nodePortAddresses: newNodePortAddresses("IPv4", []),
    scheduler: "",
    masqueradeAll: false,
    masqueradeBit: 14,
    localDetector: newDetectLocalByCIDR("10.0.0.0/8"),
    randomFully: true,
    ...over,
  };
}

/** Rules of one chain as (jump target, match set, source) triples, like upstream's ExpectedIptablesChain. */
function chainRules(payload: string, table: "nat" | "filter", chain: string) {
  const section = payload.split(/^\*/m).find((s) => s.startsWith(table + "\n"))!;
  return section.split("\n").filter((l) => l.startsWith(`-A ${chain} `)).map((l) => ({
    jump: /-j (\S+)/.exec(l)![1],
    set: /--match-set (\S+)/.exec(l)?.[1] ?? "",
    src: /(?<!!) -s (\S+)/.exec(l)?.[1] ?? "",
  }));
}

describe("IPVS state model", () => {
  it("TestLoadBalancerSourceRanges: LB VS, FW and source-CIDR sets, firewall chains", () => {
    const svc = makeServicePort("ns1", "svc1", {
      clusterIP: "10.20.30.41",
      loadBalancerVIPs: ["1.2.3.4"],
      loadBalancerSourceRanges: ["10.0.0.0/8"],
    });
    const s = computeIpvsState(input([svc], [[svc, [makeEndpoint("10.180.0.1", 80)]]]));
    assert.equal(s.virtualServers.size, 2);
    const lb = s.virtualServers.get("1.2.3.4:80/TCP")!;
    assert.deepEqual(lb.realServers, [{ address: "10.180.0.1", port: 80, weight: 1 }]);
    assert.deepEqual(s.ipsets.get("KUBE-LOAD-BALANCER"), ["1.2.3.4,tcp:80"]);
    assert.deepEqual(s.ipsets.get("KUBE-LOAD-BALANCER-FW"), ["1.2.3.4,tcp:80"]);
    assert.deepEqual(s.ipsets.get("KUBE-LOAD-BALANCER-SOURCE-CIDR"), ["1.2.3.4,tcp:80,10.0.0.0/8"]);
    assert.deepEqual(s.ipsets.get("KUBE-LOAD-BALANCER-SOURCE-IP"), []);
    assert.deepEqual(chainRules(s.iptables, "nat", "KUBE-SERVICES"), [
      { jump: "RETURN", set: "", src: "127.0.0.0/8" },
      { jump: "KUBE-LOAD-BALANCER", set: "KUBE-LOAD-BALANCER", src: "" },
      { jump: "KUBE-MARK-MASQ", set: "KUBE-CLUSTER-IP", src: "" },
      { jump: "KUBE-NODE-PORT", set: "", src: "" },
      { jump: "ACCEPT", set: "KUBE-CLUSTER-IP", src: "" },
      { jump: "ACCEPT", set: "KUBE-LOAD-BALANCER", src: "" },
    ]);
    assert.deepEqual(chainRules(s.iptables, "filter", "KUBE-PROXY-FIREWALL"), [
      { jump: "KUBE-SOURCE-RANGES-FIREWALL", set: "KUBE-LOAD-BALANCER-FW", src: "" },
    ]);
    assert.deepEqual(chainRules(s.iptables, "filter", "KUBE-SOURCE-RANGES-FIREWALL"), [
      { jump: "RETURN", set: "KUBE-LOAD-BALANCER-SOURCE-CIDR", src: "" },
      { jump: "DROP", set: "", src: "" },
    ]);
    // The node IP is outside every source range: the node may not reach the LB VIP (upstream #119656).
    assert.match(
      s.iptables,
      /^-A KUBE-IPVS-OUT-FILTER -s 1\.2\.3\.4 -m ipvs --vaddr 1\.2\.3\.4 --vproto tcp --vport 80 -j DROP$/m,
    );
  });

  it("a source range containing the node IP lets the node in (KUBE-LOAD-BALANCER-SOURCE-IP, no out filter)", () => {
    const svc = makeServicePort("ns1", "svc1", {
      clusterIP: "10.20.30.41",
      loadBalancerVIPs: ["1.2.3.4"],
      loadBalancerSourceRanges: ["100.101.0.0/16"],
    });
    const s = computeIpvsState(input([svc]));
    assert.deepEqual(s.ipsets.get("KUBE-LOAD-BALANCER-SOURCE-IP"), ["1.2.3.4,tcp:80,1.2.3.4"]);
    assert.doesNotMatch(s.iptables, /-A KUBE-IPVS-OUT-FILTER/);
  });

  it("TestAcceptIPVSTraffic: KUBE-SERVICES with external IPs, LB and NodePort services", () => {
    const svcs = [
      makeServicePort("ns1", "svc1", { clusterIP: "10.20.30.40", externalIPs: ["5.6.7.8"], nodePort: 80 }),
      makeServicePort("ns1", "svc2", {
        clusterIP: "10.20.30.41",
        loadBalancerVIPs: ["1.2.3.4"],
        nodePort: 80,
      }),
      makeServicePort("ns1", "svc3", { clusterIP: "10.20.30.42", nodePort: 80 }),
    ];
    const s = computeIpvsState(input(svcs));
    assert.deepEqual(chainRules(s.iptables, "nat", "KUBE-SERVICES"), [
      { jump: "RETURN", set: "", src: "127.0.0.0/8" },
      { jump: "KUBE-LOAD-BALANCER", set: "KUBE-LOAD-BALANCER", src: "" },
      { jump: "KUBE-MARK-MASQ", set: "KUBE-CLUSTER-IP", src: "" },
      { jump: "KUBE-MARK-MASQ", set: "KUBE-EXTERNAL-IP", src: "" },
      { jump: "ACCEPT", set: "KUBE-EXTERNAL-IP", src: "" },
      { jump: "ACCEPT", set: "KUBE-EXTERNAL-IP", src: "" },
      { jump: "KUBE-NODE-PORT", set: "", src: "" },
      { jump: "ACCEPT", set: "KUBE-CLUSTER-IP", src: "" },
      { jump: "ACCEPT", set: "KUBE-LOAD-BALANCER", src: "" },
    ]);
  });

  it("TestOnlyLocalLoadBalancing: eTP=Local LB uses only the local endpoint; LOCAL set RETURNs", () => {
    const svc = makeServicePort("ns1", "svc1", {
      clusterIP: "10.20.30.41",
      nodePort: 3001,
      loadBalancerVIPs: ["1.2.3.4"],
      externalPolicyLocal: true,
    });
    const eps = [
      makeEndpoint("10.180.0.1", 80, { nodeName: TEST_NODE_NAME }),
      makeEndpoint("10.180.1.1", 80, { nodeName: "other-node" }),
    ];
    const s = computeIpvsState(input([svc], [[svc, eps]]));
    assert.deepEqual(s.virtualServers.get("1.2.3.4:80/TCP")!.realServers.map((r) => r.address), [
      "10.180.0.1",
    ]);
    // ClusterIP traffic is not affected by eTP: both endpoints.
    assert.deepEqual(s.virtualServers.get("10.20.30.41:80/TCP")!.realServers.map((r) => r.address), [
      "10.180.0.1",
      "10.180.1.1",
    ]);
    assert.deepEqual(s.virtualServers.get(`${NODE_IP}:3001/TCP`)!.realServers.map((r) => r.address), [
      "10.180.0.1",
    ]);
    assert.deepEqual(s.ipsets.get("KUBE-LOAD-BALANCER-LOCAL"), ["1.2.3.4,tcp:80"]);
    assert.deepEqual(s.ipsets.get("KUBE-NODE-PORT-LOCAL-TCP"), ["3001"]);
    assert.deepEqual(chainRules(s.iptables, "nat", "KUBE-LOAD-BALANCER"), [
      { jump: "RETURN", set: "KUBE-LOAD-BALANCER-LOCAL", src: "" },
      { jump: "KUBE-MARK-MASQ", set: "", src: "" },
    ]);
    // The local endpoint is in the hairpin set.
    assert.deepEqual(s.ipsets.get("KUBE-LOOP-BACK"), ["10.180.0.1,tcp:80,10.180.0.1"]);
  });

  it("TestNodePortIPv4: a NodePort VS on every node address (loopback and link-local excluded), bitmap set", () => {
    const svc = makeServicePort("ns1", "svc1", { clusterIP: "10.20.30.41", nodePort: 3001 });
    const s = computeIpvsState(input([svc], [[svc, [makeEndpoint("10.180.0.1", 80)]]], {
      nodeAddresses: ["127.0.0.1", NODE_IP, "100.101.102.104", "fe80::1"],
    }));
    assert.deepEqual([...s.virtualServers.keys()], [
      "10.20.30.41:80/TCP",
      "100.101.102.103:3001/TCP",
      "100.101.102.104:3001/TCP",
    ]);
    assert.deepEqual(s.ipsets.get("KUBE-NODE-PORT-TCP"), ["3001"]);
    assert.deepEqual(chainRules(s.iptables, "nat", "KUBE-NODE-PORT"), [
      { jump: "KUBE-MARK-MASQ", set: "KUBE-NODE-PORT-TCP", src: "" },
    ]);
    // Only the ClusterIP goes on kube-ipvs0.
    assert.deepEqual(s.bindAddresses, ["10.20.30.41"]);
    assert.deepEqual(s.ipsets.get("KUBE-IPVS-IPS"), ["10.20.30.41"]);
  });

  it("--nodeport-addresses limits NodePort virtual servers to matching addresses; SCTP uses hash:ip,port", () => {
    const svc = makeServicePort("ns1", "svc1", {
      clusterIP: "10.20.30.41",
      nodePort: 3001,
      protocol: "SCTP",
    });
    const s = computeIpvsState(input([svc], [], {
      nodeAddresses: [NODE_IP, "100.101.102.104", "192.168.0.2"],
      nodePortAddresses: newNodePortAddresses("IPv4", ["100.101.0.0/16"]),
    }));
    assert.deepEqual([...s.virtualServers.keys()].filter((k) => k.includes(":3001/")), [
      "100.101.102.103:3001/SCTP",
      "100.101.102.104:3001/SCTP",
    ]);
    assert.deepEqual(s.ipsets.get("KUBE-NODE-PORT-SCTP-HASH"), [
      "100.101.102.103,sctp:3001",
      "100.101.102.104,sctp:3001",
    ]);
  });

  it("TestExternalIPs: externalIP VS, masquerade set; an externalIP on a node interface is not bound", () => {
    const svc = makeServicePort("ns1", "svc1", {
      clusterIP: "10.20.30.41",
      externalIPs: ["50.60.70.81", NODE_IP],
    });
    const s = computeIpvsState(input([svc], [[svc, [makeEndpoint("10.180.0.1", 80)]]]));
    assert.ok(s.virtualServers.has("50.60.70.81:80/TCP"));
    assert.deepEqual(s.ipsets.get("KUBE-EXTERNAL-IP"), [`${NODE_IP},tcp:80`, "50.60.70.81,tcp:80"]);
    assert.deepEqual(s.bindAddresses, ["10.20.30.41", "50.60.70.81"]);
  });

  it("TestOnlyLocalExternalIPs: eTP=Local externalIPs go to KUBE-EXTERNAL-IP-LOCAL and get local endpoints", () => {
    const svc = makeServicePort("ns1", "svc1", {
      clusterIP: "10.20.30.41",
      externalIPs: ["50.60.70.81"],
      externalPolicyLocal: true,
    });
    const eps = [
      makeEndpoint("10.180.0.1", 80, { nodeName: TEST_NODE_NAME }),
      makeEndpoint("10.180.1.1", 80),
    ];
    const s = computeIpvsState(input([svc], [[svc, eps]]));
    assert.deepEqual(s.ipsets.get("KUBE-EXTERNAL-IP-LOCAL"), ["50.60.70.81,tcp:80"]);
    assert.deepEqual(s.ipsets.get("KUBE-EXTERNAL-IP"), []);
    assert.deepEqual(s.virtualServers.get("50.60.70.81:80/TCP")!.realServers.map((r) => r.address), [
      "10.180.0.1",
    ]);
  });

  it("eTP=Local with no local endpoint falls back to cluster endpoints and counts it (upstream #97081)", () => {
    const svc = makeServicePort("ns1", "svc1", {
      clusterIP: "10.20.30.41",
      nodePort: 3001,
      externalPolicyLocal: true,
    });
    const s = computeIpvsState(
      input([svc], [[svc, [makeEndpoint("10.180.1.1", 80, { nodeName: "other" })]]]),
    );
    assert.deepEqual(s.virtualServers.get(`${NODE_IP}:3001/TCP`)!.realServers.map((r) => r.address), [
      "10.180.1.1",
    ]);
    assert.deepEqual(s.noLocalEndpoints, { internal: 0, external: 1 });
  });

  it("terminating endpoints serve only when no ready endpoint exists (upstream CategorizeEndpoints)", () => {
    const svc = makeServicePort("ns1", "svc1", { clusterIP: "10.20.30.41" });
    const term = makeEndpoint("10.180.0.9", 80, { ready: false, serving: true, terminating: true });
    let s = computeIpvsState(input([svc], [[svc, [makeEndpoint("10.180.0.1", 80), term]]]));
    assert.deepEqual(s.virtualServers.get("10.20.30.41:80/TCP")!.realServers.map((r) => r.address), [
      "10.180.0.1",
    ]);
    s = computeIpvsState(input([svc], [[svc, [term]]]));
    assert.deepEqual(s.virtualServers.get("10.20.30.41:80/TCP")!.realServers.map((r) => r.address), [
      "10.180.0.9",
    ]);
  });

  it("TestExternalIPsNoEndpoint / no endpoints: the virtual server exists with no real servers", () => {
    const svc = makeServicePort("ns1", "svc1", { clusterIP: "10.20.30.41", externalIPs: ["50.60.70.81"] });
    const s = computeIpvsState(input([svc]));
    assert.equal(s.virtualServers.size, 2);
    for (const vs of s.virtualServers.values()) assert.deepEqual(vs.realServers, []);
  });

  it("ClientIP affinity is IPVS persistence with the timeout; --ipvs-scheduler sets the scheduler, mh adds source hash", () => {
    const svc = makeServicePort("ns1", "svc1", { clusterIP: "10.20.30.41", stickyMaxAgeSeconds: 10800 });
    let vs = computeIpvsState(input([svc])).virtualServers.get("10.20.30.41:80/TCP")!;
    assert.equal(vs.scheduler, "rr");
    assert.equal(vs.persistentTimeout, 10800);
    assert.equal(vs.sourceHash, false);
    vs = computeIpvsState(input([svc], [], { scheduler: "mh" })).virtualServers.get("10.20.30.41:80/TCP")!;
    assert.equal(vs.scheduler, "mh");
    assert.equal(vs.sourceHash, true);
    const plain = makeServicePort("ns1", "svc2", { clusterIP: "10.20.30.42" });
    assert.equal(
      computeIpvsState(input([plain], [], { scheduler: "lc" })).virtualServers.get("10.20.30.42:80/TCP")!
        .persistentTimeout,
      0,
    );
  });

  it("TestHealthCheckNodePort: health check ports in their bitmap set, accepted in filter KUBE-NODE-PORT", () => {
    const svc = makeServicePort("ns1", "svc1", {
      clusterIP: "10.20.30.41",
      nodePort: 3001,
      externalPolicyLocal: true,
      healthCheckNodePort: 30000,
    });
    const s = computeIpvsState(input([svc]));
    assert.deepEqual(s.ipsets.get("KUBE-HEALTH-CHECK-NODE-PORT"), ["30000"]);
    assert.deepEqual(chainRules(s.iptables, "filter", "KUBE-NODE-PORT"), [
      { jump: "ACCEPT", set: "KUBE-HEALTH-CHECK-NODE-PORT", src: "" },
    ]);
  });

  it("ClusterIP masquerade follows masqueradeAll, the local detector, or masquerades VIP-sourced traffic", () => {
    const svc = makeServicePort("ns1", "svc1", { clusterIP: "10.20.30.41" });
    const rule = (o: Partial<IpvsModelInput>) =>
      computeIpvsState(input([svc], [], o)).iptables.split("\n").find((l) =>
        l.includes("--match-set KUBE-CLUSTER-IP") && l.includes("MARK-MASQ")
      );
    assert.match(rule({})!, / dst,dst ! -s 10\.0\.0\.0\/8 -j KUBE-MARK-MASQ$/);
    assert.match(rule({ masqueradeAll: true })!, / dst,dst -j KUBE-MARK-MASQ$/);
    assert.match(rule({ localDetector: newNoOpLocalDetector() })!, / src,dst -j KUBE-MARK-MASQ$/);
  });

  it("masquerade mark and POSTROUTING as upstream (%#08x, xor-mark, random-fully)", () => {
    assert.equal(masqueradeMark(14), "0x004000");
    const s = computeIpvsState(input([]));
    assert.deepEqual(
      s.iptables.split("\n").filter((l) =>
        l.startsWith("-A KUBE-POSTROUTING") || l.startsWith("-A KUBE-MARK-MASQ")
      ),
      [
        "-A KUBE-POSTROUTING -m mark ! --mark 0x004000/0x004000 -j RETURN",
        "-A KUBE-POSTROUTING -j MARK --xor-mark 0x004000",
        '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
        "-A KUBE-MARK-MASQ -j MARK --or-mark 0x004000",
      ],
    );
    assert.match(
      s.iptables,
      /^\*nat\n:KUBE-SERVICES - \[0:0\]\n:KUBE-POSTROUTING - \[0:0\]\n:KUBE-NODE-PORT - \[0:0\]\n:KUBE-LOAD-BALANCER - \[0:0\]\n:KUBE-MARK-MASQ - \[0:0\]\n/,
    );
    assert.match(s.iptables, /\nCOMMIT\n\*filter\n:KUBE-FORWARD - \[0:0\]\n/);
    assert.ok(s.iptables.endsWith("COMMIT\n"));
  });

  it("IPv6: KUBE-6- set names (at most 31 characters), ::1/128 early return, bracketed VS keys", () => {
    assert.equal(ipsetName("KUBE-CLUSTER-IP", "IPv6"), "KUBE-6-CLUSTER-IP");
    assert.equal(ipsetName("KUBE-LOAD-BALANCER-SOURCE-CIDR", "IPv6"), "KUBE-6-LOAD-BALANCER-SOURCE-CID");
    assert.equal(ipsetName("KUBE-CLUSTER-IP", "IPv4"), "KUBE-CLUSTER-IP");
    const svc = makeServicePort("ns1", "svc1", { clusterIP: "fd00::1" });
    const s = computeIpvsState(input([svc], [[svc, [makeEndpoint("fd00:10::1", 80)]]], {
      family: "IPv6",
      nodeIP: "2001:db8::1",
      nodeAddresses: ["2001:db8::1", "::1"],
      nodePortAddresses: newNodePortAddresses("IPv6", []),
      localDetector: newDetectLocalByCIDR("fd00:10::/64"),
    }));
    assert.deepEqual([...s.virtualServers.keys()], ["[fd00::1]:80/TCP"]);
    assert.match(s.iptables, /^-A KUBE-SERVICES -s ::1\/128 -j RETURN$/m);
    assert.match(s.iptables, /--match-set KUBE-6-CLUSTER-IP dst,dst/);
    assert.equal(virtualServerKey({ address: "fd00::1", port: 80, protocol: "TCP" }), "[fd00::1]:80/TCP");
  });

  it("is deterministic: service order does not change the state", () => {
    const a = makeServicePort("ns1", "a", {
      clusterIP: "10.20.30.41",
      loadBalancerVIPs: ["1.1.1.1"],
      loadBalancerSourceRanges: ["9.0.0.0/8"],
    });
    const b = makeServicePort("ns1", "b", {
      clusterIP: "10.20.30.42",
      loadBalancerVIPs: ["2.2.2.2"],
      loadBalancerSourceRanges: ["9.0.0.0/8"],
    });
    const x = computeIpvsState(input([a, b]));
    const y = computeIpvsState(input([b, a]));
    assert.equal(x.iptables, y.iptables);
    assert.deepEqual([...x.virtualServers.keys()], [...y.virtualServers.keys()]);
    assert.deepEqual([...x.ipsets], [...y.ipsets]);
  });
});
