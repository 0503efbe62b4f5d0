/**
 * Stale UDP conntrack cleanup after a sync, with the semantics of upstream's conntrack reconciler
 * (pkg/proxy/conntrack/cleanup.go, v1.32+, including the later fixes for services without endpoints and
 * for deleted services).
 *
 * Why: a UDP conntrack entry keeps DNATing a client's packets to the endpoint it first picked, for as long
 * as the client keeps sending. When that endpoint goes away, or when the entry was created before the
 * service's rules existed (no DNAT at all), traffic is blackholed until the entry is deleted.
 *
 * What: every UDP entry whose original destination is a service frontend is checked. A frontend is a
 * ClusterIP, external IP or LoadBalancer IP with the service port, or any address with the NodePort. If the
 * entry's reply source (ip:port) is not a serving endpoint of that service port, it is deleted. A service
 * with no serving endpoints therefore loses all its entries. Frontends that existed at the previous cleanup
 * but are gone now (deleted services, removed external IPs, changed ports) are treated as having no
 * endpoints. Traffic policies, topology and terminating state are ignored on purpose, as upstream does:
 * existing flows stay on any endpoint that still serves.
 *
 * How: list the family's UDP entries once (`conntrack -L`), compute delete filters from them with the pure
 * functions below, and delete with one batched `conntrack -R`. Listing is preferred to diffing the model
 * between syncs: it also catches entries that no event would point to (created before the rules existed,
 * or left by a cleanup that failed), and when nothing is stale it costs one table walk instead of one per
 * removed endpoint.
 */
import type { EndpointInfo, IPFamily, Protocol, ServicePortInfo } from "../types.ts";
import { infoV } from "../../log.ts";
import { type ConntrackDeleteFilter, type ConntrackFlow, filterKey } from "./flow.ts";
import type { ConntrackRunner } from "./runner.ts";
import { canonicalIP } from "../../net/ip.ts";
import { joinHostPort } from "../../net/go_net.ts";

/** One service port after a sync, with all of its endpoints (serving or not; `serving` is read here). */
export interface ServicePortEndpoints {
  readonly servicePort: ServicePortInfo;
  readonly endpoints: readonly EndpointInfo[];
}

/** A frontend a client can send to: an IP with the service port, or a NodePort on any node address. */
export interface Frontend {
  readonly protocol: Protocol;
  readonly kind: "ip" | "nodePort";
  /** Canonical address for kind "ip"; "" for kind "nodePort". */
  readonly ip: string;
  readonly port: number;
}

/**
 * Serving endpoints ("ip:port", IPv6 bracketed) per frontend, keyed by frontendKey. Built from the current
 * service ports, with removed frontends mapped to an empty set.
 */
export type ServingIndex = ReadonlyMap<string, ReadonlySet<string>>;

/** Protocols whose entries upstream cleans: UDP only. SCTP can be added by the caller. */
export const DEFAULT_CLEANUP_PROTOCOLS: readonly Protocol[] = ["UDP"];

/** Map key of a frontend: "UDP|ip|10.96.0.10|53" or "UDP|nodePort||30053". */
export function frontendKey(f: Frontend): string {
  return `${f.protocol}|${f.kind}|${f.ip}|${f.port}`;
}

function familyOf(ip: string): IPFamily {
  return ip.includes(":") ? "IPv6" : "IPv4";
}

/**
 * The frontends of one service port in one family, for the given protocols: ClusterIP, external IPs and
 * LoadBalancer IPs with the port, and the NodePort. Empty when the protocol is not cleaned.
 */
export function servicePortFrontends(
  sp: ServicePortInfo,
  family: IPFamily,
  protocols: readonly Protocol[] = DEFAULT_CLEANUP_PROTOCOLS,
): Frontend[] {
  if (!protocols.includes(sp.protocol)) return [];
  const out: Frontend[] = [];
  const ips = [sp.clusterIP, ...sp.externalIPs, ...sp.loadBalancerVIPs];
  for (const ip of ips) {
    if (ip === "" || familyOf(ip) !== family || !(sp.port > 0)) continue;
    out.push({ protocol: sp.protocol, kind: "ip", ip: canonicalIP(ip), port: sp.port });
  }
  if (sp.nodePort > 0) out.push({ protocol: sp.protocol, kind: "nodePort", ip: "", port: sp.nodePort });
  return out;
}

