/**
 * Turns a synthetic cluster into what the proxier renders from, the way the proxier does it: Service and
 * EndpointSlice events through the change trackers into a ServicePortMap / EndpointsMap, then a
 * RenderInput with the settings the benchmarked agent runs with (IPv4, ClusterCIDR local detection,
 * masquerade bit 14, all node addresses for NodePorts). Also the one-endpoint change the partial-sync
 * benchmarks apply.
 */
import type { EndpointSlice } from "../lib/k8s/objects.ts";
import { ServiceChangeTracker, ServicePortMap } from "../lib/proxy/service_change_tracker.ts";
import { EndpointsChangeTracker, EndpointsMap } from "../lib/proxy/endpoints_change_tracker.ts";
import { newDetectLocalByCIDR } from "../lib/proxy/iptables/local_detector.ts";
import type { RenderInput } from "../lib/proxy/iptables/render/render.ts";
import type { SyntheticCluster } from "./synthetic_cluster.ts";

/** The pod/cluster CIDR of the synthetic cluster (its endpoints live in 10/8); the agent gets the same. */
export const BENCH_CLUSTER_CIDR = "10.0.0.0/8";
/** Node addresses the renderer sees (loopback plus one node IP, as the agent in a bare netns would). */
export const BENCH_NODE_IPS: readonly string[] = Object.freeze(["127.0.0.1", "192.0.2.10"]);

/** The proxier-side state of one family, built from API objects. */
export interface ClusterModel {
  readonly nodeName: string;
  readonly nodeLabels: Record<string, string>;
  readonly services: ServicePortMap;
  readonly endpoints: EndpointsMap;
  readonly serviceTracker: ServiceChangeTracker;
  readonly endpointsTracker: EndpointsChangeTracker;
}

/** Counts of a built model. */
export interface ModelCounts {
  readonly services: number;
  readonly servicePorts: number;
  readonly endpoints: number;
}

const quiet = () => {};

/** Feeds every Service and EndpointSlice through fresh change trackers and applies them (a full list). */
export function buildClusterModel(cluster: SyntheticCluster): ClusterModel {
  const nodeName = cluster.node.metadata?.name ?? "bench-node";
  const serviceTracker = new ServiceChangeTracker({ ipFamily: "IPv4", warn: quiet });
  const endpointsTracker = new EndpointsChangeTracker({ ipFamily: "IPv4", nodeName, warn: quiet });
  for (const s of cluster.services) serviceTracker.update(null, s);
  for (const e of cluster.endpointSlices) endpointsTracker.endpointSliceUpdate(e, false);
  const services = new ServicePortMap();
  const endpoints = new EndpointsMap();
  services.apply(serviceTracker);
  endpoints.apply(endpointsTracker);
  return {
    nodeName,
    nodeLabels: { ...(cluster.node.metadata?.labels ?? {}) },
    services,
    endpoints,
    serviceTracker,
    endpointsTracker,
  };
}

/** Service, service-port and endpoint counts of a model. */
export function modelCounts(cluster: SyntheticCluster, model: ClusterModel): ModelCounts {
  let endpoints = 0;
  for (const eps of model.endpoints.values()) endpoints += eps.length;
  return { services: cluster.services.length, servicePorts: model.services.size, endpoints };
}

/** The RenderInput the agent's proxier would build for this model. */
export function renderInputFor(
  model: ClusterModel,
  sync: {
    full: boolean;
    changedServices?: ReadonlySet<string>;
    existingNatChains?: ReadonlySet<string> | null;
  },
): RenderInput {
  return {
    family: "IPv4",
    services: model.services,
    endpoints: model.endpoints,
    nodeName: model.nodeName,
    nodeLabels: model.nodeLabels,
    primaryNodeIP: BENCH_NODE_IPS[1],
    nodeIPs: BENCH_NODE_IPS,
    masqueradeAll: false,
    masqueradeBit: 14,
    localhostNodePorts: true,
    nodePortAddresses: [],
    localDetector: newDetectLocalByCIDR(BENCH_CLUSTER_CIDR),
    features: { randomFully: true, nfacct: false, dropInvalid: true },
    full: sync.full,
    changedServices: sync.changedServices ?? new Set(),
    existingNatChains: sync.existingNatChains ?? null,
  };
}

/**
 * The EndpointSlice of Service `index` with its last endpoint's address moved to a fresh address
 * (`generation` makes successive changes distinct): one endpoint removed, one added, everything else
 * equal. The resourceVersion is bumped so trackers and the test apiserver see a real update.
 */
export function oneEndpointChange(cluster: SyntheticCluster, index: number, generation = 1): EndpointSlice {
  const slice = cluster.endpointSlices[index];
  if (slice === undefined) throw new RangeError(`oneEndpointChange: no EndpointSlice at index ${index}`);
  const endpoints = slice.endpoints ?? [];
  if (endpoints.length === 0) throw new Error(`oneEndpointChange: EndpointSlice ${index} has no endpoints`);
  const last = endpoints[endpoints.length - 1];
  // 11/8 is outside the generator's endpoint range (10/8), so the new address is unique in the cluster.
  const n = index * 64 + (generation % 64);
  const address = `11.${(n >> 16) & 255}.${(n >> 8) & 255}.${n & 255}`;
  return {
    ...slice,
    metadata: {
      ...slice.metadata,
      resourceVersion: String(Number(slice.metadata?.resourceVersion ?? "0") + generation * 10_000_000),
    },
    endpoints: [...endpoints.slice(0, -1), { ...last, addresses: [address] }],
  };
}

/** The index of a Service whose one-endpoint change is representative (a plain ClusterIP, one port). */
export function plainServiceIndex(cluster: SyntheticCluster): number {
  const mid = Math.floor(cluster.services.length / 2);
  for (let k = 0; k < cluster.services.length; k++) {
    const i = (mid + k) % cluster.services.length;
    const spec = cluster.services[i].spec;
    if (
      spec?.type === "ClusterIP" && (spec.ports?.length ?? 0) === 1 && !spec.externalIPs?.length &&
      spec.internalTrafficPolicy !== "Local" && spec.sessionAffinity !== "ClientIP"
    ) return i;
  }
  return mid;
}
