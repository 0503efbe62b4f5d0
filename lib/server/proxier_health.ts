/**
 * The proxy health server behind `healthzBindAddress` (default 0.0.0.0:10256), with upstream's v1.33+
 * semantics (pkg/proxy/healthcheck/proxy_health.go):
 * - per IP family, `updated(family)` records a successful sync and clears the pending mark;
 *   `queuedUpdate(family)` marks the oldest unprocessed change (only if none is marked yet);
 * - healthy = for every family that has synced at least once, nothing is pending or the oldest pending change
 *   is younger than healthTimeout (2 × syncPeriod);
 * - `/healthz` also requires node eligibility: the Node is known, has no deletionTimestamp and no
 *   `ToBeDeletedByClusterAutoscaler` taint, so load balancers drain nodes being removed; `/livez` does not;
 * - status 200 or 503, headers `Content-Type: application/json` and `X-Content-Type-Options: nosniff`, body
 *   json.Marshal of ProxyHealth (`lastUpdated`, `currentTime`, `nodeEligible` on /healthz only, `healthy`
 *   — the proxier's health, without the node —, `status` per family); on 200 `lastUpdated` is overwritten
 *   with now, for compatibility with releases that reported the last sync-loop run;
 * - each answer counts in kubeproxy_proxy_healthz_total / kubeproxy_proxy_livez_total{code}.
 *
 * edgeproxy extension — serving from cache: with a {@link CacheStateSource}, while rules are programmed from
 * the last-known-state cache the body also carries `"servingFromCache":true` and `"cacheAgeSeconds":N`
 * (whole seconds, left out when unknown), after upstream's fields; in normal operation the body is byte-for-
 * byte upstream's. The status code is deliberately NOT affected: load balancers act on the code, and the rules
 * programmed from the cache still forward traffic, so failing /healthz during an apiserver outage would turn
 * a control-plane outage into a data-plane one — the very failure edgeproxy exists to avoid. Upstream behaves
 * the same when the apiserver is away (no events, nothing pending, healthy). Staleness is for operators:
 * this body field and the edgeproxy_serving_from_cache / edgeproxy_state_cache_age_seconds metrics.
 */
import { Hono } from "hono";
import type { Node } from "../k8s/objects.ts";
import type { CacheStateSource } from "../metrics/edgeproxy.ts";
import type { Counter } from "../metrics/registry.ts";
import type { IPFamily } from "../proxy/types.ts";
import type { NodeHandler } from "../proxy/handlers.ts";
import { formatRFC3339Nano, goJSON } from "./go_json.ts";

/** Wall clock in ms since the epoch (fraction allowed); injected so tests control time. */
export interface Clock {
  now(): number;
}

/** `Date.now()`. */
export const systemClock: Clock = { now: () => Date.now() };

/** Taint the cluster autoscaler puts on a node before deleting it. */
export const TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler";

/** healthTimeout as upstream's server.go computes it: 2 × syncPeriod. */
export function healthTimeoutFor(syncPeriodMs: number): number {
  return 2 * syncPeriodMs;
}

/** Health of one proxier (one IP family). Times in ms since the epoch. */
export interface ProxierHealth {
  readonly lastUpdatedMs: number;
  readonly healthy: boolean;
}

/** Upstream's ProxyHealth, before JSON encoding. */
export interface ProxyHealth {
  /** Most recent lastUpdated over the families; null (Go's zero time) when none has synced. */
  readonly lastUpdatedMs: number | null;
  readonly currentTimeMs: number;
  /** True when every proxier is healthy. */
  readonly healthy: boolean;
  /** Per family, sorted IPv4 then IPv6 (the order json.Marshal writes map keys). */
  readonly status: ReadonlyMap<IPFamily, ProxierHealth>;
}

