/**
 * Endpoints change tracking (upstream pkg/proxy/endpointschangetracker.go): EndpointSlice events go
 * into an EndpointSliceCache; at the start of a sync the proxier applies the pending changes to its
 * EndpointsMap and learns which ServicePorts changed, which UDP endpoints went away (stale conntrack
 * entries) and which UDP ServicePorts got their first serving endpoint. Applying costs O(slices of the
 * changed Services).
 */
import type { EndpointSlice } from "../k8s/objects.ts";
import { ANNOTATION_LAST_CHANGE_TRIGGER_TIME, namespacedName } from "../k8s/objects.ts";
import type { EndpointInfo, IPFamily, ServicePortName } from "./types.ts";
import {
  type EndpointsChange,
  EndpointSliceCache,
  endpointSliceKeys,
  type ServiceEndpoints,
} from "./endpoint_slice_cache.ts";
import { formatValue, objectRef, type Warn } from "./service_port.ts";

/** Options of an EndpointsChangeTracker. */
export interface EndpointsChangeTrackerOptions {
  /** This proxy's node name; endpoints with this nodeName are local. */
  readonly nodeName: string;
  /** The family of the proxier; only EndpointSlices of this address type are used. */
  readonly ipFamily: IPFamily;
  /** Receives one line per invalid slice, port or endpoint. */
  readonly warn: Warn;
  /**
   * When the tracker started: trigger times not after it are ignored, so the network programming
   * latency metric does not count changes made before this process existed (upstream trackerStartTime).
   * Unset: every trigger time counts.
   */
  readonly trackerStartTime?: Date;
}

// Go's time.RFC3339Nano layout as accepted by time.Parse.
const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;

/** Pending, not yet applied EndpointSlice changes, grouped by Service. */
export class EndpointsChangeTracker {
  readonly ipFamily: IPFamily;
  readonly #warn: Warn;
  readonly #cache: EndpointSliceCache;
  readonly #startTime: number | null;
  #lastChangeTriggerTimes = new Map<string, Date[]>();
  #changesTotal = 0;

  constructor(options: EndpointsChangeTrackerOptions) {
    this.ipFamily = options.ipFamily;
    this.#warn = options.warn;
    this.#startTime = options.trackerStartTime?.getTime() ?? null;
    this.#cache = new EndpointSliceCache({
      nodeName: options.nodeName,
      ipFamily: options.ipFamily,
      warn: options.warn,
    });
  }

  /**
   * Records an add/update (removeSlice false) or delete (removeSlice true) of an EndpointSlice. Slices
   * of another address type (the other family, FQDN) are ignored. Returns true when this call changed
   * something that needs a sync (upstream semantics, unlike ServiceChangeTracker.update).
   */
  endpointSliceUpdate(slice: EndpointSlice, removeSlice: boolean): boolean {
    if (typeof slice !== "object" || slice === null) {
      this.#warn(`ignoring EndpointSlice: not an object (got ${formatValue(slice)})`);
      return false;
    }
    const addressType = slice.addressType;
    if (addressType !== this.ipFamily) {
      if (addressType !== "IPv4" && addressType !== "IPv6" && addressType !== "FQDN" && !removeSlice) {
        this.#warn(
          `ignoring EndpointSlice ${
            objectRef(slice.metadata?.namespace, slice.metadata?.name)
          }: addressType: ` +
            `must be IPv4, IPv6 or FQDN (got ${formatValue(addressType)})`,
        );
      }
      return false;
    }
    this.#changesTotal++;
    const changed = this.#cache.updatePending(slice, removeSlice);
    if (changed.length === 0) return false;
    const keys = endpointSliceKeys(slice);
    if (typeof keys !== "string") {
      const service = namespacedName(keys.namespace, keys.serviceName);
      if (removeSlice) {
        // On delete the annotation dates from the last update, which is not what the metric measures.
        this.#lastChangeTriggerTimes.delete(service);
      } else if (changed.includes(service)) {
        const t = this.#triggerTime(slice);
        if (t !== null && (this.#startTime === null || t.getTime() > this.#startTime)) {
          const times = this.#lastChangeTriggerTimes.get(service);
          if (times === undefined) this.#lastChangeTriggerTimes.set(service, [t]);
          else times.push(t);
        }
      }
    }
    return true;
  }

  /** Number of EndpointSlices with a pending change (kubeproxy_sync_proxy_rules_endpoint_changes_pending). */
  pendingChanges(): number {
    return this.#cache.pendingChanges();
  }

  /** "ns/name" of the Services with pending endpoint changes. */
  pendingServices(): Set<string> {
    return this.#cache.pendingServices();
  }

  /** EndpointSlice events of this family seen so far (kubeproxy_sync_proxy_rules_endpoint_changes_total). */
  changesTotal(): number {
    return this.#changesTotal;
  }

  /** Applies the pending slices; returns each changed Service's endpoints before and after. */
  checkout(): EndpointsChange[] {
    return this.#cache.checkoutChanges();
  }

  /** Hands over and forgets the trigger times recorded since the last call, per Service "ns/name". */
  checkoutTriggerTimes(): Map<string, Date[]> {
    const out = this.#lastChangeTriggerTimes;
    this.#lastChangeTriggerTimes = new Map();
    return out;
  }

  #triggerTime(slice: EndpointSlice): Date | null {
    const annotations = slice.metadata?.annotations;
    if (typeof annotations !== "object" || annotations === null) return null;
    const raw: unknown = annotations[ANNOTATION_LAST_CHANGE_TRIGGER_TIME];
    if (raw === undefined) return null;
    const ms = typeof raw === "string" && RFC3339.test(raw) ? Date.parse(raw) : NaN;
    if (Number.isNaN(ms)) {
      this.#warn(
        `EndpointSlice ${objectRef(slice.metadata?.namespace, slice.metadata?.name)}: metadata.annotations` +
          `["${ANNOTATION_LAST_CHANGE_TRIGGER_TIME}"]: not an RFC 3339 time (got ${formatValue(raw)})`,
      );
      return null;
    }
    return new Date(ms);
  }
}

