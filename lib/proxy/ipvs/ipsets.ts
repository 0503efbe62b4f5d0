/**
 * The ipsets of upstream's IPVS proxier (pkg/proxy/ipvs/ipset.go, proxier.go ipsetInfo): their names,
 * types and comments, the IPv6 names (KUBE- → KUBE-6-, at most 31 characters) and the entry strings
 * `ipset save` prints for each type.
 */
import type { IPFamily } from "../types.ts";

/** ipset types the IPVS proxier uses (upstream utilipset.Type). */
export type IPSetType = "hash:ip,port" | "hash:ip,port,ip" | "hash:ip,port,net" | "bitmap:port" | "hash:ip";

/** One set as upstream declares it. */
export interface IPSetInfo {
  readonly name: string;
  readonly type: IPSetType;
  readonly comment: string;
}

export const KUBE_LOOP_BACK_SET = "KUBE-LOOP-BACK";
export const KUBE_CLUSTER_IP_SET = "KUBE-CLUSTER-IP";
export const KUBE_EXTERNAL_IP_SET = "KUBE-EXTERNAL-IP";
export const KUBE_EXTERNAL_IP_LOCAL_SET = "KUBE-EXTERNAL-IP-LOCAL";
export const KUBE_LOAD_BALANCER_SET = "KUBE-LOAD-BALANCER";
export const KUBE_LOAD_BALANCER_FW_SET = "KUBE-LOAD-BALANCER-FW";
export const KUBE_LOAD_BALANCER_LOCAL_SET = "KUBE-LOAD-BALANCER-LOCAL";
export const KUBE_LOAD_BALANCER_SOURCE_IP_SET = "KUBE-LOAD-BALANCER-SOURCE-IP";
export const KUBE_LOAD_BALANCER_SOURCE_CIDR_SET = "KUBE-LOAD-BALANCER-SOURCE-CIDR";
export const KUBE_NODE_PORT_TCP_SET = "KUBE-NODE-PORT-TCP";
export const KUBE_NODE_PORT_LOCAL_TCP_SET = "KUBE-NODE-PORT-LOCAL-TCP";
export const KUBE_NODE_PORT_UDP_SET = "KUBE-NODE-PORT-UDP";
export const KUBE_NODE_PORT_LOCAL_UDP_SET = "KUBE-NODE-PORT-LOCAL-UDP";
export const KUBE_NODE_PORT_SCTP_SET = "KUBE-NODE-PORT-SCTP-HASH";
export const KUBE_NODE_PORT_LOCAL_SCTP_SET = "KUBE-NODE-PORT-LOCAL-SCTP-HASH";
export const KUBE_HEALTH_CHECK_NODE_PORT_SET = "KUBE-HEALTH-CHECK-NODE-PORT";
export const KUBE_IPVS_SET = "KUBE-IPVS-IPS";

/** Every set, in upstream's ipsetInfo order. */
export const IPSET_INFO: readonly IPSetInfo[] = Object.freeze([
  {
    name: KUBE_LOOP_BACK_SET,
    type: "hash:ip,port,ip",
    comment: "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose",
  },
  {
    name: KUBE_CLUSTER_IP_SET,
    type: "hash:ip,port",
    comment: "Kubernetes service cluster ip + port for masquerade purpose",
  },
  {
    name: KUBE_EXTERNAL_IP_SET,
    type: "hash:ip,port",
    comment: "Kubernetes service external ip + port for masquerade and filter purpose",
  },
  {
    name: KUBE_EXTERNAL_IP_LOCAL_SET,
    type: "hash:ip,port",
    comment: "Kubernetes service external ip + port with externalTrafficPolicy=local",
  },
  { name: KUBE_LOAD_BALANCER_SET, type: "hash:ip,port", comment: "Kubernetes service lb portal" },
  {
    name: KUBE_LOAD_BALANCER_FW_SET,
    type: "hash:ip,port",
    comment: "Kubernetes service load balancer ip + port for load balancer with sourceRange",
  },
  {
    name: KUBE_LOAD_BALANCER_LOCAL_SET,
    type: "hash:ip,port",
    comment: "Kubernetes service load balancer ip + port with externalTrafficPolicy=local",
  },
  {
    name: KUBE_LOAD_BALANCER_SOURCE_IP_SET,
    type: "hash:ip,port,ip",
    comment: "Kubernetes service load balancer ip + port + source IP for packet filter purpose",
  },
  {
    name: KUBE_LOAD_BALANCER_SOURCE_CIDR_SET,
    type: "hash:ip,port,net",
    comment: "Kubernetes service load balancer ip + port + source cidr for packet filter purpose",
  },
  {
    name: KUBE_NODE_PORT_TCP_SET,
    type: "bitmap:port",
    comment: "Kubernetes nodeport TCP port for masquerade purpose",
  },
  {
    name: KUBE_NODE_PORT_LOCAL_TCP_SET,
    type: "bitmap:port",
    comment: "Kubernetes nodeport TCP port with externalTrafficPolicy=local",
  },
  {
    name: KUBE_NODE_PORT_UDP_SET,
    type: "bitmap:port",
    comment: "Kubernetes nodeport UDP port for masquerade purpose",
  },
  {
    name: KUBE_NODE_PORT_LOCAL_UDP_SET,
    type: "bitmap:port",
    comment: "Kubernetes nodeport UDP port with externalTrafficPolicy=local",
  },
  {
    name: KUBE_NODE_PORT_SCTP_SET,
    type: "hash:ip,port",
    comment: "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'",
  },
  {
    name: KUBE_NODE_PORT_LOCAL_SCTP_SET,
    type: "hash:ip,port",
    comment: "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'",
  },
  {
    name: KUBE_HEALTH_CHECK_NODE_PORT_SET,
    type: "bitmap:port",
    comment: "Kubernetes health check node port",
  },
  { name: KUBE_IPVS_SET, type: "hash:ip", comment: "Addresses on the ipvs interface" },
]);

const BY_NAME: ReadonlyMap<string, IPSetInfo> = new Map(IPSET_INFO.map((s) => [s.name, s]));

/** The declaration of a set by its (IPv4) name. */
export function ipsetInfo(name: string): IPSetInfo {
  const info = BY_NAME.get(name);
  if (!info) throw new Error(`ipvs: unknown ipset ${JSON.stringify(name)}`);
  return info;
}

/**
 * The kernel name of a set in `family`: IPv6 sets are "KUBE-6-..." cut to ipset's 31 characters
 * (upstream NewIPSet), so both families' sets coexist.
 */
export function ipsetName(name: string, family: IPFamily): string {
  if (family !== "IPv6" || !name.startsWith("KUBE-")) return name;
  return ("KUBE-6-" + name.slice(5)).slice(0, 31);
}

/** Entry "ip,proto:port" (hash:ip,port). */
export function ipPortEntry(ip: string, protocol: string, port: number): string {
  return `${ip},${protocol.toLowerCase()}:${port}`;
}

/** Entry "ip,proto:port,ip2" (hash:ip,port,ip). */
export function ipPortIPEntry(ip: string, protocol: string, port: number, ip2: string): string {
  return `${ip},${protocol.toLowerCase()}:${port},${ip2}`;
}

/** Entry "ip,proto:port,net" (hash:ip,port,net). */
export function ipPortNetEntry(ip: string, protocol: string, port: number, net: string): string {
  return `${ip},${protocol.toLowerCase()}:${port},${net}`;
}
