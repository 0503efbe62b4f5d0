/**
 * The iptables chains of upstream's IPVS proxier (pkg/proxy/ipvs/proxier.go): the chains it owns, the
 * jump rules from the built-in chains into them, and the ipset → chain rules (ipsetWithIptablesChain).
 */
import type { JumpRule } from "../iptables/jump_rules_table.ts";
import {
  KUBE_LOAD_BALANCER_FW_SET,
  KUBE_LOAD_BALANCER_LOCAL_SET,
  KUBE_LOAD_BALANCER_SET,
  KUBE_LOAD_BALANCER_SOURCE_CIDR_SET,
  KUBE_LOAD_BALANCER_SOURCE_IP_SET,
  KUBE_LOOP_BACK_SET,
  KUBE_NODE_PORT_LOCAL_SCTP_SET,
  KUBE_NODE_PORT_LOCAL_TCP_SET,
  KUBE_NODE_PORT_LOCAL_UDP_SET,
  KUBE_NODE_PORT_SCTP_SET,
  KUBE_NODE_PORT_TCP_SET,
  KUBE_NODE_PORT_UDP_SET,
} from "./ipsets.ts";

export const KUBE_SERVICES = "KUBE-SERVICES";
export const KUBE_PROXY_FIREWALL = "KUBE-PROXY-FIREWALL";
export const KUBE_SOURCE_RANGES_FIREWALL = "KUBE-SOURCE-RANGES-FIREWALL";
export const KUBE_POSTROUTING = "KUBE-POSTROUTING";
export const KUBE_MARK_MASQ = "KUBE-MARK-MASQ";
export const KUBE_NODE_PORT = "KUBE-NODE-PORT";
export const KUBE_FORWARD = "KUBE-FORWARD";
export const KUBE_LOAD_BALANCER = "KUBE-LOAD-BALANCER";
export const KUBE_IPVS_FILTER = "KUBE-IPVS-FILTER";
export const KUBE_IPVS_OUT_FILTER = "KUBE-IPVS-OUT-FILTER";

/** The dummy interface that holds the service addresses IPVS answers for. */
export const DEFAULT_DUMMY_DEVICE = "kube-ipvs0";

/** The default scheduler (--ipvs-scheduler ""). */
export const DEFAULT_SCHEDULER = "rr";

/** A table/chain pair. */
export interface TableChain {
  readonly table: "nat" | "filter";
  readonly chain: string;
}

/** The chains the IPVS proxier owns, in upstream's iptablesChains order (also the cleanup order). */
export const IPVS_CHAINS: readonly TableChain[] = Object.freeze([
  { table: "nat", chain: KUBE_SERVICES },
  { table: "nat", chain: KUBE_POSTROUTING },
  { table: "nat", chain: KUBE_NODE_PORT },
  { table: "nat", chain: KUBE_LOAD_BALANCER },
  { table: "nat", chain: KUBE_MARK_MASQ },
  { table: "filter", chain: KUBE_FORWARD },
  { table: "filter", chain: KUBE_NODE_PORT },
  { table: "filter", chain: KUBE_PROXY_FIREWALL },
  { table: "filter", chain: KUBE_SOURCE_RANGES_FIREWALL },
  { table: "filter", chain: KUBE_IPVS_FILTER },
  { table: "filter", chain: KUBE_IPVS_OUT_FILTER },
]);

/** A jump from a built-in chain into an owned chain (upstream iptablesJumpChain), prepended. */
export interface IpvsJumpChain {
  readonly table: "nat" | "filter";
  readonly from: string;
  readonly to: string;
  readonly comment: string;
}

/** Upstream's iptablesJumpChain, in its order. */
export const IPVS_JUMP_CHAINS: readonly IpvsJumpChain[] = Object.freeze([
  { table: "nat", from: "OUTPUT", to: KUBE_SERVICES, comment: "kubernetes service portals" },
  { table: "nat", from: "PREROUTING", to: KUBE_SERVICES, comment: "kubernetes service portals" },
  { table: "nat", from: "POSTROUTING", to: KUBE_POSTROUTING, comment: "kubernetes postrouting rules" },
  { table: "filter", from: "FORWARD", to: KUBE_FORWARD, comment: "kubernetes forwarding rules" },
  { table: "filter", from: "INPUT", to: KUBE_NODE_PORT, comment: "kubernetes health check rules" },
  { table: "filter", from: "INPUT", to: KUBE_PROXY_FIREWALL, comment: "kube-proxy firewall rules" },
  { table: "filter", from: "FORWARD", to: KUBE_PROXY_FIREWALL, comment: "kube-proxy firewall rules" },
  { table: "filter", from: "INPUT", to: KUBE_IPVS_FILTER, comment: "kubernetes ipvs access filter" },
  { table: "filter", from: "OUTPUT", to: KUBE_IPVS_OUT_FILTER, comment: "kubernetes ipvs access filter" },
]);

