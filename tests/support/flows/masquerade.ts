/**
 * Upstream TestInternalExternalMasquerade: who gets masqueraded, and which endpoints are eligible, for
 * every sender × destination × traffic policy, with and without a local-traffic detector and
 * --masquerade-all.
 */
import { dnat, dnatMasq, flow, withOverrides } from "./build.ts";
import {
  endpoints,
  FROM_EXTERNAL as X,
  FROM_LOCALHOST as LO,
  FROM_NODE as N,
  FROM_POD as P,
  NODE_IP,
  THIS_NODE,
} from "./addresses.ts";
import type { Flow, FlowConfig, FlowOutcome, FlowService, FlowTable } from "./types.ts";

const p80 = (nodePort: number) => [{ port: 80, nodePort }];

const SERVICES: readonly FlowService[] = [
  {
    namespace: "ns1",
    name: "svc1",
    clusterIP: "172.30.0.41",
    ports: p80(3001),
    loadBalancerIPs: ["1.2.3.4"],
    endpoints: endpoints([["10.180.0.1", THIS_NODE], ["10.180.1.1", "remote"]]),
  },
  {
    namespace: "ns2",
    name: "svc2",
    clusterIP: "172.30.0.42",
    ports: p80(3002),
    healthCheckNodePort: 30002,
    externalTrafficPolicy: "Local",
    loadBalancerIPs: ["5.6.7.8"],
    endpoints: endpoints([["10.180.0.2", THIS_NODE], ["10.180.1.2", "remote"]]),
  },
  {
    namespace: "ns3",
    name: "svc3",
    clusterIP: "172.30.0.43",
    ports: p80(3003),
    internalTrafficPolicy: "Local",
    loadBalancerIPs: ["9.10.11.12"],
    endpoints: endpoints([["10.180.0.3", THIS_NODE], ["10.180.1.3", "remote"]]),
  },
];

const both1 = ["10.180.0.1:80", "10.180.1.1:80"];
const both2 = ["10.180.0.2:80", "10.180.1.2:80"];
const both3 = ["10.180.0.3:80", "10.180.1.3:80"];

const FLOWS: readonly Flow[] = [
  flow("pod to ClusterIP", P, ["172.30.0.41", 80], dnat(both1)),
  flow("pod to NodePort", P, [NODE_IP, 3001], dnatMasq(both1)),
  flow("pod to LB", P, ["1.2.3.4", 80], dnatMasq(both1)),
  flow("node to ClusterIP", N, ["172.30.0.41", 80], dnatMasq(both1)),
  flow("node to NodePort", N, [NODE_IP, 3001], dnatMasq(both1)),
  flow("localhost to NodePort", LO, ["127.0.0.1", 3001], dnatMasq(both1)),
  flow("node to LB", N, ["1.2.3.4", 80], dnatMasq(both1)),
  flow("external to ClusterIP", X, ["172.30.0.41", 80], dnatMasq(both1)),
  flow("external to NodePort", X, [NODE_IP, 3001], dnatMasq(both1)),
  flow("external to LB", X, ["1.2.3.4", 80], dnatMasq(both1)),

  flow("pod to ClusterIP with eTP:Local", P, ["172.30.0.42", 80], dnat(both2)),
  flow("pod to NodePort with eTP:Local", P, [NODE_IP, 3002], dnat(both2)),
  flow("pod to LB with eTP:Local", P, ["5.6.7.8", 80], dnat(both2)),
  flow("node to ClusterIP with eTP:Local", N, ["172.30.0.42", 80], dnatMasq(both2)),
  // (upstream's case uses port 3001, i.e. svc1)
  flow("node to NodePort with eTP:Local", N, [NODE_IP, 3001], dnatMasq(both1)),
  flow("localhost to NodePort with eTP:Local", LO, ["127.0.0.1", 3002], dnatMasq(both2)),
  flow("node to LB with eTP:Local", N, ["5.6.7.8", 80], dnatMasq(both2)),
  flow("external to ClusterIP with eTP:Local", X, ["172.30.0.42", 80], dnatMasq(both2)),
  flow("external to NodePort with eTP:Local", X, [NODE_IP, 3002], dnat("10.180.0.2:80")),
  flow("external to LB with eTP:Local", X, ["5.6.7.8", 80], dnat("10.180.0.2:80")),

  flow("pod to ClusterIP with iTP:Local", P, ["172.30.0.43", 80], dnat("10.180.0.3:80")),
  flow("pod to NodePort with iTP:Local", P, [NODE_IP, 3003], dnatMasq(both3)),
  flow("pod to LB with iTP:Local", P, ["9.10.11.12", 80], dnatMasq(both3)),
  flow("node to ClusterIP with iTP:Local", N, ["172.30.0.43", 80], dnatMasq("10.180.0.3:80")),
  flow("node to NodePort with iTP:Local", N, [NODE_IP, 3003], dnatMasq(both3)),
  flow("localhost to NodePort with iTP:Local", LO, ["127.0.0.1", 3003], dnatMasq(both3)),
  flow("node to LB with iTP:Local", N, ["9.10.11.12", 80], dnatMasq(both3)),
  flow("external to ClusterIP with iTP:Local", X, ["172.30.0.43", 80], dnatMasq("10.180.0.3:80")),
  flow("external to NodePort with iTP:Local", X, [NODE_IP, 3003], dnatMasq(both3)),
  flow("external to LB with iTP:Local", X, ["9.10.11.12", 80], dnatMasq(both3)),
];

