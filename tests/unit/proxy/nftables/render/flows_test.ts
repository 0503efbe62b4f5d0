/**
 * Packet flows through the rendered nftables rules, traced on a fake table (tests/support/nft_tracer.ts):
 * upstream's packet-flow tests of pkg/proxy/nftables/proxier_test.go, transcribed (TestNoEndpointsReject,
 * TestClusterIPGeneral, TestLoadBalancer, TestNodePorts, TestExternalTrafficPolicyLocal/Cluster,
 * TestInternalExternalMasquerade, TestTerminatingEndpointsTrafficPolicyCluster).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import type { EndpointInfo, IPFamily, ServicePortInfo } from "../../../../../lib/proxy/types.ts";
import { newNodePortAddresses } from "../../../../../lib/proxy/nodeport_addresses.ts";
import type { NftRenderInput } from "../../../../../lib/proxy/nftables/render/render.ts";
import { FakeNftTable } from "../../../../support/nft_fake.ts";
import { nftFakeProxierInput, syncInto } from "../../../../support/nft_fixtures.ts";
import { checkNftPacketFlows, type NftPacketFlow } from "../../../../support/nft_tracer.ts";
import {
  makeEndpoint,
  makeServicePort,
  TEST_EXTERNAL_CLIENT,
  TEST_EXTERNAL_CLIENT_BLOCKED,
  TEST_NODE_IP,
  TEST_NODE_IP_ALT,
  TEST_NODE_IPS,
  TEST_NODE_IPV6,
  TEST_NODE_IPV6_ALT,
  TEST_NODE_NAME,
} from "../../../../support/tracer.ts";

type Pair = readonly [ServicePortInfo, readonly EndpointInfo[]];

/** Renders `services` (with upstream's fake-proxier settings, overridden by `opts`) and traces `flows`. */
function runFlows(
  services: readonly ServicePortInfo[],
  endpoints: readonly Pair[],
  flows: readonly NftPacketFlow[],
  opts: Partial<NftRenderInput> & { family?: IPFamily } = {},
): void {
  const base = { ...nftFakeProxierInput(opts.family ?? "IPv4"), ...opts };
  const nft = new FakeNftTable(base.family === "IPv6" ? "ip6" : "ip", "kube-proxy");
  syncInto(nft, { services, endpoints }, base);
  const failures = checkNftPacketFlows(nft, TEST_NODE_IPS, flows);
  assert.deepEqual(failures, []);
}

const local = { nodeName: TEST_NODE_NAME };

test("TestNoEndpointsReject", () => {
  const svc = makeServicePort("ns1", "svc1", {
    clusterIP: "172.30.0.41",
    nodePort: 3001,
    externalIPs: ["192.168.99.11"],
    loadBalancerVIPs: ["1.2.3.4"],
  });
  runFlows([svc], [], [
    {
      name: "pod to cluster IP with no endpoints",
      sourceIP: "10.0.0.2",
      destIP: "172.30.0.41",
      destPort: 80,
      output: "REJECT",
    },
    {
      name: "external to external IP with no endpoints",
      sourceIP: TEST_EXTERNAL_CLIENT,
      destIP: "192.168.99.11",
      destPort: 80,
      output: "REJECT",
    },
    {
      name: "pod to NodePort with no endpoints",
      sourceIP: "10.0.0.2",
      destIP: TEST_NODE_IP,
      destPort: 3001,
      output: "REJECT",
    },
    {
      name: "external to NodePort with no endpoints",
      sourceIP: TEST_EXTERNAL_CLIENT,
      destIP: TEST_NODE_IP,
      destPort: 3001,
      output: "REJECT",
    },
    {
      name: "pod to LoadBalancer IP with no endpoints",
      sourceIP: "10.0.0.2",
      destIP: "1.2.3.4",
      destPort: 80,
      output: "REJECT",
    },
    {
      name: "external to LoadBalancer IP with no endpoints",
      sourceIP: TEST_EXTERNAL_CLIENT,
      destIP: "1.2.3.4",
      destPort: 80,
      output: "REJECT",
    },
  ]);
});

