/**
 * `--api-mode=poll`: a complete paginated LIST every pollInterval instead of a watch, diffed into the same
 * store as the reflector's, so handlers see the same add/update/delete events (just later). For sites where
 * long-lived watch connections do not survive (proxies, NAT timeouts, flaky links). Errors back off like
 * the reflector's; after a success the next round waits the full interval. A page body over
 * MAX_API_MESSAGE_BYTES (lib/k8s/bounded_read.ts) fails the round, like any other error.
 */
import { sleep } from "./backoff.ts";
import { FailureTracker } from "./failure_tracker.ts";
import type { ReflectorTimings } from "./reflector.ts";
import type { ResourceEventHandler, ResourceSpec } from "./resource.ts";
import { ResourceSink } from "./resource_sink.ts";
import type { ApiStats } from "./stats.ts";
import { type ApiTransport, errorChain, listAll, type Logger, silentLogger } from "./transport.ts";
import type { KubeObject, ObjectStore } from "./store.ts";

/** Options of {@link Poller}. */
export interface PollerOptions<T extends KubeObject> {
  transport: ApiTransport;
  spec: ResourceSpec;
  handler: ResourceEventHandler<T>;
  /** Time between the end of one successful LIST and the start of the next (ms). */
  intervalMs: number;
  /** backoff, maxRetryAfterMs, pageSize and maxMessageBytes are used. */
  timings?: Pick<ReflectorTimings, "backoff" | "maxRetryAfterMs" | "pageSize" | "maxMessageBytes">;
  log?: Logger;
  stats?: ApiStats;
  store?: ObjectStore<T>;
}

/** Periodic LIST loop for one resource. */
export class Poller<T extends KubeObject> {
  readonly sink: ResourceSink<T>;
  readonly #t: ApiTransport;
  readonly #spec: ResourceSpec;
  readonly #intervalMs: number;
  readonly #pageSize: number;
  readonly #maxPageBytes: number | undefined;
  readonly #log: Logger;
  readonly #stats: ApiStats | undefined;
  readonly #failures: FailureTracker;
  readonly #stop = new AbortController();
  #running: Promise<void> | null = null;
  #rounds = 0;

  /** Nothing happens until {@link start}. */
  constructor(opts: PollerOptions<T>) {
    if (!(opts.intervalMs > 0)) throw new Error(`poll interval must be positive, got ${opts.intervalMs} ms`);
    this.#t = opts.transport;
    this.#spec = opts.spec;
    this.#intervalMs = opts.intervalMs;
    this.#pageSize = opts.timings?.pageSize ?? 500;
    this.#maxPageBytes = opts.timings?.maxMessageBytes;
    this.#log = opts.log ?? opts.transport.log ?? silentLogger;
    this.#stats = opts.stats ?? opts.transport.stats;
    this.sink = new ResourceSink(opts.spec, opts.handler, this.#log, this.#stats, opts.store);
    this.#failures = new FailureTracker(
      opts.spec.resource,
      this.#log,
      opts.timings?.backoff,
      opts.timings?.maxRetryAfterMs ?? 60_000,
      () => this.#t.config.credentials.description,
    );
  }

  /** Resolves after the first complete list has been delivered. */
  get synced(): Promise<void> {
    return this.sink.synced;
  }

  /** Starts polling (idempotent). */
  start(): void {
    this.#running ??= this.#run().catch((e) => {
      this.#log.error(`poller ${this.#spec.resource} ended unexpectedly: ${errorChain(e)}`);
    });
  }

  /** Aborts the request in flight and the wait; resolves when the loop has ended. */
  async stop(): Promise<void> {
    this.#stop.abort(new DOMException("poller stopped", "AbortError"));
    await this.#running;
  }

  async #run(): Promise<void> {
    const signal = this.#stop.signal;
    while (!signal.aborted) {
      try {
        if (this.#rounds > 0) this.#stats?.recordRelist(this.#spec.resource);
        this.#rounds++;
        const res = await listAll<unknown>(this.#t, {
          path: this.#spec.path,
          resource: this.#spec.resource,
          labelSelector: this.#spec.labelSelector,
          fieldSelector: this.#spec.fieldSelector,
          limit: this.#pageSize,
          maxPageBytes: this.#maxPageBytes,
          signal,
          log: this.#log,
        });
        if (signal.aborted) return;
        this.#failures.ok("poll");
        const n = this.sink.applyList(res.items);
        this.#log.debug(`poll ${this.#spec.resource}: ${res.items.length} objects, ${n} changes`);
      } catch (e) {
        if (signal.aborted) return;
        await this.#failures.fail("poll", e, signal);
        continue;
      }
      await sleep(this.#intervalMs, signal);
    }
  }
}
