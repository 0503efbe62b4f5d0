/**
 * EndpointSlice cache (upstream pkg/proxy/endpointslicecache.go): the slices of every Service, as applied
 * by the proxier plus pending updates not yet applied. Endpoints move between slices, so slices are kept
 * per Service and per slice name, and a Service's endpoints are always the merge of all its slices.
 *
 * Each slice is validated and reduced to what the proxier uses when it arrives (so a warning is logged
 * once per event), and change detection compares those reductions: an update that changes nothing the
 * proxier uses (resourceVersion, targetRef, ...) is not a change. Checking out pending changes costs
 * O(slices of the changed Services).
 *
 * Endpoints are held once: a slice is kept as the EndpointInfo of each (port, endpoint) pair, built when
 * it arrives, and the merged per-ServicePort arrays handed to the EndpointsMap hold those same objects
 * (not a second, per-port copy of each endpoint next to the slice's fields).
 */
import type { EndpointSlice } from "../k8s/objects.ts";
import { LABEL_SERVICE_NAME, namespacedName } from "../k8s/objects.ts";
import {
  type EndpointInfo,
  type IPFamily,
  type Protocol,
  servicePortKey,
  type ServicePortName,
} from "./types.ts";
import {
  compareEndpoints,
  type EndpointFields,
  type EndpointPlacement,
  newEndpointInfo,
  placementOf,
} from "./endpoints.ts";
import {
  formatValue,
  ipFamilyOf,
  isDNSLabel,
  isPortNumber,
  objectRef,
  parseIP,
  type Warn,
} from "./service_port.ts";
import { nonSpecialIPProblem } from "../net/special_ip.ts";

/** One port of a slice, validated: `name` is "" when unnamed, protocol defaults to TCP. */
export interface EndpointSlicePort {
  readonly name: string;
  readonly port: number;
  readonly protocol: Protocol;
}

/** What the proxier keeps of one EndpointSlice (upstream endpointSliceInfo). */
export interface EndpointSliceData {
  /** Sorted by port number, then name, then protocol. */
  readonly ports: readonly EndpointSlicePort[];
  /** Valid endpoints only, in slice order. */
  readonly endpoints: readonly EndpointFields[];
}

/** The endpoints of one ServicePort, merged over all slices of its Service. */
export interface ServicePortEndpoints {
  readonly name: ServicePortName;
  /** Sorted by "ip:port"; never empty. */
  readonly endpoints: readonly EndpointInfo[];
}

/** The endpoints of one Service, keyed by servicePortKey. */
export type ServiceEndpoints = Map<string, ServicePortEndpoints>;

/** The change of one Service's endpoints between two checkouts. */
export interface EndpointsChange {
  /** "ns/name" of the Service. */
  readonly service: string;
  readonly previous: ServiceEndpoints;
  readonly current: ServiceEndpoints;
}

/** Where a slice belongs: its Service ("ns/name") and its own name. */
export interface EndpointSliceKeys {
  readonly namespace: string;
  readonly serviceName: string;
  readonly sliceName: string;
}

/**
 * What the cache keeps of one slice: its name, its ports and, per port (same index), the EndpointInfo
 * of each of its endpoints on that port, sorted by "ip:port" (stably: duplicates keep their slice order,
 * which the merge's tie-break depends on). Upstream sorts a slice's endpoints too, so a reordering alone
 * is no change. A slice without ports keeps its endpoint fields instead, so that a change to them is
 * still a change (as upstream, which compares whole slice infos).
 */
interface SliceEntry {
  readonly name: string;
  readonly ports: readonly EndpointSlicePort[];
  /**
   * Per port, the endpoints on it; for a slice with one port (most slices) that port's endpoints
   * themselves, without an array around them. Read through {@link endpointsOnPort}.
   */
  readonly byPort: readonly EndpointInfo[] | readonly (readonly EndpointInfo[])[];
  readonly portless: readonly EndpointFields[] | null;
}