test("TestClusterIPGeneral", () => {
  const svc1 = makeServicePort("ns1", "svc1", { clusterIP: "172.30.0.41", port: "http" });
  const s2 = (port: string, protocol: "TCP" | "UDP" | "SCTP", portNumber: number) =>
    makeServicePort("ns2", "svc2", { clusterIP: "172.30.0.42", port, protocol, portNumber });
  const http = s2("http", "TCP", 80), https = s2("https", "TCP", 443), dnsUDP = s2("dns-udp", "UDP", 53);
  const dnsTCP = s2("dns-tcp", "TCP", 53), dnsSCTP = s2("dns-sctp", "SCTP", 53);
  const eps = (
    port: number,
  ) => [makeEndpoint("10.180.0.1", port, local), makeEndpoint("10.180.2.1", port, { nodeName: "node2" })];
  runFlows(
    [svc1, http, https, dnsUDP, dnsTCP, dnsSCTP],
    [
      [svc1, [makeEndpoint("10.180.0.1", 80, local)]],
      [http, eps(80)],
      [https, eps(8443)],
      [dnsUDP, eps(53)],
      [dnsTCP, eps(5353)],
      [dnsSCTP, eps(53)],
    ],
    [
      {
        name: "simple clusterIP",
        sourceIP: "10.180.0.2",
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
        name: "clusterIP with multiple endpoints",
        sourceIP: "10.180.0.2",
        destIP: "172.30.0.42",
        destPort: 80,
        output: "10.180.0.1:80, 10.180.2.1:80",
      },
      {
        name: "clusterIP with TargetPort",
        sourceIP: "10.180.0.2",
        destIP: "172.30.0.42",
        destPort: 443,
        output: "10.180.0.1:8443, 10.180.2.1:8443",
      },
      {
        name: "TCP on a port shared by TCP, UDP, SCTP",
        sourceIP: "10.180.0.2",
        protocol: "TCP",
        destIP: "172.30.0.42",
        destPort: 53,
        output: "10.180.0.1:5353, 10.180.2.1:5353",
      },
      {
        name: "UDP on a port shared by TCP, UDP, SCTP",
        sourceIP: "10.180.0.2",
        protocol: "UDP",
        destIP: "172.30.0.42",
        destPort: 53,
        output: "10.180.0.1:53, 10.180.2.1:53",
      },
      {
        name: "SCTP on a port shared by TCP, UDP, SCTP",
        sourceIP: "10.180.0.2",
        protocol: "SCTP",
        destIP: "172.30.0.42",
        destPort: 53,
        output: "10.180.0.1:53, 10.180.2.1:53",
      },
      {
        name: "TCP-only port does not match UDP traffic",
        sourceIP: "10.180.0.2",
        protocol: "UDP",
        destIP: "172.30.0.42",
        destPort: 80,
        output: "REJECT",
      },
      {
        name: "svc1 does not accept svc2's ports",
        sourceIP: "10.180.0.2",
        destIP: "172.30.0.41",
        destPort: 443,
        output: "REJECT",
      },
      {
        name: "packet to unallocated cluster ip",
        sourceIP: "10.180.0.2",
        destIP: "172.30.0.50",
        destPort: 80,
        output: "DROP",
      },
    ],
  );
});

test("TestLoadBalancer", () => {
  const svc = makeServicePort("ns1", "svc1", {
    clusterIP: "172.30.0.41",
    nodePort: 3001,
    loadBalancerVIPs: ["1.2.3.4", "5.6.7.8"],
    loadBalancerSourceRanges: ["192.168.0.0/24", "203.0.113.0/25"],
  });
  const ep = "10.180.0.1:80";
  runFlows([svc], [[svc, [makeEndpoint("10.180.0.1", 80)]]], [
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
    {
      name: "pod to LB1 (blocked by LoadBalancerSourceRanges)",
      sourceIP: "10.0.0.2",
      destIP: "1.2.3.4",
      destPort: 80,
      output: "DROP",
    },
    {
      name: "pod to LB2 (blocked by LoadBalancerSourceRanges)",
      sourceIP: "10.0.0.2",
      destIP: "5.6.7.8",
      destPort: 80,
      output: "DROP",
    },
    {
      name: "node to LB1 (allowed by LoadBalancerSourceRanges)",
      sourceIP: TEST_NODE_IP,
      destIP: "1.2.3.4",
      destPort: 80,
      output: ep,
      masq: true,
    },
    {
      name: "node to LB2 (allowed by LoadBalancerSourceRanges)",
      sourceIP: TEST_NODE_IP,
      destIP: "5.6.7.8",
      destPort: 80,
      output: ep,
      masq: true,
    },
    {
      name: "same node to LB1, SNATted to LB1 (implicitly allowed)",
      sourceIP: "1.2.3.4",
      destIP: "1.2.3.4",
      destPort: 80,
      output: ep,
      masq: true,
    },
    {
      name: "same node to LB2, SNATted to LB2 (implicitly allowed)",
      sourceIP: "5.6.7.8",
      destIP: "5.6.7.8",
      destPort: 80,
      output: ep,
      masq: true,
    },
  ]);
});