/**
 * Builds the serving index: removed frontends first, with no endpoints, then each current service port's
 * frontends with its serving endpoints of this family. When two service ports share a frontend the later
 * one wins, as in upstream's map.
 */
export function buildServingIndex(
  family: IPFamily,
  servicePorts: readonly ServicePortEndpoints[],
  removedFrontends: readonly Frontend[],
  protocols: readonly Protocol[] = DEFAULT_CLEANUP_PROTOCOLS,
): Map<string, ReadonlySet<string>> {
  const index = new Map<string, ReadonlySet<string>>();
  const none: ReadonlySet<string> = new Set();
  for (const f of removedFrontends) {
    if (protocols.includes(f.protocol)) index.set(frontendKey(f), none);
  }
  for (const { servicePort, endpoints } of servicePorts) {
    const frontends = servicePortFrontends(servicePort, family, protocols);
    if (frontends.length === 0) continue;
    const serving = new Set<string>();
    for (const ep of endpoints) {
      if (ep.serving && familyOf(ep.ip) === family) serving.add(joinHostPort(canonicalIP(ep.ip), ep.port));
    }
    for (const f of frontends) index.set(frontendKey(f), serving);
  }
  return index;
}

/** Frontends in `previous` that are not in `current` (compared by frontendKey). */
export function removedFrontends(previous: Iterable<Frontend>, current: Iterable<Frontend>): Frontend[] {
  const now = new Set<string>();
  for (const f of current) now.add(frontendKey(f));
  const out = new Map<string, Frontend>();
  for (const f of previous) {
    const k = frontendKey(f);
    if (!now.has(k)) out.set(k, f);
  }
  return [...out.values()];
}

/**
 * True when a flow is addressed to a frontend in the index; a cheap pre-filter while listing a big table.
 */
export function isServiceFlow(index: ServingIndex, flow: ConntrackFlow): boolean {
  return index.has(`${flow.protocol}|ip|${flow.origDst}|${flow.origDstPort}`) ||
    index.has(`${flow.protocol}|nodePort||${flow.origDstPort}`);
}

/**
 * The delete filters for the stale entries among `flows` (upstream's reconcile step). A flow addressed
 * to a service IP:port whose reply source is not a serving endpoint gets a filter on (orig dst, orig dst
 * port, reply src, reply src port). A flow to a NodePort in the same situation gets one on (orig dst port,
 * reply src, reply src port). Filters are deduplicated, because one filter removes every client's entry
 * to the same stale backend, and sorted, so the same input gives the same output.
 */
export function staleFlowFilters(
  family: IPFamily,
  index: ServingIndex,
  flows: Iterable<ConntrackFlow>,
): ConntrackDeleteFilter[] {
  const filters = new Map<string, ConntrackDeleteFilter>();
  const add = (f: ConntrackDeleteFilter) => filters.set(filterKey(f), f);
  for (const flow of flows) {
    if (flow.family !== family) continue;
    const replyEndpoint = joinHostPort(flow.replySrc, flow.replySrcPort);
    const byIP = index.get(`${flow.protocol}|ip|${flow.origDst}|${flow.origDstPort}`);
    if (byIP !== undefined && !byIP.has(replyEndpoint)) {
      add({
        family,
        protocol: flow.protocol,
        origDst: flow.origDst,
        origDstPort: flow.origDstPort,
        replySrc: flow.replySrc,
        replySrcPort: flow.replySrcPort,
      });
    }
    const byNodePort = index.get(`${flow.protocol}|nodePort||${flow.origDstPort}`);
    if (byNodePort !== undefined && !byNodePort.has(replyEndpoint)) {
      add({
        family,
        protocol: flow.protocol,
        origDstPort: flow.origDstPort,
        replySrc: flow.replySrc,
        replySrcPort: flow.replySrcPort,
      });
    }
  }
  return [...filters.entries()].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0)).map(([, f]) => f);
}

