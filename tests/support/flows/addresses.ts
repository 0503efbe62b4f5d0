/**
 * The address plan the flow tables are written in: upstream proxier_test.go's NewFakeProxier conventions.
 * A rule tracer uses these addresses as they are; a real-traffic runner maps each address to a host of its
 * topology with the same role (see the FlowSourceKind docs).
 */
import type { FlowEndpoint, FlowSource } from "./types.ts";

/** The proxied node's name (upstream testNodeName): endpoints with this nodeName are local. */
export const THIS_NODE = "test-node";
/** The node's primary IPv4 address (upstream testNodeIP). */
export const NODE_IP = "192.168.0.2";
/** A secondary node address (upstream testNodeIPAlt). */
export const NODE_IP_ALT = "192.168.1.2";
/** A third node address, used as a Service externalIP (upstream testExternalIP). */
export const NODE_EXTERNAL_IP = "192.168.99.11";
/** The node's IPv6 addresses (upstream testNodeIPv6, testNodeIPv6Alt). */
export const NODE_IPV6 = "2001:db8::1";
export const NODE_IPV6_ALT = "2001:db8:1::2";
/** Every address of the node (upstream testNodeIPs), plus loopback in LOCAL_ADDRESSES. */
export const NODE_IPS: readonly string[] = [NODE_IP, NODE_IP_ALT, NODE_EXTERNAL_IP, NODE_IPV6, NODE_IPV6_ALT];
/** An external client inside the tables' loadBalancerSourceRanges (upstream testExternalClient). */
export const EXTERNAL_CLIENT = "203.0.113.2";
/** An external client outside them (upstream testExternalClientBlocked). */
export const EXTERNAL_CLIENT_BLOCKED = "203.0.113.130";
/** The cluster CIDR the pod detector uses, per family. */
export const CLUSTER_CIDR = { IPv4: "10.0.0.0/8", IPv6: "fd00:10::/64" } as const;
/** A pod on this node that no table uses as an endpoint. */
export const POD_IP = "10.0.0.2";
export const POD_IPV6 = "fd00:10::2";

/** Senders. */
export const FROM_POD: FlowSource = { kind: "pod", ip: POD_IP };
export const FROM_NODE: FlowSource = { kind: "node", ip: NODE_IP };
export const FROM_LOCALHOST: FlowSource = { kind: "localhost", ip: "127.0.0.1" };
export const FROM_EXTERNAL: FlowSource = { kind: "external", ip: EXTERNAL_CLIENT };
export const FROM_EXTERNAL_BLOCKED: FlowSource = { kind: "external-blocked", ip: EXTERNAL_CLIENT_BLOCKED };

/** An endpoint pod of the destination sending (hairpin). */
export function fromEndpoint(ip: string): FlowSource {
  return { kind: "endpoint", ip };
}

/** The node sending from a load-balancer IP of a Service. */
export function fromLoadBalancerIP(ip: string): FlowSource {
  return { kind: "lb-ip", ip };
}

/** Endpoints from [ip, nodeName?] pairs (conditions default ready). */
export function endpoints(list: ReadonlyArray<readonly [string, string?]>): FlowEndpoint[] {
  return list.map(([ip, node]) => (node === undefined ? { ip } : { ip, node }));
}