/** The ServicePortName of `port` of the Service `t` tracks. */
function portNameOf(t: ServiceTracker, port: EndpointSlicePort): ServicePortName {
  return { namespace: t.namespace, name: t.name, port: port.name, protocol: port.protocol };
}

/** The endpoints of `entry` on its port `p`. */
function endpointsOnPort(entry: SliceEntry, p: number): readonly EndpointInfo[] {
  return entry.ports.length === 1
    ? entry.byPort as readonly EndpointInfo[]
    : (entry.byPort as readonly (readonly EndpointInfo[])[])[p];
}

/**
 * The slices of one Service. Nearly every Service has one slice and no pending change, so the applied
 * slices are that one entry itself or else a sorted array (a Map costs ~250 bytes even for one entry,
 * an array 64), and `pending` exists only while something is pending. The endpoints of one applied
 * slice are not kept here (the EndpointsMap holds them; checkout rebuilds them without merging or
 * sorting); those of several are, since merging them again would double a large Service's checkout.
 */
interface ServiceTracker {
  readonly namespace: string;
  readonly name: string;
  /** The one applied slice, or all of them sorted by name (never one); read through {@link appliedOf}. */
  applied: SliceEntry | readonly SliceEntry[];
  /** null marks a pending removal. Only entries that differ from `applied` are kept; null when empty. */
  pending: Map<string, SliceEntry | null> | null;
  /** The merged endpoints of the applied slices when there are several, else null. */
  merged: ServiceEndpoints | null;
}

/** The applied slices of `t`, sorted by name. */
function appliedOf(t: ServiceTracker): readonly SliceEntry[] {
  return Array.isArray(t.applied) ? t.applied : [t.applied as SliceEntry];
}

/** How a tracker keeps `list` (see ServiceTracker.applied). */
function appliedFrom(list: readonly SliceEntry[]): SliceEntry | readonly SliceEntry[] {
  return list.length === 1 ? list[0] : list.length === 0 ? NO_SLICES : list;
}

/** Index of the slice `name` in `applied`, or -(insertion point) - 1 when absent. */
function sliceIndex(applied: readonly SliceEntry[], name: string): number {
  let lo = 0;
  let hi = applied.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >>> 1;
    const n = applied[mid].name;
    if (n < name) lo = mid + 1;
    else if (n > name) hi = mid - 1;
    else return mid;
  }
  return -lo - 1;
}

/** Equal slice states (null = absent), compared by value without keeping a text copy per slice. */
function sameEntry(a: SliceEntry | null, b: SliceEntry | null): boolean {
  if (a === null || b === null) return a === b;
  return sameValue(a.ports, b.ports) && sameValue(a.byPort, b.byPort) && sameValue(a.portless, b.portless);
}

/**
 * Structural equality of the plain data endpointSliceDataFromSlice builds (objects, arrays, strings,
 * numbers, booleans, null): same keys in the same order and equal values, as comparing their JSON would.
 */
export function sameValue(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const bb = b as unknown[];
    if (a.length !== bb.length) return false;
    for (let i = 0; i < a.length; i++) if (!sameValue(a[i], bb[i])) return false;
    return true;
  }
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length) return false;
  for (let i = 0; i < ka.length; i++) {
    if (ka[i] !== kb[i]) return false;
    if (!sameValue((a as Record<string, unknown>)[ka[i]], (b as Record<string, unknown>)[kb[i]])) {
      return false;
    }
  }
  return true;
}

/** Options of an EndpointSliceCache. */
export interface EndpointSliceCacheOptions {
  /** This proxy's node name; endpoints with this nodeName are local. */
  readonly nodeName: string;
  /** The family of the proxier; addresses of the other family are skipped. */
  readonly ipFamily: IPFamily;
  readonly warn: Warn;
}

const PROTOCOLS: ReadonlySet<string> = new Set(["TCP", "UDP", "SCTP"]);
const SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** Stands for an absent `conditions` or `hints` (no object made per endpoint). */
const NO_FIELDS: Readonly<Record<string, unknown>> = Object.freeze({});

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/**
 * The Service and slice name of `slice` (upstream endpointSliceCacheKeys), or a problem description.
 * The Service name must be a DNS label, since it becomes part of ServicePort names in rules.
 */