/** One UDP endpoint that stopped receiving traffic: conntrack entries towards it are stale. */
export interface DeletedUDPEndpoint {
  readonly servicePortKey: string;
  /** "ip:port" as in EndpointInfo.endpoint. */
  readonly endpoint: string;
  readonly ip: string;
}

/** What EndpointsMap.apply changed (upstream UpdateEndpointsMapResult). */
export interface UpdateEndpointsMapResult {
  /** servicePortKeys whose endpoints were added, updated or deleted (all ports of changed Services). */
  readonly updatedServices: Set<string>;
  /** "ns/name" of the Services whose EndpointSlices changed. */
  readonly changedServices: Set<string>;
  /** UDP endpoints that were serving and now are gone or no longer serving. */
  readonly deletedUDPEndpoints: DeletedUDPEndpoint[];
  /** UDP servicePortKeys that went from 0 to >0 serving endpoints (black-hole entries are stale). */
  readonly newlyActiveUDPServices: Set<string>;
  /** Trigger times per Service "ns/name", for kubeproxy_network_programming_duration_seconds. */
  readonly lastChangeTriggerTimes: Map<string, Date[]>;
}

/**
 * The proxier's current endpoints, keyed by servicePortKey (upstream EndpointsMap). Only ServicePorts
 * with at least one endpoint have an entry. Change it through apply() only.
 */
export class EndpointsMap extends Map<string, readonly EndpointInfo[]> {
  /** Applies and clears the tracker's pending changes; returns what changed. */
  apply(tracker: EndpointsChangeTracker): UpdateEndpointsMapResult {
    const result: UpdateEndpointsMapResult = {
      updatedServices: new Set(),
      changedServices: new Set(),
      deletedUDPEndpoints: [],
      newlyActiveUDPServices: new Set(),
      lastChangeTriggerTimes: new Map(),
    };
    for (const change of tracker.checkout()) {
      result.changedServices.add(change.service);
      for (const key of change.previous.keys()) {
        result.updatedServices.add(key);
        this.delete(key);
      }
      for (const [key, group] of change.current) {
        result.updatedServices.add(key);
        this.set(key, group.endpoints);
      }
      detectStaleConntrackEntries(change.previous, change.current, result);
    }
    for (const [k, v] of tracker.checkoutTriggerTimes()) result.lastChangeTriggerTimes.set(k, v);
    return result;
  }

