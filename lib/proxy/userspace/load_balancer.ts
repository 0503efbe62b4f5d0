/**
 * The userspace mode's load balancer (upstream pkg/proxy/userspace/roundrobin.go LoadBalancerRR), pure: per
 * service port, round robin over the endpoints the core's endpoint selection (lib/proxy/topology.ts) gives
 * it, ClientIP session affinity with the Service's timeout, and a dead-endpoint backoff (beyond upstream:
 * after a failed dial an endpoint is skipped for a while, so a backend that drops SYNs does not cost a dial
 * timeout on every round-robin visit). Updating endpoints never touches established connections: the
 * balancer only answers "where does the next connection go".
 *
 * Traffic to the cluster IP uses the internal pool (internalTrafficPolicy), traffic to a node port,
 * external IP or load-balancer IP the external pool (externalTrafficPolicy) unless it comes from a pod or
 * the node (then the cluster pool), as the iptables mode's KUBE-SVC and KUBE-EXT chains do.
 */
import type { EndpointInfo, ServicePortInfo } from "../types.ts";
import { categorizeEndpoints, type CategorizeOptions } from "../topology.ts";

/**
 * Which of a service port's pools a connection uses: to the cluster IP (internalTrafficPolicy), to an
 * external destination (externalTrafficPolicy), or to an external destination from a pod or the node itself
 * (cluster endpoints, as upstream's KUBE-EXT chain short-circuits local traffic to KUBE-SVC).
 */
export type TrafficKind = "internal" | "external" | "cluster";

/** Default time a failed endpoint is skipped by round robin. */
export const DEFAULT_DEAD_ENDPOINT_BACKOFF_MS = 5_000;

/** Options of a {@link LoadBalancerRR}. */
export interface LoadBalancerOptions {
  /** This node's name (endpoint locality, topology hints). */
  readonly nodeName: string;
  /** Milliseconds now (injected so tests control affinity expiry and backoff). */
  readonly now: () => number;
  /** How long a failed endpoint is skipped (ms). */
  readonly deadEndpointBackoffMs?: number;
  readonly categorize?: CategorizeOptions;
}

interface Affinity {
  endpoint: string;
  lastUsedMs: number;
}

interface Pool {
  endpoints: readonly EndpointInfo[];
  /** Round-robin cursor: index of the next endpoint to try. */
  index: number;
  affinity: Map<string, Affinity>;
}

interface ServicePortState {
  stickyMs: number;
  internal: Pool;
  external: Pool;
  cluster: Pool;
}

function newPool(endpoints: readonly EndpointInfo[]): Pool {
  return { endpoints, index: 0, affinity: new Map() };
}

function sameEndpoints(a: readonly EndpointInfo[], b: readonly EndpointInfo[]): boolean {
  return a.length === b.length && a.every((ep, i) => ep.endpoint === b[i].endpoint);
}

/** Per-service-port round robin with ClientIP affinity and dead-endpoint backoff. */
export class LoadBalancerRR {
  readonly #o: LoadBalancerOptions;
  readonly #backoffMs: number;
  readonly #services = new Map<string, ServicePortState>();
  /** "ip:port" → time until which round robin skips it. */
  readonly #dead = new Map<string, number>();

  constructor(o: LoadBalancerOptions) {
    this.#o = o;
    this.#backoffMs = o.deadEndpointBackoffMs ?? DEFAULT_DEAD_ENDPOINT_BACKOFF_MS;
  }

