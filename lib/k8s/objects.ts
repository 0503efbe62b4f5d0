/**
 * The Kubernetes API objects edgeproxy reads, as they arrive in JSON from the apiserver, a manifest file or
 * the state cache: @kubernetes/client-node's generated models (V1Service, V1EndpointSlice, V1Node, V1ServiceCIDR) seen
 * through {@link Wire}, because those models describe client-node's deserialised objects, not the wire:
 * their timestamps are Date (raw JSON never is) and some fields are required that a peer may omit.
 * Validation happens where each is consumed: lib/proxy/service_port.ts (Services),
 * lib/proxy/endpoint_slice_cache.ts (EndpointSlices), lib/source/node_shape.ts (the Node),
 * lib/source/service_cidrs.ts (ServiceCIDRs).
 */
import type {
  DiscoveryV1EndpointPort,
  V1Endpoint,
  V1EndpointSlice,
  V1Node,
  V1ObjectMeta,
  V1Service,
  V1ServiceCIDR,
  V1ServicePort,
} from "@kubernetes/client-node";

/**
 * A client-node model as it arrives in JSON: every field optional (nothing guarantees a peer sends it),
 * timestamps strings (client-node types them as Date, which raw JSON never is), string maps as they are,
 * and a *bool may be null.
 */
export type Wire<T> = T extends Date ? string
  : T extends boolean ? boolean | null
  : T extends Array<infer U> ? Array<Wire<U>>
  : T extends object ? (string extends keyof T ? T : { [K in keyof T]?: Wire<T[K]> })
  : T;

/** metadata of any object. */
export type ObjectMeta = Wire<V1ObjectMeta>;
/** core/v1 Service. */
export type Service = Wire<V1Service>;
/** core/v1 ServicePort. */
export type ServicePortSpec = Wire<V1ServicePort>;
/** discovery.k8s.io/v1 Endpoint. */
export type Endpoint = Wire<V1Endpoint>;
/** discovery.k8s.io/v1 EndpointPort. */
export type EndpointPort = Wire<DiscoveryV1EndpointPort>;
/** discovery.k8s.io/v1 EndpointSlice; `endpoints` and `ports` have no omitempty in Go, so null arrives. */
export type EndpointSlice = Omit<Wire<V1EndpointSlice>, "endpoints" | "ports"> & {
  endpoints?: Endpoint[] | null;
  ports?: EndpointPort[] | null;
};
/** core/v1 Node. */
export type Node = Wire<V1Node>;
/** networking.k8s.io/v1 ServiceCIDR (cluster-scoped; spec.cidrs: at most one per family). */
export type ServiceCIDR = Wire<V1ServiceCIDR>;

/** A List response (`kind: ServiceList`, `List`, ...). */
export interface ObjectList<T> {
  apiVersion?: string;
  kind?: string;
  metadata?: { resourceVersion?: string; continue?: string; remainingItemCount?: number };
  items?: T[];
}

/** meta/v1 Status, as returned with errors and in watch ERROR events. */
export interface Status {
  apiVersion?: string;
  kind?: "Status";
  status?: string;
  message?: string;
  reason?: string;
  code?: number;
  metadata?: { resourceVersion?: string };
}

/** One line of a watch stream. */
export interface WatchEvent<T> {
  type: "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR";
  object: T | Status;
}

/**
 * "namespace/name", upstream's types.NamespacedName.String(): both parts always, so an empty namespace
 * gives "/name". The key of Services, EndpointSlices and service ports in the proxy's maps. (The object
 * store keys cluster-scoped objects by name alone: see objectKey in ./store.ts.)
 */
export function namespacedName(namespace: string, name: string): string {
  return `${namespace}/${name}`;
}

/** The label EndpointSlices carry to name their Service. */
export const LABEL_SERVICE_NAME = "kubernetes.io/service-name";
/** Label selector upstream kube-proxy uses for Services and EndpointSlices. */
export const PROXY_LABEL_SELECTOR =
  "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";
/** EndpointSlice annotation feeding kubeproxy_network_programming_duration_seconds. */
export const ANNOTATION_LAST_CHANGE_TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time";
