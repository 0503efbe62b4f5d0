/**
 * The fixed part of kube-proxy's nftables table, written at the start of every full sync (upstream
 * setupNFTables, v1.34): the table, its base chains on the netfilter hooks, the top-level chains they
 * jump to, masquerading, the ClusterIP check, the NodePort address set, the "no endpoints" and
 * loadBalancerSourceRanges maps and the service dispatch maps. Every chain, set and map is added then
 * flushed, so the table's fixed content is recreated whatever was there before.
 */
import type { BaseChainSpec, NftFamily, NftTransaction } from "./transaction.ts";
import {
  CLUSTER_IPS_CHECK_CHAIN,
  CLUSTER_IPS_SET,
  FILTER_FORWARD_CHAIN,
  FILTER_INPUT_CHAIN,
  FILTER_OUTPUT_CHAIN,
  FILTER_OUTPUT_PRE_DNAT_CHAIN,
  FILTER_PREROUTING_PRE_DNAT_CHAIN,
  FIREWALL_CHECK_CHAIN,
  FIREWALL_IPS_MAP,
  MARK_MASQ_CHAIN,
  MASQUERADING_CHAIN,
  NAT_OUTPUT_CHAIN,
  NAT_POSTROUTING_CHAIN,
  NAT_PREROUTING_CHAIN,
  NO_ENDPOINT_NODEPORTS_MAP,
  NO_ENDPOINT_SERVICES_MAP,
  NODEPORT_ENDPOINTS_CHECK_CHAIN,
  NODEPORT_IPS_SET,
  REJECT_CHAIN,
  SERVICE_ENDPOINTS_CHECK_CHAIN,
  SERVICE_IPS_MAP,
  SERVICE_NODEPORTS_MAP,
  SERVICES_CHAIN,
} from "./names.ts";

// nft's named priorities for the ip/ip6 families.
const DSTNAT_PRIORITY = -100;
const FILTER_PRIORITY = 0;
const SRCNAT_PRIORITY = 100;

/** A base chain and its hook. */
export interface NftBaseChain extends BaseChainSpec {
  readonly name: string;
}

/**
 * Base chains (upstream nftablesBaseChains, v1.34): filtering on pre-DNAT destinations runs before DNAT;
 * the endpoint and ClusterIP checks run at the filter priority.
 */
export const NFT_BASE_CHAINS: readonly NftBaseChain[] = [
  {
    name: FILTER_PREROUTING_PRE_DNAT_CHAIN,
    type: "filter",
    hook: "prerouting",
    priority: DSTNAT_PRIORITY - 10,
  },
  { name: FILTER_OUTPUT_PRE_DNAT_CHAIN, type: "filter", hook: "output", priority: DSTNAT_PRIORITY - 10 },
  { name: FILTER_INPUT_CHAIN, type: "filter", hook: "input", priority: FILTER_PRIORITY },
  { name: FILTER_FORWARD_CHAIN, type: "filter", hook: "forward", priority: FILTER_PRIORITY },
  { name: FILTER_OUTPUT_CHAIN, type: "filter", hook: "output", priority: FILTER_PRIORITY },
  { name: NAT_PREROUTING_CHAIN, type: "nat", hook: "prerouting", priority: DSTNAT_PRIORITY },
  { name: NAT_OUTPUT_CHAIN, type: "nat", hook: "output", priority: DSTNAT_PRIORITY },
  { name: NAT_POSTROUTING_CHAIN, type: "nat", hook: "postrouting", priority: SRCNAT_PRIORITY },
];

/** A jump from a base chain to a top-level regular chain. */
export interface NftJumpChain {
  readonly dstChain: string;
  readonly srcChain: string;
  /** Match before the jump ("" for none). */
  readonly extraArgs: string;
}

