/**
 * Counters about edgeproxy's conversation with the apiserver, for the metrics to expose (edgeproxy_apiserver_*
 * read the snapshot; client-go's rest_client_* listen to each request, see {@link ApiStats.onRequest}).
 * Plain numbers only; no Prometheus code here.
 */

/** Request kinds counted separately (client-go's verbs as kube-proxy uses them). */
export type ApiVerb = "list" | "watch" | "get" | "create";

/** Code label of a request that never got an HTTP status (refused, reset, TLS, timeout), as in client-go. */
export const ERROR_CODE = "<error>";

/** Counters of one resource ("services", "endpointslices", "nodes", "events"). */
export interface ResourceStatsSnapshot {
  /** Watch streams (re)opened after the first. */
  watchRestarts: number;
  /** LIST attempts after the first (after 410 Gone, retries after list errors, poll rounds). */
  relists: number;
  /** Watch events applied (ADDED/MODIFIED/DELETED), bookmarks excluded. */
  watchEvents: number;
  /** BOOKMARK events seen. */
  bookmarks: number;
  /** Lines or objects dropped as malformed. */
  malformed: number;
  /** Last time (ms since epoch) a request for this resource got any HTTP answer or watch data. */
  lastContactMs: number | null;
}

/** One row of the request counter. */
export interface RequestCount {
  resource: string;
  verb: ApiVerb;
  /** HTTP status as a string, or {@link ERROR_CODE}. */
  code: string;
  count: number;
}

/** Everything {@link ApiStats.snapshot} returns. */
export interface ApiStatsSnapshot {
  /** Rows sorted by resource, verb, code. */
  requests: RequestCount[];
  /** Keyed by resource. */
  resources: Record<string, ResourceStatsSnapshot>;
  /** Latest contact over all resources (ms since epoch), null before the first. */
  lastContactMs: number | null;
}

/** One finished request, as {@link ApiStats.onRequest} listeners receive it. */
export interface RequestEvent {
  readonly resource: string;
  readonly verb: ApiVerb;
  /** HTTP status as a string, or {@link ERROR_CODE}. */
  readonly code: string;
  /** Time from sending the request to the response headers (ms); null when no response arrived. */
  readonly latencyMs: number | null;
  /** The apiserver's `host[:port]`, as client-go's `host` label; "" before any server is known. */
  readonly host: string;
}

/** Mutable counters; one instance per apiserver connection. */
export class ApiStats {
  readonly #now: () => number;
  readonly #requests = new Map<string, RequestCount>();
  readonly #resources = new Map<string, ResourceStatsSnapshot>();
  #lastContact: number | null = null;
  #host = "";
  readonly #listeners = new Set<(e: RequestEvent) => void>();

  /** `now` returns wall-clock ms (tests pass a fake). */
  constructor(now: () => number = () => Date.now()) {
    this.#now = now;
  }

  #res(resource: string): ResourceStatsSnapshot {
    let r = this.#resources.get(resource);
    if (!r) {
      r = { watchRestarts: 0, relists: 0, watchEvents: 0, bookmarks: 0, malformed: 0, lastContactMs: null };
      this.#resources.set(resource, r);
    }
    return r;
  }

  /**
   * Counts one finished request; a numeric code also counts as contact. `latencyMs` is the time to the
   * response headers; `server` the apiserver URL the request went to (remembered for later requests).
   */
  recordRequest(
    resource: string,
    verb: ApiVerb,
    code: number | typeof ERROR_CODE,
    latencyMs?: number,
    server?: string,
  ): void {
    if (server !== undefined) this.#host = hostOf(server) ?? this.#host;
    const c = String(code);
    const key = `${resource}\u0000${verb}\u0000${c}`;
    const row = this.#requests.get(key);
    if (row) row.count++;
    else this.#requests.set(key, { resource, verb, code: c, count: 1 });
    if (code !== ERROR_CODE) this.recordContact(resource);
    if (this.#listeners.size > 0) {
      const e: RequestEvent = { resource, verb, code: c, latencyMs: latencyMs ?? null, host: this.#host };
      for (const l of this.#listeners) l(e);
    }
  }

  /** Calls `listener` after every {@link recordRequest}; returns a function that removes it. */
  onRequest(listener: (e: RequestEvent) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Notes that the apiserver answered for `resource` just now. */
  recordContact(resource: string): void {
    const t = this.#now();
    this.#res(resource).lastContactMs = t;
    this.#lastContact = t;
  }

  /** Counts a watch stream opened again after the first. */
  recordWatchRestart(resource: string): void {
    this.#res(resource).watchRestarts++;
  }

  /** Counts a LIST attempt after the first. */
  recordRelist(resource: string): void {
    this.#res(resource).relists++;
  }

  /** Counts an applied watch event, or a bookmark. */
  recordWatchEvent(resource: string, bookmark = false): void {
    if (bookmark) this.#res(resource).bookmarks++;
    else this.#res(resource).watchEvents++;
  }

  /** Counts a dropped malformed line or object. */
  recordMalformed(resource: string): void {
    this.#res(resource).malformed++;
  }

  /** Latest contact (ms since epoch) over all resources, null before the first. */
  lastContact(): number | null {
    return this.#lastContact;
  }

  /** A deep copy of every counter, in a stable order. */
  snapshot(): ApiStatsSnapshot {
    const requests = [...this.#requests.values()].map((r) => ({ ...r })).sort((a, b) =>
      a.resource.localeCompare(b.resource) || a.verb.localeCompare(b.verb) || a.code.localeCompare(b.code)
    );
    const resources: Record<string, ResourceStatsSnapshot> = {};
    for (const k of [...this.#resources.keys()].sort()) resources[k] = { ...this.#resources.get(k)! };
    return { requests, resources, lastContactMs: this.#lastContact };
  }
}

/** `host[:port]` of a URL (as Go's url.URL.Host), or null when it does not parse. */
function hostOf(server: string): string | null {
  try {
    return new URL(server).host;
  } catch {
    return null;
  }
}
