import {
  type EndpointSlice,
  namespacedName,
  type Node,
  type ObjectMeta,
  type Service,
  type ServiceCIDR,
} from "../k8s/objects.ts";
import type { ProxyHandlers } from "../proxy/handlers.ts";
import { ByNamespacedName } from "../k8s/by_name.ts";

/** Where a set of objects came from. The cache is a provisional origin: the first full list of a live source replaces it. */
export type Origin = "live" | "cache";

type Kind = "service" | "endpointSlice" | "node" | "serviceCIDR";

/** A kind held in a map (the Node is a single entry). */
type MapKind = Exclude<Kind, "node">;
type MapObject = Service | EndpointSlice | ServiceCIDR;

/** The namespace and name the store keys an object by ("" for an absent one). */
function namesOf(meta: ObjectMeta | undefined): [string, string] {
  return [meta?.namespace ?? "", meta?.name ?? ""];
}

function sameObject(a: { metadata?: ObjectMeta }, b: { metadata?: ObjectMeta }): boolean {
  const ra = a.metadata?.resourceVersion, rb = b.metadata?.resourceVersion;
  if (ra && rb && ra === rb) return true;
  return JSON.stringify(a) === JSON.stringify(b);
}

/** A point-in-time copy of everything the store holds, for the state cache. */
export interface StateSnapshot {
  services: Service[];
  endpointSlices: EndpointSlice[];
  node: Node | null;
  /** ServiceCIDRs (none when the source has none, e.g. a mode that does not watch them). */
  serviceCIDRs?: ServiceCIDR[];
}

/**
 * The merged view between sources and the proxier. Sources (apiserver, poll, manifests) feed it as
 * "live"; the state cache feeds it as "cache" when the apiserver is unreachable at start. It forwards to
 * the proxier's handlers only real changes (an add of an object it already holds becomes an update, or
 * nothing when identical), forwards each Synced callback once, and when a live source finishes its first
 * list of a kind, deletes every object of that kind that only the cache knew: objects deleted while the
 * node was offline never linger as ghosts, and objects that did not change cause no churn.
 */