/** A response as data, so the HTTP layer is a thin adapter and tests can check it without sockets. */
export interface HealthResponse {
  readonly status: 200 | 503;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

/** The two counters the handlers increment. */
export interface HealthCounters {
  readonly proxyHealthzTotal: Counter;
  readonly proxyLivezTotal: Counter;
}

/** Options of {@link ProxyHealthServer}. */
export interface ProxyHealthServerOptions {
  /** 2 × syncPeriod (see {@link healthTimeoutFor}). */
  readonly healthTimeoutMs: number;
  readonly clock?: Clock;
  /** kubeproxy_proxy_healthz_total / kubeproxy_proxy_livez_total. */
  readonly metrics?: HealthCounters;
  /** edgeproxy extension: reports serving-from-cache in the body (never in the status code). */
  readonly cacheState?: CacheStateSource;
  /**
   * Node eligibility before any Node object is known. Upstream (v1.33+) says not eligible, and waits for its
   * Node at start-up; edgeproxy without an apiserver (manifests mode) may never see one and should pass true.
   */
  readonly nodeEligibleWhenUnknown?: boolean;
}

const JSON_HEADERS = { "Content-Type": "application/json", "X-Content-Type-Options": "nosniff" } as const;
const FAMILIES: readonly IPFamily[] = ["IPv4", "IPv6"];

/** Upstream's NodeEligible for a Node object (null: not known). */
export function nodeEligible(node: Node | null, whenUnknown = false): boolean {
  if (node === null) return whenUnknown;
  if (node.metadata?.deletionTimestamp) return false;
  // The Node is shape-checked upstream of here (lib/source/node_shape.ts); still, /healthz must never fail with a
  // 500 because of object content, so a taints field that is not a list counts as absent.
  const taints: unknown = node.spec?.taints;
  if (!Array.isArray(taints)) return true;
  return !taints.some((t) => typeof t === "object" && t !== null && t.key === TO_BE_DELETED_TAINT);
}

/**
 * State and handlers of the proxy health server. It is also a {@link NodeHandler} for the proxy's own Node,
 * so a source can feed it directly.
 */
export class ProxyHealthServer implements NodeHandler {
  readonly #healthTimeoutMs: number;
  readonly #clock: Clock;
  readonly #metrics: HealthCounters | undefined;
  readonly #cacheState: CacheStateSource | undefined;
  readonly #whenUnknown: boolean;
  readonly #lastUpdated = new Map<IPFamily, number>();
  readonly #oldestPendingQueued = new Map<IPFamily, number>();
  #node: Node | null = null;

  constructor(opts: ProxyHealthServerOptions) {
    if (!(opts.healthTimeoutMs > 0)) {
      throw new Error(`ProxyHealthServer: healthTimeoutMs must be > 0, got ${opts.healthTimeoutMs}`);
    }
    this.#healthTimeoutMs = opts.healthTimeoutMs;
    this.#clock = opts.clock ?? systemClock;
    this.#metrics = opts.metrics;
    this.#cacheState = opts.cacheState;
    this.#whenUnknown = opts.nodeEligibleWhenUnknown ?? false;
  }

  /** The proxier of `family` has programmed the current state: healthy now, nothing pending. */
  updated(family: IPFamily): void {
    this.#oldestPendingQueued.delete(family);
    this.#lastUpdated.set(family, this.#clock.now());
  }

