/**
 * Endpoint selection for one service port, as upstream CategorizeEndpoints (pkg/proxy/topology.go):
 * which endpoints the Cluster-policy and Local-policy chains use, with the serving+terminating fallback
 * (separately for each) and topology hints (PreferSameNode, then PreferSameZone) applied only when every
 * ready endpoint carries them.
 */
import type { EndpointInfo, ServicePortInfo } from "./types.ts";
import { externallyAccessible } from "./types.ts";

/** Node label holding the node's zone (v1.LabelTopologyZone). */
export const LABEL_TOPOLOGY_ZONE = "topology.kubernetes.io/zone";

/** Result of categorizeEndpoints. */
export interface CategorizedEndpoints {
  /** Endpoints for Cluster traffic policy; empty when the service port never uses Cluster policy. */
  readonly clusterEndpoints: readonly EndpointInfo[];
  /** Endpoints for Local traffic policy; empty when the service port never uses Local policy. */
  readonly localEndpoints: readonly EndpointInfo[];
  /** Union of the two: every endpoint that gets a KUBE-SEP chain on this node (input order). */
  readonly allReachableEndpoints: readonly EndpointInfo[];
  /** True when some node in the cluster has a usable endpoint (even if none is reachable from here). */
  readonly hasAnyEndpoints: boolean;
}

/** Options mirroring upstream feature gates. */
export interface CategorizeOptions {
  /** PreferSameTrafficDistribution gate (beta, on by default since v1.34): honour hints.forNodes. */
  readonly preferSameTrafficDistribution?: boolean;
}

/** Upstream UsesClusterEndpoints: iTP=Cluster, or any external destination (for short-circuiting). */
export function usesClusterEndpoints(svc: ServicePortInfo): boolean {
  return !svc.internalPolicyLocal || externallyAccessible(svc);
}

/** Upstream UsesLocalEndpoints: iTP=Local, or eTP=Local with an external destination. */
export function usesLocalEndpoints(svc: ServicePortInfo): boolean {
  return svc.internalPolicyLocal || (svc.externalPolicyLocal && externallyAccessible(svc));
}

type TopologyMode = "" | "PreferSameNode" | "PreferSameZone";

function hasHint(hints: readonly string[] | null, value: string): boolean {
  return hints !== null && hints.includes(value);
}

/** Upstream topologyModeFromHints: looks only at ready endpoints. */
function topologyModeFromHints(
  endpoints: readonly EndpointInfo[],
  nodeName: string,
  zone: string,
  preferSameNode: boolean,
): TopologyMode {
  let hasEndpointForNode = false;
  let allHaveNodeHints = true;
  let hasEndpointForZone = false;
  let allHaveZoneHints = true;
  for (const ep of endpoints) {
    if (!ep.ready) continue;
    if (ep.nodeHints === null || ep.nodeHints.length === 0) allHaveNodeHints = false;
    else if (ep.nodeHints.includes(nodeName)) hasEndpointForNode = true;
    if (ep.zoneHints === null || ep.zoneHints.length === 0) allHaveZoneHints = false;
    else if (ep.zoneHints.includes(zone)) hasEndpointForZone = true;
  }
  if (preferSameNode && allHaveNodeHints && hasEndpointForNode) return "PreferSameNode";
  if (allHaveZoneHints && hasEndpointForZone) return "PreferSameZone";
  return "";
}

function availableForTopology(ep: EndpointInfo, mode: TopologyMode, nodeName: string, zone: string): boolean {
  switch (mode) {
    case "":
      return true;
    case "PreferSameNode":
      return hasHint(ep.nodeHints, nodeName);
    case "PreferSameZone":
      return hasHint(ep.zoneHints, zone);
  }
}

const EMPTY: readonly EndpointInfo[] = Object.freeze([]);

/**
 * Splits a service port's endpoints into the sets its iptables chains use on this node.
 * `endpoints` is the service port's full endpoint list (sorted by "ip:port", as the endpoint tracker
 * keeps it); `nodeName` is this node; `nodeLabels` its labels (for the zone).
 */
export function categorizeEndpoints(
  endpoints: readonly EndpointInfo[],
  svc: ServicePortInfo,
  nodeName: string,
  nodeLabels: Readonly<Record<string, string>>,
  options: CategorizeOptions = {},
): CategorizedEndpoints {
  const preferSameNode = options.preferSameTrafficDistribution ?? true;
  let topologyMode: TopologyMode = "";
  let useServingTerminating = false;
  let hasAnyEndpoints = false;
  let clusterEndpoints: readonly EndpointInfo[] = EMPTY;
  let localEndpoints: readonly EndpointInfo[] = EMPTY;

  const usesCluster = usesClusterEndpoints(svc);
  if (usesCluster) {
    const zone = Object.hasOwn(nodeLabels, LABEL_TOPOLOGY_ZONE) ? nodeLabels[LABEL_TOPOLOGY_ZONE] : "";
    topologyMode = topologyModeFromHints(endpoints, nodeName, zone, preferSameNode);
    clusterEndpoints = endpoints.filter((ep) =>
      ep.ready && availableForTopology(ep, topologyMode, nodeName, zone)
    );
    // No ready endpoint anywhere (topology would have been dropped otherwise): fall back to
    // serving+terminating ones, ignoring topology, to avoid dropping connections.
    if (clusterEndpoints.length === 0) {
      clusterEndpoints = endpoints.filter((ep) => ep.serving && ep.terminating);
    }
    if (clusterEndpoints.length > 0) hasAnyEndpoints = true;
  }

  if (!usesLocalEndpoints(svc)) {
    return { clusterEndpoints, localEndpoints, allReachableEndpoints: clusterEndpoints, hasAnyEndpoints };
  }

  let hasLocalReady = false;
  let hasLocalServingTerminating = false;
  for (const ep of endpoints) {
    if (ep.ready) {
      hasAnyEndpoints = true;
      if (ep.isLocal) hasLocalReady = true;
    } else if (ep.serving && ep.terminating) {
      hasAnyEndpoints = true;
      if (ep.isLocal) hasLocalServingTerminating = true;
    }
  }
  if (hasLocalReady) {
    localEndpoints = endpoints.filter((ep) => ep.isLocal && ep.ready);
  } else if (hasLocalServingTerminating) {
    useServingTerminating = true;
    localEndpoints = endpoints.filter((ep) => ep.isLocal && ep.serving && ep.terminating);
  }

  if (!usesCluster) {
    return { clusterEndpoints, localEndpoints, allReachableEndpoints: localEndpoints, hasAnyEndpoints };
  }
  if (topologyMode === "" && !useServingTerminating) {
    // clusterEndpoints holds every ready endpoint, so it is a superset of the (ready) local ones.
    return { clusterEndpoints, localEndpoints, allReachableEndpoints: clusterEndpoints, hasAnyEndpoints };
  }
  // Merge: upstream builds this from a map (random order); we keep the input order instead.
  const reachable = new Set<EndpointInfo>(clusterEndpoints);
  for (const ep of localEndpoints) reachable.add(ep);
  const seen = new Set<string>();
  const allReachableEndpoints = endpoints.filter((ep) => {
    if (!reachable.has(ep)) return false;
    const at = ep.endpoint;
    if (seen.has(at)) return false;
    seen.add(at);
    return true;
  });
  return { clusterEndpoints, localEndpoints, allReachableEndpoints, hasAnyEndpoints };
}