/** Upstream's iptablesJumpChain as the iptables backend's jump rules (prepended, with their comment). */
export const IPVS_JUMP_RULES: readonly JumpRule[] = Object.freeze(
  IPVS_JUMP_CHAINS.map((j) => ({
    table: j.table,
    fromChain: j.from,
    toChain: j.to,
    extraArgs: [],
    comment: j.comment,
  })),
);

/** One "-m set --match-set <set> <matchType> -j <to>" rule written when the set is not empty. */
export interface IpsetChainRule {
  readonly set: string;
  readonly table: "nat" | "filter";
  readonly from: string;
  readonly to: string;
  readonly matchType: string;
  readonly protocol: "" | "tcp" | "udp" | "sctp";
}

/**
 * Upstream's ipsetWithIptablesChain, in its order (the Local node-port sets come before the others so
 * their RETURN wins).
 */
export const IPSET_CHAIN_RULES: readonly IpsetChainRule[] = Object.freeze([
  {
    set: KUBE_LOOP_BACK_SET,
    table: "nat",
    from: KUBE_POSTROUTING,
    to: "MASQUERADE",
    matchType: "dst,dst,src",
    protocol: "",
  },
  {
    set: KUBE_LOAD_BALANCER_SET,
    table: "nat",
    from: KUBE_SERVICES,
    to: KUBE_LOAD_BALANCER,
    matchType: "dst,dst",
    protocol: "",
  },
  {
    set: KUBE_LOAD_BALANCER_LOCAL_SET,
    table: "nat",
    from: KUBE_LOAD_BALANCER,
    to: "RETURN",
    matchType: "dst,dst",
    protocol: "",
  },
  {
    set: KUBE_NODE_PORT_LOCAL_TCP_SET,
    table: "nat",
    from: KUBE_NODE_PORT,
    to: "RETURN",
    matchType: "dst",
    protocol: "tcp",
  },
  {
    set: KUBE_NODE_PORT_TCP_SET,
    table: "nat",
    from: KUBE_NODE_PORT,
    to: KUBE_MARK_MASQ,
    matchType: "dst",
    protocol: "tcp",
  },
  {
    set: KUBE_NODE_PORT_LOCAL_UDP_SET,
    table: "nat",
    from: KUBE_NODE_PORT,
    to: "RETURN",
    matchType: "dst",
    protocol: "udp",
  },
  {
    set: KUBE_NODE_PORT_UDP_SET,
    table: "nat",
    from: KUBE_NODE_PORT,
    to: KUBE_MARK_MASQ,
    matchType: "dst",
    protocol: "udp",
  },
  {
    set: KUBE_NODE_PORT_LOCAL_SCTP_SET,
    table: "nat",
    from: KUBE_NODE_PORT,
    to: "RETURN",
    matchType: "dst,dst",
    protocol: "sctp",
  },
  {
    set: KUBE_NODE_PORT_SCTP_SET,
    table: "nat",
    from: KUBE_NODE_PORT,
    to: KUBE_MARK_MASQ,
    matchType: "dst,dst",
    protocol: "sctp",
  },
  {
    set: KUBE_LOAD_BALANCER_FW_SET,
    table: "filter",
    from: KUBE_PROXY_FIREWALL,
    to: KUBE_SOURCE_RANGES_FIREWALL,
    matchType: "dst,dst",
    protocol: "",
  },
  {
    set: KUBE_LOAD_BALANCER_SOURCE_CIDR_SET,
    table: "filter",
    from: KUBE_SOURCE_RANGES_FIREWALL,
    to: "RETURN",
    matchType: "dst,dst,src",
    protocol: "",
  },
  {
    set: KUBE_LOAD_BALANCER_SOURCE_IP_SET,
    table: "filter",
    from: KUBE_SOURCE_RANGES_FIREWALL,
    to: "RETURN",
    matchType: "dst,dst,src",
    protocol: "",
  },
]);
