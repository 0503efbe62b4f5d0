/** Upstream TestLoadBalancer: loadBalancerSourceRanges at LB IPs (S11), and the health-check node port. */
import { ACCEPT, dnat, dnatMasq, DROP, flow, NONE } from "./build.ts";
import {
  endpoints,
  FROM_EXTERNAL as X,
  FROM_EXTERNAL_BLOCKED as XB,
  FROM_NODE as N,
  FROM_POD as P,
  fromLoadBalancerIP,
  NODE_IP,
} from "./addresses.ts";
import type { FlowTable } from "./types.ts";

const ep = "10.180.0.1:80";

/** Source ranges, the node and LB-IP hairpin exceptions; the health-check node port. */
export const LOAD_BALANCER_TABLES: readonly FlowTable[] = [
  {
    group: "TestLoadBalancer (S11)",
    name: "source ranges allow listed clients, the node and LB-IP hairpin; NodePort bypasses them",
    services: [{
      namespace: "ns1",
      name: "svc1",
      clusterIP: "172.30.0.41",
      ports: [{ port: 80, nodePort: 3001 }],
      loadBalancerIPs: ["1.2.3.4", "5.6.7.8"],
      loadBalancerSourceRanges: ["192.168.0.0/24", "203.0.113.0/25"],
      endpoints: endpoints([["10.180.0.1"]]),
    }],
    flows: [
      flow("pod to cluster IP", P, ["172.30.0.41", 80], dnat(ep)),
      flow("external to nodePort", X, [NODE_IP, 3001], dnatMasq(ep)),
      flow("nodePort bypasses LoadBalancerSourceRanges", XB, [NODE_IP, 3001], dnatMasq(ep)),
      flow("accepted external to LB1", X, ["1.2.3.4", 80], dnatMasq(ep)),
      flow("accepted external to LB2", X, ["5.6.7.8", 80], dnatMasq(ep)),
      flow("blocked external to LB1", XB, ["1.2.3.4", 80], DROP),
      flow("blocked external to LB2", XB, ["5.6.7.8", 80], DROP),
      flow("pod to LB1 (blocked)", P, ["1.2.3.4", 80], DROP),
      flow("pod to LB2 (blocked)", P, ["5.6.7.8", 80], DROP),
      flow("node to LB1 (allowed)", N, ["1.2.3.4", 80], dnatMasq(ep)),
      flow("node to LB2 (allowed)", N, ["5.6.7.8", 80], dnatMasq(ep)),
      flow("same node to LB1, SNATted to LB1", fromLoadBalancerIP("1.2.3.4"), ["1.2.3.4", 80], dnatMasq(ep)),
      flow("same node to LB2, SNATted to LB2", fromLoadBalancerIP("5.6.7.8"), ["5.6.7.8", 80], dnatMasq(ep)),
    ],
  },
  {
    group: "TestLoadBalancer (S11)",
    name: "no LB-IP source rule when no range contains the node IP",
    services: [{
      namespace: "ns1",
      name: "svc1",
      clusterIP: "172.30.0.41",
      ports: [{ port: 80 }],
      loadBalancerIPs: ["1.2.3.4"],
      loadBalancerSourceRanges: ["203.0.113.0/25"],
      endpoints: endpoints([["10.180.0.1"]]),
    }],
    flows: [
      flow("node to LB (not allowed)", N, ["1.2.3.4", 80], DROP),
      flow("LB-IP source (not allowed)", fromLoadBalancerIP("1.2.3.4"), ["1.2.3.4", 80], DROP),
    ],
  },
  {
    group: "TestHealthCheckNodePort",
    name: "accepts the health check node port, and stops once the service is gone",
    config: { nodePortAddresses: ["127.0.0.0/8"] },
    services: [{
      namespace: "ns1",
      name: "svc1",
      clusterIP: "172.30.0.42",
      ports: [{ port: 80, nodePort: 3001 }],
      healthCheckNodePort: 30000,
      externalTrafficPolicy: "Local",
      endpoints: [],
    }],
    flows: [
      flow(
        "firewall accepts HealthCheckNodePort",
        { kind: "external", ip: "1.2.3.4" },
        [NODE_IP, 30000],
        ACCEPT,
      ),
    ],
    then: [{
      name: "service deleted",
      deleteServices: ["ns1/svc1"],
      flows: [
        flow("HealthCheckNodePort no longer has any rule", { kind: "external", ip: "1.2.3.4" }, [
          NODE_IP,
          30000,
        ], NONE),
      ],
    }],
  },
];
