/** Upstream TestNodePorts (S18): --nodeport-addresses and --iptables-localhost-nodeports, IPv4 and IPv6. */
import { dnat, dnatMasq, flow, NONE } from "./build.ts";
import {
  EXTERNAL_CLIENT,
  NODE_IP,
  NODE_IP_ALT,
  NODE_IPV6,
  NODE_IPV6_ALT,
  POD_IP,
  POD_IPV6,
  THIS_NODE,
} from "./addresses.ts";
import type { FlowFamily, FlowTable } from "./types.ts";

interface NodePortCase {
  readonly name: string;
  readonly family: FlowFamily;
  readonly localhostNodePorts: boolean;
  readonly nodePortAddresses: readonly string[];
  /** Whether a NodePort answers on the node's secondary address. */
  readonly allowAltNodeIP: boolean;
}

const CASES: readonly NodePortCase[] = [
  {
    name: "ipv4, localhost-nodeports enabled",
    family: "IPv4",
    localhostNodePorts: true,
    nodePortAddresses: [],
    allowAltNodeIP: true,
  },
  {
    name: "ipv4, localhost-nodeports disabled",
    family: "IPv4",
    localhostNodePorts: false,
    nodePortAddresses: [],
    allowAltNodeIP: true,
  },
  {
    name: "ipv4, localhost-nodeports disabled, localhost in nodeport-addresses",
    family: "IPv4",
    localhostNodePorts: false,
    nodePortAddresses: ["192.168.0.0/24", "127.0.0.1/32"],
    allowAltNodeIP: false,
  },
  {
    name: "ipv4, localhost-nodeports disabled, multiple nodeport-addresses",
    family: "IPv4",
    localhostNodePorts: false,
    nodePortAddresses: ["192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64"],
    allowAltNodeIP: true,
  },
  {
    name: "ipv6, localhost-nodeports enabled",
    family: "IPv6",
    localhostNodePorts: true,
    nodePortAddresses: [],
    allowAltNodeIP: true,
  },
  {
    name: "ipv6, localhost-nodeports disabled",
    family: "IPv6",
    localhostNodePorts: false,
    nodePortAddresses: [],
    allowAltNodeIP: true,
  },
  {
    name: "ipv6, localhost-nodeports disabled, multiple nodeport-addresses",
    family: "IPv6",
    localhostNodePorts: false,
    nodePortAddresses: ["192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64"],
    allowAltNodeIP: false,
  },
];

function table(tc: NodePortCase): FlowTable {
  const v4 = tc.family === "IPv4";
  const svcIP = v4 ? "172.30.0.41" : "fd00:172:30::41";
  const [ep1, ep2] = v4 ? ["10.180.0.1", "10.180.2.1"] : ["fd00:10:180::1", "fd00:10:180::2:1"];
  const [podIP, externalIP, nodeIP, altNodeIP, localhost] = v4
    ? [POD_IP, EXTERNAL_CLIENT, NODE_IP, NODE_IP_ALT, "127.0.0.1"]
    : [POD_IPV6, "2600:5200::1", NODE_IPV6, NODE_IPV6_ALT, "::1"];
  const join = (ip: string) => (v4 ? `${ip}:80` : `[${ip}]:80`);
  const both = [join(ep1), join(ep2)];
  const pod = { kind: "pod", ip: podIP } as const;
  const external = { kind: "external", ip: externalIP } as const;
  const node = { kind: "node", ip: nodeIP } as const;
  const lo = { kind: "localhost", ip: localhost } as const;
  return {
    group: "TestNodePorts (S18): --nodeport-addresses and --iptables-localhost-nodeports",
    name: tc.name,
    config: {
      family: tc.family,
      localhostNodePorts: tc.localhostNodePorts,
      nodePortAddresses: tc.nodePortAddresses,
    },
    services: [{
      namespace: "ns1",
      name: "svc1",
      clusterIP: svcIP,
      ports: [{ port: 80, nodePort: 3001 }],
      endpoints: [{ ip: ep1 }, { ip: ep2, node: THIS_NODE }],
    }],
    flows: [
      flow("pod to cluster IP", pod, [svcIP, 80], dnat(both)),
      flow("external to nodePort", external, [nodeIP, 3001], dnatMasq(both)),
      flow("node to nodePort", node, [nodeIP, 3001], dnatMasq(both)),
      v4 && tc.localhostNodePorts
        ? flow("localhost to nodePort gets masqueraded", lo, [localhost, 3001], dnatMasq(both))
        : flow("localhost to nodePort is ignored", lo, [localhost, 3001], NONE),
      tc.allowAltNodeIP
        ? flow("external to nodePort on secondary IP", external, [altNodeIP, 3001], dnatMasq(both))
        : flow("secondary nodeIP ignores NodePorts", external, [altNodeIP, 3001], NONE),
    ],
  };
}

/** One table per case. */
export const NODE_PORT_TABLES: readonly FlowTable[] = CASES.map(table);