for (
  const tc of [
    { name: "ipv4", family: "IPv4", nodePortAddresses: null, allowAltNodeIP: false },
    {
      name: "ipv4, multiple nodeport-addresses",
      family: "IPv4",
      nodePortAddresses: ["192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64"],
      allowAltNodeIP: true,
    },
    { name: "ipv6", family: "IPv6", nodePortAddresses: null, allowAltNodeIP: false },
    {
      name: "ipv6, multiple nodeport-addresses",
      family: "IPv6",
      nodePortAddresses: ["192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64", "2001:db8:1::2/128"],
      allowAltNodeIP: true,
    },
  ] as const
) {
  test(`TestNodePorts: ${tc.name}`, () => {
    const v4 = tc.family === "IPv4";
    const svcIP = v4 ? "172.30.0.41" : "fd00:172:30::41";
    const [ep1, ep2] = v4 ? ["10.180.0.1", "10.180.2.1"] : ["fd00:10:180::1", "fd00:10:180::2:1"];
    const nodeIP = v4 ? TEST_NODE_IP : TEST_NODE_IPV6;
    const svc = makeServicePort("ns1", "svc1", { clusterIP: svcIP, nodePort: 3001 });
    const podIP = v4 ? "10.0.0.2" : "fd00:10::2";
    const client = v4 ? TEST_EXTERNAL_CLIENT : "2600:5200::1";
    const alt = v4 ? TEST_NODE_IP_ALT : TEST_NODE_IPV6_ALT;
    const output = v4 ? `${ep1}:80, ${ep2}:80` : `[${ep1}]:80, [${ep2}]:80`;
    runFlows([svc], [[svc, [makeEndpoint(ep1, 80), makeEndpoint(ep2, 80, local)]]], [
      { name: "pod to cluster IP", sourceIP: podIP, destIP: svcIP, destPort: 80, output },
      { name: "external to nodePort", sourceIP: client, destIP: nodeIP, destPort: 3001, output, masq: true },
      { name: "node to nodePort", sourceIP: nodeIP, destIP: nodeIP, destPort: 3001, output, masq: true },
      tc.allowAltNodeIP
        ? {
          name: "external to nodePort on secondary IP",
          sourceIP: client,
          destIP: alt,
          destPort: 3001,
          output,
          masq: true,
        }
        : {
          name: "secondary nodeIP ignores NodePorts",
          sourceIP: client,
          destIP: alt,
          destPort: 3001,
          output: "",
        },
    ], {
      family: tc.family,
      ...(tc.nodePortAddresses === null
        ? {}
        : { nodePortAddresses: newNodePortAddresses(tc.family, tc.nodePortAddresses) }),
    });
  });
}

/** The LoadBalancer service of TestExternalTrafficPolicyLocal/Cluster. */
function etpService(externalPolicyLocal: boolean): Pair {
  const svc = makeServicePort("ns1", "svc1", {
    clusterIP: "172.30.0.41",
    nodePort: 3001,
    externalIPs: ["192.168.99.11"],
    loadBalancerVIPs: ["1.2.3.4"],
    healthCheckNodePort: externalPolicyLocal ? 30000 : 0,
    externalPolicyLocal,
  });
  return [svc, [makeEndpoint("10.180.0.1", 80), makeEndpoint("10.180.2.1", 80, local)]];
}

