/**
 * What one watched resource is: the collection to list and watch with its selectors ({@link ResourceSpec}:
 * Services, EndpointSlices, this node's Node, ServiceCIDRs), and the handler its events go to. Shared by the reflector
 * and the poller.
 */
import {
  type EndpointSlice,
  type Node,
  PROXY_LABEL_SELECTOR,
  type Service,
  type ServiceCIDR,
} from "./objects.ts";
import type { KubeObject } from "./store.ts";

/** Which collection to list and watch, and how to recognise its objects. */
export interface ResourceSpec {
  /** Short name for logs and stats: "services", "endpointslices", "nodes". */
  resource: string;
  /** Collection path, e.g. /api/v1/services. */
  path: string;
  /** apiVersion of the objects (filled into list items, which arrive without it). */
  apiVersion: string;
  /** Expected kind; an object with another kind is skipped. */
  kind: string;
  labelSelector?: string;
  fieldSelector?: string;
}

/** Services, all namespaces, with upstream kube-proxy's label selector. */
export const SERVICES_RESOURCE: ResourceSpec = {
  resource: "services",
  path: "/api/v1/services",
  apiVersion: "v1",
  kind: "Service",
  labelSelector: PROXY_LABEL_SELECTOR,
};

/** EndpointSlices, all namespaces, with the same label selector as Services. */
export const ENDPOINTSLICES_RESOURCE: ResourceSpec = {
  resource: "endpointslices",
  path: "/apis/discovery.k8s.io/v1/endpointslices",
  apiVersion: "discovery.k8s.io/v1",
  kind: "EndpointSlice",
  labelSelector: PROXY_LABEL_SELECTOR,
};

/**
 * ServiceCIDRs (networking.k8s.io/v1, cluster-scoped, no selector): the ranges ClusterIPs are allocated
 * from, for the nftables mode's "drop traffic to unallocated ClusterIPs" rule (upstream ServiceCIDRConfig).
 */
export const SERVICECIDRS_RESOURCE: ResourceSpec = {
  resource: "servicecidrs",
  path: "/apis/networking.k8s.io/v1/servicecidrs",
  apiVersion: "networking.k8s.io/v1",
  kind: "ServiceCIDR",
};

/** The proxy's own Node (fieldSelector metadata.name=<node>). */
export function nodeResource(nodeName: string): ResourceSpec {
  return {
    resource: "nodes",
    path: "/api/v1/nodes",
    apiVersion: "v1",
    kind: "Node",
    fieldSelector: `metadata.name=${nodeName}`,
  };
}

/** Object type per resource spec, for callers that want it. */
export type ObjectOf<S extends string> = S extends "services" ? Service
  : S extends "endpointslices" ? EndpointSlice
  : S extends "nodes" ? Node
  : S extends "servicecidrs" ? ServiceCIDR
  : KubeObject;

/** What a reflector or poller calls. `onSynced` is called once, after the first complete list. */
export interface ResourceEventHandler<T> {
  onAdd(obj: T): void;
  onUpdate(oldObj: T, obj: T): void;
  onDelete(obj: T): void;
  onSynced(): void;
}
