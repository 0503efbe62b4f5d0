import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  computeProbability,
  formatFixed10,
  probability,
} from "../../../../../lib/proxy/iptables/render/probability.ts";
import {
  masqueradeMark,
  type RenderInput,
  renderIptablesRules,
} from "../../../../../lib/proxy/iptables/render/render.ts";
import {
  localDetectorFor,
  newDetectLocalByBridgeInterface,
  newDetectLocalByCIDR,
  newDetectLocalByInterfaceNamePrefix,
  newNoOpLocalDetector,
} from "../../../../../lib/proxy/iptables/local_detector.ts";
import { newNodePortAddresses } from "../../../../../lib/proxy/nodeport_addresses.ts";
import {
  IPTABLES_JUMP_RULES,
  IPTABLES_KUBELET_JUMP_RULES,
  jumpRuleArgs,
  jumpRuleLine,
} from "../../../../../lib/proxy/iptables/jump_rules_table.ts";
import { formatCIDR, formatIP, parseCIDR, parseIP, parseIPOfFamily } from "../../../../../lib/net/ip.ts";
import { servicePortKey } from "../../../../../lib/proxy/types.ts";
import type { EndpointInfo, ServicePortInfo } from "../../../../../lib/proxy/types.ts";
import {
  checkPacketFlows,
  FakeIptables,
  FakeProxier,
  type FakeProxierOptions,
  makeEndpoint,
  makeServicePort,
  TEST_NODE_IPS,
  TEST_NODE_NAME,
} from "../../../../support/tracer.ts";

function chainRules(options: FakeProxierOptions, table: string, chain: string): string[] {
  const p = new FakeProxier(options);
  const s = p.sync();
  assert.equal(s.error, null);
  return (p.ipt.rules(table, chain) ?? []).map((r) => r.raw);
}

describe("TestMasqueradeRule", () => {
  for (const randomFully of [false, true]) {
    it(`randomFully ${randomFully}`, () => {
      assert.deepEqual(
        chainRules({ features: { randomFully, nfacct: true, dropInvalid: true } }, "nat", "KUBE-POSTROUTING"),
        [
          "-A KUBE-POSTROUTING -m mark ! --mark 0x00004000/0x00004000 -j RETURN",
          "-A KUBE-POSTROUTING -j MARK --xor-mark 0x00004000",
          `-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE${
            randomFully ? " --random-fully" : ""
          }`,
        ],
      );
    });
  }
  it("masqueradeMark formats 1<<bit as Go's %#08x", () => {
    assert.equal(masqueradeMark(14), "0x00004000");
    assert.equal(masqueradeMark(0), "0x00000001");
    assert.equal(masqueradeMark(31), "0x80000000");
    assert.throws(() => masqueradeMark(32), /0\.\.31/);
    assert.throws(() => masqueradeMark(1.5), /0\.\.31/);
    assert.deepEqual(chainRules({ masqueradeBit: 3 }, "nat", "KUBE-MARK-MASQ"), [
      "-A KUBE-MARK-MASQ -j MARK --or-mark 0x00000008",
    ]);
  });
});

describe("TestDropInvalidRule", () => {
  const tail = [
    `-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x00004000/0x00004000 -j ACCEPT`,
    `-A KUBE-FORWARD -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`,
  ];
  const cases: Array<[boolean, boolean, string[]]> = [
    [false, true, ["-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP"]],
    [true, true, [
      "-A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP",
    ]],
    [false, false, []],
  ];
  for (const [nfacct, dropInvalid, drop] of cases) {
    it(`nfacct ${nfacct}, dropInvalid (tcpBeLiberal off) ${dropInvalid}`, () => {
      assert.deepEqual(
        chainRules({ features: { randomFully: false, nfacct, dropInvalid } }, "filter", "KUBE-FORWARD"),
        [...drop, ...tail],
      );
    });
  }
});

