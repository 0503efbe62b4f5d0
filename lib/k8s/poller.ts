/**
 * `--api-mode=poll`, for sites where long-lived connections do not survive (NAT and proxy idle timeouts,
 * flaky links): the reflector's list+watch loop (lib/k8s/reflector.ts) with bounded watches. After the
 * first LIST, each watch resumes from the last resourceVersion with `timeoutSeconds` = the poll interval
 * and bookmarks on, and the next one starts as soon as it ends; so the link carries what changed, not the
 * whole cluster every interval, and no connection idles longer than the interval. A full LIST happens
 * only at start, after a 410, or every `relistPeriodMs` when asked. When a proxy on the way buffers whole
 * responses (each watch's data arrives only as it ends), the reflector falls back to LISTs with
 * resourceVersion=0 every interval and logs so once, trying a watch again every `watchRetryMs`. Handlers
 * see the same events as in watch mode.
 *
 * Over HTTP/2 the pollers of one transport share one connection and one {@link PollLink}: once a watch
 * streamed, all but the keeper are bounded at `relaxedFactor` × the interval (lib/k8s/poll_link.ts). The
 * keeper is the EndpointSlices watch by default: the resource that changes most often, so should the link
 * start to buffer, the most frequent changes still wait at most one interval and the buffering is noticed
 * within one interval.
 */
import { Reflector, type ReflectorTimings } from "./reflector.ts";
import { ENDPOINTSLICES_RESOURCE, type ResourceEventHandler, type ResourceSpec } from "./resource.ts";
import type { ResourceSink } from "./resource_sink.ts";
import type { ApiStats } from "./stats.ts";
import type { ApiTransport, Logger } from "./transport.ts";
import type { KubeObject, ObjectStore } from "./store.ts";
import { type PollLink, pollLinkFor } from "./poll_link.ts";

/** Options of {@link Poller}. */
export interface PollerOptions<T extends KubeObject> {
  transport: ApiTransport;
  spec: ResourceSpec;
  handler: ResourceEventHandler<T>;
  /** --poll-interval (ms): the longest a watch stays open, and the LIST period after a fallback. */
  intervalMs: number;
  /** A full LIST this often even while watches work (ms; unset or 0: never). */
  relistPeriodMs?: number;
  /** After a fallback to LISTs, try a watch again this often (ms; default 10 min). */
  watchRetryMs?: number;
  /** Shared by the pollers of one connection (default: the transport's own). */
  link?: PollLink;
  /** Ends every interval whatever the link (default: true for EndpointSlices, false otherwise). */
  keeper?: boolean;
  /** Non-keepers over HTTP/2 are bounded at this many intervals once the link streams (default 3). */
  relaxedFactor?: number;
  /** The reflector's timings (watchTimeout* are replaced by the interval). */
  timings?: ReflectorTimings;
  log?: Logger;
  stats?: ApiStats;
  store?: ObjectStore<T>;
}

/** Bounded-watch loop for one resource; see the module header. */
export class Poller<T extends KubeObject> {
  readonly sink: ResourceSink<T>;
  readonly #r: Reflector<T>;

  /** Nothing happens until {@link start}. Throws when the interval is not positive. */
  constructor(opts: PollerOptions<T>) {
    if (!(opts.intervalMs > 0)) throw new Error(`poll interval must be positive, got ${opts.intervalMs} ms`);
    this.#r = new Reflector<T>({
      transport: opts.transport,
      spec: opts.spec,
      handler: opts.handler,
      timings: opts.timings,
      log: opts.log,
      stats: opts.stats,
      store: opts.store,
      bounded: {
        intervalMs: opts.intervalMs,
        relistPeriodMs: opts.relistPeriodMs,
        watchRetryMs: opts.watchRetryMs,
        link: opts.link ?? pollLinkFor(opts.transport),
        keeper: opts.keeper ?? opts.spec.resource === ENDPOINTSLICES_RESOURCE.resource,
        relaxedFactor: opts.relaxedFactor,
      },
    });
    this.sink = this.#r.sink;
  }

  /** Resolves after the first complete list has been delivered. */
  get synced(): Promise<void> {
    return this.#r.synced;
  }

  /** True once buffered watches made it fall back to resourceVersion=0 LISTs. */
  get listing(): boolean {
    return this.#r.listing;
  }

  /** The resourceVersion the next watch starts from. */
  get lastResourceVersion(): string {
    return this.#r.lastResourceVersion;
  }

  /** Starts polling (idempotent). */
  start(): void {
    this.#r.start();
  }

  /** Aborts the request in flight and the wait; resolves when the loop has ended. */
  async stop(): Promise<void> {
    await this.#r.stop();
  }
}
