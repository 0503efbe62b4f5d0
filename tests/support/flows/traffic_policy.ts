/**
 * externalTrafficPolicy and internalTrafficPolicy, with ready, serving-terminating and terminating
 * endpoints: upstream TestExternalTrafficPolicyLocal/Cluster, TestInternalTrafficPolicy (S17) and
 * TestTerminatingEndpoints (S14-S16).
 */
import { dnat, dnatMasq, DROP, flow, REJECT } from "./build.ts";
import { FROM_EXTERNAL as X, FROM_POD as P, NODE_IP, THIS_NODE } from "./addresses.ts";
import type { FlowEndpoint, FlowOutcome, FlowService, FlowTable } from "./types.ts";

const both = ["10.180.0.1:80", "10.180.2.1:80"];

function etpService(local: boolean): FlowService {
  return {
    namespace: "ns1",
    name: "svc1",
    clusterIP: "172.30.0.41",
    ports: [{ port: 80, nodePort: 3001 }],
    externalIPs: ["192.168.99.11"],
    loadBalancerIPs: ["1.2.3.4"],
    externalTrafficPolicy: local ? "Local" : "Cluster",
    ...(local ? { healthCheckNodePort: 30000 } : {}),
    endpoints: [{ ip: "10.180.0.1" }, { ip: "10.180.2.1", node: THIS_NODE }],
  };
}

const ETP_GROUP = "TestExternalTrafficPolicyLocal / Cluster";

const ETP_TABLES: readonly FlowTable[] = [
  {
    group: ETP_GROUP,
    name: "eTP=Local: external clients reach only the local endpoint, unmasqueraded; pods reach all",
    services: [etpService(true)],
    flows: [
      flow("pod to cluster IP", P, ["172.30.0.41", 80], dnat(both)),
      flow("pod to external IP", P, ["192.168.99.11", 80], dnat(both)),
      flow("external to external IP", X, ["192.168.99.11", 80], dnat("10.180.2.1:80")),
      flow("pod to LB IP", P, ["1.2.3.4", 80], dnat(both)),
      flow("external to LB IP", X, ["1.2.3.4", 80], dnat("10.180.2.1:80")),
      flow("pod to NodePort", P, [NODE_IP, 3001], dnat(both)),
      flow("external to NodePort", X, [NODE_IP, 3001], dnat("10.180.2.1:80")),
    ],
  },
  {
    group: ETP_GROUP,
    name: "eTP=Cluster: external destinations are masqueraded and reach all endpoints",
    services: [etpService(false)],
    flows: [
      flow("pod to cluster IP", P, ["172.30.0.41", 80], dnat(both)),
      flow("pod to external IP", P, ["192.168.99.11", 80], dnatMasq(both)),
      flow("external to external IP", X, ["192.168.99.11", 80], dnatMasq(both)),
      flow("pod to LB IP", P, ["1.2.3.4", 80], dnatMasq(both)),
      flow("external to LB IP", X, ["1.2.3.4", 80], dnatMasq(both)),
      flow("pod to NodePort", P, [NODE_IP, 3001], dnatMasq(both)),
      flow("external to NodePort", X, [NODE_IP, 3001], dnatMasq(both)),
    ],
  },
];

const ITP_CASES: ReadonlyArray<
  readonly [string, boolean, ReadonlyArray<readonly [string, string]>, FlowOutcome]
> = [
  [
    "iTP=Cluster",
    false,
    [["10.0.1.1", THIS_NODE], ["10.0.1.2", "node1"], ["10.0.1.3", "node2"]],
    dnat(["10.0.1.1:80", "10.0.1.2:80", "10.0.1.3:80"]),
  ],
  [
    "iTP=Local, one local endpoint",
    true,
    [["10.0.1.1", THIS_NODE], ["10.0.1.2", "node1"], ["10.0.1.3", "node2"]],
    dnat("10.0.1.1:80"),
  ],
  [
    "iTP=Local, two local endpoints",
    true,
    [["10.0.1.1", THIS_NODE], ["10.0.1.2", THIS_NODE], ["10.0.1.3", "node2"]],
    dnat(["10.0.1.1:80", "10.0.1.2:80"]),
  ],
  ["iTP=Local, no local endpoints", true, [["10.0.1.1", "node0"], ["10.0.1.2", "node1"], [
    "10.0.1.3",
    "node2",
  ]], DROP],
];

const ITP_TABLES: readonly FlowTable[] = ITP_CASES.map(([name, local, list, expect]) => ({
  group: "TestInternalTrafficPolicy (S17)",
  name,
  services: [{
    namespace: "ns1",
    name: "svc1",
    clusterIP: "172.30.1.1",
    ports: [{ name: "", port: 80 }],
    internalTrafficPolicy: local ? "Local" : "Cluster",
    endpoints: list.map(([ip, node]) => ({ ip, node })),
  }],
  flows: [flow(name, P, ["172.30.1.1", 80], expect)],
  then: [{
    name: "endpoints deleted",
    setEndpoints: { "ns1/svc1": [] },
    flows: [flow("endpoints deleted", P, ["172.30.1.1", 80], REJECT)],
  }],
}));