/** Jumps from the base chains (upstream nftablesJumpChains, v1.34), in upstream's order. */
export const NFT_JUMP_CHAINS: readonly NftJumpChain[] = [
  { dstChain: NODEPORT_ENDPOINTS_CHECK_CHAIN, srcChain: FILTER_INPUT_CHAIN, extraArgs: "ct state new" },
  { dstChain: SERVICE_ENDPOINTS_CHECK_CHAIN, srcChain: FILTER_INPUT_CHAIN, extraArgs: "ct state new" },
  { dstChain: SERVICE_ENDPOINTS_CHECK_CHAIN, srcChain: FILTER_FORWARD_CHAIN, extraArgs: "ct state new" },
  { dstChain: SERVICE_ENDPOINTS_CHECK_CHAIN, srcChain: FILTER_OUTPUT_CHAIN, extraArgs: "ct state new" },
  { dstChain: FIREWALL_CHECK_CHAIN, srcChain: FILTER_PREROUTING_PRE_DNAT_CHAIN, extraArgs: "ct state new" },
  { dstChain: FIREWALL_CHECK_CHAIN, srcChain: FILTER_OUTPUT_PRE_DNAT_CHAIN, extraArgs: "ct state new" },
  { dstChain: SERVICES_CHAIN, srcChain: NAT_OUTPUT_CHAIN, extraArgs: "" },
  { dstChain: SERVICES_CHAIN, srcChain: NAT_PREROUTING_CHAIN, extraArgs: "" },
  { dstChain: MASQUERADING_CHAIN, srcChain: NAT_POSTROUTING_CHAIN, extraArgs: "" },
  { dstChain: CLUSTER_IPS_CHECK_CHAIN, srcChain: FILTER_FORWARD_CHAIN, extraArgs: "ct state new" },
  { dstChain: CLUSTER_IPS_CHECK_CHAIN, srcChain: FILTER_OUTPUT_CHAIN, extraArgs: "ct state new" },
];

/** What the fixed part of the table depends on. */
export interface NftSetupInput {
  readonly family: NftFamily;
  /** Masquerade mark, e.g. "0x00004000". */
  readonly masqueradeMark: string;
  /** ServiceCIDRs of this family (normalised); traffic to unallocated addresses in them is dropped. */
  readonly serviceCIDRs: readonly string[];
  /** True when every local address accepts NodePorts: no nodeport-ips set, `fib daddr type local`. */
  readonly nodePortMatchAll: boolean;
  /** Addresses accepting NodePorts when not matchAll (loopback addresses already removed). */
  readonly nodePortIPs: readonly string[];
  /**
   * First sync of this process (upstream !proxier.flushed): add+delete every base chain first, so that
   * base chains left by an older version with other hooks or priorities are recreated.
   */
  readonly recreateBaseChains: boolean;
}

/** Adds and flushes a regular chain once (upstream ensureChain). */
export function ensureChain(tx: NftTransaction, chain: string, created: Set<string>): void {
  if (created.has(chain)) return;
  created.add(chain);
  tx.addChain(chain);
  tx.flushChain(chain);
}

/**
 * The rules of the (flushed) `cluster-ips-check` chain: reject traffic to undefined ports of active
 * ClusterIPs, and drop traffic to unallocated addresses of the service CIDRs when there are any (upstream
 * writes no drop rule without ServiceCIDRs). A change of the CIDRs alone rewrites only this chain.
 */
export function writeClusterIPsCheckRules(
  tx: NftTransaction,
  family: NftFamily,
  serviceCIDRs: readonly string[],
): void {
  tx.addRule(
    CLUSTER_IPS_CHECK_CHAIN,
    `${family} daddr @${CLUSTER_IPS_SET} reject`,
    "Reject traffic to invalid ports of ClusterIPs",
  );
  if (serviceCIDRs.length > 0) {
    tx.addRule(
      CLUSTER_IPS_CHECK_CHAIN,
      `${family} daddr { ${serviceCIDRs.join(",")} } drop`,
      "Drop traffic to unallocated ClusterIPs",
    );
  }
}