describe("TestComputeProbability", () => {
  it("matches upstream's table", () => {
    const expected: Array<[number, string]> = [
      [1, "1.0000000000"],
      [2, "0.5000000000"],
      [10, "0.1000000000"],
      [100, "0.0100000000"],
      [1000, "0.0010000000"],
      [10000, "0.0001000000"],
      [100000, "0.0000100000"],
      [100001, "0.0000099999"],
    ];
    for (const [n, want] of expected) {
      assert.equal(computeProbability(n), want, `n=${n}`);
      assert.equal(probability(n), want, `memoised n=${n}`);
    }
  });
  it("rounds exact ties half to even like Go (1/2048 = 0.00048828125), unlike toFixed", () => {
    assert.equal(computeProbability(2048), "0.0004882812");
    assert.equal((1 / 2048).toFixed(10), "0.0004882813");
    assert.equal(formatFixed10(0.5), "0.5000000000");
    assert.equal(formatFixed10(0), "0.0000000000");
    assert.equal(formatFixed10(12.25), "12.2500000000");
  });
  it("n = 1..10000 equal Python's '%.10f' (a half-to-even exact formatter) byte for byte", () => {
    // sha256 of "\n".join('%.10f' % (1/n) for n in range(1, 10001)), computed with CPython.
    const text = Array.from({ length: 10000 }, (_, i) => probability(i + 1)).join("\n");
    assert.equal(
      createHash("sha256").update(text).digest("hex"),
      "89641a20ae643445121b12425540842a30cd548fe23e9f57bcce03abc9c843c9",
    );
  });
  it("strictly increases as n decreases (100000 → 2)", () => {
    let prev = 0;
    for (let n = 100000; n > 1; n--) {
      const p = Number(probability(n));
      assert.ok(p > prev, `n=${n}`);
      prev = p;
    }
  });
});

