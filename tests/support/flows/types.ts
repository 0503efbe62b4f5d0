/**
 * The shape of a backend-neutral packet-flow table: a small cluster (Services with their endpoints, the
 * proxy's settings) and packets with the outcome every proxy mode must produce, written in Service terms
 * (which endpoints may receive the packet, whether the endpoint sees the client's own address), never in
 * the terms of one backend (chains, sets, virtual servers). See index.ts for how a backend runs them.
 */

/** IP family of a table (a table is single-stack). */
export type FlowFamily = "IPv4" | "IPv6";

/** Protocol of a Service port (Kubernetes spelling). */
export type FlowProtocol = "TCP" | "UDP" | "SCTP";

/** The proxy's settings that change outcomes (kube-proxy's flag names in the comments). */
export interface FlowConfig {
  /** Default IPv4. */
  readonly family?: FlowFamily;
  /** --masquerade-all (default false). */
  readonly masqueradeAll?: boolean;
  /**
   * How pod traffic is told apart (--detect-local-mode): "cluster-cidr" (default; the table's
   * `clusterCIDR`) or "none" (no detector: every packet to a ClusterIP counts as pod traffic).
   */
  readonly localDetector?: "cluster-cidr" | "none";
  /** --nodeport-addresses (default []: every node address). */
  readonly nodePortAddresses?: readonly string[];
  /** --iptables-localhost-nodeports (default true; IPv4 only). */
  readonly localhostNodePorts?: boolean;
}

/** One port of a Service. */
export interface FlowServicePort {
  /** Port name (default "p80"). */
  readonly name?: string;
  /** Default TCP. */
  readonly protocol?: FlowProtocol;
  readonly port: number;
  /** The endpoints' port (default `port`). */
  readonly targetPort?: number;
  /** 0 or absent: no NodePort. */
  readonly nodePort?: number;
}

/** One endpoint (an EndpointSlice entry); every port of the Service is served on its targetPort. */
export interface FlowEndpoint {
  readonly ip: string;
  /** nodeName; THIS_NODE (addresses.ts) makes the endpoint local. Default "" (unknown node: remote). */
  readonly node?: string;
  /** EndpointSlice conditions (default ready, serving, not terminating). */
  readonly ready?: boolean;
  readonly serving?: boolean;
  readonly terminating?: boolean;
}

/** A Service with its endpoints. */
export interface FlowService {
  readonly namespace: string;
  readonly name: string;
  readonly clusterIP: string;
  readonly ports: readonly FlowServicePort[];
  readonly externalIPs?: readonly string[];
  /** status.loadBalancer.ingress IPs (makes it a LoadBalancer Service). */
  readonly loadBalancerIPs?: readonly string[];
  readonly loadBalancerSourceRanges?: readonly string[];
  /** Default "Cluster". */
  readonly externalTrafficPolicy?: "Cluster" | "Local";
  /** Default "Cluster". */
  readonly internalTrafficPolicy?: "Cluster" | "Local";
  readonly healthCheckNodePort?: number;
  /** ClientIP session affinity with this timeout; absent: no affinity. */
  readonly sessionAffinitySeconds?: number;
  readonly endpoints: readonly FlowEndpoint[];
}

/**
 * Who sends the packet. `ip` is its source address in the table's address plan (addresses.ts); a real-traffic
 * runner sends from a host of the same kind and reads "preserved" as "the endpoint sees that host's address".
 */
export type FlowSourceKind =
  /** A pod on this node (inside the cluster CIDR) that is not an endpoint of the destination. */
  | "pod"
  /** An endpoint pod of the destination Service, on this node (hairpin). */
  | "endpoint"
  /** The node itself, from its own address. */
  | "node"
  /** The node itself, from and to the loopback address. */
  | "localhost"
  /** A client outside the cluster (inside any loadBalancerSourceRanges of the table). */
  | "external"
  /** A client outside the cluster and outside the table's loadBalancerSourceRanges. */
  | "external-blocked"
  /** The node, sending from a Service's load-balancer IP (a cloud LB that hairpins with its own address). */
  | "lb-ip";

/** The sender of a flow. */
export interface FlowSource {
  readonly kind: FlowSourceKind;
  readonly ip: string;
}

/** The destination of a flow. */
export interface FlowDestination {
  readonly ip: string;
  readonly port: number;
  /** Default TCP. */
  readonly protocol?: FlowProtocol;
}

/**
 * What happens to a packet:
 * - `dnat`: delivered to one of these endpoints ("ip:port", "[ip6]:port"; listed sorted), each possible one
 *   eventually; `source` says whether the endpoint sees the client's address or a node address (masquerade);
 * - `reject`: refused (TCP reset / ICMP unreachable);
 * - `drop`: silently dropped;
 * - `accept`: let through to a listener on the node itself (a health-check node port);
 * - `none`: the proxy does not touch it (routed as if there were no Service).
 */
export type FlowOutcome =
  | { readonly dnat: readonly string[]; readonly source: "preserved" | "masqueraded" }
  | { readonly verdict: "reject" | "drop" | "accept" | "none" };

/** One packet and its expected outcome. */
export interface Flow {
  readonly name: string;
  readonly from: FlowSource;
  readonly to: FlowDestination;
  readonly expect: FlowOutcome;
  /**
   * With ClientIP affinity: every packet of one client reaches the same endpoint (of `dnat`). A rule
   * tracer that cannot see history checks only the endpoint set.
   */
  readonly sticky?: boolean;
}

/** A change applied after the previous step's flows, followed by flows in the new state. */
export interface FlowStep {
  readonly name: string;
  /** Services removed (by "namespace/name"). */
  readonly deleteServices?: readonly string[];
  /** New endpoint lists (by "namespace/name"; [] removes every endpoint). */
  readonly setEndpoints?: Readonly<Record<string, readonly FlowEndpoint[]>>;
  readonly flows: readonly Flow[];
}

/** A cluster, packets and their outcomes; optionally later states (`then`). */
export interface FlowTable {
  /** Group (an upstream proxier_test.go test name or a scenario) and the case within it. */
  readonly group: string;
  readonly name: string;
  readonly config?: FlowConfig;
  readonly services: readonly FlowService[];
  readonly flows: readonly Flow[];
  readonly then?: readonly FlowStep[];
}

/** "namespace/name" of a Service. */
export function flowServiceKey(svc: Pick<FlowService, "namespace" | "name">): string {
  return `${svc.namespace}/${svc.name}`;
}