/** What one reconcile did. */
export interface ConntrackCleanupResult {
  readonly family: IPFamily;
  /** False when there was nothing to check (no service port of a cleaned protocol, nothing removed). */
  readonly listed: boolean;
  /** Entries addressed to a frontend, across the cleaned protocols. */
  readonly serviceFlows: number;
  readonly filters: readonly ConntrackDeleteFilter[];
  /** Entries conntrack reported deleted. */
  readonly entriesDeleted: number;
}

/** Settings of StaleFlowReconciler. */
export interface StaleFlowReconcilerOptions {
  /** Protocols to clean; defaults to UDP only, as upstream. */
  readonly protocols?: readonly Protocol[];
}

/**
 * Runs the cleanup after each successful sync and remembers, per family, the frontends it saw, so that
 * frontends that disappear between two cleanups are flushed once. If a cleanup fails, the removed
 * frontends are kept and retried at the next one.
 */
export class StaleFlowReconciler {
  readonly #runner: ConntrackRunner;
  readonly #protocols: readonly Protocol[];
  readonly #lastFrontends = new Map<IPFamily, Frontend[]>();
  readonly #pendingRemoved = new Map<IPFamily, Frontend[]>();

  /** `runner` does the listing and deleting (CliConntrackRunner in production). */
  constructor(runner: ConntrackRunner, opts: StaleFlowReconcilerOptions = {}) {
    this.#runner = runner;
    this.#protocols = opts.protocols ?? DEFAULT_CLEANUP_PROTOCOLS;
  }

  /**
   * Seeds the frontends "seen at the previous cleanup", e.g. from the state cache at start-up, so services
   * deleted while edgeproxy was down are flushed by the first cleanup. Does nothing once a family has
   * been reconciled.
   */
  prime(family: IPFamily, servicePorts: readonly ServicePortEndpoints[]): void {
    if (this.#lastFrontends.has(family)) return;
    this.#lastFrontends.set(
      family,
      servicePorts.flatMap((sp) => servicePortFrontends(sp.servicePort, family, this.#protocols)),
    );
  }

  /**
   * Reconciles one family's conntrack table with the service ports as just synced. Throws (with the
   * conntrack command's message) if listing or deleting failed; the caller logs and carries on.
   */
  async reconcile(
    family: IPFamily,
    servicePorts: readonly ServicePortEndpoints[],
  ): Promise<ConntrackCleanupResult> {
    const current = servicePorts.flatMap((sp) =>
      servicePortFrontends(sp.servicePort, family, this.#protocols)
    );
    const removed = removedFrontends(
      [...(this.#lastFrontends.get(family) ?? []), ...(this.#pendingRemoved.get(family) ?? [])],
      current,
    );
    this.#lastFrontends.set(family, current);
    this.#pendingRemoved.set(family, removed);

    const index = buildServingIndex(family, servicePorts, removed, this.#protocols);
    if (index.size === 0) {
      this.#pendingRemoved.set(family, []);
      return { family, listed: false, serviceFlows: 0, filters: [], entriesDeleted: 0 };
    }
    const protocols = [...new Set([...index.keys()].map((k) => k.slice(0, k.indexOf("|")) as Protocol))]
      .sort();
    const flows: ConntrackFlow[] = [];
    for (const protocol of protocols) {
      flows.push(...await this.#runner.listFlows(family, protocol, (f) => isServiceFlow(index, f)));
    }
    const filters = staleFlowFilters(family, index, flows);
    const entriesDeleted = await this.#runner.deleteFlows(filters);
    this.#pendingRemoved.set(family, []);
    infoV(4, "Finished reconciling conntrack entries", {
      ipFamily: family,
      serviceFlows: flows.length,
      filters: filters.length,
      entriesDeleted,
    });
    return { family, listed: true, serviceFlows: flows.length, filters, entriesDeleted };
  }
}
