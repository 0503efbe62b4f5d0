import type { EndpointSlice, Node, Service, ServiceCIDR } from "../k8s/objects.ts";

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

/**
 * ServiceCIDR object events (networking.k8s.io/v1), as sources deliver them; lib/source/service_cidrs.ts
 * turns them into {@link ServiceCIDRsHandler} calls. `onServiceCIDRsSynced` is called once, after the
 * first complete list; nothing waits for it (an apiserver may not serve the API).
 */
export interface ServiceCIDRHandler {
  onServiceCIDRAdd(serviceCIDR: ServiceCIDR): void;
  onServiceCIDRUpdate(oldServiceCIDR: ServiceCIDR, serviceCIDR: ServiceCIDR): void;
  onServiceCIDRDelete(serviceCIDR: ServiceCIDR): void;
  onServiceCIDRsSynced(): void;
}

/** Upstream's config.ServiceCIDRHandler: told the complete list of service CIDRs after every change. */
export interface ServiceCIDRsHandler {
  /** Every valid CIDR of every ServiceCIDR object (both families), normalised, sorted, each once. */
  onServiceCIDRsChanged(cidrs: readonly string[]): void;
}

/**
 * Everything a source feeds. The ServiceCIDR methods are optional: only the nftables mode uses service
 * CIDRs, and a consumer without them ignores those events.
 */
export interface ProxyHandlers
  extends
    ServiceHandler,
    EndpointSliceHandler,
    NodeHandler,
    Partial<ServiceCIDRHandler>,
    Partial<ServiceCIDRsHandler> {}