export function endpointSliceKeys(slice: EndpointSlice): EndpointSliceKeys | string {
  const meta = isObject(slice) && isObject(slice.metadata) ? slice.metadata : undefined;
  if (meta === undefined) return "metadata: missing";
  const { namespace, name } = meta;
  if (!isDNSLabel(namespace)) {
    return `metadata.namespace: must be a DNS label (got ${formatValue(namespace)})`;
  }
  if (typeof name !== "string" || name.length > 253 || !SUBDOMAIN.test(name)) {
    return `metadata.name: must be a DNS subdomain (got ${formatValue(name)})`;
  }
  const labels = isObject(meta.labels) ? meta.labels : {};
  const serviceName = labels[LABEL_SERVICE_NAME];
  if (serviceName === undefined || serviceName === "") {
    return `metadata.labels["${LABEL_SERVICE_NAME}"]: missing`;
  }
  if (!isDNSLabel(serviceName)) {
    return `metadata.labels["${LABEL_SERVICE_NAME}"]: must be a DNS label (got ${formatValue(serviceName)})`;
  }
  return { namespace, serviceName, sliceName: name };
}

function hasPort(ports: readonly EndpointSlicePort[], name: string, protocol: string): boolean {
  for (const q of ports) if (q.name === name && q.protocol === protocol) return true;
  return false;
}

function hintNames(list: unknown): string[] | null {
  if (!Array.isArray(list) || list.length === 0) return null;
  const names = new Set<string>();
  for (const h of list) if (isObject(h) && typeof h.name === "string") names.add(h.name);
  return [...names].sort();
}

/**
 * Validates and reduces an EndpointSlice (upstream newEndpointSliceInfo). Invalid ports and endpoints
 * are dropped one by one, each with one warning naming the slice; the rest of the slice is kept.
 */
