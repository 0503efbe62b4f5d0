/**
 * edgeproxy_* metrics: what upstream kube-proxy does not have because it never runs without the apiserver.
 * The apiserver numbers are read at scrape time from the client's stats object (lib/k8s/stats.ts), the
 * cache state from whoever decides to program from the state cache; drift repairs are counted directly.
 */
import type { Counter, Registry } from "./registry.ts";

/**
 * The part of the apiserver client's statistics the metrics read (structurally what lib/k8s/stats.ts's
 * `ApiStats.snapshot()` returns).
 */
export interface ApiserverStatsSource {
  snapshot(): {
    readonly requests: ReadonlyArray<
      { readonly verb: string; readonly code: string; readonly resource: string; readonly count: number }
    >;
    readonly resources: Readonly<
      Record<string, { readonly watchRestarts: number; readonly relists: number }>
    >;
    /** Latest answer from the apiserver (ms since epoch), null before the first. */
    readonly lastContactMs: number | null;
  };
}

/** Whether rules are currently programmed from the last-known-state cache rather than a live apiserver view. */
export interface CacheState {
  readonly servingFromCache: boolean;
  /** Age of the state being served (seconds since it was last confirmed by the apiserver); null if unknown. */
  readonly cacheAgeSeconds: number | null;
}

/** Supplies {@link CacheState} on demand (metrics scrape, /healthz body). */
export interface CacheStateSource {
  cacheState(): CacheState;
}

/** Options of {@link createEdgeproxyMetrics}. */
export interface EdgeproxyMetricsOptions {
  readonly apiserverStats?: ApiserverStatsSource;
  readonly cacheState?: CacheStateSource;
}

/** The edgeproxy_* metrics that are updated directly (the others are computed at scrape time). */
export interface EdgeproxyMetrics {
  /** edgeproxy_drift_repairs_total{ip_family}: syncs forced because the kernel's rules differed from ours. */
  readonly driftRepairsTotal: Counter;
}

/**
 * Registers the edgeproxy_* families. Without `apiserverStats` the apiserver families export nothing;
 * without `cacheState` the cache families export nothing.
 */
export function createEdgeproxyMetrics(
  registry: Registry,
  opts: EdgeproxyMetricsOptions = {},
): EdgeproxyMetrics {
  const stats = opts.apiserverStats;
  const perResource = (
    name: string,
    help: string,
    pick: (r: { watchRestarts: number; relists: number }) => number,
  ) =>
    registry.collector({
      name,
      help,
      type: "counter",
      labelNames: ["resource"],
      collect: () =>
        stats
          ? Object.entries(stats.snapshot().resources).map(([resource, r]) => ({
            labels: { resource },
            value: pick(r),
          }))
          : [],
    });

  registry.collector({
    name: "edgeproxy_apiserver_requests_total",
    help:
      "Requests edgeproxy made to the apiserver, by verb, resource and HTTP status code (<error> when no response arrived).",
    type: "counter",
    labelNames: ["verb", "code", "resource"],
    collect: () =>
      stats
        ? stats.snapshot().requests.map((r) => ({
          labels: { verb: r.verb, code: r.code, resource: r.resource },
          value: r.count,
        }))
        : [],
  });
  perResource(
    "edgeproxy_apiserver_watch_restarts_total",
    "Watch streams reopened after the first, by resource.",
    (r) => r.watchRestarts,
  );
  perResource(
    "edgeproxy_apiserver_relists_total",
    "Full lists after the first (expired resource version, watch errors, poll rounds), by resource.",
    (r) => r.relists,
  );
  registry.collector({
    name: "edgeproxy_apiserver_last_contact_timestamp_seconds",
    help: "Last time the apiserver answered (unix seconds); 0 if it never did.",
    type: "gauge",
    collect: () => {
      if (!stats) return [];
      const ms = stats.snapshot().lastContactMs;
      return [{ value: ms === null ? 0 : ms / 1000 }];
    },
  });

  const cache = opts.cacheState;
  registry.collector({
    name: "edgeproxy_serving_from_cache",
    help:
      "1 while rules are programmed from the last-known-state cache because the apiserver is unavailable, else 0.",
    type: "gauge",
    collect: () => (cache ? [{ value: cache.cacheState().servingFromCache ? 1 : 0 }] : []),
  });
  registry.collector({
    name: "edgeproxy_state_cache_age_seconds",
    help: "Age of the cached state in seconds (time since the apiserver last confirmed it).",
    type: "gauge",
    collect: () => {
      const age = cache?.cacheState().cacheAgeSeconds ?? null;
      return age === null ? [] : [{ value: age }];
    },
  });

  return {
    driftRepairsTotal: registry.counter({
      name: "edgeproxy_drift_repairs_total",
      help: "Syncs forced because the rules in the kernel no longer matched what edgeproxy last wrote.",
      labelNames: ["ip_family"],
    }),
  };
}
