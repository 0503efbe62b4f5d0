import type { EndpointSlice, Node, Service } from "../k8s/objects.ts";

/**
 * Service event handlers, modelled on upstream's config.ServiceHandler. Sources (apiserver watch, poll,
 * manifests, state cache) call these; the proxier implements them. `onServicesSynced` is called once,
 * when the initial list is complete.
 */
export interface ServiceHandler {
  onServiceAdd(service: Service): void;
  onServiceUpdate(oldService: Service, service: Service): void;
  onServiceDelete(service: Service): void;
  onServicesSynced(): void;
}

/** EndpointSlice event handlers, modelled on upstream's config.EndpointSliceHandler. */
export interface EndpointSliceHandler {
  onEndpointSliceAdd(slice: EndpointSlice): void;
  onEndpointSliceUpdate(oldSlice: EndpointSlice, slice: EndpointSlice): void;
  onEndpointSliceDelete(slice: EndpointSlice): void;
  onEndpointSlicesSynced(): void;
}

/** Node event handlers for the proxy's own Node, modelled on upstream's config.NodeHandler. */
export interface NodeHandler {
  onNodeAdd(node: Node): void;
  onNodeUpdate(oldNode: Node, node: Node): void;
  onNodeDelete(node: Node): void;
  onNodeSynced(): void;
}

/** Everything a source feeds. */
export interface ProxyHandlers extends ServiceHandler, EndpointSliceHandler, NodeHandler {}