export function endpointSliceDataFromSlice(
  slice: EndpointSlice,
  family: IPFamily,
  warn: Warn,
): EndpointSliceData {
  // Built only for a warning: this runs once per slice.
  const ref = () => objectRef(slice.metadata?.namespace, slice.metadata?.name);
  const ports: EndpointSlicePort[] = [];
  const rawPorts = slice.ports ?? [];
  if (!Array.isArray(rawPorts)) {
    warn(`ignoring ports of EndpointSlice ${ref()}: must be a list (got ${formatValue(rawPorts)})`);
  } else {
    const skip = (i: number, why: string) => warn(`ignoring ports[${i}] of EndpointSlice ${ref()}: ${why}`);
    for (let i = 0; i < rawPorts.length; i++) {
      const p: unknown = rawPorts[i];
      if (!isObject(p)) {
        skip(i, `must be an object (got ${formatValue(p)})`);
        continue;
      }
      // The brief differs from upstream here: upstream skips a port whose name is nil; we read it as "".
      const name = p.name ?? "";
      if (name !== "" && !isDNSLabel(name)) {
        skip(i, `name: must be a DNS label (got ${formatValue(name)})`);
        continue;
      }
      // Upstream skips ports with a nil or zero port ("TODO: handle nil ports to mean all").
      if (!isPortNumber(p.port)) {
        skip(i, `port: must be 1-65535 (got ${formatValue(p.port)})`);
        continue;
      }
      const protocol = p.protocol ?? "TCP";
      if (typeof protocol !== "string" || !PROTOCOLS.has(protocol)) {
        skip(i, `protocol: must be TCP, UDP or SCTP (got ${formatValue(protocol)})`);
        continue;
      }
      // Slices have one or a few ports: a scan finds a duplicate without a set of keys.
      if (hasPort(ports, name as string, protocol)) {
        skip(i, `duplicate port ${formatValue(name)}/${protocol}`);
        continue;
      }
      ports.push({ name: name as string, port: p.port, protocol: protocol as Protocol });
    }
  }
  ports.sort((a, b) =>
    a.port - b.port || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0) ||
    (a.protocol < b.protocol ? -1 : a.protocol > b.protocol ? 1 : 0)
  );

  const endpoints: EndpointFields[] = [];
  const rawEndpoints = slice.endpoints ?? [];
  if (!Array.isArray(rawEndpoints)) {
    warn(`ignoring endpoints of EndpointSlice ${ref()}: must be a list (got ${formatValue(rawEndpoints)})`);
  } else {
    // A plain loop with the warning built only when needed: this runs once per endpoint (65k at 10k
    // Services), and a closure per endpoint was most of the model build's garbage.
    const skip = (i: number, why: string) =>
      warn(`ignoring endpoints[${i}] of EndpointSlice ${ref()}: ${why}`);
    for (let i = 0; i < rawEndpoints.length; i++) {
      const ep: unknown = rawEndpoints[i];
      if (!isObject(ep)) {
        skip(i, `must be an object (got ${formatValue(ep)})`);
        continue;
      }
      const addresses = ep.addresses;
      if (!Array.isArray(addresses) || addresses.length === 0) {
        skip(i, `addresses: must be a non-empty list (got ${formatValue(addresses)})`);
        continue;
      }
      // Only the first address is used (the API defines the others as fungible, and no one sets them).
      const ip = parseIP(addresses[0]);
      if (ip === null) {
        skip(i, `addresses[0]: not a valid IP address (got ${formatValue(addresses[0])})`);
        continue;
      }
      if (ipFamilyOf(ip) !== family) {
        skip(i, `addresses[0]: not an ${family} address (got ${formatValue(addresses[0])})`);
        continue;
      }
      // Discovery validation refuses unspecified, loopback and link-local endpoint addresses.
      const problem = nonSpecialIPProblem(ip);
      if (problem !== null) {
        skip(i, `addresses[0]: ${problem} (got ${formatValue(addresses[0])})`);
        continue;
      }
      const c = isObject(ep.conditions) ? ep.conditions : NO_FIELDS;
      const hints = isObject(ep.hints) ? ep.hints : NO_FIELDS;
      endpoints.push({
        ip,
        nodeName: typeof ep.nodeName === "string" ? ep.nodeName : "",
        zone: typeof ep.zone === "string" ? ep.zone : "",
        ready: typeof c.ready === "boolean" ? c.ready : true,
        serving: typeof c.serving === "boolean" ? c.serving : true,
        terminating: c.terminating === true,
        zoneHints: hintNames(hints.forZones),
        nodeHints: hintNames(hints.forNodes),
      });
    }
  }
  return { ports, endpoints };
}

/** Cache of the EndpointSlices of every Service, applied and pending. */
export class EndpointSliceCache {
  readonly nodeName: string;
  readonly ipFamily: IPFamily;
  readonly #warn: Warn;
  /** Per Service "ns/name". */
  readonly #trackers = new Map<string, ServiceTracker>();
  /** Services with pending slices. */
  readonly #pendingServices = new Set<string>();
  /**
   * Namespace -> slice name -> Service "ns/name" the slice was last filed under (to follow label changes).
   * Keyed by the slice's own name strings rather than a built "ns/sliceName": one string fewer per slice.
   */
  readonly #sliceOwner = new Map<string, Map<string, string>>();
  /** Port lists shared between slices, by their text (see #sharedPorts). */
  readonly #portLists = new Map<string, readonly EndpointSlicePort[]>();
  /** Placements without hints shared between endpoints, by node name, then zone (see #placement). */
  readonly #placements = new Map<string, Map<string, EndpointPlacement>>();
  #placementCount = 0;

  constructor(options: EndpointSliceCacheOptions) {
    this.nodeName = options.nodeName;
    this.ipFamily = options.ipFamily;
    this.#warn = options.warn;
  }