  /** A change for `family` arrived and is not yet programmed; only the oldest such moment is kept. */
  queuedUpdate(family: IPFamily): void {
    if (!this.#oldestPendingQueued.has(family)) this.#oldestPendingQueued.set(family, this.#clock.now());
  }

  /** Upstream's Health(): the proxiers' health, node ignored. */
  health(): ProxyHealth {
    const now = this.#clock.now();
    const status = new Map<IPFamily, ProxierHealth>();
    let lastUpdatedMs: number | null = null;
    let healthy = true;
    for (const family of FAMILIES) {
      const last = this.#lastUpdated.get(family);
      if (last === undefined) continue;
      if (lastUpdatedMs === null || last > lastUpdatedMs) lastUpdatedMs = last;
      const pending = this.#oldestPendingQueued.get(family);
      // Healthy while nothing is pending, or the oldest pending change is not late yet.
      const familyHealthy = pending === undefined || now - pending < this.#healthTimeoutMs;
      if (!familyHealthy) healthy = false;
      status.set(family, { lastUpdatedMs: last, healthy: familyHealthy });
    }
    return { lastUpdatedMs, currentTimeMs: now, healthy, status };
  }

  /** The proxiers' health (what service health checks report as serviceProxyHealthy). */
  isHealthy(): boolean {
    return this.health().healthy;
  }

  /** Sets the proxy's own Node (null when deleted or not known). */
  setNode(node: Node | null): void {
    this.#node = node;
  }

  /** Upstream's NodeEligible(). */
  nodeEligible(): boolean {
    return nodeEligible(this.#node, this.#whenUnknown);
  }

  /** NodeHandler: the Node appeared. */
  onNodeAdd(node: Node): void {
    this.setNode(node);
  }

  /** NodeHandler: the Node changed. */
  onNodeUpdate(_oldNode: Node, node: Node): void {
    this.setNode(node);
  }

  /** NodeHandler: the Node was deleted. */
  onNodeDelete(_node: Node): void {
    this.setNode(null);
  }

  /** NodeHandler: nothing to do. */
  onNodeSynced(): void {}

  /** The `/healthz` answer; counts it. */
  healthz(): HealthResponse {
    const health = this.health();
    const eligible = this.nodeEligible();
    const ok = health.healthy && eligible;
    this.#metrics?.proxyHealthzTotal.inc({ code: ok ? "200" : "503" });
    return this.#respond(health, ok, eligible);
  }

  /** The `/livez` answer (node eligibility ignored); counts it. */
  livez(): HealthResponse {
    const health = this.health();
    this.#metrics?.proxyLivezTotal.inc({ code: health.healthy ? "200" : "503" });
    return this.#respond(health, health.healthy, undefined);
  }

  #respond(health: ProxyHealth, ok: boolean, eligible: boolean | undefined): HealthResponse {
    const body: Record<string, unknown> = {
      lastUpdated: formatRFC3339Nano(ok ? health.currentTimeMs : health.lastUpdatedMs),
      currentTime: formatRFC3339Nano(health.currentTimeMs),
    };
    if (eligible !== undefined) body.nodeEligible = eligible;
    body.healthy = health.healthy;
    if (health.status.size > 0) {
      const status: Record<string, unknown> = {};
      for (const [family, h] of health.status) {
        status[family] = { lastUpdated: formatRFC3339Nano(h.lastUpdatedMs), healthy: h.healthy };
      }
      body.status = status;
    }
    const cache = this.#cacheState?.cacheState();
    if (cache?.servingFromCache) {
      body.servingFromCache = true;
      if (cache.cacheAgeSeconds !== null && Number.isFinite(cache.cacheAgeSeconds)) {
        body.cacheAgeSeconds = Math.max(0, Math.floor(cache.cacheAgeSeconds));
      }
    }
    return { status: ok ? 200 : 503, headers: JSON_HEADERS, body: goJSON(body) };
  }
}

/** Go's http.NotFound, which every kube-proxy mux answers for unknown paths. */
export function goNotFound(): Response {
  return new Response("404 page not found\n", {
    status: 404,
    headers: { "Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff" },
  });
}

/** A {@link HealthResponse} as a web Response. */
export function toResponse(r: HealthResponse): Response {
  return new Response(r.body, { status: r.status, headers: r.headers });
}

/** The health server's routes: `/healthz` and `/livez` (any method, exact paths); everything else 404. */
export function createHealthzApp(server: ProxyHealthServer): Hono {
  const app = new Hono();
  app.all("/healthz", () => toResponse(server.healthz()));
  app.all("/livez", () => toResponse(server.livez()));
  app.notFound(() => goNotFound());
  return app;
}