describe("payload safety", () => {
  const base = () => {
    const p = new FakeProxier();
    const good = makeServicePort("ns1", "good", { clusterIP: "172.30.0.41" });
    p.setService(good).setEndpoints(good, [makeEndpoint("10.180.0.1", 80)]);
    return p;
  };
  const bad: Array<[string, ServicePortInfo, EndpointInfo[]]> = [
    ["quote in name", makeServicePort("ns1", 'x" -j ACCEPT', { clusterIP: "172.30.0.42" }), []],
    [
      "newline in namespace",
      makeServicePort("ns1\n-A INPUT -j ACCEPT", "x", { clusterIP: "172.30.0.42" }),
      [],
    ],
    ["backslash in port name", makeServicePort("ns1", "x", { clusterIP: "172.30.0.42", port: "a\\b" }), []],
    ["control char", makeServicePort("ns1", "x\u0001", { clusterIP: "172.30.0.42" }), []],
    ["clusterIP with spaces", makeServicePort("ns1", "x", { clusterIP: "172.30.0.42 -j ACCEPT" }), []],
    ["IPv6 clusterIP in an IPv4 sync", makeServicePort("ns1", "x", { clusterIP: "fd00::1" }), []],
    ["unnormalised clusterIP", makeServicePort("ns1", "x", { clusterIP: "172.30.0.042" }), []],
    [
      "bad external IP",
      makeServicePort("ns1", "x", { clusterIP: "172.30.0.42", externalIPs: ["1.2.3.4\n"] }),
      [],
    ],
    [
      "bad source range",
      makeServicePort("ns1", "x", {
        clusterIP: "172.30.0.42",
        loadBalancerVIPs: ["1.2.3.4"],
        loadBalancerSourceRanges: ["1.2.3.0/24 x"],
      }),
      [],
    ],
    ["bad port", makeServicePort("ns1", "x", { clusterIP: "172.30.0.42", portNumber: 70000 }), []],
    [
      "bad endpoint IP",
      makeServicePort("ns1", "x", { clusterIP: "172.30.0.42" }),
      [{
        ...makeEndpoint("10.180.0.2", 80),
        ip: '10.180.0.2" -j ACCEPT',
        endpoint: '10.180.0.2" -j ACCEPT:80',
      }],
    ],
    ["endpoint string mismatch", makeServicePort("ns1", "x", { clusterIP: "172.30.0.42" }), [{
      ...makeEndpoint("10.180.0.2", 80),
      endpoint: "10.180.0.3:80",
    }]],
  ];
  for (const [name, svc, eps] of bad) {
    it(`skips a service port with ${name}, warns, and keeps the rest`, () => {
      const p = base();
      p.setService(svc).setEndpoints(svc, eps);
      const s = p.sync();
      assert.equal(s.error, null, "the payload still applies");
      assert.deepEqual(s.result.skippedServices, [servicePortKey(svc.name)]);
      assert.equal(s.result.warnings.length, 1);
      assert.match(s.result.warnings[0], /skipped: /);
      assert.ok(!s.result.payload.includes("172.30.0.42"), "nothing of the bad service port is written");
      assert.ok(!s.result.payload.includes('-j ACCEPT"') && !/\n-A INPUT/.test(s.result.payload));
      assert.ok(s.result.payload.includes('"ns1/good:p80 cluster IP"'));
      // Every line is printable ASCII.
      assert.ok(/^[\x20-\x7e\n]*$/.test(s.result.payload));
    });
  }
  it("replaces an unsafe local detector by no detection, with a warning", () => {
    const s = new FakeProxier({
      localDetector: { implemented: true, ifLocal: ["-s", "10.0.0.0/8\n"], ifNotLocal: ["!", "-s", "x y"] },
    }).sync();
    assert.equal(s.error, null);
    assert.match(s.result.warnings.join("\n"), /localDetector: unsafe argument/);
  });
  it("payload lines are tidy: no trailing or double spaces, ends with COMMIT", () => {
    const p = base();
    const lb = makeServicePort("ns2", "lb", {
      clusterIP: "172.30.0.50",
      nodePort: 3005,
      loadBalancerVIPs: ["1.2.3.4"],
      loadBalancerSourceRanges: ["192.168.0.0/24"],
      externalPolicyLocal: true,
      healthCheckNodePort: 30005,
      stickyMaxAgeSeconds: 300,
      externalIPs: ["192.168.99.50"],
    });
    p.setService(lb).setEndpoints(lb, [
      makeEndpoint("10.180.0.9", 80, { nodeName: TEST_NODE_NAME }),
      makeEndpoint("10.180.1.9", 80),
    ]);
    const { payload } = p.sync().result;
    for (const line of payload.split("\n")) {
      assert.ok(!/\s$/.test(line) && !/ {2}/.test(line), JSON.stringify(line));
    }
    assert.ok(payload.startsWith("*filter\n") && payload.endsWith("COMMIT\n"));
  });
  it("does not mutate its input", () => {
    const p = base();
    const deepFreeze = <T>(o: T): T => {
      if (o !== null && typeof o === "object") {
        for (const v of Object.values(o)) deepFreeze(v);
        Object.freeze(o);
      }
      return o;
    };
    const eps = deepFreeze([makeEndpoint("10.180.0.9", 80), makeEndpoint("10.180.0.3", 80)]);
    const svc = deepFreeze(makeServicePort("ns2", "x", { clusterIP: "172.30.0.50" }));
    const input: RenderInput = deepFreeze({
      ...p.settings,
      services: new Map([[servicePortKey(svc.name), svc]]),
      endpoints: new Map([[servicePortKey(svc.name), eps]]),
      full: true,
      changedServices: new Set<string>(),
      existingNatChains: null,
    });
    const r = renderIptablesRules(input);
    assert.deepEqual(r.warnings, []);
    assert.deepEqual(eps.map((e) => e.ip), ["10.180.0.9", "10.180.0.3"]);
    // Unsorted endpoints are still written in "ip:port" order.
    assert.ok(
      r.payload.indexOf("--to-destination 10.180.0.3:80") <
        r.payload.indexOf("--to-destination 10.180.0.9:80"),
    );
  });
});

