/**
 * Packet-flow tests: upstream proxier_test.go flow tables replayed through renderIptablesRules, the fake
 * kernel and the packet tracer (research §1.9 truth table, §2.3 scenarios).
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { newNoOpLocalDetector } from "../../lib/proxy/iptables/local_detector.ts";
import type { EndpointInfo, IPFamily, ServicePortInfo } from "../../lib/proxy/types.ts";
import {
  checkPacketFlows,
  type EndpointFixture,
  FakeProxier,
  type FakeProxierOptions,
  makeEndpoint,
  makeServicePort,
  type PacketFlow,
  TEST_EXTERNAL_CLIENT,
  TEST_EXTERNAL_CLIENT_BLOCKED,
  TEST_NODE_IP,
  TEST_NODE_IP_ALT,
  TEST_NODE_IPS,
  TEST_NODE_IPV6,
  TEST_NODE_IPV6_ALT,
  TEST_NODE_NAME,
} from "../support/tracer.ts";

function syncOk(p: FakeProxier): void {
  const s = p.sync();
  assert.equal(s.error, null);
  assert.deepEqual(s.result.warnings, []);
}

function assertFlows(p: FakeProxier, flows: readonly PacketFlow[]): void {
  assert.deepEqual(checkPacketFlows(p.ipt, TEST_NODE_IPS, flows), []);
}

function eps(list: ReadonlyArray<[string, EndpointFixture?]>, port = 80): EndpointInfo[] {
  return list.map(([ip, f]) => makeEndpoint(ip, port, f ?? {}));
}

describe("TestInternalExternalMasquerade (§1.9 truth table)", () => {
  const setup = (p: FakeProxier) => {
    const svc1 = makeServicePort("ns1", "svc1", {
      clusterIP: "172.30.0.41",
      nodePort: 3001,
      loadBalancerVIPs: ["1.2.3.4"],
    });
    const svc2 = makeServicePort("ns2", "svc2", {
      clusterIP: "172.30.0.42",
      nodePort: 3002,
      healthCheckNodePort: 30002,
      externalPolicyLocal: true,
      loadBalancerVIPs: ["5.6.7.8"],
    });
    const svc3 = makeServicePort("ns3", "svc3", {
      clusterIP: "172.30.0.43",
      nodePort: 3003,
      internalPolicyLocal: true,
      loadBalancerVIPs: ["9.10.11.12"],
    });
    p.setService(svc1).setService(svc2).setService(svc3);
    p.setEndpoints(
      svc1,
      eps([["10.180.0.1", { nodeName: TEST_NODE_NAME }], ["10.180.1.1", { nodeName: "remote" }]]),
    );
    p.setEndpoints(
      svc2,
      eps([["10.180.0.2", { nodeName: TEST_NODE_NAME }], ["10.180.1.2", { nodeName: "remote" }]]),
    );
    p.setEndpoints(
      svc3,
      eps([["10.180.0.3", { nodeName: TEST_NODE_NAME }], ["10.180.1.3", { nodeName: "remote" }]]),
    );
    syncOk(p);
  };
  const both1 = "10.180.0.1:80, 10.180.1.1:80";
  const both2 = "10.180.0.2:80, 10.180.1.2:80";
  const both3 = "10.180.0.3:80, 10.180.1.3:80";
  const X = TEST_EXTERNAL_CLIENT;
  const N = TEST_NODE_IP;
  const flows: PacketFlow[] = [
    {
      name: "pod to ClusterIP",
      sourceIP: "10.0.0.2",
      destIP: "172.30.0.41",
      destPort: 80,
      output: both1,
      masq: false,
    },
    { name: "pod to NodePort", sourceIP: "10.0.0.2", destIP: N, destPort: 3001, output: both1, masq: true },
    { name: "pod to LB", sourceIP: "10.0.0.2", destIP: "1.2.3.4", destPort: 80, output: both1, masq: true },
    {
      name: "node to ClusterIP",
      sourceIP: N,
      destIP: "172.30.0.41",
      destPort: 80,
      output: both1,
      masq: true,
    },
    { name: "node to NodePort", sourceIP: N, destIP: N, destPort: 3001, output: both1, masq: true },
    {
      name: "localhost to NodePort",
      sourceIP: "127.0.0.1",
      destIP: "127.0.0.1",
      destPort: 3001,
      output: both1,
      masq: true,
    },
    { name: "node to LB", sourceIP: N, destIP: "1.2.3.4", destPort: 80, output: both1, masq: true },
    {
      name: "external to ClusterIP",
      sourceIP: X,
      destIP: "172.30.0.41",
      destPort: 80,
      output: both1,
      masq: true,
    },
    { name: "external to NodePort", sourceIP: X, destIP: N, destPort: 3001, output: both1, masq: true },
    { name: "external to LB", sourceIP: X, destIP: "1.2.3.4", destPort: 80, output: both1, masq: true },
    {
      name: "pod to ClusterIP with eTP:Local",
      sourceIP: "10.0.0.2",
      destIP: "172.30.0.42",
      destPort: 80,
      output: both2,
    },
    {
      name: "pod to NodePort with eTP:Local",
      sourceIP: "10.0.0.2",
      destIP: N,
      destPort: 3002,
      output: both2,
    },
    {
      name: "pod to LB with eTP:Local",
      sourceIP: "10.0.0.2",
      destIP: "5.6.7.8",
      destPort: 80,
      output: both2,
    },
    {
      name: "node to ClusterIP with eTP:Local",
      sourceIP: N,
      destIP: "172.30.0.42",
      destPort: 80,
      output: both2,
      masq: true,
    },
    // (upstream's case uses port 3001, i.e. svc1)
    {
      name: "node to NodePort with eTP:Local",
      sourceIP: N,
      destIP: N,
      destPort: 3001,
      output: both1,
      masq: true,
    },
    {
      name: "localhost to NodePort with eTP:Local",
      sourceIP: "127.0.0.1",
      destIP: "127.0.0.1",
      destPort: 3002,
      output: both2,
      masq: true,
    },
    {
      name: "node to LB with eTP:Local",
      sourceIP: N,
      destIP: "5.6.7.8",
      destPort: 80,
      output: both2,
      masq: true,
    },
    {
      name: "external to ClusterIP with eTP:Local",
      sourceIP: X,
      destIP: "172.30.0.42",
      destPort: 80,
      output: both2,
      masq: true,
    },
    {
      name: "external to NodePort with eTP:Local",
      sourceIP: X,
      destIP: N,
      destPort: 3002,
      output: "10.180.0.2:80",
    },
    {
      name: "external to LB with eTP:Local",
      sourceIP: X,
      destIP: "5.6.7.8",
      destPort: 80,
      output: "10.180.0.2:80",
    },
    {
      name: "pod to ClusterIP with iTP:Local",
      sourceIP: "10.0.0.2",
      destIP: "172.30.0.43",
      destPort: 80,
      output: "10.180.0.3:80",
    },
    {
      name: "pod to NodePort with iTP:Local",
      sourceIP: "10.0.0.2",
      destIP: N,
      destPort: 3003,
      output: both3,
      masq: true,
    },
    {
      name: "pod to LB with iTP:Local",
      sourceIP: "10.0.0.2",
      destIP: "9.10.11.12",
      destPort: 80,
      output: both3,
      masq: true,
    },
    {
      name: "node to ClusterIP with iTP:Local",
      sourceIP: N,
      destIP: "172.30.0.43",
      destPort: 80,
      output: "10.180.0.3:80",
      masq: true,
    },
    {
      name: "node to NodePort with iTP:Local",
      sourceIP: N,
      destIP: N,
      destPort: 3003,
      output: both3,
      masq: true,
    },
    {
      name: "localhost to NodePort with iTP:Local",
      sourceIP: "127.0.0.1",
      destIP: "127.0.0.1",
      destPort: 3003,
      output: both3,
      masq: true,
    },
    {
      name: "node to LB with iTP:Local",
      sourceIP: N,
      destIP: "9.10.11.12",
      destPort: 80,
      output: both3,
      masq: true,
    },
    {
      name: "external to ClusterIP with iTP:Local",
      sourceIP: X,
      destIP: "172.30.0.43",
      destPort: 80,
      output: "10.180.0.3:80",
      masq: true,
    },
    {
      name: "external to NodePort with iTP:Local",
      sourceIP: X,
      destIP: N,
      destPort: 3003,
      output: both3,
      masq: true,
    },
    {
      name: "external to LB with iTP:Local",
      sourceIP: X,
      destIP: "9.10.11.12",
      destPort: 80,
      output: both3,
      masq: true,
    },
  ];
  type Override = { output?: string; masq?: boolean };
  const noDetector: Record<string, Override> = {
    // Without a detector all ClusterIP traffic counts as pod traffic: no masquerade...
    "node to ClusterIP": { masq: false },
    "node to ClusterIP with eTP:Local": { masq: false },
    "node to ClusterIP with iTP:Local": { masq: false },
    "external to ClusterIP": { masq: false },
    "external to ClusterIP with eTP:Local": { masq: false },
    "external to ClusterIP with iTP:Local": { masq: false },
    // ...and there is no eTP=Local short-circuit, so pods get only the local endpoints.
    "pod to NodePort with eTP:Local": { output: "10.180.0.2:80" },
    "pod to LB with eTP:Local": { output: "10.180.0.2:80" },
  };
  const masqueradeAll: Record<string, Override> = {
    "pod to ClusterIP": { masq: true },
    "pod to ClusterIP with eTP:Local": { masq: true },
    "pod to ClusterIP with iTP:Local": { masq: true },
  };
  const cases: Array<[string, FakeProxierOptions, Record<string, Override>]> = [
    ["base", {}, {}],
    ["no LocalTrafficDetector", { localDetector: newNoOpLocalDetector() }, noDetector],
    ["masqueradeAll", { masqueradeAll: true }, masqueradeAll],
    [
      "masqueradeAll, no LocalTrafficDetector",
      { masqueradeAll: true, localDetector: newNoOpLocalDetector() },
      {
        ...masqueradeAll,
        "pod to NodePort with eTP:Local": noDetector["pod to NodePort with eTP:Local"],
        "pod to LB with eTP:Local": noDetector["pod to LB with eTP:Local"],
      },
    ],
  ];
  for (const [name, options, overrides] of cases) {
    it(name, () => {
      const p = new FakeProxier(options);
      setup(p);
      let applied = 0;
      const merged = flows.map((f) => {
        const o = overrides[f.name];
        if (o === undefined) return f;
        applied++;
        // An override must change something, or the case would not test anything.
        assert.ok(
          (o.output !== undefined && o.output !== f.output) ||
            (o.masq !== undefined && o.masq !== (f.masq ?? false)),
          f.name,
        );
        return { ...f, ...o };
      });
      assert.equal(applied, Object.keys(overrides).length);
      assertFlows(p, merged);
    });
  }
});

describe("TestLoadBalancer (S11)", () => {
  it("source ranges allow listed clients, the node and LB-IP hairpin; NodePort bypasses them", () => {
    const p = new FakeProxier();
    const svc = makeServicePort("ns1", "svc1", {
      clusterIP: "172.30.0.41",
      nodePort: 3001,
      loadBalancerVIPs: ["1.2.3.4", "5.6.7.8"],
      loadBalancerSourceRanges: ["192.168.0.0/24", "203.0.113.0/25"],
    });
    p.setService(svc).setEndpoints(svc, eps([["10.180.0.1"]]));
    syncOk(p);
    const ep = "10.180.0.1:80";
    assertFlows(p, [
      { name: "pod to cluster IP", sourceIP: "10.0.0.2", destIP: "172.30.0.41", destPort: 80, output: ep },
      {
        name: "external to nodePort",
        sourceIP: TEST_EXTERNAL_CLIENT,
        destIP: TEST_NODE_IP,
        destPort: 3001,
        output: ep,
        masq: true,
      },
      {
        name: "nodePort bypasses LoadBalancerSourceRanges",
        sourceIP: TEST_EXTERNAL_CLIENT_BLOCKED,
        destIP: TEST_NODE_IP,
        destPort: 3001,
        output: ep,
        masq: true,
      },
      {
        name: "accepted external to LB1",
        sourceIP: TEST_EXTERNAL_CLIENT,
        destIP: "1.2.3.4",
        destPort: 80,
        output: ep,
        masq: true,
      },
      {
        name: "accepted external to LB2",
        sourceIP: TEST_EXTERNAL_CLIENT,
        destIP: "5.6.7.8",
        destPort: 80,
        output: ep,
        masq: true,
      },
      {
        name: "blocked external to LB1",
        sourceIP: TEST_EXTERNAL_CLIENT_BLOCKED,
        destIP: "1.2.3.4",
        destPort: 80,
        output: "DROP",
      },
      {
        name: "blocked external to LB2",
        sourceIP: TEST_EXTERNAL_CLIENT_BLOCKED,
        destIP: "5.6.7.8",
        destPort: 80,
        output: "DROP",
      },
      { name: "pod to LB1 (blocked)", sourceIP: "10.0.0.2", destIP: "1.2.3.4", destPort: 80, output: "DROP" },
      { name: "pod to LB2 (blocked)", sourceIP: "10.0.0.2", destIP: "5.6.7.8", destPort: 80, output: "DROP" },
      {
        name: "node to LB1 (allowed)",
        sourceIP: TEST_NODE_IP,
        destIP: "1.2.3.4",
        destPort: 80,
        output: ep,
        masq: true,
      },
      {
        name: "node to LB2 (allowed)",
        sourceIP: TEST_NODE_IP,
        destIP: "5.6.7.8",
        destPort: 80,
        output: ep,
        masq: true,
      },
      {
        name: "same node to LB1, SNATted to LB1",
        sourceIP: "1.2.3.4",
        destIP: "1.2.3.4",
        destPort: 80,
        output: ep,
        masq: true,
      },
      {
        name: "same node to LB2, SNATted to LB2",
        sourceIP: "5.6.7.8",
        destIP: "5.6.7.8",
        destPort: 80,
        output: ep,
        masq: true,
      },
    ]);
  });

  it("no LB-IP source rule when no range contains the node IP", () => {
    const p = new FakeProxier();
    const svc = makeServicePort("ns1", "svc1", {
      clusterIP: "172.30.0.41",
      loadBalancerVIPs: ["1.2.3.4"],
      loadBalancerSourceRanges: ["203.0.113.0/25"],
    });
    p.setService(svc).setEndpoints(svc, eps([["10.180.0.1"]]));
    syncOk(p);
    assertFlows(p, [
      {
        name: "node to LB (not allowed)",
        sourceIP: TEST_NODE_IP,
        destIP: "1.2.3.4",
        destPort: 80,
        output: "DROP",
      },
      {
        name: "LB-IP source (not allowed)",
        sourceIP: "1.2.3.4",
        destIP: "1.2.3.4",
        destPort: 80,
        output: "DROP",
      },
    ]);
  });
});

describe("TestNodePorts (S18): --nodeport-addresses and --iptables-localhost-nodeports", () => {
  const cases: Array<{
    name: string;
    family: IPFamily;
    localhostNodePorts: boolean;
    nodePortAddresses: string[];
    allowAltNodeIP: boolean;
    expectFirewall: boolean;
  }> = [
    {
      name: "ipv4, localhost-nodeports enabled",
      family: "IPv4",
      localhostNodePorts: true,
      nodePortAddresses: [],
      allowAltNodeIP: true,
      expectFirewall: true,
    },
    {
      name: "ipv4, localhost-nodeports disabled",
      family: "IPv4",
      localhostNodePorts: false,
      nodePortAddresses: [],
      allowAltNodeIP: true,
      expectFirewall: false,
    },
    {
      name: "ipv4, localhost-nodeports disabled, localhost in nodeport-addresses",
      family: "IPv4",
      localhostNodePorts: false,
      nodePortAddresses: ["192.168.0.0/24", "127.0.0.1/32"],
      allowAltNodeIP: false,
      expectFirewall: false,
    },
    {
      name: "ipv4, localhost-nodeports disabled, multiple nodeport-addresses",
      family: "IPv4",
      localhostNodePorts: false,
      nodePortAddresses: ["192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64"],
      allowAltNodeIP: true,
      expectFirewall: false,
    },
    {
      name: "ipv6, localhost-nodeports enabled",
      family: "IPv6",
      localhostNodePorts: true,
      nodePortAddresses: [],
      allowAltNodeIP: true,
      expectFirewall: false,
    },
    {
      name: "ipv6, localhost-nodeports disabled",
      family: "IPv6",
      localhostNodePorts: false,
      nodePortAddresses: [],
      allowAltNodeIP: true,
      expectFirewall: false,
    },
    {
      name: "ipv6, localhost-nodeports disabled, multiple nodeport-addresses",
      family: "IPv6",
      localhostNodePorts: false,
      nodePortAddresses: ["192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64"],
      allowAltNodeIP: false,
      expectFirewall: false,
    },
  ];
  for (const tc of cases) {
    it(tc.name, () => {
      const v4 = tc.family === "IPv4";
      const svcIP = v4 ? "172.30.0.41" : "fd00:172:30::41";
      const [ep1, ep2] = v4 ? ["10.180.0.1", "10.180.2.1"] : ["fd00:10:180::1", "fd00:10:180::2:1"];
      const p = new FakeProxier({
        family: tc.family,
        localhostNodePorts: tc.localhostNodePorts,
        nodePortAddresses: tc.nodePortAddresses,
      });
      const svc = makeServicePort("ns1", "svc1", { clusterIP: svcIP, nodePort: 3001 });
      p.setService(svc).setEndpoints(svc, eps([[ep1], [ep2, { nodeName: TEST_NODE_NAME }]]));
      const s = p.sync();
      assert.equal(s.error, null);
      const [podIP, externalIP, nodeIP, altNodeIP, localhost] = v4
        ? ["10.0.0.2", TEST_EXTERNAL_CLIENT, TEST_NODE_IP, TEST_NODE_IP_ALT, "127.0.0.1"]
        : ["fd00:10::2", "2600:5200::1", TEST_NODE_IPV6, TEST_NODE_IPV6_ALT, "::1"];
      const join = (ip: string) => (v4 ? `${ip}:80` : `[${ip}]:80`);
      const output = `${join(ep1)}, ${join(ep2)}`;
      const flows: PacketFlow[] = [
        { name: "pod to cluster IP", sourceIP: podIP, destIP: svcIP, destPort: 80, output },
        {
          name: "external to nodePort",
          sourceIP: externalIP,
          destIP: nodeIP,
          destPort: 3001,
          output,
          masq: true,
        },
        { name: "node to nodePort", sourceIP: nodeIP, destIP: nodeIP, destPort: 3001, output, masq: true },
        v4 && tc.localhostNodePorts
          ? {
            name: "localhost to nodePort gets masqueraded",
            sourceIP: localhost,
            destIP: localhost,
            destPort: 3001,
            output,
            masq: true,
          }
          : {
            name: "localhost to nodePort is ignored",
            sourceIP: localhost,
            destIP: localhost,
            destPort: 3001,
            output: "",
          },
        tc.allowAltNodeIP
          ? {
            name: "external to nodePort on secondary IP",
            sourceIP: externalIP,
            destIP: altNodeIP,
            destPort: 3001,
            output,
            masq: true,
          }
          : {
            name: "secondary nodeIP ignores NodePorts",
            sourceIP: externalIP,
            destIP: altNodeIP,
            destPort: 3001,
            output: "",
          },
      ];
      assertFlows(p, flows);
      const firewall = p.ipt.rules("filter", "KUBE-FIREWALL")?.map((r) => r.raw) ?? [];
      assert.deepEqual(
        firewall,
        tc.expectFirewall
          ? [
            `-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`,
          ]
          : [],
      );
      assert.equal(s.result.localhostNodePorts, tc.expectFirewall);
    });
  }

  it("writes the exact nodeports tail rules per mode", () => {
    const tail = (options: FakeProxierOptions) => {
      const p = new FakeProxier(options);
      return p.sync().result.payload.split("\n").filter((l) => l.includes("must be the last rule"));
    };
    const c =
      `-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain"`;
    assert.deepEqual(tail({}), [`${c} -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS`]);
    assert.deepEqual(tail({ localhostNodePorts: false }), [
      `${c} -m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j KUBE-NODEPORTS`,
    ]);
    assert.deepEqual(tail({ family: "IPv6" }), [
      `${c} -m addrtype --dst-type LOCAL ! -d ::1/128 -j KUBE-NODEPORTS`,
    ]);
    assert.deepEqual(tail({ nodePortAddresses: ["192.168.0.0/16"] }), [
      `${c} -d 192.168.0.2 -j KUBE-NODEPORTS`,
      `${c} -d 192.168.1.2 -j KUBE-NODEPORTS`,
      `${c} -d 192.168.99.11 -j KUBE-NODEPORTS`,
    ]);
    // A zero CIDR among others means "all addresses" again.
    assert.deepEqual(tail({ nodePortAddresses: ["192.168.0.0/24", "0.0.0.0/0"] }), [
      `${c} -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS`,
    ]);
    // nodePortAddresses without loopback turn localhost NodePorts (and KUBE-FIREWALL) off, as NewProxier does.
    const p = new FakeProxier({ nodePortAddresses: ["192.168.0.0/24"] });
    const r = p.sync().result;
    assert.equal(r.localhostNodePorts, false);
    assert.ok(!r.payload.includes("KUBE-FIREWALL"));
  });

  it("writes the localhost nfacct NodePort rule only with nfacct and localhost NodePorts", () => {
    const payload = (options: FakeProxierOptions) => {
      const p = new FakeProxier(options);
      const svc = makeServicePort("ns1", "svc1", { clusterIP: "172.30.0.41", nodePort: 3001 });
      p.setService(svc).setEndpoints(svc, eps([["10.180.0.1"]]));
      return p.sync().result.payload;
    };
    const nfacctRule =
      "-A KUBE-NODEPORTS -m comment --comment ns1/svc1:p80 -m tcp -p tcp -d 127.0.0.0/8 --dport 3001 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-EXT-XPGD46QRK7WJZT7O";
    assert.ok(payload({}).includes(nfacctRule));
    assert.ok(
      !payload({ features: { randomFully: false, nfacct: false, dropInvalid: true } }).includes("nfacct"),
    );
    assert.ok(!payload({ localhostNodePorts: false }).includes("localhost_nps_accepted_pkts"));
  });
});

describe("TestHealthCheckNodePort", () => {
  it("accepts the health check node port, and stops once the service is gone", () => {
    const p = new FakeProxier({ nodePortAddresses: ["127.0.0.0/8"] });
    const svc = makeServicePort("ns1", "svc1", {
      clusterIP: "172.30.0.42",
      nodePort: 3001,
      healthCheckNodePort: 30000,
      externalPolicyLocal: true,
    });
    p.setService(svc);
    syncOk(p);
    const flow = {
      name: "firewall accepts HealthCheckNodePort",
      sourceIP: "1.2.3.4",
      destIP: TEST_NODE_IP,
      destPort: 30000,
    };
    assertFlows(p, [{ ...flow, output: "ACCEPT" }]);
    p.deleteService("ns1", "svc1");
    syncOk(p);
    assertFlows(p, [{ ...flow, name: "HealthCheckNodePort no longer has any rule", output: "" }]);
  });
});

describe("TestNoEndpointsReject (S8)", () => {
  it("rejects ClusterIP, external IP, NodePort and LB IP traffic", () => {
    const p = new FakeProxier();
    p.setService(makeServicePort("ns1", "svc1", {
      clusterIP: "172.30.0.41",
      nodePort: 3001,
      externalIPs: ["192.168.99.11"],
      loadBalancerVIPs: ["1.2.3.4"],
    }));
    syncOk(p);
    const r = { output: "REJECT" };
    assertFlows(p, [
      { name: "pod to cluster IP", sourceIP: "10.0.0.2", destIP: "172.30.0.41", destPort: 80, ...r },
      {
        name: "external to external IP",
        sourceIP: TEST_EXTERNAL_CLIENT,
        destIP: "192.168.99.11",
        destPort: 80,
        ...r,
      },
      { name: "pod to NodePort", sourceIP: "10.0.0.2", destIP: TEST_NODE_IP, destPort: 3001, ...r },
      {
        name: "external to NodePort",
        sourceIP: TEST_EXTERNAL_CLIENT,
        destIP: TEST_NODE_IP,
        destPort: 3001,
        ...r,
      },
      { name: "pod to LoadBalancer IP", sourceIP: "10.0.0.2", destIP: "1.2.3.4", destPort: 80, ...r },
      {
        name: "external to LoadBalancer IP",
        sourceIP: TEST_EXTERNAL_CLIENT,
        destIP: "1.2.3.4",
        destPort: 80,
        ...r,
      },
    ]);
  });
});

describe("TestClusterIPGeneral (S9, S10)", () => {
  it("hairpin masquerade, target ports, protocols sharing a port", () => {
    const p = new FakeProxier();
    const svc1 = makeServicePort("ns1", "svc1", { clusterIP: "172.30.0.41", port: "http" });
    p.setService(svc1).setEndpoints(svc1, [makeEndpoint("10.180.0.1", 80, { nodeName: TEST_NODE_NAME })]);
    const ports: Array<[string, "TCP" | "UDP" | "SCTP", number, number]> = [
      ["http", "TCP", 80, 80],
      ["https", "TCP", 443, 8443],
      ["dns-udp", "UDP", 53, 53],
      ["dns-tcp", "TCP", 53, 5353],
      ["dns-sctp", "SCTP", 53, 53],
    ];
    for (const [name, protocol, port, target] of ports) {
      const s = makeServicePort("ns2", "svc2", {
        clusterIP: "172.30.0.42",
        port: name,
        protocol,
        portNumber: port,
      });
      p.setService(s).setEndpoints(s, [
        makeEndpoint("10.180.0.1", target, { nodeName: TEST_NODE_NAME }),
        makeEndpoint("10.180.2.1", target, { nodeName: "node2" }),
      ]);
    }
    syncOk(p);
    const src = "10.180.0.2";
    assertFlows(p, [
      {
        name: "simple clusterIP",
        sourceIP: src,
        destIP: "172.30.0.41",
        destPort: 80,
        output: "10.180.0.1:80",
      },
      {
        name: "hairpin to cluster IP",
        sourceIP: "10.180.0.1",
        destIP: "172.30.0.41",
        destPort: 80,
        output: "10.180.0.1:80",
        masq: true,
      },
      {
        name: "multiple endpoints",
        sourceIP: src,
        destIP: "172.30.0.42",
        destPort: 80,
        output: "10.180.0.1:80, 10.180.2.1:80",
      },
      {
        name: "TargetPort",
        sourceIP: src,
        destIP: "172.30.0.42",
        destPort: 443,
        output: "10.180.0.1:8443, 10.180.2.1:8443",
      },
      {
        name: "same port (TCP)",
        sourceIP: src,
        destIP: "172.30.0.42",
        destPort: 53,
        output: "10.180.0.1:5353, 10.180.2.1:5353",
      },
      {
        name: "same port (UDP)",
        sourceIP: src,
        protocol: "udp",
        destIP: "172.30.0.42",
        destPort: 53,
        output: "10.180.0.1:53, 10.180.2.1:53",
      },
      {
        name: "same port (SCTP)",
        sourceIP: src,
        protocol: "sctp",
        destIP: "172.30.0.42",
        destPort: 53,
        output: "10.180.0.1:53, 10.180.2.1:53",
      },
      {
        name: "TCP-only port does not match UDP",
        sourceIP: src,
        protocol: "udp",
        destIP: "172.30.0.42",
        destPort: 80,
        output: "",
      },
      {
        name: "svc1 does not accept svc2's ports",
        sourceIP: src,
        destIP: "172.30.0.41",
        destPort: 443,
        output: "",
      },
    ]);
  });
});

describe("TestExternalTrafficPolicyLocal / Cluster", () => {
  const build = (externalPolicyLocal: boolean) => {
    const p = new FakeProxier();
    const svc = makeServicePort("ns1", "svc1", {
      clusterIP: "172.30.0.41",
      nodePort: 3001,
      externalIPs: ["192.168.99.11"],
      loadBalancerVIPs: ["1.2.3.4"],
      externalPolicyLocal,
      healthCheckNodePort: externalPolicyLocal ? 30000 : 0,
    });
    p.setService(svc).setEndpoints(svc, eps([["10.180.0.1"], ["10.180.2.1", { nodeName: TEST_NODE_NAME }]]));
    syncOk(p);
    return p;
  };
  const both = "10.180.0.1:80, 10.180.2.1:80";
  it("eTP=Local: external clients reach only the local endpoint, unmasqueraded; pods reach all", () => {
    const X = TEST_EXTERNAL_CLIENT;
    assertFlows(build(true), [
      { name: "pod to cluster IP", sourceIP: "10.0.0.2", destIP: "172.30.0.41", destPort: 80, output: both },
      {
        name: "pod to external IP",
        sourceIP: "10.0.0.2",
        destIP: "192.168.99.11",
        destPort: 80,
        output: both,
      },
      {
        name: "external to external IP",
        sourceIP: X,
        destIP: "192.168.99.11",
        destPort: 80,
        output: "10.180.2.1:80",
      },
      { name: "pod to LB IP", sourceIP: "10.0.0.2", destIP: "1.2.3.4", destPort: 80, output: both },
      { name: "external to LB IP", sourceIP: X, destIP: "1.2.3.4", destPort: 80, output: "10.180.2.1:80" },
      { name: "pod to NodePort", sourceIP: "10.0.0.2", destIP: TEST_NODE_IP, destPort: 3001, output: both },
      {
        name: "external to NodePort",
        sourceIP: X,
        destIP: TEST_NODE_IP,
        destPort: 3001,
        output: "10.180.2.1:80",
      },
    ]);
  });
  it("eTP=Cluster: external destinations are masqueraded and reach all endpoints", () => {
    const X = TEST_EXTERNAL_CLIENT;
    assertFlows(build(false), [
      { name: "pod to cluster IP", sourceIP: "10.0.0.2", destIP: "172.30.0.41", destPort: 80, output: both },
      {
        name: "pod to external IP",
        sourceIP: "10.0.0.2",
        destIP: "192.168.99.11",
        destPort: 80,
        output: both,
        masq: true,
      },
      {
        name: "external to external IP",
        sourceIP: X,
        destIP: "192.168.99.11",
        destPort: 80,
        output: both,
        masq: true,
      },
      {
        name: "pod to LB IP",
        sourceIP: "10.0.0.2",
        destIP: "1.2.3.4",
        destPort: 80,
        output: both,
        masq: true,
      },
      { name: "external to LB IP", sourceIP: X, destIP: "1.2.3.4", destPort: 80, output: both, masq: true },
      {
        name: "pod to NodePort",
        sourceIP: "10.0.0.2",
        destIP: TEST_NODE_IP,
        destPort: 3001,
        output: both,
        masq: true,
      },
      {
        name: "external to NodePort",
        sourceIP: X,
        destIP: TEST_NODE_IP,
        destPort: 3001,
        output: both,
        masq: true,
      },
    ]);
  });
});

describe("TestInternalTrafficPolicy (S17)", () => {
  const cases: Array<[string, boolean, Array<[string, string]>, string]> = [
    [
      "iTP=Cluster",
      false,
      [["10.0.1.1", TEST_NODE_NAME], ["10.0.1.2", "node1"], ["10.0.1.3", "node2"]],
      "10.0.1.1:80, 10.0.1.2:80, 10.0.1.3:80",
    ],
    ["iTP=Local, one local endpoint", true, [["10.0.1.1", TEST_NODE_NAME], ["10.0.1.2", "node1"], [
      "10.0.1.3",
      "node2",
    ]], "10.0.1.1:80"],
    ["iTP=Local, two local endpoints", true, [["10.0.1.1", TEST_NODE_NAME], ["10.0.1.2", TEST_NODE_NAME], [
      "10.0.1.3",
      "node2",
    ]], "10.0.1.1:80, 10.0.1.2:80"],
    ["iTP=Local, no local endpoints", true, [["10.0.1.1", "node0"], ["10.0.1.2", "node1"], [
      "10.0.1.3",
      "node2",
    ]], "DROP"],
  ];
  for (const [name, local, list, output] of cases) {
    it(name, () => {
      const p = new FakeProxier();
      const svc = makeServicePort("ns1", "svc1", {
        clusterIP: "172.30.1.1",
        port: "",
        internalPolicyLocal: local,
      });
      p.setService(svc).setEndpoints(svc, list.map(([ip, node]) => makeEndpoint(ip, 80, { nodeName: node })));
      syncOk(p);
      const flow = { name, sourceIP: "10.0.0.2", destIP: "172.30.1.1", destPort: 80 };
      assertFlows(p, [{ ...flow, output }]);
      assert.equal(p.lastSync!.result.noLocalEndpoints.internal, output === "DROP" ? 1 : 0);
      p.setEndpoints(svc, []);
      syncOk(p);
      assertFlows(p, [{ ...flow, name: "endpoints deleted", output: "REJECT" }]);
    });
  }
});

describe("TestTerminatingEndpoints (S14-S16)", () => {
  const lb = (externalPolicyLocal: boolean): ServicePortInfo =>
    makeServicePort("ns1", "svc1", {
      clusterIP: "172.30.1.1",
      port: "",
      loadBalancerVIPs: ["1.2.3.4"],
      externalPolicyLocal,
      healthCheckNodePort: externalPolicyLocal ? 30000 : 0,
    });
  const R = { ready: true, serving: true, terminating: false };
  const ST = { ready: false, serving: true, terminating: true };
  const T = { ready: false, serving: false, terminating: true };
  type Case = [string, Array<[string, EndpointFixture]>, [string, boolean], [string, boolean]];
  const run = (externalPolicyLocal: boolean, cases: Case[]) => {
    for (const [name, list, [podOut, podMasq], [extOut, extMasq]] of cases) {
      it(`${externalPolicyLocal ? "eTP=Local" : "eTP=Cluster"}: ${name}`, () => {
        const p = new FakeProxier();
        const svc = lb(externalPolicyLocal);
        p.setService(svc).setEndpoints(svc, list.map(([ip, f]) => makeEndpoint(ip, 80, f)));
        syncOk(p);
        const pod = { name: "pod to clusterIP", sourceIP: "10.0.0.2", destIP: "172.30.1.1", destPort: 80 };
        const ext = {
          name: "external to LB",
          sourceIP: TEST_EXTERNAL_CLIENT,
          destIP: "1.2.3.4",
          destPort: 80,
        };
        assertFlows(p, [{ ...pod, output: podOut, masq: podMasq }, {
          ...ext,
          output: extOut,
          masq: extMasq,
        }]);
        p.setEndpoints(svc, []);
        syncOk(p);
        assertFlows(p, [{ ...pod, output: "REJECT" }, { ...ext, output: "REJECT" }]);
      });
    }
  };
  const me = { nodeName: TEST_NODE_NAME };
  run(true, [
    [
      "ready endpoints exist",
      [["10.0.1.1", { ...R, ...me }], ["10.0.1.2", { ...R, ...me }], ["10.0.1.3", { ...ST, ...me }], [
        "10.0.1.4",
        { ...T, ...me },
      ], [
        "10.0.1.5",
        { ...R, nodeName: "node-1" },
      ]],
      ["10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80", false],
      ["10.0.1.1:80, 10.0.1.2:80", false],
    ],
    [
      "only terminating endpoints exist locally",
      [["10.0.1.2", { ...ST, ...me }], ["10.0.1.3", { ...ST, ...me }], ["10.0.1.4", { ...T, ...me }], [
        "10.0.1.5",
        { ...R, nodeName: "node-1" },
      ]],
      ["10.0.1.5:80", false],
      ["10.0.1.2:80, 10.0.1.3:80", false],
    ],
    ["terminating endpoints on remote node", [["10.0.1.5", { ...ST, nodeName: "node-1" }]], [
      "10.0.1.5:80",
      false,
    ], ["DROP", false]],
    [
      "no usable endpoints on any node",
      [["10.0.1.5", { ...T, ...me }], ["10.0.1.6", { ...T, nodeName: "node-1" }]],
      ["REJECT", false],
      [
        "REJECT",
        false,
      ],
    ],
  ]);
  const other = { nodeName: "another-node" };
  run(false, [
    [
      "ready endpoints exist (S15)",
      [["10.0.1.1", { ...R, ...me }], ["10.0.1.2", { ...R, ...me }], ["10.0.1.3", { ...ST, ...other }], [
        "10.0.1.4",
        { ...T, ...other },
      ], [
        "10.0.1.5",
        { ...R, ...other },
      ]],
      ["10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80", false],
      ["10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80", true],
    ],
    [
      "only terminating endpoints exist (S14)",
      [["10.0.1.2", { ...ST, ...me }], ["10.0.1.3", { ...ST, ...me }], ["10.0.1.4", { ...T, ...other }], [
        "10.0.1.5",
        { ...ST, ...other },
      ]],
      ["10.0.1.2:80, 10.0.1.3:80, 10.0.1.5:80", false],
      ["10.0.1.2:80, 10.0.1.3:80, 10.0.1.5:80", true],
    ],
    ["terminating endpoints on remote node", [["10.0.1.5", { ...ST, nodeName: "node-1" }]], [
      "10.0.1.5:80",
      false,
    ], ["10.0.1.5:80", true]],
    [
      "no usable endpoints on any node (S16)",
      [["10.0.1.5", { ...T, ...me }], ["10.0.1.6", { ...T, nodeName: "node-1" }]],
      ["REJECT", false],
      [
        "REJECT",
        false,
      ],
    ],
  ]);
});

describe("TestNoEndpointsMetric", () => {
  const cases: Array<[string, boolean, boolean, Array<[string, string]>, number, number]> = [
    [
      "iTP=Local with local endpoints",
      true,
      false,
      [["10.0.1.1", TEST_NODE_NAME], ["10.0.1.2", "node1"]],
      0,
      0,
    ],
    [
      "eTP=Local with local endpoints",
      false,
      true,
      [["10.0.1.1", TEST_NODE_NAME], ["10.0.1.2", "node1"]],
      0,
      0,
    ],
    ["both with local endpoints", true, true, [["10.0.1.1", TEST_NODE_NAME], ["10.0.1.2", "node1"]], 0, 0],
    ["iTP=Local without local endpoints", true, false, [["10.0.1.1", "node0"], ["10.0.1.2", "node1"]], 1, 0],
    ["eTP=Local without local endpoints", false, true, [["10.0.1.1", "node0"], ["10.0.1.2", "node1"]], 0, 1],
    ["both without local endpoints", true, true, [["10.0.1.1", "node0"], ["10.0.1.2", "node1"]], 1, 1],
    ["both, no endpoints at all", true, true, [], 0, 0],
  ];
  for (const [name, itp, etp, list, internal, external] of cases) {
    it(name, () => {
      const p = new FakeProxier();
      const svc = makeServicePort("ns1", "svc1", {
        clusterIP: "172.30.1.1",
        port: "",
        nodePort: 123,
        internalPolicyLocal: itp,
        externalPolicyLocal: etp,
      });
      p.setService(svc).setEndpoints(svc, list.map(([ip, node]) => makeEndpoint(ip, 80, { nodeName: node })));
      const s = p.sync();
      assert.equal(s.error, null);
      assert.deepEqual(s.result.noLocalEndpoints, { internal, external });
    });
  }
});
