/**
 * Proxy-side views of Services and endpoints, in kube-proxy's vocabulary (pkg/proxy/serviceport.go,
 * endpoint.go). Built from API objects by lib/proxy/service_port.ts and endpoint_slice_cache.ts; consumed by
 * endpoint selection and by each backend's rule rendering.
 * These are plain, immutable data: the renderer reads nothing else.
 */
import { namespacedName } from "../k8s/objects.ts";

/** Transport protocol of a ServicePort, upper-case as in the API. */
export type Protocol = "TCP" | "UDP" | "SCTP";

/** IP family a proxier instance handles. */
export type IPFamily = "IPv4" | "IPv6";

/**
 * Identity of one port of one Service: upstream's ServicePortName {NamespacedName, Port, Protocol}.
 * `port` is the ServicePort's name ("" when unnamed).
 */
export interface ServicePortName {
  readonly namespace: string;
  readonly name: string;
  readonly port: string;
  readonly protocol: Protocol;
}

/** Upstream ServicePortName.String(): "ns/name" or "ns/name:port" (no protocol). */
export function servicePortNameString(n: ServicePortName): string {
  const nn = namespacedName(n.namespace, n.name);
  return n.port === "" ? nn : `${nn}:${n.port}`;
}

/** Map key for a ServicePortName: unique across protocols ("ns/name:port/TCP"). */
export function servicePortKey(n: ServicePortName): string {
  return `${servicePortNameString(n)}/${n.protocol}`;
}

/** One Service port as the proxier sees it (upstream BaseServicePortInfo), for one IP family. */
export interface ServicePortInfo {
  readonly name: ServicePortName;
  /** Cluster IP of this family (normalised). */
  readonly clusterIP: string;
  readonly port: number;
  readonly protocol: Protocol;
  /** 0 when the port has no NodePort. */
  readonly nodePort: number;
  /** Filtered to this family, normalised, deduplicated, in spec order. */
  readonly externalIPs: readonly string[];
  /** LoadBalancer ingress IPs of this family, excluding `ipMode: Proxy`, normalised. */
  readonly loadBalancerVIPs: readonly string[];
  /** Source CIDRs of this family, trimmed and normalised; invalid ones dropped. */
  readonly loadBalancerSourceRanges: readonly string[];
  /** ClientIP affinity timeout in seconds; 0 means no session affinity. */
  readonly stickyMaxAgeSeconds: number;
  /** externalTrafficPolicy=Local (only meaningful when externally accessible). */
  readonly externalPolicyLocal: boolean;
  /** internalTrafficPolicy=Local. */
  readonly internalPolicyLocal: boolean;
  /** 0 when unset or not applicable. */
  readonly healthCheckNodePort: number;
}

/** One endpoint of one ServicePort (upstream BaseEndpointInfo). */
export interface EndpointInfo {
  /** Normalised IP address. */
  readonly ip: string;
  readonly port: number;
  /** "ip:port", IPv6 bracketed ("[fd00::1]:80"): upstream net.JoinHostPort. Used in SEP hashes. */
  readonly endpoint: string;
  /** nodeName equals this proxy's node name. */
  readonly isLocal: boolean;
  readonly ready: boolean;
  readonly serving: boolean;
  readonly terminating: boolean;
  /** Zone hints (hints.forZones[].name, sorted, deduplicated), or null when the endpoint carries none. */
  readonly zoneHints: readonly string[] | null;
  /** Node hints (hints.forNodes[].name, sorted, deduplicated), or null when the endpoint carries none. */
  readonly nodeHints: readonly string[] | null;
  readonly nodeName: string;
  readonly zone: string;
}

/** True when traffic can reach the service port from outside the cluster network. */
export function externallyAccessible(svc: ServicePortInfo): boolean {
  return svc.nodePort > 0 || svc.externalIPs.length > 0 || svc.loadBalancerVIPs.length > 0;
}
