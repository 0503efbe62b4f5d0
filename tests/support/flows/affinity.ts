/** ClientIP session affinity: each client keeps reaching one endpoint (S12). */
import { dnat, dnatMasq, flow } from "./build.ts";
import { FROM_EXTERNAL as X, FROM_POD as P, NODE_IP, THIS_NODE } from "./addresses.ts";
import type { Flow, FlowTable } from "./types.ts";

const all = ["10.180.0.1:80", "10.180.0.2:80", "10.180.0.3:80", "10.180.2.1:80"];
const sticky = (f: Flow): Flow => ({ ...f, sticky: true });

/** A sticky Service next to the same Service without affinity. */
export const AFFINITY_TABLES: readonly FlowTable[] = [{
  group: "Session affinity (S12)",
  name: "ClientIP affinity keeps a client on one endpoint; without it every endpoint is used",
  services: [
    {
      namespace: "ns1",
      name: "sticky",
      clusterIP: "172.30.0.51",
      ports: [{ port: 80, nodePort: 3005 }],
      sessionAffinitySeconds: 600,
      endpoints: [
        { ip: "10.180.0.1", node: THIS_NODE },
        { ip: "10.180.0.2", node: THIS_NODE },
        { ip: "10.180.0.3", node: THIS_NODE },
        { ip: "10.180.2.1", node: "node2" },
      ],
    },
    {
      namespace: "ns1",
      name: "spread",
      clusterIP: "172.30.0.52",
      ports: [{ port: 80 }],
      endpoints: [
        { ip: "10.180.0.1", node: THIS_NODE },
        { ip: "10.180.0.2", node: THIS_NODE },
        { ip: "10.180.0.3", node: THIS_NODE },
        { ip: "10.180.2.1", node: "node2" },
      ],
    },
  ],
  flows: [
    sticky(flow("pod to sticky ClusterIP", P, ["172.30.0.51", 80], dnat(all))),
    sticky(flow("external to sticky ClusterIP", X, ["172.30.0.51", 80], dnatMasq(all))),
    sticky(flow("external to sticky NodePort", X, [NODE_IP, 3005], dnatMasq(all))),
    flow("external to ClusterIP without affinity", X, ["172.30.0.52", 80], dnatMasq(all)),
  ],
}];