describe("IPv6 rendering", () => {
  it("brackets endpoints in DNAT and hashes, uses the IPv6 detector, no KUBE-FIREWALL", () => {
    const p = new FakeProxier({ family: "IPv6" });
    const svc = makeServicePort("ns1", "svc1", { clusterIP: "fd00:172:30::41" });
    p.setService(svc).setEndpoints(svc, [makeEndpoint("fd00:10:180::1", 80)]);
    const s = p.sync();
    assert.equal(s.error, null);
    const nat = (p.ipt.rules("nat", "KUBE-SEP-OGYCNMB4EMRUSJ6N") ?? []).map((r) => r.raw);
    assert.deepEqual(nat, [
      "-A KUBE-SEP-OGYCNMB4EMRUSJ6N -m comment --comment ns1/svc1:p80 -s fd00:10:180::1 -j KUBE-MARK-MASQ",
      "-A KUBE-SEP-OGYCNMB4EMRUSJ6N -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination [fd00:10:180::1]:80",
    ]);
    assert.ok(s.result.payload.includes("! -s fd00:10::/64 -j KUBE-MARK-MASQ"));
    assert.ok(!s.result.payload.includes("KUBE-FIREWALL"));
    assert.deepEqual(
      checkPacketFlows(p.ipt, TEST_NODE_IPS, [
        {
          name: "pod to ClusterIP",
          sourceIP: "fd00:10::2",
          destIP: "fd00:172:30::41",
          destPort: 80,
          output: "[fd00:10:180::1]:80",
        },
      ]),
      [],
    );
  });
});

describe("local traffic detectors", () => {
  it("build upstream's match arguments", () => {
    assert.deepEqual(newDetectLocalByCIDR("10.0.0.1/8"), {
      implemented: true,
      ifLocal: ["-s", "10.0.0.0/8"],
      ifNotLocal: ["!", "-s", "10.0.0.0/8"],
    });
    assert.deepEqual(newDetectLocalByCIDR("fd00:10::/64").ifNotLocal, ["!", "-s", "fd00:10::/64"]);
    assert.deepEqual(newDetectLocalByBridgeInterface("br0"), {
      implemented: true,
      ifLocal: ["-i", "br0"],
      ifNotLocal: ["!", "-i", "br0"],
    });
    assert.deepEqual(newDetectLocalByInterfaceNamePrefix("veth"), {
      implemented: true,
      ifLocal: ["-i", "veth+"],
      ifNotLocal: ["!", "-i", "veth+"],
    });
    assert.equal(newNoOpLocalDetector().implemented, false);
    assert.throws(() => newDetectLocalByCIDR("10.0.0.0"), /invalid CIDR/);
    assert.throws(() => newDetectLocalByBridgeInterface("br 0"), /invalid bridge interface/);
    assert.throws(() => newDetectLocalByInterfaceNamePrefix(""), /invalid interface name prefix/);
  });
  it("pick the family's CIDR per mode, falling back to no-op with a warning", () => {
    const cfg = { mode: "ClusterCIDR" as const, clusterCIDR: "10.0.0.0/8, fd00:10::/64" };
    assert.deepEqual(localDetectorFor("IPv4", cfg).detector.ifLocal, ["-s", "10.0.0.0/8"]);
    assert.deepEqual(localDetectorFor("IPv6", cfg).detector.ifLocal, ["-s", "fd00:10::/64"]);
    const v4only = localDetectorFor("IPv6", { mode: "ClusterCIDR", clusterCIDR: "10.0.0.0/8" });
    assert.equal(v4only.detector.implemented, false);
    assert.match(v4only.warning!, /no IPv6 CIDR/);
    assert.deepEqual(
      localDetectorFor("IPv4", { mode: "NodeCIDR", nodePodCIDRs: ["10.244.1.0/24"] }).detector.ifNotLocal,
      ["!", "-s", "10.244.1.0/24"],
    );
    assert.deepEqual(
      localDetectorFor("IPv6", { mode: "BridgeInterface", bridgeInterface: "cbr0" }).detector.ifLocal,
      ["-i", "cbr0"],
    );
    assert.deepEqual(
      localDetectorFor("IPv4", { mode: "InterfaceNamePrefix", interfaceNamePrefix: "cali" }).detector.ifLocal,
      ["-i", "cali+"],
    );
    assert.deepEqual(localDetectorFor("IPv4", { mode: "" }), {
      detector: newNoOpLocalDetector(),
      warning: null,
    });
    const bad = localDetectorFor("IPv4", { mode: "BridgeInterface", bridgeInterface: "" });
    assert.equal(bad.detector.implemented, false);
    assert.match(bad.warning!, /invalid bridge interface/);
  });
  it("an interface detector is written into the rules", () => {
    const p = new FakeProxier({ localDetector: newDetectLocalByInterfaceNamePrefix("veth") });
    const svc = makeServicePort("ns1", "svc1", {
      clusterIP: "172.30.0.41",
      nodePort: 3001,
      externalPolicyLocal: true,
    });
    p.setService(svc).setEndpoints(svc, [makeEndpoint("10.180.0.1", 80, { nodeName: TEST_NODE_NAME })]);
    const { payload } = p.sync().result;
    assert.ok(payload.includes("--dport 80 ! -i veth+ -j KUBE-MARK-MASQ"));
    assert.ok(
      payload.includes(
        '"pod traffic for ns1/svc1:p80 external destinations" -i veth+ -j KUBE-SVC-XPGD46QRK7WJZT7O',
      ),
    );
  });
});