test("TestExternalTrafficPolicyLocal", () => {
  const [svc, eps] = etpService(true);
  const both = "10.180.0.1:80, 10.180.2.1:80", localOnly = "10.180.2.1:80";
  runFlows([svc], [[svc, eps]], [
    {
      name: "pod to cluster IP hits both endpoints, unmasqueraded",
      sourceIP: "10.0.0.2",
      destIP: "172.30.0.41",
      destPort: 80,
      output: both,
    },
    {
      name: "pod to external IP hits both endpoints, unmasqueraded",
      sourceIP: "10.0.0.2",
      destIP: "192.168.99.11",
      destPort: 80,
      output: both,
    },
    {
      name: "external to external IP hits only local endpoint, unmasqueraded",
      sourceIP: TEST_EXTERNAL_CLIENT,
      destIP: "192.168.99.11",
      destPort: 80,
      output: localOnly,
    },
    {
      name: "pod to LB IP hits only both endpoints, unmasqueraded",
      sourceIP: "10.0.0.2",
      destIP: "1.2.3.4",
      destPort: 80,
      output: both,
    },
    {
      name: "external to LB IP hits only local endpoint, unmasqueraded",
      sourceIP: TEST_EXTERNAL_CLIENT,
      destIP: "1.2.3.4",
      destPort: 80,
      output: localOnly,
    },
    {
      name: "pod to NodePort hits both endpoints, unmasqueraded",
      sourceIP: "10.0.0.2",
      destIP: TEST_NODE_IP,
      destPort: 3001,
      output: both,
    },
    {
      name: "external to NodePort hits only local endpoint, unmasqueraded",
      sourceIP: TEST_EXTERNAL_CLIENT,
      destIP: TEST_NODE_IP,
      destPort: 3001,
      output: localOnly,
    },
  ]);
});

test("TestExternalTrafficPolicyCluster", () => {
  const [svc, eps] = etpService(false);
  const both = "10.180.0.1:80, 10.180.2.1:80";
  runFlows([svc], [[svc, eps]], [
    {
      name: "pod to cluster IP hits both endpoints, unmasqueraded",
      sourceIP: "10.0.0.2",
      destIP: "172.30.0.41",
      destPort: 80,
      output: both,
    },
    {
      name: "pod to external IP hits both endpoints, masqueraded",
      sourceIP: "10.0.0.2",
      destIP: "192.168.99.11",
      destPort: 80,
      output: both,
      masq: true,
    },
    {
      name: "external to external IP hits both endpoints, masqueraded",
      sourceIP: TEST_EXTERNAL_CLIENT,
      destIP: "192.168.99.11",
      destPort: 80,
      output: both,
      masq: true,
    },
    {
      name: "pod to LB IP hits both endpoints, masqueraded",
      sourceIP: "10.0.0.2",
      destIP: "1.2.3.4",
      destPort: 80,
      output: both,
      masq: true,
    },
    {
      name: "external to LB IP hits both endpoints, masqueraded",
      sourceIP: TEST_EXTERNAL_CLIENT,
      destIP: "1.2.3.4",
      destPort: 80,
      output: both,
      masq: true,
    },
    {
      name: "pod to NodePort hits both endpoints, masqueraded",
      sourceIP: "10.0.0.2",
      destIP: TEST_NODE_IP,
      destPort: 3001,
      output: both,
      masq: true,
    },
    {
      name: "external to NodePort hits both endpoints, masqueraded",
      sourceIP: TEST_EXTERNAL_CLIENT,
      destIP: TEST_NODE_IP,
      destPort: 3001,
      output: both,
      masq: true,
    },
  ]);
});

/** TestInternalExternalMasquerade's three LoadBalancers (plain, eTP=Local, iTP=Local) and its flows. */
function internalExternalSetup(): { services: ServicePortInfo[]; endpoints: Pair[] } {
  const mk = (
    n: number,
    lb: string,
    extra: { externalPolicyLocal?: boolean; internalPolicyLocal?: boolean },
  ) =>
    makeServicePort(`ns${n}`, `svc${n}`, {
      clusterIP: `172.30.0.4${n}`,
      nodePort: 3000 + n,
      loadBalancerVIPs: [lb],
      healthCheckNodePort: extra.externalPolicyLocal ? 30000 + n : 0,
      ...extra,
    });
  const svc1 = mk(1, "1.2.3.4", {}), svc2 = mk(2, "5.6.7.8", { externalPolicyLocal: true });
  const svc3 = mk(3, "9.10.11.12", { internalPolicyLocal: true });
  const eps = (
    n: number,
  ) => [makeEndpoint(`10.180.0.${n}`, 80, local), makeEndpoint(`10.180.1.${n}`, 80, { nodeName: "remote" })];
  return { services: [svc1, svc2, svc3], endpoints: [[svc1, eps(1)], [svc2, eps(2)], [svc3, eps(3)]] };
}