/** Writes the fixed part of the table into `tx` (upstream setupNFTables). */
export function writeSetup(tx: NftTransaction, input: NftSetupInput): void {
  const ipX = input.family;
  const addrType = input.family === "ip6" ? "ipv6_addr" : "ipv4_addr";
  const noLocalhost = input.family === "ip6" ? "ip6 daddr != ::1" : "ip daddr != 127.0.0.0/8";
  const mark = input.masqueradeMark;

  tx.addTable("rules for kube-proxy");

  if (input.recreateBaseChains) {
    for (const bc of NFT_BASE_CHAINS) {
      tx.addChain(bc.name);
      tx.deleteChain(bc.name);
    }
  }
  for (const bc of NFT_BASE_CHAINS) {
    tx.addChain(bc.name, bc);
    tx.flushChain(bc.name);
  }

  const created = new Set<string>();
  for (const j of NFT_JUMP_CHAINS) {
    ensureChain(tx, j.dstChain, created);
    tx.addRule(j.srcChain, j.extraArgs === "" ? `jump ${j.dstChain}` : `${j.extraArgs} jump ${j.dstChain}`);
  }
  for (const chain of [SERVICES_CHAIN, CLUSTER_IPS_CHECK_CHAIN, MASQUERADING_CHAIN, MARK_MASQ_CHAIN]) {
    ensureChain(tx, chain, created);
  }

  tx.addRule(MARK_MASQ_CHAIN, `mark set mark or ${mark}`);
  tx.addRule(MASQUERADING_CHAIN, `mark and ${mark} == 0 return`);
  tx.addRule(MASQUERADING_CHAIN, `mark set mark xor ${mark}`);
  tx.addRule(MASQUERADING_CHAIN, "masquerade fully-random");

  tx.addSet(CLUSTER_IPS_SET, { type: addrType, comment: "Active ClusterIPs" });
  writeClusterIPsCheckRules(tx, ipX, input.serviceCIDRs);

  // "add" before "delete" so that deleting a set that does not exist is not an error.
  tx.addSet(NODEPORT_IPS_SET, { type: addrType, comment: "IPs that accept NodePort traffic" });
  if (input.nodePortMatchAll) {
    tx.deleteSet(NODEPORT_IPS_SET);
  } else {
    tx.flushSet(NODEPORT_IPS_SET);
    for (const ip of input.nodePortIPs) tx.addElement(NODEPORT_IPS_SET, [ip]);
  }

  tx.addMap(NO_ENDPOINT_SERVICES_MAP, {
    type: `${addrType} . inet_proto . inet_service : verdict`,
    comment: "vmap to drop or reject packets to services with no endpoints",
  });
  tx.addMap(NO_ENDPOINT_NODEPORTS_MAP, {
    type: "inet_proto . inet_service : verdict",
    comment: "vmap to drop or reject packets to service nodeports with no endpoints",
  });
  tx.addChain(REJECT_CHAIN, undefined, "helper for @no-endpoint-services / @no-endpoint-nodeports");
  tx.flushChain(REJECT_CHAIN);
  tx.addRule(REJECT_CHAIN, "reject");
  tx.addRule(
    SERVICE_ENDPOINTS_CHECK_CHAIN,
    `${ipX} daddr . meta l4proto . th dport vmap @${NO_ENDPOINT_SERVICES_MAP}`,
  );
  tx.addRule(
    NODEPORT_ENDPOINTS_CHECK_CHAIN,
    input.nodePortMatchAll
      ? `${noLocalhost} meta l4proto . th dport vmap @${NO_ENDPOINT_NODEPORTS_MAP}`
      : `${ipX} daddr @${NODEPORT_IPS_SET} meta l4proto . th dport vmap @${NO_ENDPOINT_NODEPORTS_MAP}`,
  );

  tx.addMap(FIREWALL_IPS_MAP, {
    type: `${addrType} . inet_proto . inet_service : verdict`,
    comment: "destinations that are subject to LoadBalancerSourceRanges",
  });
  ensureChain(tx, FIREWALL_CHECK_CHAIN, created);
  tx.addRule(FIREWALL_CHECK_CHAIN, `${ipX} daddr . meta l4proto . th dport vmap @${FIREWALL_IPS_MAP}`);

  tx.addMap(SERVICE_IPS_MAP, {
    type: `${addrType} . inet_proto . inet_service : verdict`,
    comment: "ClusterIP, ExternalIP and LoadBalancer IP traffic",
  });
  tx.addMap(SERVICE_NODEPORTS_MAP, {
    type: "inet_proto . inet_service : verdict",
    comment: "NodePort traffic",
  });
  tx.addRule(SERVICES_CHAIN, `${ipX} daddr . meta l4proto . th dport vmap @${SERVICE_IPS_MAP}`);
  tx.addRule(
    SERVICES_CHAIN,
    input.nodePortMatchAll
      ? `fib daddr type local ${noLocalhost} meta l4proto . th dport vmap @${SERVICE_NODEPORTS_MAP}`
      : `${ipX} daddr @${NODEPORT_IPS_SET} meta l4proto . th dport vmap @${SERVICE_NODEPORTS_MAP}`,
  );

  // Upstream's element storages are reset on a full sync: every container is flushed and refilled.
  tx.flushSet(CLUSTER_IPS_SET);
  for (
    const m of [
      SERVICE_IPS_MAP,
      FIREWALL_IPS_MAP,
      NO_ENDPOINT_SERVICES_MAP,
      NO_ENDPOINT_NODEPORTS_MAP,
      SERVICE_NODEPORTS_MAP,
    ]
  ) tx.flushMap(m);
}