  /**
   * Sets a service port's endpoints (its full list, as the endpoints map holds it): selects the internal
   * and external pools with upstream's CategorizeEndpoints. A pool whose endpoint list is unchanged keeps
   * its cursor; affinity entries survive only while their endpoint is still in the pool (upstream
   * removeSessionAffinityByEndpoint).
   */
  onEndpointsUpdate(
    key: string,
    svc: ServicePortInfo,
    endpoints: readonly EndpointInfo[],
    nodeLabels: Readonly<Record<string, string>>,
  ): void {
    const cat = categorizeEndpoints(endpoints, svc, this.#o.nodeName, nodeLabels, this.#o.categorize);
    const internal = svc.internalPolicyLocal ? cat.localEndpoints : cat.clusterEndpoints;
    const external = svc.externalPolicyLocal ? cat.localEndpoints : cat.clusterEndpoints;
    const stickyMs = svc.stickyMaxAgeSeconds * 1000;
    const prev = this.#services.get(key);
    if (!prev) {
      this.#services.set(key, {
        stickyMs,
        internal: newPool(internal),
        external: newPool(external),
        cluster: newPool(cat.clusterEndpoints),
      });
      return;
    }
    prev.stickyMs = stickyMs;
    updatePool(prev.internal, internal, stickyMs);
    updatePool(prev.external, external, stickyMs);
    updatePool(prev.cluster, cat.clusterEndpoints, stickyMs);
  }

  /** Forgets a service port (its Service or port was removed). */
  deleteService(key: string): void {
    this.#services.delete(key);
  }

  /** Service port keys the balancer knows. */
  services(): IterableIterator<string> {
    return this.#services.keys();
  }

  /** True when the service port has an endpoint in the pool of `kind`. */
  hasEndpoints(key: string, kind: TrafficKind): boolean {
    const s = this.#services.get(key);
    return s !== undefined && s[kind].endpoints.length > 0;
  }

  /**
   * The endpoint for the next connection from `clientIP` (upstream NextEndpoint), or null when the pool is
   * empty. With affinity, a client keeps its endpoint until the timeout passes without use;
   * `resetAffinity` (a retry after a failed dial) picks a new one. Round robin skips endpoints in backoff
   * unless every endpoint is in backoff.
   */
  nextEndpoint(key: string, kind: TrafficKind, clientIP: string, resetAffinity = false): EndpointInfo | null {
    const s = this.#services.get(key);
    if (!s) return null;
    const pool = s[kind];
    const n = pool.endpoints.length;
    if (n === 0) return null;
    const now = this.#o.now();
    const sticky = s.stickyMs > 0 && clientIP !== "";
    if (sticky && !resetAffinity) {
      const a = pool.affinity.get(clientIP);
      if (a && now - a.lastUsedMs < s.stickyMs) {
        const ep = pool.endpoints.find((e) => e.endpoint === a.endpoint);
        if (ep && !this.#isDead(ep.endpoint, now)) {
          a.lastUsedMs = now;
          return ep;
        }
      }
    }
    let chosen: EndpointInfo | null = null;
    for (let i = 0; i < n; i++) {
      const ep = pool.endpoints[(pool.index + i) % n];
      if (!this.#isDead(ep.endpoint, now)) {
        chosen = ep;
        pool.index = (pool.index + i + 1) % n;
        break;
      }
    }
    if (chosen === null) {
      // Every endpoint is backed off: plain round robin, so a recovered backend is found.
      chosen = pool.endpoints[pool.index % n];
      pool.index = (pool.index + 1) % n;
    }
    if (sticky) pool.affinity.set(clientIP, { endpoint: chosen.endpoint, lastUsedMs: now });
    return chosen;
  }

  /** Records a failed dial to `endpoint` ("ip:port"): round robin skips it for the backoff period. */
  markDialFailed(endpoint: string): void {
    if (this.#backoffMs > 0) this.#dead.set(endpoint, this.#o.now() + this.#backoffMs);
  }

  /** Records a successful dial: the endpoint leaves backoff at once. */
  markDialSucceeded(endpoint: string): void {
    this.#dead.delete(endpoint);
  }

  /** Drops expired affinity and backoff entries (upstream CleanupStaleStickySessions). */
  cleanupStale(): void {
    const now = this.#o.now();
    for (const s of this.#services.values()) {
      for (const pool of [s.internal, s.external, s.cluster]) {
        for (const [ip, a] of pool.affinity) if (now - a.lastUsedMs >= s.stickyMs) pool.affinity.delete(ip);
      }
    }
    for (const [ep, until] of this.#dead) if (until <= now) this.#dead.delete(ep);
  }

  #isDead(endpoint: string, now: number): boolean {
    const until = this.#dead.get(endpoint);
    return until !== undefined && until > now;
  }
}

function updatePool(pool: Pool, endpoints: readonly EndpointInfo[], stickyMs: number): void {
  if (stickyMs === 0) pool.affinity.clear();
  if (sameEndpoints(pool.endpoints, endpoints)) {
    pool.endpoints = endpoints; // flags may have changed; order and identity did not
    return;
  }
  pool.endpoints = endpoints;
  pool.index = endpoints.length === 0 ? 0 : pool.index % endpoints.length;
  const present = new Set(endpoints.map((e) => e.endpoint));
  for (const [ip, a] of pool.affinity) if (!present.has(a.endpoint)) pool.affinity.delete(ip);
}