/** Without a detector all ClusterIP traffic counts as pod traffic: no masquerade, no eTP short-circuit. */
const NO_DETECTOR: Readonly<Record<string, FlowOutcome>> = {
  "node to ClusterIP": dnat(both1),
  "node to ClusterIP with eTP:Local": dnat(both2),
  "node to ClusterIP with iTP:Local": dnat("10.180.0.3:80"),
  "external to ClusterIP": dnat(both1),
  "external to ClusterIP with eTP:Local": dnat(both2),
  "external to ClusterIP with iTP:Local": dnat("10.180.0.3:80"),
  // ...and no eTP=Local short-circuit for pods, so they get only the local endpoints.
  "pod to NodePort with eTP:Local": dnat("10.180.0.2:80"),
  "pod to LB with eTP:Local": dnat("10.180.0.2:80"),
};

/** --masquerade-all masquerades pod traffic to ClusterIPs too. */
const MASQUERADE_ALL: Readonly<Record<string, FlowOutcome>> = {
  "pod to ClusterIP": dnatMasq(both1),
  "pod to ClusterIP with eTP:Local": dnatMasq(both2),
  "pod to ClusterIP with iTP:Local": dnatMasq("10.180.0.3:80"),
};

const variant = (
  name: string,
  config: FlowConfig,
  overrides: Readonly<Record<string, FlowOutcome>>,
): FlowTable => ({
  group: "TestInternalExternalMasquerade (truth table)",
  name,
  config,
  services: SERVICES,
  flows: withOverrides(FLOWS, overrides),
});

/** The truth table and its three variants. */
export const MASQUERADE_TABLES: readonly FlowTable[] = [
  variant("base", {}, {}),
  variant("no LocalTrafficDetector", { localDetector: "none" }, NO_DETECTOR),
  variant("masqueradeAll", { masqueradeAll: true }, MASQUERADE_ALL),
  variant("masqueradeAll, no LocalTrafficDetector", { masqueradeAll: true, localDetector: "none" }, {
    ...MASQUERADE_ALL,
    "pod to NodePort with eTP:Local": NO_DETECTOR["pod to NodePort with eTP:Local"],
    "pod to LB with eTP:Local": NO_DETECTOR["pod to LB with eTP:Local"],
  }),
];