const IEM_FLOWS: NftPacketFlow[] = [
  {
    name: "pod to ClusterIP",
    sourceIP: "10.0.0.2",
    destIP: "172.30.0.41",
    destPort: 80,
    output: "10.180.0.1:80, 10.180.1.1:80",
    masq: false,
  },
  {
    name: "pod to NodePort",
    sourceIP: "10.0.0.2",
    destIP: TEST_NODE_IP,
    destPort: 3001,
    output: "10.180.0.1:80, 10.180.1.1:80",
    masq: true,
  },
  {
    name: "pod to LB",
    sourceIP: "10.0.0.2",
    destIP: "1.2.3.4",
    destPort: 80,
    output: "10.180.0.1:80, 10.180.1.1:80",
    masq: true,
  },
  {
    name: "node to ClusterIP",
    sourceIP: TEST_NODE_IP,
    destIP: "172.30.0.41",
    destPort: 80,
    output: "10.180.0.1:80, 10.180.1.1:80",
    masq: true,
  },
  {
    name: "node to NodePort",
    sourceIP: TEST_NODE_IP,
    destIP: TEST_NODE_IP,
    destPort: 3001,
    output: "10.180.0.1:80, 10.180.1.1:80",
    masq: true,
  },
  {
    name: "node to LB",
    sourceIP: TEST_NODE_IP,
    destIP: "1.2.3.4",
    destPort: 80,
    output: "10.180.0.1:80, 10.180.1.1:80",
    masq: true,
  },
  {
    name: "external to ClusterIP",
    sourceIP: TEST_EXTERNAL_CLIENT,
    destIP: "172.30.0.41",
    destPort: 80,
    output: "10.180.0.1:80, 10.180.1.1:80",
    masq: true,
  },
  {
    name: "external to NodePort",
    sourceIP: TEST_EXTERNAL_CLIENT,
    destIP: TEST_NODE_IP,
    destPort: 3001,
    output: "10.180.0.1:80, 10.180.1.1:80",
    masq: true,
  },
  {
    name: "external to LB",
    sourceIP: TEST_EXTERNAL_CLIENT,
    destIP: "1.2.3.4",
    destPort: 80,
    output: "10.180.0.1:80, 10.180.1.1:80",
    masq: true,
  },
  {
    name: "pod to ClusterIP with eTP:Local",
    sourceIP: "10.0.0.2",
    destIP: "172.30.0.42",
    destPort: 80,
    output: "10.180.0.2:80, 10.180.1.2:80",
    masq: false,
  },
  {
    name: "pod to NodePort with eTP:Local",
    sourceIP: "10.0.0.2",
    destIP: TEST_NODE_IP,
    destPort: 3002,
    output: "10.180.0.2:80, 10.180.1.2:80",
    masq: false,
  },
  {
    name: "pod to LB with eTP:Local",
    sourceIP: "10.0.0.2",
    destIP: "5.6.7.8",
    destPort: 80,
    output: "10.180.0.2:80, 10.180.1.2:80",
    masq: false,
  },
  {
    name: "node to ClusterIP with eTP:Local",
    sourceIP: TEST_NODE_IP,
    destIP: "172.30.0.42",
    destPort: 80,
    output: "10.180.0.2:80, 10.180.1.2:80",
    masq: true,
  },
  {
    name: "node to NodePort with eTP:Local",
    sourceIP: TEST_NODE_IP,
    destIP: TEST_NODE_IP,
    destPort: 3001,
    output: "10.180.0.1:80, 10.180.1.1:80",
    masq: true,
  },
  {
    name: "node to LB with eTP:Local",
    sourceIP: TEST_NODE_IP,
    destIP: "5.6.7.8",
    destPort: 80,
    output: "10.180.0.2:80, 10.180.1.2:80",
    masq: true,
  },
  {
    name: "external to ClusterIP with eTP:Local",
    sourceIP: TEST_EXTERNAL_CLIENT,
    destIP: "172.30.0.42",
    destPort: 80,
    output: "10.180.0.2:80, 10.180.1.2:80",
    masq: true,
  },
  {
    name: "external to NodePort with eTP:Local",
    sourceIP: TEST_EXTERNAL_CLIENT,
    destIP: TEST_NODE_IP,
    destPort: 3002,
    output: "10.180.0.2:80",
    masq: false,
  },
  {
    name: "external to LB with eTP:Local",
    sourceIP: TEST_EXTERNAL_CLIENT,
    destIP: "5.6.7.8",
    destPort: 80,
    output: "10.180.0.2:80",
    masq: false,
  },
  {
    name: "pod to ClusterIP with iTP:Local",
    sourceIP: "10.0.0.2",
    destIP: "172.30.0.43",
    destPort: 80,
    output: "10.180.0.3:80",
    masq: false,
  },
  {
    name: "pod to NodePort with iTP:Local",
    sourceIP: "10.0.0.2",
    destIP: TEST_NODE_IP,
    destPort: 3003,
    output: "10.180.0.3:80, 10.180.1.3:80",
    masq: true,
  },
  {
    name: "pod to LB with iTP:Local",
    sourceIP: "10.0.0.2",
    destIP: "9.10.11.12",
    destPort: 80,
    output: "10.180.0.3:80, 10.180.1.3:80",
    masq: true,
  },
  {
    name: "node to ClusterIP with iTP:Local",
    sourceIP: TEST_NODE_IP,
    destIP: "172.30.0.43",
    destPort: 80,
    output: "10.180.0.3:80",
    masq: true,
  },
  {
    name: "node to NodePort with iTP:Local",
    sourceIP: TEST_NODE_IP,
    destIP: TEST_NODE_IP,
    destPort: 3003,
    output: "10.180.0.3:80, 10.180.1.3:80",
    masq: true,
  },
  {
    name: "node to LB with iTP:Local",
    sourceIP: TEST_NODE_IP,
    destIP: "9.10.11.12",
    destPort: 80,
    output: "10.180.0.3:80, 10.180.1.3:80",
    masq: true,
  },
  {
    name: "external to ClusterIP with iTP:Local",
    sourceIP: TEST_EXTERNAL_CLIENT,
    destIP: "172.30.0.43",
    destPort: 80,
    output: "10.180.0.3:80",
    masq: true,
  },
  {
    name: "external to NodePort with iTP:Local",
    sourceIP: TEST_EXTERNAL_CLIENT,
    destIP: TEST_NODE_IP,
    destPort: 3003,
    output: "10.180.0.3:80, 10.180.1.3:80",
    masq: true,
  },
  {
    name: "external to LB with iTP:Local",
    sourceIP: TEST_EXTERNAL_CLIENT,
    destIP: "9.10.11.12",
    destPort: 80,
    output: "10.180.0.3:80, 10.180.1.3:80",
    masq: true,
  },
];