  /**
   * The ServicePortName of a key in this map, read back from the key (no name is kept per entry: the
   * cache validated every part as a DNS label, so the key's separators are unambiguous).
   */
  portName(servicePortKey: string): ServicePortName | undefined {
    return this.has(servicePortKey) ? parseServicePortKey(servicePortKey) ?? undefined : undefined;
  }

  /**
   * Number of distinct local ready endpoint IPs per Service "ns/name", for health-check node ports
   * (upstream LocalReadyEndpoints; terminating endpoints are not ready, so they never count).
   */
  localReadyEndpoints(): Map<string, number> {
    const ips = new Map<string, Set<string>>();
    for (const [key, endpoints] of this) {
      let nn: string | null = null;
      for (const ep of endpoints) {
        if (!ep.ready || !ep.isLocal) continue;
        nn ??= serviceOfKey(key);
        if (nn === null) break;
        let set = ips.get(nn);
        if (set === undefined) ips.set(nn, set = new Set());
        set.add(ep.ip);
      }
    }
    const out = new Map<string, number>();
    for (const [nn, set] of ips) out.set(nn, set.size);
    return out;
  }
}

/**
 * The ServicePortName a servicePortKey was made of ("ns/name/PROTO" or "ns/name:port/PROTO"), or null
 * when `key` is not one. Exact for names that are DNS labels, as every name the cache accepts is.
 */
export function parseServicePortKey(key: string): ServicePortName | null {
  const slash = key.indexOf("/");
  const last = key.lastIndexOf("/");
  if (slash <= 0 || last <= slash + 1) return null;
  const protocol = key.slice(last + 1);
  if (protocol !== "TCP" && protocol !== "UDP" && protocol !== "SCTP") return null;
  const rest = key.slice(slash + 1, last);
  const colon = rest.indexOf(":");
  return {
    namespace: key.slice(0, slash),
    name: colon < 0 ? rest : rest.slice(0, colon),
    port: colon < 0 ? "" : rest.slice(colon + 1),
    protocol,
  };
}

/** The Service ("ns/name") of a servicePortKey, or null when `key` is not one. */
function serviceOfKey(key: string): string | null {
  const name = parseServicePortKey(key);
  return name === null ? null : namespacedName(name.namespace, name.name);
}

/** Serving state per "ip:port"; true when any copy of an endpoint is serving. */
function servingByEndpoint(endpoints: readonly EndpointInfo[]): Map<string, boolean> {
  const out = new Map<string, boolean>();
  for (const ep of endpoints) {
    const at = ep.endpoint;
    if (ep.serving || !out.has(at)) out.set(at, ep.serving);
  }
  return out;
}

/**
 * Upstream detectStaleConntrackEntries: UDP endpoints that were serving and are now gone or changed
 * serving state, and UDP ServicePorts that went from no serving endpoint to some.
 */
function detectStaleConntrackEntries(
  previous: ServiceEndpoints,
  current: ServiceEndpoints,
  result: UpdateEndpointsMapResult,
): void {
  for (const [key, group] of previous) {
    if (group.name.protocol !== "UDP") continue;
    // Serving state by "ip:port" (unique within a ServicePort's merged endpoints): a lookup per endpoint,
    // not a scan, so a change to a large UDP Service stays linear.
    let servingNow: Map<string, boolean> | null = null;
    for (const ep of group.endpoints) {
      // No traffic went to a non-serving endpoint, so nothing can be stale.
      if (!ep.serving) continue;
      servingNow ??= servingByEndpoint(current.get(key)?.endpoints ?? []);
      if (servingNow.get(ep.endpoint) !== true) {
        result.deletedUDPEndpoints.push({ servicePortKey: key, endpoint: ep.endpoint, ip: ep.ip });
      }
    }
  }
  for (const [key, group] of current) {
    if (group.name.protocol !== "UDP") continue;
    const serving = group.endpoints.some((ep) => ep.serving);
    const wasServing = (previous.get(key)?.endpoints ?? []).some((ep) => ep.serving);
    if (serving && !wasServing) result.newlyActiveUDPServices.add(key);
  }
}
