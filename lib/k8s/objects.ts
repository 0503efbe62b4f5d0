/**
 * The subset of Kubernetes API objects edgeproxy reads, as they arrive in JSON from the apiserver,
 * a manifest file or the state cache. Timestamps stay strings (RFC 3339), exactly as on the wire;
 * @kubernetes/client-node's generated types model them as Date, which raw JSON never is.
 * Every field is optional because nothing guarantees a peer sends it: validation happens in lib/model.
 */

/** metadata of any object. */
export interface ObjectMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  deletionTimestamp?: string;
  creationTimestamp?: string;
}

/** core/v1 ServicePort. */
export interface ServicePortSpec {
  name?: string;
  protocol?: string;
  port?: number;
  targetPort?: number | string;
  nodePort?: number;
  appProtocol?: string;
}

/** core/v1 Service. */
export interface Service {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
  spec?: {
    type?: string;
    clusterIP?: string;
    clusterIPs?: string[];
    ipFamilies?: string[];
    ipFamilyPolicy?: string;
    ports?: ServicePortSpec[];
    selector?: Record<string, string>;
    externalIPs?: string[];
    externalName?: string;
    loadBalancerIP?: string;
    loadBalancerSourceRanges?: string[];
    externalTrafficPolicy?: string;
    internalTrafficPolicy?: string;
    healthCheckNodePort?: number;
    sessionAffinity?: string;
    sessionAffinityConfig?: { clientIP?: { timeoutSeconds?: number } };
    trafficDistribution?: string;
  };
  status?: {
    loadBalancer?: {
      ingress?: Array<{ ip?: string; hostname?: string; ipMode?: string }>;
    };
  };
}

/** discovery.k8s.io/v1 EndpointPort. */
export interface EndpointPort {
  name?: string;
  protocol?: string;
  port?: number;
  appProtocol?: string;
}

/** discovery.k8s.io/v1 Endpoint. */
export interface Endpoint {
  addresses?: string[];
  conditions?: { ready?: boolean | null; serving?: boolean | null; terminating?: boolean | null };
  hostname?: string;
  nodeName?: string;
  zone?: string;
  hints?: { forZones?: Array<{ name?: string }>; forNodes?: Array<{ name?: string }> };
  targetRef?: { kind?: string; namespace?: string; name?: string; uid?: string };
}

/** discovery.k8s.io/v1 EndpointSlice. */
export interface EndpointSlice {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
  addressType?: string;
  endpoints?: Endpoint[] | null;
  ports?: EndpointPort[] | null;
}

/** core/v1 Node (the fields kube-proxy uses). */
export interface Node {
  apiVersion?: string;
  kind?: string;
  metadata?: ObjectMeta;
  spec?: {
    podCIDR?: string;
    podCIDRs?: string[];
    taints?: Array<{ key?: string; value?: string; effect?: string }>;
    unschedulable?: boolean;
  };
  status?: {
    addresses?: Array<{ type?: string; address?: string }>;
  };
}

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

/** The label EndpointSlices carry to name their Service. */
export const LABEL_SERVICE_NAME = "kubernetes.io/service-name";
/** Label selector upstream kube-proxy uses for Services and EndpointSlices. */
export const PROXY_LABEL_SELECTOR =
  "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";
/** EndpointSlice annotation feeding kubeproxy_network_programming_duration_seconds. */
export const ANNOTATION_LAST_CHANGE_TRIGGER_TIME = "endpoints.kubernetes.io/last-change-trigger-time";