const R = { ready: true, serving: true, terminating: false };
const ST = { ready: false, serving: true, terminating: true };
const T = { ready: false, serving: false, terminating: true };
const me = { node: THIS_NODE };
const other = { node: "another-node" };
const node1 = { node: "node-1" };

type TerminatingCase = readonly [string, readonly FlowEndpoint[], FlowOutcome, FlowOutcome];

function terminatingTables(local: boolean, cases: readonly TerminatingCase[]): FlowTable[] {
  return cases.map(([name, eps, pod, ext]) => ({
    group: "TestTerminatingEndpoints (S14-S16)",
    name: `${local ? "eTP=Local" : "eTP=Cluster"}: ${name}`,
    services: [{
      namespace: "ns1",
      name: "svc1",
      clusterIP: "172.30.1.1",
      ports: [{ name: "", port: 80 }],
      loadBalancerIPs: ["1.2.3.4"],
      externalTrafficPolicy: local ? "Local" : "Cluster",
      ...(local ? { healthCheckNodePort: 30000 } : {}),
      endpoints: eps,
    }],
    flows: [
      flow("pod to clusterIP", P, ["172.30.1.1", 80], pod),
      flow("external to LB", X, ["1.2.3.4", 80], ext),
    ],
    then: [{
      name: "endpoints deleted",
      setEndpoints: { "ns1/svc1": [] },
      flows: [
        flow("pod to clusterIP", P, ["172.30.1.1", 80], REJECT),
        flow("external to LB", X, ["1.2.3.4", 80], REJECT),
      ],
    }],
  }));
}

const TERMINATING_TABLES: readonly FlowTable[] = [
  ...terminatingTables(true, [
    [
      "ready endpoints exist",
      [
        { ip: "10.0.1.1", ...R, ...me },
        { ip: "10.0.1.2", ...R, ...me },
        { ip: "10.0.1.3", ...ST, ...me },
        { ip: "10.0.1.4", ...T, ...me },
        { ip: "10.0.1.5", ...R, ...node1 },
      ],
      dnat(["10.0.1.1:80", "10.0.1.2:80", "10.0.1.5:80"]),
      dnat(["10.0.1.1:80", "10.0.1.2:80"]),
    ],
    [
      "only terminating endpoints exist locally",
      [
        { ip: "10.0.1.2", ...ST, ...me },
        { ip: "10.0.1.3", ...ST, ...me },
        { ip: "10.0.1.4", ...T, ...me },
        { ip: "10.0.1.5", ...R, ...node1 },
      ],
      dnat("10.0.1.5:80"),
      dnat(["10.0.1.2:80", "10.0.1.3:80"]),
    ],
    [
      "terminating endpoints on remote node",
      [{ ip: "10.0.1.5", ...ST, ...node1 }],
      dnat("10.0.1.5:80"),
      DROP,
    ],
    [
      "no usable endpoints on any node",
      [{ ip: "10.0.1.5", ...T, ...me }, { ip: "10.0.1.6", ...T, ...node1 }],
      REJECT,
      REJECT,
    ],
  ]),
  ...terminatingTables(false, [
    [
      "ready endpoints exist (S15)",
      [
        { ip: "10.0.1.1", ...R, ...me },
        { ip: "10.0.1.2", ...R, ...me },
        { ip: "10.0.1.3", ...ST, ...other },
        { ip: "10.0.1.4", ...T, ...other },
        { ip: "10.0.1.5", ...R, ...other },
      ],
      dnat(["10.0.1.1:80", "10.0.1.2:80", "10.0.1.5:80"]),
      dnatMasq(["10.0.1.1:80", "10.0.1.2:80", "10.0.1.5:80"]),
    ],
    [
      "only terminating endpoints exist (S14)",
      [
        { ip: "10.0.1.2", ...ST, ...me },
        { ip: "10.0.1.3", ...ST, ...me },
        { ip: "10.0.1.4", ...T, ...other },
        { ip: "10.0.1.5", ...ST, ...other },
      ],
      dnat(["10.0.1.2:80", "10.0.1.3:80", "10.0.1.5:80"]),
      dnatMasq(["10.0.1.2:80", "10.0.1.3:80", "10.0.1.5:80"]),
    ],
    [
      "terminating endpoints on remote node",
      [{ ip: "10.0.1.5", ...ST, ...node1 }],
      dnat("10.0.1.5:80"),
      dnatMasq("10.0.1.5:80"),
    ],
    [
      "no usable endpoints on any node (S16)",
      [{ ip: "10.0.1.5", ...T, ...me }, { ip: "10.0.1.6", ...T, ...node1 }],
      REJECT,
      REJECT,
    ],
  ]),
];

/** eTP, iTP and endpoint-condition tables. */
export const TRAFFIC_POLICY_TABLES: readonly FlowTable[] = [
  ...ETP_TABLES,
  ...ITP_TABLES,
  ...TERMINATING_TABLES,
];