for (
  const tc of [
    { name: "base", masqueradeAll: false, localDetector: true, overrides: {} },
    {
      name: "no LocalTrafficDetector",
      masqueradeAll: false,
      localDetector: false,
      overrides: {
        "node to ClusterIP": { masq: false },
        "node to ClusterIP with eTP:Local": { masq: false },
        "node to ClusterIP with iTP:Local": { masq: false },
        "external to ClusterIP": { masq: false },
        "external to ClusterIP with eTP:Local": { masq: false },
        "external to ClusterIP with iTP:Local": { masq: false },
        "pod to NodePort with eTP:Local": { output: "10.180.0.2:80" },
        "pod to LB with eTP:Local": { output: "10.180.0.2:80" },
      },
    },
    {
      name: "masqueradeAll",
      masqueradeAll: true,
      localDetector: true,
      overrides: {
        "pod to ClusterIP": { masq: true },
        "pod to ClusterIP with eTP:Local": { masq: true },
        "pod to ClusterIP with iTP:Local": { masq: true },
      },
    },
    {
      name: "masqueradeAll, no LocalTrafficDetector",
      masqueradeAll: true,
      localDetector: false,
      overrides: {
        "pod to ClusterIP": { masq: true },
        "pod to ClusterIP with eTP:Local": { masq: true },
        "pod to ClusterIP with iTP:Local": { masq: true },
        "pod to NodePort with eTP:Local": { output: "10.180.0.2:80" },
        "pod to LB with eTP:Local": { output: "10.180.0.2:80" },
      },
    },
  ] as Array<
    {
      name: string;
      masqueradeAll: boolean;
      localDetector: boolean;
      overrides: Record<string, Partial<NftPacketFlow>>;
    }
  >
) {
  test(`TestInternalExternalMasquerade: ${tc.name}`, () => {
    const flows = IEM_FLOWS.map((f) => ({ ...f, ...(tc.overrides[f.name] ?? {}) }));
    const used = IEM_FLOWS.filter((f) => f.name in tc.overrides).length;
    assert.equal(used, Object.keys(tc.overrides).length, "every override names a flow");
    const { services, endpoints } = internalExternalSetup();
    runFlows(services, endpoints, flows, {
      masqueradeAll: tc.masqueradeAll,
      ...(tc.localDetector ? {} : { localDetector: { mode: "None" } as const }),
    });
  });
}

