/**
 * Service change tracking (upstream pkg/proxy/servicechangetracker.go): Service events accumulate as
 * <previous, current> ServicePort maps per Service until the proxier applies them to its ServicePortMap
 * at the start of a sync. Applying costs O(changed Services), not O(all Services).
 */
import { namespacedName, type Service } from "../k8s/objects.ts";
import { type IPFamily, type ServicePortInfo, servicePortKey } from "./types.ts";
import { servicePortsFromService, type Warn } from "./service_port.ts";

/** The ServicePorts of one Service, keyed by servicePortKey. */
type PortsOfService = Map<string, ServicePortInfo>;

/** The accumulated change of one Service: its ports before the first pending event and after the last. */
export interface ServiceChange {
  previous: Map<string, ServicePortInfo>;
  current: Map<string, ServicePortInfo>;
}

/** Options of a ServiceChangeTracker. */
export interface ServiceChangeTrackerOptions {
  /** The family of the proxier this tracker feeds. */
  readonly ipFamily: IPFamily;
  /** Receives one line per invalid Service/port/entry (see servicePortsFromService). */
  readonly warn: Warn;
}

/** Pending, not yet applied changes to Services, keyed by "ns/name". */
export class ServiceChangeTracker {
  readonly ipFamily: IPFamily;
  readonly #warn: Warn;
  #items = new Map<string, ServiceChange>();
  #changesTotal = 0;

  constructor(options: ServiceChangeTrackerOptions) {
    this.ipFamily = options.ipFamily;
    this.#warn = options.warn;
  }

  /**
   * Records a Service add (previous null), update, or delete (current null). Returns true when the
   * tracker holds changes that need a sync, whether or not this call caused them (upstream semantics).
   */
  update(previous: Service | null, current: Service | null): boolean {
    if (previous === null && current === null) return false;
    const svc = (current ?? previous)!;
    this.#changesTotal++;
    const key = serviceKey(svc);
    let change = this.#items.get(key);
    if (change === undefined) {
      // The previous object was validated (and warned about) when it was current: stay quiet now.
      change = { previous: this.#toPortMap(previous, () => {}), current: new Map() };
      this.#items.set(key, change);
    }
    change.current = this.#toPortMap(current, this.#warn);
    if (portMapsEqual(change.previous, change.current)) this.#items.delete(key);
    return this.#items.size > 0;
  }

  /** Number of Services with pending changes (kubeproxy_sync_proxy_rules_service_changes_pending). */
  pendingChanges(): number {
    return this.#items.size;
  }

  /** "ns/name" of the Services with pending changes. */
  pendingServices(): Set<string> {
    return new Set(this.#items.keys());
  }

  /** Number of update() calls so far (kubeproxy_sync_proxy_rules_service_changes_total). */
  changesTotal(): number {
    return this.#changesTotal;
  }

  /** Hands the pending changes over (sorted by "ns/name" for deterministic results) and forgets them. */
  checkout(): Array<[string, ServiceChange]> {
    const out = [...this.#items].sort((a, b) => compareStrings(a[0], b[0]));
    this.#items = new Map();
    return out;
  }

  #toPortMap(svc: Service | null, warn: Warn): PortsOfService {
    const m: PortsOfService = new Map();
    if (svc === null) return m;
    for (const info of servicePortsFromService(svc, this.ipFamily, warn)) {
      m.set(servicePortKey(info.name), info);
    }
    return m;
  }
}

/** What ServicePortMap.apply changed (upstream UpdateServiceMapResult). */
export interface UpdateServiceMapResult {
  /** servicePortKeys of every port of every Service added, updated or deleted since the last apply. */
  readonly updatedServices: Set<string>;
  /** "ns/name" of those Services. */
  readonly changedServices: Set<string>;
  /**
   * Cluster IPs of UDP ServicePorts that were removed (the Service deleted or the port dropped):
   * conntrack entries to them are stale.
   */
  readonly deletedUDPClusterIPs: Set<string>;
}

/** The proxier's current ServicePorts, keyed by servicePortKey (upstream ServicePortMap). */
export class ServicePortMap extends Map<string, ServicePortInfo> {
  /** Applies and clears the tracker's pending changes; returns what changed. */
  apply(tracker: ServiceChangeTracker): UpdateServiceMapResult {
    const result: UpdateServiceMapResult = {
      updatedServices: new Set(),
      changedServices: new Set(),
      deletedUDPClusterIPs: new Set(),
    };
    for (const [nn, change] of tracker.checkout()) {
      result.changedServices.add(nn);
      for (const key of change.previous.keys()) result.updatedServices.add(key);
      for (const [key, info] of change.current) {
        result.updatedServices.add(key);
        this.set(key, info);
      }
      // Ports present before and not now are removed; ports present in both were just overwritten.
      for (const key of change.previous.keys()) {
        if (change.current.has(key)) continue;
        const old = this.get(key);
        if (old === undefined) continue;
        if (old.protocol === "UDP") result.deletedUDPClusterIPs.add(old.clusterIP);
        this.delete(key);
      }
    }
    return result;
  }

  /** healthCheckNodePort of every Service that has one, keyed by "ns/name". */
  healthCheckNodePorts(): Map<string, number> {
    const out = new Map<string, number>();
    for (const info of this.values()) {
      if (info.healthCheckNodePort !== 0) {
        out.set(namespacedName(info.name.namespace, info.name.name), info.healthCheckNodePort);
      }
    }
    return out;
  }
}

/** Tracker key of a Service: its "ns/name" (as given; invalid names map to no ports anyway). */
function serviceKey(svc: Service): string {
  const meta = typeof svc === "object" && svc !== null ? svc.metadata : undefined;
  return namespacedName(String(meta?.namespace ?? ""), String(meta?.name ?? ""));
}

/** Plain code-unit order, as Go's string comparison (no locale). */
function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

function arraysEqual(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

/** Deep equality of two ServicePortInfos (upstream uses reflect.DeepEqual). */
export function servicePortInfoEqual(a: ServicePortInfo, b: ServicePortInfo): boolean {
  return a.name.namespace === b.name.namespace && a.name.name === b.name.name &&
    a.name.port === b.name.port && a.name.protocol === b.name.protocol &&
    a.clusterIP === b.clusterIP && a.port === b.port && a.protocol === b.protocol &&
    a.nodePort === b.nodePort && a.stickyMaxAgeSeconds === b.stickyMaxAgeSeconds &&
    a.externalPolicyLocal === b.externalPolicyLocal && a.internalPolicyLocal === b.internalPolicyLocal &&
    a.healthCheckNodePort === b.healthCheckNodePort &&
    arraysEqual(a.externalIPs, b.externalIPs) && arraysEqual(a.loadBalancerVIPs, b.loadBalancerVIPs) &&
    arraysEqual(a.loadBalancerSourceRanges, b.loadBalancerSourceRanges);
}

function portMapsEqual(a: PortsOfService, b: PortsOfService): boolean {
  if (a.size !== b.size) return false;
  for (const [k, v] of a) {
    const w = b.get(k);
    if (w === undefined || !servicePortInfoEqual(v, w)) return false;
  }
  return true;
}
