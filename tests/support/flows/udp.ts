/**
 * UDP Services (ClusterIP and NodePort, with and without endpoints) and loadBalancerSourceRanges next to
 * externalIPs: cases the real-traffic suite checked before the tables existed, now shared by every backend.
 */
import { dnat, dnatMasq, DROP, flow, REJECT } from "./build.ts";
import {
  FROM_EXTERNAL as X,
  FROM_EXTERNAL_BLOCKED as XB,
  FROM_POD as P,
  NODE_IP,
  THIS_NODE,
} from "./addresses.ts";
import type { FlowTable } from "./types.ts";

const both = ["10.180.0.1:53", "10.180.2.1:53"];

/** UDP, and source ranges that guard the LB IP but not the externalIP or the NodePort. */
export const UDP_TABLES: readonly FlowTable[] = [
  {
    group: "UDP Services",
    name: "UDP ClusterIP and NodePort reach local and remote endpoints",
    services: [{
      namespace: "ns1",
      name: "dns",
      clusterIP: "172.30.0.53",
      ports: [{ name: "dns", protocol: "UDP", port: 53, nodePort: 3053 }],
      endpoints: [{ ip: "10.180.0.1", node: THIS_NODE }, { ip: "10.180.2.1", node: "node2" }],
    }],
    flows: [
      flow("pod to UDP ClusterIP", P, ["172.30.0.53", 53, "UDP"], dnat(both)),
      flow("external to UDP ClusterIP", X, ["172.30.0.53", 53, "UDP"], dnatMasq(both)),
      flow("external to UDP NodePort", X, [NODE_IP, 3053, "UDP"], dnatMasq(both)),
    ],
  },
  {
    group: "UDP Services",
    name: "a UDP Service without endpoints rejects at its ClusterIP and NodePort",
    services: [{
      namespace: "ns1",
      name: "dns",
      clusterIP: "172.30.0.53",
      ports: [{ name: "dns", protocol: "UDP", port: 53, nodePort: 3053 }],
      endpoints: [],
    }],
    flows: [
      flow("pod to UDP ClusterIP", P, ["172.30.0.53", 53, "UDP"], REJECT),
      flow("external to UDP ClusterIP", X, ["172.30.0.53", 53, "UDP"], REJECT),
      flow("external to UDP NodePort", X, [NODE_IP, 3053, "UDP"], REJECT),
    ],
  },
  {
    group: "Source ranges and externalIPs",
    name: "loadBalancerSourceRanges guard the LB IP only: the externalIP and the NodePort stay open",
    services: [{
      namespace: "ns1",
      name: "svc1",
      clusterIP: "172.30.0.41",
      ports: [{ port: 80, nodePort: 3001 }],
      externalIPs: ["198.18.0.11"],
      loadBalancerIPs: ["198.18.0.21"],
      loadBalancerSourceRanges: ["203.0.113.0/25"],
      endpoints: [{ ip: "10.180.0.1", node: THIS_NODE }],
    }],
    flows: [
      flow("allowed external to LB IP", X, ["198.18.0.21", 80], dnatMasq("10.180.0.1:80")),
      flow("allowed external to externalIP", X, ["198.18.0.11", 80], dnatMasq("10.180.0.1:80")),
      flow("blocked external to LB IP", XB, ["198.18.0.21", 80], DROP),
      flow("blocked external to externalIP", XB, ["198.18.0.11", 80], dnatMasq("10.180.0.1:80")),
      flow("blocked external to NodePort", XB, [NODE_IP, 3001], dnatMasq("10.180.0.1:80")),
      flow("pod to LB IP (outside the ranges)", P, ["198.18.0.21", 80], DROP),
    ],
  },
];