  /**
   * Records an add/update (remove false) or a delete (remove true) of `slice`, whose address type the
   * caller has checked. Returns the "ns/name" of the Services whose pending state changed: usually
   * one, two when the slice moved between Services, none when nothing the proxier uses changed.
   */
  updatePending(slice: EndpointSlice, remove: boolean): string[] {
    const keys = endpointSliceKeys(slice);
    const changed: string[] = [];
    if (typeof keys === "string") {
      // A slice we filed before that lost its Service label: it no longer belongs to that Service.
      const meta = isObject(slice) && isObject(slice.metadata) ? slice.metadata : undefined;
      const namespace = String(meta?.namespace);
      const sliceName = String(meta?.name);
      const owner = this.#sliceOwner.get(namespace)?.get(sliceName);
      if (owner !== undefined && this.#setPending(owner, sliceName, null)) changed.push(owner);
      if (owner !== undefined) this.#forgetOwner(namespace, sliceName);
      if (!remove) this.#warn(`ignoring EndpointSlice ${objectRef(meta?.namespace, meta?.name)}: ${keys}`);
      return changed;
    }
    const service = namespacedName(keys.namespace, keys.serviceName);
    const owner = this.#sliceOwner.get(keys.namespace)?.get(keys.sliceName);
    if (owner !== undefined && owner !== service) {
      if (this.#setPending(owner, keys.sliceName, null)) changed.push(owner);
    }
    if (remove) {
      this.#forgetOwner(keys.namespace, keys.sliceName);
      if (owner === undefined || owner === service) {
        if (this.#setPending(service, keys.sliceName, null)) changed.push(service);
      }
      return changed;
    }
    let owners = this.#sliceOwner.get(keys.namespace);
    if (owners === undefined) this.#sliceOwner.set(keys.namespace, owners = new Map());
    owners.set(keys.sliceName, service);
    const entry = this.#entryOf(keys.sliceName, endpointSliceDataFromSlice(slice, this.ipFamily, this.#warn));
    if (this.#setPending(service, keys.sliceName, entry, keys)) changed.push(service);
    return changed;
  }

  #forgetOwner(namespace: string, sliceName: string): void {
    const owners = this.#sliceOwner.get(namespace);
    if (owners?.delete(sliceName) && owners.size === 0) this.#sliceOwner.delete(namespace);
  }

  /** Number of placements shared between endpoints (diagnostics; at most MAX_SHARED_PLACEMENTS). */
  sharedPlacements(): number {
    return this.#placementCount;
  }

  /** Number of distinct port lists shared between slices (diagnostics; at most MAX_SHARED_PORT_LISTS). */
  sharedPortLists(): number {
    return this.#portLists.size;
  }

  /** Number of slices with a pending change. */
  pendingChanges(): number {
    let n = 0;
    for (const s of this.#pendingServices) n += this.#trackers.get(s)?.pending?.size ?? 0;
    return n;
  }

  /** "ns/name" of the Services with pending slice changes. */
  pendingServices(): Set<string> {
    return new Set(this.#pendingServices);
  }

  /**
   * Applies all pending slices and returns, per changed Service (sorted by "ns/name"), its endpoints
   * before and after. Costs O(slices of the changed Services).
   */
  checkoutChanges(): EndpointsChange[] {
    const changes: EndpointsChange[] = [];
    for (const service of [...this.#pendingServices].sort()) {
      const t = this.#trackers.get(service);
      if (t === undefined) continue;
      const previous = t.merged ?? this.#endpointsOf(t);
      const applied = [...appliedOf(t)];
      for (const [sliceName, entry] of t.pending ?? []) {
        const i = sliceIndex(applied, sliceName);
        if (entry === null) {
          if (i >= 0) applied.splice(i, 1);
        } else if (i >= 0) {
          applied[i] = entry;
        } else {
          applied.splice(-i - 1, 0, entry);
        }
      }
      t.applied = appliedFrom(applied);
      t.pending = null;
      const current = this.#endpointsOf(t);
      t.merged = applied.length > 1 ? current : null;
      if (applied.length === 0) this.#trackers.delete(service);
      changes.push({ service, previous, current });
    }
    this.#pendingServices.clear();
    return changes;
  }

  /** Sets the pending state of one slice; true when that changes the slice's latest state. */
  #setPending(
    service: string,
    sliceName: string,
    entry: SliceEntry | null,
    keys?: EndpointSliceKeys,
  ): boolean {
    let t = this.#trackers.get(service);
    if (t === undefined) {
      if (entry === null || keys === undefined) return false;
      t = {
        namespace: keys.namespace,
        name: keys.serviceName,
        applied: NO_SLICES,
        pending: null,
        merged: null,
      };
      this.#trackers.set(service, t);
    }
    const list = appliedOf(t);
    const i = sliceIndex(list, sliceName);
    const applied = i >= 0 ? list[i] : null;
    const latest = t.pending?.has(sliceName) ? t.pending.get(sliceName)! : applied;
    if (sameEntry(latest, entry)) return false;
    if (sameEntry(applied, entry)) t.pending?.delete(sliceName);
    else (t.pending ??= new Map()).set(sliceName, entry);
    if (t.pending !== null && t.pending.size > 0) {
      this.#pendingServices.add(service);
    } else {
      t.pending = null;
      this.#pendingServices.delete(service);
      if (list.length === 0) this.#trackers.delete(service);
    }
    return true;
  }

  /** The EndpointInfo of each (port, endpoint) pair of a slice; its fields are not kept beside them. */
  #entryOf(name: string, data: EndpointSliceData): SliceEntry {
    if (data.ports.length === 0) {
      return { name, ports: NO_PORTS, byPort: NO_ENDPOINTS, portless: data.endpoints };
    }
    const ports = this.#sharedPorts(data.ports);
    const placements = data.endpoints.map((ep) => this.#placement(ep));
    if (ports.length === 1) {
      return { name, ports, byPort: this.#onPort(data.endpoints, placements, ports[0]), portless: null };
    }
    const byPort = new Array<readonly EndpointInfo[]>(ports.length);
    for (let i = 0; i < ports.length; i++) byPort[i] = this.#onPort(data.endpoints, placements, ports[i]);
    return { name, ports, byPort, portless: null };
  }

  /** A slice's endpoints on one of its ports, sorted; `placements[i]` is that of `endpoints[i]`. */
  #onPort(
    endpoints: readonly EndpointFields[],
    placements: readonly EndpointPlacement[],
    port: EndpointSlicePort,
  ): readonly EndpointInfo[] {
    if (endpoints.length === 0) return NO_ENDPOINTS;
    const out = new Array<EndpointInfo>(endpoints.length);
    for (let i = 0; i < endpoints.length; i++) {
      const ep = endpoints[i];
      const isLocal = this.nodeName !== "" && ep.nodeName === this.nodeName;
      out[i] = newEndpointInfo(ep, port.port, isLocal, placements[i]);
    }
    return out.sort(compareEndpoints);
  }

  /**
   * The placement of `ep`: for one without hints (nearly all) one frozen object per node name and zone,
   * shared by every endpoint there; with hints, or past {@link MAX_SHARED_PLACEMENTS} of them, its own.
   */
  #placement(ep: EndpointFields): EndpointPlacement {
    if (ep.zoneHints !== null || ep.nodeHints !== null) return placementOf(ep);
    let byZone = this.#placements.get(ep.nodeName);
    const shared = byZone?.get(ep.zone);
    if (shared !== undefined) return shared;
    if (this.#placementCount >= MAX_SHARED_PLACEMENTS) return placementOf(ep);
    if (byZone === undefined) this.#placements.set(ep.nodeName, byZone = new Map());
    const placement = Object.freeze(placementOf(ep));
    byZone.set(ep.zone, placement);
    this.#placementCount++;
    return placement;
  }

  /**
   * One frozen copy of each distinct port list, shared by every slice that has it: a cluster has few
   * distinct lists (most slices have one or two ports on common numbers), so this keeps one small array
   * and its port objects for all of them instead of per slice. Lists beyond the first
   * {@link MAX_SHARED_PORT_LISTS} are kept as they are, so the table stays bounded.
   */
  #sharedPorts(ports: readonly EndpointSlicePort[]): readonly EndpointSlicePort[] {
    let key = "";
    for (const p of ports) key += `${p.port}/${p.protocol}/${p.name},`;
    const shared = this.#portLists.get(key);
    if (shared !== undefined) return shared;
    if (this.#portLists.size >= MAX_SHARED_PORT_LISTS) return ports;
    const frozen = Object.freeze(ports.map((p) => Object.freeze({ ...p })));
    this.#portLists.set(key, frozen);
    return frozen;
  }

  /** Merges the applied slices of a Service into its endpoints (upstream getEndpointsMap). */
  #endpointsOf(t: ServiceTracker): ServiceEndpoints {
    if (!Array.isArray(t.applied)) return this.#endpointsOfOne(t, t.applied as SliceEntry);
    return t.applied.length === 0 ? new Map() : this.#endpointsOfMany(t);
  }

  /** The general merge, for any number of slices. */
  #endpointsOfMany(t: ServiceTracker): ServiceEndpoints {
    const byPort = new Map<string, { name: ServicePortName; set: Map<string, EndpointInfo> }>();
    // Slice order is fixed (by name) so that ties below resolve the same way every time.
    for (const entry of appliedOf(t)) {
      for (let p = 0; p < entry.ports.length; p++) {
        const name = portNameOf(t, entry.ports[p]);
        const key = servicePortKey(name);
        let group = byPort.get(key);
        if (group === undefined) {
          group = { name, set: new Map() };
          byPort.set(key, group);
        }
        for (const info of endpointsOnPort(entry, p)) {
          // The same IP twice (an Endpoint moving between slices, or a new Pod reusing the IP of a
          // terminating one): prefer the non-terminating one (upstream #135593).
          const at = info.endpoint;
          if (!group.set.has(at) || !info.terminating) group.set.set(at, info);
        }
      }
    }
    const out: ServiceEndpoints = new Map();
    for (const key of [...byPort.keys()].sort()) {
      const group = byPort.get(key)!;
      if (group.set.size === 0) continue;
      out.set(key, { name: group.name, endpoints: [...group.set.values()].sort(compareEndpoints) });
    }
    return out;
  }

  /**
   * The endpoints of a Service with one slice: each port's array is the slice's own (already sorted),
   * shared rather than copied, unless it holds an "ip:port" twice, which the general merge resolves.
   */
  #endpointsOfOne(t: ServiceTracker, entry: SliceEntry): ServiceEndpoints {
    const groups: Array<[string, ServicePortEndpoints]> = [];
    for (let p = 0; p < entry.ports.length; p++) {
      const endpoints = endpointsOnPort(entry, p);
      if (endpoints.length === 0) continue;
      if (hasDuplicate(endpoints)) return this.#endpointsOfMany(t);
      const name = portNameOf(t, entry.ports[p]);
      groups.push([servicePortKey(name), { name, endpoints }]);
    }
    groups.sort((a, b) => a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);
    return new Map(groups);
  }
}

/** Distinct port lists an EndpointSliceCache shares at most (see #sharedPorts). */
export const MAX_SHARED_PORT_LISTS = 1024;

/**
 * Distinct (node, zone) placements an EndpointSliceCache shares at most (see #placement): more than the
 * nodes of any cluster, so that only names churning without end (nodes replaced forever) reach it.
 */
export const MAX_SHARED_PLACEMENTS = 65536;

/** The ports of a slice without ports (shared: nothing to keep per slice). */
const NO_PORTS: readonly EndpointSlicePort[] = Object.freeze([]);

/** The applied slices of a Service that has none yet (shared). */
const NO_SLICES: readonly SliceEntry[] = Object.freeze([]);

/** The byPort of a slice without endpoints (shared: nothing to keep per slice). */
const NO_ENDPOINTS: readonly never[] = Object.freeze([]);

/** True when a sorted endpoint list holds the same "ip:port" twice (adjacent after sorting). */
function hasDuplicate(sorted: readonly EndpointInfo[]): boolean {
  for (let i = 1; i < sorted.length; i++) {
    if (sorted[i].ip === sorted[i - 1].ip && sorted[i].port === sorted[i - 1].port) return true;
  }
  return false;
}
