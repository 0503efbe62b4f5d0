/**
 * The nftables renderer's input for a synthetic cluster model (bench/cluster_model.ts), with the settings
 * the benchmarked agent runs with (IPv4, ClusterCIDR local detection, masquerade bit 14, NodePorts on all
 * node addresses), so the nftables figures are for the same cluster as the iptables ones.
 */
import { newNodePortAddresses } from "../lib/proxy/nodeport_addresses.ts";
import type { NftRenderInput } from "../lib/proxy/nftables/render/render.ts";
import { BENCH_CLUSTER_CIDR, BENCH_NODE_IPS, type ClusterModel } from "./cluster_model.ts";

/** The NftRenderInput of a first full sync of `model` into an empty namespace. */
export function nftRenderInputFor(model: ClusterModel): NftRenderInput {
  return {
    family: "IPv4",
    services: model.services.values(),
    endpoints: model.endpoints,
    nodeName: model.nodeName,
    nodeLabels: model.nodeLabels,
    nodeIP: BENCH_NODE_IPS[1],
    nodePortAddresses: newNodePortAddresses("IPv4", []),
    localAddresses: BENCH_NODE_IPS,
    serviceCIDRs: ["172.30.0.0/15"],
    masqueradeBit: 14,
    masqueradeAll: false,
    localDetector: { mode: "CIDR", cidr: BENCH_CLUSTER_CIDR },
    firstSync: true,
    existingChains: null,
    existingSets: null,
  };
}