describe("nodePortAddresses", () => {
  it("filters by family, detects loopback and match-all, selects interface addresses", () => {
    const all4 = newNodePortAddresses("IPv4", []);
    assert.deepEqual([all4.cidrStrings, all4.matchAll, all4.containsIPv4Loopback], [
      ["0.0.0.0/0"],
      true,
      true,
    ]);
    const all6 = newNodePortAddresses("IPv6", ["192.168.0.0/24"]);
    assert.deepEqual([all6.cidrStrings, all6.matchAll, all6.containsIPv4Loopback], [["::/0"], true, false]);
    const some = newNodePortAddresses("IPv4", ["192.168.0.0/24", "127.0.0.1/32", "2001:db8::/64", "junk"]);
    assert.deepEqual(some.cidrStrings, ["192.168.0.0/24", "127.0.0.1/32"]);
    assert.equal(some.matchAll, false);
    assert.equal(some.containsIPv4Loopback, true);
    assert.deepEqual(some.invalid, ["junk"]);
    assert.deepEqual(some.nodeIPs(["192.168.1.2", "127.0.0.1", "192.168.0.2", "::1", "192.168.0.2"]), [
      "127.0.0.1",
      "192.168.0.2",
    ]);
    assert.equal(newNodePortAddresses("IPv4", ["192.168.0.0/24"]).containsIPv4Loopback, false);
  });
  it("reports invalid values as render warnings", () => {
    const r = new FakeProxier({ nodePortAddresses: ["nope", "192.168.0.0/24"] }).sync().result;
    assert.match(r.warnings.join("\n"), /nodePortAddresses value "nope" ignored/);
  });
});

describe("IP helpers", () => {
  it("parse and format like Go's net package", () => {
    assert.equal(formatIP(parseIP("2001:db8:0:0:0:0:0:1")!), "2001:db8::1");
    assert.equal(parseIPOfFamily("::ffff:1.2.3.4", true), null);
    assert.equal(parseIPOfFamily("::ffff:1.2.3.4", false), null);
    assert.equal(formatIP(parseIP("fd00:0:0:1:0:0:0:0")!), "fd00:0:0:1::");
    assert.equal(formatIP(parseIP("1:0:0:2:0:0:0:3")!), "1:0:0:2::3");
    assert.equal(formatIP(parseIP("1:0:0:2:2:0:0:3")!), "1::2:2:0:0:3");
    assert.equal(formatCIDR(parseCIDR("203.0.113.7/25")!), "203.0.113.0/25");
    for (
      const bad of [
        "1.2.3",
        "01.2.3.4",
        "1.2.3.256",
        "1::2::3",
        "fe80::1%eth0",
        "1.2.3.4/33",
        " 1.2.3.4",
        "::1/129",
      ]
    ) {
      assert.equal(bad.includes("/") ? parseCIDR(bad) : parseIP(bad), null, bad);
    }
  });
});

