/** Upstream TestNoEndpointsReject (S8) and TestClusterIPGeneral (S9, S10). */
import { dnat, dnatMasq, flow, NONE, REJECT } from "./build.ts";
import { FROM_EXTERNAL as X, FROM_POD as P, fromEndpoint, NODE_IP, THIS_NODE } from "./addresses.ts";
import type { FlowServicePort, FlowTable } from "./types.ts";

const SVC2_PORTS: readonly FlowServicePort[] = [
  { name: "http", protocol: "TCP", port: 80, targetPort: 80 },
  { name: "https", protocol: "TCP", port: 443, targetPort: 8443 },
  { name: "dns-udp", protocol: "UDP", port: 53, targetPort: 53 },
  { name: "dns-tcp", protocol: "TCP", port: 53, targetPort: 5353 },
  { name: "dns-sctp", protocol: "SCTP", port: 53, targetPort: 53 },
];

/** A pod on this node that is not an endpoint (TestClusterIPGeneral's source). */
const SRC = { kind: "pod", ip: "10.180.0.2" } as const;

/** Rejection without endpoints; ports, protocols and hairpin of plain ClusterIPs. */
export const CLUSTER_IP_TABLES: readonly FlowTable[] = [
  {
    group: "TestNoEndpointsReject (S8)",
    name: "rejects ClusterIP, external IP, NodePort and LB IP traffic",
    services: [{
      namespace: "ns1",
      name: "svc1",
      clusterIP: "172.30.0.41",
      ports: [{ port: 80, nodePort: 3001 }],
      externalIPs: ["192.168.99.11"],
      loadBalancerIPs: ["1.2.3.4"],
      endpoints: [],
    }],
    flows: [
      flow("pod to cluster IP", P, ["172.30.0.41", 80], REJECT),
      flow("external to external IP", X, ["192.168.99.11", 80], REJECT),
      flow("pod to NodePort", P, [NODE_IP, 3001], REJECT),
      flow("external to NodePort", X, [NODE_IP, 3001], REJECT),
      flow("pod to LoadBalancer IP", P, ["1.2.3.4", 80], REJECT),
      flow("external to LoadBalancer IP", X, ["1.2.3.4", 80], REJECT),
    ],
  },
  {
    group: "TestClusterIPGeneral (S9, S10)",
    name: "hairpin masquerade, target ports, protocols sharing a port",
    services: [
      {
        namespace: "ns1",
        name: "svc1",
        clusterIP: "172.30.0.41",
        ports: [{ name: "http", port: 80 }],
        endpoints: [{ ip: "10.180.0.1", node: THIS_NODE }],
      },
      {
        namespace: "ns2",
        name: "svc2",
        clusterIP: "172.30.0.42",
        ports: SVC2_PORTS,
        endpoints: [{ ip: "10.180.0.1", node: THIS_NODE }, { ip: "10.180.2.1", node: "node2" }],
      },
    ],
    flows: [
      flow("simple clusterIP", SRC, ["172.30.0.41", 80], dnat("10.180.0.1:80")),
      flow(
        "hairpin to cluster IP",
        fromEndpoint("10.180.0.1"),
        ["172.30.0.41", 80],
        dnatMasq("10.180.0.1:80"),
      ),
      flow("multiple endpoints", SRC, ["172.30.0.42", 80], dnat(["10.180.0.1:80", "10.180.2.1:80"])),
      flow("TargetPort", SRC, ["172.30.0.42", 443], dnat(["10.180.0.1:8443", "10.180.2.1:8443"])),
      flow("same port (TCP)", SRC, ["172.30.0.42", 53], dnat(["10.180.0.1:5353", "10.180.2.1:5353"])),
      flow("same port (UDP)", SRC, ["172.30.0.42", 53, "UDP"], dnat(["10.180.0.1:53", "10.180.2.1:53"])),
      flow("same port (SCTP)", SRC, ["172.30.0.42", 53, "SCTP"], dnat(["10.180.0.1:53", "10.180.2.1:53"])),
      flow("TCP-only port does not match UDP", SRC, ["172.30.0.42", 80, "UDP"], NONE),
      flow("svc1 does not accept svc2's ports", SRC, ["172.30.0.41", 443], NONE),
    ],
  },
];