/** TestTerminatingEndpointsTrafficPolicyCluster: a LoadBalancer (eTP=Cluster) and four endpoint sets. */
test("TestTerminatingEndpointsTrafficPolicyCluster", () => {
  const svc = makeServicePort("ns1", "svc1", {
    clusterIP: "172.30.1.1",
    port: "",
    loadBalancerVIPs: ["1.2.3.4"],
  });
  const ep = (ip: string, ready: boolean, serving: boolean, terminating: boolean, nodeName: string) =>
    makeEndpoint(ip, 80, { ready, serving, terminating, nodeName });
  const cases: Array<[string, EndpointInfo[], string]> = [
    ["ready endpoints exist", [
      ep("10.0.1.1", true, true, false, TEST_NODE_NAME),
      ep("10.0.1.2", true, true, false, TEST_NODE_NAME),
      ep("10.0.1.3", false, true, true, "another-node"),
      ep("10.0.1.4", false, false, true, "another-node"),
      ep("10.0.1.5", true, true, false, "another-node"),
    ], "10.0.1.1:80, 10.0.1.2:80, 10.0.1.5:80"],
    ["only terminating endpoints exist", [
      ep("10.0.1.2", false, true, true, TEST_NODE_NAME),
      ep("10.0.1.3", false, true, true, TEST_NODE_NAME),
      ep("10.0.1.4", false, false, true, "another-node"),
      ep("10.0.1.5", false, true, true, "another-node"),
    ], "10.0.1.2:80, 10.0.1.3:80, 10.0.1.5:80"],
    ["terminating endpoints on remote node", [ep("10.0.1.5", false, true, true, "node-1")], "10.0.1.5:80"],
    ["no usable endpoints on any node", [
      ep("10.0.1.5", false, false, true, TEST_NODE_NAME),
      ep("10.0.1.5", false, false, true, "node-1"),
    ], "REJECT"],
  ];
  for (const [name, eps, output] of cases) {
    const usable = output !== "REJECT";
    runFlows([svc], [[svc, eps]], [
      { name: `${name}: pod to clusterIP`, sourceIP: "10.0.0.2", destIP: "172.30.1.1", destPort: 80, output },
      {
        name: `${name}: external to LB`,
        sourceIP: TEST_EXTERNAL_CLIENT,
        destIP: "1.2.3.4",
        destPort: 80,
        output,
        masq: usable,
      },
    ]);
    // After the endpoints are deleted: REJECT.
    runFlows([svc], [], [
      {
        name: `${name}: pod to clusterIP after endpoints deleted`,
        sourceIP: "10.0.0.2",
        destIP: "172.30.1.1",
        destPort: 80,
        output: "REJECT",
      },
      {
        name: `${name}: external to LB after endpoints deleted`,
        sourceIP: TEST_EXTERNAL_CLIENT,
        destIP: "1.2.3.4",
        destPort: 80,
        output: "REJECT",
      },
    ]);
  }
});