describe("jump rule table", () => {
  it("lists upstream's jumps with args in EnsureRule order", () => {
    assert.equal(IPTABLES_JUMP_RULES.length, 12);
    assert.equal(IPTABLES_KUBELET_JUMP_RULES.length, 2);
    assert.deepEqual(jumpRuleArgs(IPTABLES_JUMP_RULES[0]), [
      "-m",
      "conntrack",
      "--ctstate",
      "NEW",
      "-m",
      "comment",
      "--comment",
      "kubernetes externally-visible service portals",
      "-j",
      "KUBE-EXTERNAL-SERVICES",
    ]);
    assert.equal(
      jumpRuleLine(IPTABLES_JUMP_RULES[10]),
      '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    );
    assert.equal(jumpRuleLine(IPTABLES_KUBELET_JUMP_RULES[0]), "-A INPUT -j KUBE-FIREWALL");
  });
});

describe("packet tracer self-test (static rules)", () => {
  it("follows jumps, collects probabilistic endpoints, skips recent/mark/conntrack rules, honours negation", () => {
    const ipt = new FakeIptables();
    ipt.restore(`*filter
:KUBE-SERVICES - [0:0]
-A KUBE-SERVICES -m comment --comment "x has no endpoints" -m udp -p udp -d 172.30.0.9 --dport 53 -j REJECT
COMMIT
*nat
:PREROUTING - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-SVC-A - [0:0]
:KUBE-SEP-1 - [0:0]
:KUBE-SEP-2 - [0:0]
-A PREROUTING -j KUBE-SERVICES
-A KUBE-SERVICES -m tcp -p tcp -d 172.30.0.1 --dport 80 -j KUBE-SVC-A
-A KUBE-SVC-A -m tcp -p tcp -d 172.30.0.1 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SVC-A -m recent --name KUBE-SEP-2 --rcheck --seconds 10 --reap -j KUBE-SEP-2
-A KUBE-SVC-A -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-1
-A KUBE-SVC-A -j KUBE-SEP-2
-A KUBE-SEP-1 -m tcp -p tcp -j DNAT --to-destination 10.1.0.1:8080
-A KUBE-SEP-2 -m tcp -p tcp -j DNAT --to-destination 10.1.0.2:8080
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
COMMIT
`);
    assert.deepEqual(
      checkPacketFlows(ipt, TEST_NODE_IPS, [
        {
          name: "pod",
          sourceIP: "10.0.0.2",
          destIP: "172.30.0.1",
          destPort: 80,
          output: "10.1.0.1:8080, 10.1.0.2:8080",
        },
        {
          name: "outside",
          sourceIP: "203.0.113.2",
          destIP: "172.30.0.1",
          destPort: 80,
          output: "10.1.0.1:8080, 10.1.0.2:8080",
          masq: true,
        },
        { name: "wrong port", sourceIP: "10.0.0.2", destIP: "172.30.0.1", destPort: 81, output: "" },
        {
          name: "wrong protocol",
          sourceIP: "10.0.0.2",
          destIP: "172.30.0.1",
          destPort: 80,
          protocol: "udp",
          output: "",
        },
        {
          name: "filter reject",
          sourceIP: "10.0.0.2",
          destIP: "172.30.0.9",
          destPort: 53,
          protocol: "udp",
          output: "REJECT",
        },
      ]),
      [],
    );
    // The checker reports mismatches.
    assert.equal(
      checkPacketFlows(ipt, TEST_NODE_IPS, [{
        name: "x",
        sourceIP: "10.0.0.2",
        destIP: "172.30.0.1",
        destPort: 80,
        output: "",
      }]).length,
      1,
    );
  });
  it("FakeIptables.restore rejects bad payloads atomically", () => {
    const ipt = new FakeIptables();
    ipt.restore("*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j RETURN\nCOMMIT\n");
    assert.throws(
      () => ipt.restore("*nat\n:KUBE-B - [0:0]\n-A KUBE-C -j RETURN\nCOMMIT\n"),
      /chain KUBE-C does not exist/,
    );
    assert.ok(!ipt.chains("nat").has("KUBE-B"));
    assert.throws(
      () => ipt.restore("*nat\n:KUBE-B - [0:0]\n-A KUBE-B -j KUBE-NOPE\nCOMMIT\n"),
      /target chain KUBE-NOPE/,
    );
    assert.throws(() => ipt.restore("*nat\n-X KUBE-A\nCOMMIT\n"), /not empty/);
    assert.throws(() => ipt.restore("*nat\n:KUBE-A - [0:0]\n"), /missing COMMIT/);
    // --noflush: an undeclared chain keeps its rules.
    ipt.restore("*nat\n:KUBE-B - [0:0]\n-A KUBE-B -j RETURN\nCOMMIT\n");
    assert.equal(ipt.rules("nat", "KUBE-A")!.length, 1);
  });
});