export class StateStore implements ProxyHandlers {
  // The objects by key; which of them only the cache gave is kept beside (empty once a live source has
  // listed), not as an origin per entry: at 10k Services that was 20k small objects for one bit each.
  #services = new ByNamespacedName<Service>();
  #slices = new ByNamespacedName<EndpointSlice>();
  #serviceCIDRs = new ByNamespacedName<ServiceCIDR>();
  #fromCache: Record<MapKind, Set<MapObject>> = {
    service: new Set(),
    endpointSlice: new Set(),
    serviceCIDR: new Set(),
  };
  #node: { obj: Node; origin: Origin } | null = null;
  #synced = { service: false, endpointSlice: false, node: false, serviceCIDR: false };
  #liveSynced = { service: false, endpointSlice: false, node: false, serviceCIDR: false };
  #version = 0;
  #cacheLoaded = false;

  /** @param downstream the proxier (or a fan-out to several). */
  constructor(private readonly downstream: ProxyHandlers) {}

  /** Increases on every forwarded change; lets the cache writer skip writing an unchanged state. */
  get version(): number {
    return this.#version;
  }

  /**
   * True once a live source has completed its first list of Services, EndpointSlices and the Node in
   * this process's life: only from then on does the store hold a confirmed state that may be persisted.
   * ServiceCIDRs are not waited for (an apiserver may not serve them, as nothing upstream waits for them).
   */
  get liveSynced(): boolean {
    return this.#liveSynced.service && this.#liveSynced.endpointSlice && this.#liveSynced.node;
  }

  /** True from loading a cache until a live source has listed Services, EndpointSlices and the Node. */
  get servingFromCache(): boolean {
    return this.#cacheLoaded && !this.liveSynced;
  }

  /** Everything currently held, sorted by key (deterministic cache files). */
  snapshot(): StateSnapshot {
    return {
      services: this.#services.sortedBy(namespacedName),
      endpointSlices: this.#slices.sortedBy(namespacedName),
      node: this.#node?.obj ?? null,
      serviceCIDRs: this.#serviceCIDRs.sortedBy(namespacedName),
    };
  }

  /**
   * Loads a cached state as provisional objects and marks every kind synced, so the proxier programs
   * rules from it. Objects a live source already delivered, and kinds it has already listed, are left
   * alone.
   */
  loadFromCache(state: StateSnapshot): void {
    this.#cacheLoaded = true;
    // A kind a live source has already listed completely is current: cached objects of it would be ghosts.
    const live = this.#liveSynced;
    if (!live.service) { for (const s of state.services) this.#upsert("service", s, "cache"); }
    if (!live.endpointSlice) {
      for (const s of state.endpointSlices) {
        this.#upsert("endpointSlice", s, "cache");
      }
    }
    if (state.node && !this.#node && !live.node) this.#upsert("node", state.node, "cache");
    if (!live.serviceCIDR) {
      for (const c of state.serviceCIDRs ?? []) {
        this.#upsert("serviceCIDR", c, "cache");
      }
    }
    this.#markSynced("service", "cache");
    this.#markSynced("endpointSlice", "cache");
    this.#markSynced("node", "cache");
    this.#markSynced("serviceCIDR", "cache");
  }

  /** The map holding Services, EndpointSlices or ServiceCIDRs (the Node is a single entry). */
  #mapOf(kind: MapKind): ByNamespacedName<MapObject> {
    const map = kind === "service"
      ? this.#services
      : kind === "endpointSlice"
      ? this.#slices
      : this.#serviceCIDRs;
    return map as ByNamespacedName<MapObject>;
  }

  #upsert(kind: Kind, obj: Service | EndpointSlice | Node | ServiceCIDR, origin: Origin): void {
    if (kind === "node") {
      const prev = this.#node;
      if (prev && origin === "cache" && prev.origin === "live") return;
      this.#node = { obj: obj as Node, origin };
      if (!prev) this.#emit(() => this.downstream.onNodeAdd(obj as Node));
      else if (!sameObject(prev.obj, obj)) {
        this.#emit(() => this.downstream.onNodeUpdate(prev.obj, obj as Node));
      }
      return;
    }
    const map = this.#mapOf(kind);
    const cached = this.#fromCache[kind];
    const [ns, name] = namesOf(obj.metadata);
    const prev = map.get(ns, name);
    if (prev && origin === "cache" && !cached.has(prev)) return;
    map.set(ns, name, obj as MapObject);
    if (prev) cached.delete(prev);
    if (origin === "cache") cached.add(obj as MapObject);
    if (kind === "serviceCIDR") {
      const c = obj as ServiceCIDR;
      if (!prev) this.#emit(() => this.downstream.onServiceCIDRAdd?.(c));
      else if (!sameObject(prev, obj)) {
        this.#emit(() => this.downstream.onServiceCIDRUpdate?.(prev as ServiceCIDR, c));
      }
    } else if (kind === "service") {
      if (!prev) this.#emit(() => this.downstream.onServiceAdd(obj as Service));
      else if (!sameObject(prev, obj)) {
        this.#emit(() => this.downstream.onServiceUpdate(prev as Service, obj as Service));
      }
    } else {
      if (!prev) this.#emit(() => this.downstream.onEndpointSliceAdd(obj as EndpointSlice));
      else if (!sameObject(prev, obj)) {
        this.#emit(() => this.downstream.onEndpointSliceUpdate(prev as EndpointSlice, obj as EndpointSlice));
      }
    }
  }

  #remove(kind: Kind, obj: { metadata?: ObjectMeta }): void {
    if (kind === "node") {
      const prev = this.#node;
      if (!prev) return;
      this.#node = null;
      this.#emit(() => this.downstream.onNodeDelete(prev.obj));
      return;
    }
    const map = this.#mapOf(kind);
    const [ns, name] = namesOf(obj.metadata);
    const prev = map.get(ns, name);
    if (!prev) return;
    map.delete(ns, name);
    this.#fromCache[kind].delete(prev);
    if (kind === "service") this.#emit(() => this.downstream.onServiceDelete(prev as Service));
    else if (kind === "serviceCIDR") {
      this.#emit(() => this.downstream.onServiceCIDRDelete?.(prev as ServiceCIDR));
    } else this.#emit(() => this.downstream.onEndpointSliceDelete(prev as EndpointSlice));
  }

  #markSynced(kind: Kind, origin: Origin): void {
    if (origin === "live" && !this.#liveSynced[kind]) {
      this.#liveSynced[kind] = true;
      // The live list is complete: whatever only the cache knew no longer exists.
      if (kind === "node") {
        if (this.#node?.origin === "cache") this.#remove("node", this.#node.obj);
      } else {
        for (const o of [...this.#fromCache[kind]]) this.#remove(kind, o);
      }
    }
    if (this.#synced[kind]) return;
    this.#synced[kind] = true;
    if (kind === "service") this.downstream.onServicesSynced();
    else if (kind === "endpointSlice") this.downstream.onEndpointSlicesSynced();
    else if (kind === "serviceCIDR") this.downstream.onServiceCIDRsSynced?.();
    else this.downstream.onNodeSynced();
  }

  #emit(fn: () => void): void {
    this.#version++;
    fn();
  }

  /** @inheritdoc */
  onServiceAdd(service: Service): void {
    this.#upsert("service", service, "live");
  }
  /** @inheritdoc */
  onServiceUpdate(_old: Service, service: Service): void {
    this.#upsert("service", service, "live");
  }
  /** @inheritdoc */
  onServiceDelete(service: Service): void {
    this.#remove("service", service);
  }
  /** @inheritdoc */
  onServicesSynced(): void {
    this.#markSynced("service", "live");
  }
  /** @inheritdoc */
  onEndpointSliceAdd(slice: EndpointSlice): void {
    this.#upsert("endpointSlice", slice, "live");
  }
  /** @inheritdoc */
  onEndpointSliceUpdate(_old: EndpointSlice, slice: EndpointSlice): void {
    this.#upsert("endpointSlice", slice, "live");
  }
  /** @inheritdoc */
  onEndpointSliceDelete(slice: EndpointSlice): void {
    this.#remove("endpointSlice", slice);
  }
  /** @inheritdoc */
  onEndpointSlicesSynced(): void {
    this.#markSynced("endpointSlice", "live");
  }
  /** @inheritdoc */
  onNodeAdd(node: Node): void {
    this.#upsert("node", node, "live");
  }
  /** @inheritdoc */
  onNodeUpdate(_old: Node, node: Node): void {
    this.#upsert("node", node, "live");
  }
  /** @inheritdoc */
  onNodeDelete(node: Node): void {
    this.#remove("node", node);
  }
  /** @inheritdoc */
  onNodeSynced(): void {
    this.#markSynced("node", "live");
  }
  /** @inheritdoc */
  onServiceCIDRAdd(serviceCIDR: ServiceCIDR): void {
    this.#upsert("serviceCIDR", serviceCIDR, "live");
  }
  /** @inheritdoc */
  onServiceCIDRUpdate(_old: ServiceCIDR, serviceCIDR: ServiceCIDR): void {
    this.#upsert("serviceCIDR", serviceCIDR, "live");
  }
  /** @inheritdoc */
  onServiceCIDRDelete(serviceCIDR: ServiceCIDR): void {
    this.#remove("serviceCIDR", serviceCIDR);
  }
  /** @inheritdoc */
  onServiceCIDRsSynced(): void {
    this.#markSynced("serviceCIDR", "live");
  }
}
