/**
 * A list+watch loop for one resource, modelled on client-go's Reflector (tools/cache/reflector.go):
 * - a LIST diffed against the store (adds, updates, deletes; the first list ends with `onSynced`), at the
 *   resourceVersion client-go's `relistResourceVersion` picks: "0" for the first one (served by the
 *   apiserver's watch cache in one response, `limit` ignored; paginated when the cache is off), the last
 *   resourceVersion seen for later ones (from the watch cache, so sent without `limit`), and "" (a
 *   consistent read, paginated) after such a list failed with 410 or "Too large resource version", or
 *   when one response would exceed {@link MAX_API_MESSAGE_BYTES};
 * - a WATCH from the list's resourceVersion with allowWatchBookmarks and timeoutSeconds in [300, 600)
 *   (one watch: lib/k8s/watch_stream.ts);
 * - a watch that was established and then ended (server-side timeout, EOF, connection reset or any other
 *   broken stream, the watchdog) after it ran at least 1 s or delivered something is resumed at once from
 *   the last resourceVersion seen (events and bookmarks): no backoff, no relist, and the backoff starts
 *   over. A flaky link that drops the connection every few seconds costs one round trip per drop;
 * - after 410 Gone (HTTP 410, or an ERROR event with code 410 inside a 200 stream), a new LIST at once
 *   whose diff delivers exactly what changed while away;
 * - exponential backoff with jitter (800 ms → 30 s, reset after 2 min without failures;
 *   lib/k8s/failure_tracker.ts) only for attempts that fail: connect errors, 5xx, 429 (at least its
 *   Retry-After), 401/403 (logged once per streak), ERROR events, a line or page over
 *   {@link MAX_API_MESSAGE_BYTES}, and "very short watches" (ended within 1 s with nothing received);
 * - a watch that delivered a garbled line resumes from the last good resourceVersion after a short pause,
 *   and backs off if garbage keeps coming.
 * With {@link BoundedWatchOptions} (`--api-mode=poll`, for links that drop long-lived connections) the
 * same loop runs with every watch bounded by `timeoutSeconds` = the poll interval, so no connection
 * stays idle longer than that, and a full LIST happens only at start, after a 410, or every
 * `relistPeriodMs` when set. When several watches in a row delivered their data only as they ended (a
 * proxy on the way buffers whole responses, so a watch is no better than a late list), it logs so once
 * and falls back to LISTs with resourceVersion=0 (served from the apiserver's watch cache) every interval,
 * trying one watch again every `watchRetryMs` (the proxy may have gone). Over HTTP/2, once the shared
 * {@link PollLink} has seen a watch stream, watches other than the keeper are bounded at `relaxedFactor` ×
 * the interval (lib/k8s/poll_link.ts says why).
 * `stop()` aborts everything and leaves no timer behind.
 */
import { type Backoff, type BackoffOptions, sleep } from "./backoff.ts";
import { MAX_API_MESSAGE_BYTES, MAX_WATCH_EVENT_BYTES } from "./bounded_read.ts";
import { FailureTracker } from "./failure_tracker.ts";
import type { ResourceEventHandler, ResourceSpec } from "./resource.ts";
import { ResourceSink } from "./resource_sink.ts";
import type { ApiStats } from "./stats.ts";
import { MessageTooLargeError } from "./bounded_read.ts";
import {
  type ApiTransport,
  errorChain,
  isExpired,
  isTooLargeResourceVersion,
  listAll,
  type Logger,
  silentLogger,
} from "./transport.ts";
import type { KubeObject, ObjectStore } from "./store.ts";
import { type WatchCursor, watchOnce, type WatchOutcome } from "./watch_stream.ts";
import type { PollLink } from "./poll_link.ts";

/** Tunables, all with production defaults; tests shorten them. */
export interface ReflectorTimings {
  backoff?: BackoffOptions;
  /** Lower bound of watch timeoutSeconds (default 300). */
  watchTimeoutMinSeconds?: number;
  /** Upper bound, exclusive (default 600). */
  watchTimeoutMaxSeconds?: number;
  /** Silence tolerated beyond the watch's timeout before the watchdog reconnects (ms, default 30 000). */
  watchdogMarginMs?: number;
  /** Replaces timeout + margin as the silence limit (ms; tests). */
  watchdogMs?: number;
  /** A watch closing sooner than this with nothing received counts as a failure (ms, default 1000). */
  shortWatchMs?: number;
  /** Longest Retry-After honoured (ms, default 60 000). */
  maxRetryAfterMs?: number;
  /** LIST page size (default 500). */
  pageSize?: number;
  /** Largest LIST page body (bytes, default {@link MAX_API_MESSAGE_BYTES}); also the event line limit when set. */
  maxMessageBytes?: number;
  /** Largest watch event line (bytes; default maxMessageBytes when set, else {@link MAX_WATCH_EVENT_BYTES}). */
  maxEventBytes?: number;
  /** Random source for timeoutSeconds (tests). */
  random?: () => number;
}

/** Poll mode: bounded watches, and when to give them up for LISTs. */
export interface BoundedWatchOptions {
  /**
   * --poll-interval (ms): every watch's timeoutSeconds (rounded, at least 1 s), so no connection is idle
   * longer (a relaxed watch: `relaxedFactor` × that); also the period of the resourceVersion=0 LISTs after
   * a fallback.
   */
  intervalMs: number;
  /** A full LIST this often even while watches work (ms; 0 or unset: only at start and after a 410). */
  relistPeriodMs?: number;
  /** Watches in a row whose data arrived only as they ended before falling back to LISTs (default 3). */
  bufferedLimit?: number;
  /** After a fallback, try one bounded watch again this often (ms, default 10 min): the proxy may be gone. */
  watchRetryMs?: number;
  /** Shared with the other watches of the same connection; unset: every watch is bounded at the interval. */
  link?: PollLink;
  /** This watch ends every interval whatever the link: it keeps the shared connection from idling. */
  keeper?: boolean;
  /** Non-keeper watches over HTTP/2 are bounded at this many intervals once the link streams (default 3). */
  relaxedFactor?: number;
}

/** Options of {@link Reflector}. */
export interface ReflectorOptions<T extends KubeObject> {
  transport: ApiTransport;
  spec: ResourceSpec;
  handler: ResourceEventHandler<T>;
  timings?: ReflectorTimings;
  /** Poll mode (bounded watches); unset: plain list+watch. */
  bounded?: BoundedWatchOptions;
  log?: Logger;
  stats?: ApiStats;
  store?: ObjectStore<T>;
}

/** Pause before resuming a watch that delivered a garbled line. */
const GARBLED_RESUME_MS = 500;
/** A second garbled line within this window counts as a failure (backoff). */
const GARBLED_REPEAT_MS = 10_000;
/** Data that arrives this close to the end of a watch arrived "at the end" (buffering detection). */
const AT_END_MS = 250;

/** How a bounded watch's data travelled, judged from a watch the server ended at its timeout. */
export type WatchDelivery = "buffered" | "streamed" | "unknown";

/**
 * Buffering detection for bounded watches, and its opposite: a watch whose headers, or whose first data,
 * arrived only as it ended (in the second half of its `timeoutSeconds`, within {@link AT_END_MS} of its
 * end) was held back by something on the way; one whose data arrived well before its end streamed. A cut
 * connection, or a watch that received nothing early enough to tell, says nothing either way.
 */
export function watchDelivery(
  out: Extract<WatchOutcome, { kind: "ended" }>,
  timeoutSeconds: number,
): WatchDelivery {
  if (!out.closedByServer) return "unknown";
  const halfMs = timeoutSeconds * 500;
  if (out.headersMs >= halfMs) return "buffered";
  if (out.firstChunkMs === null) return "unknown";
  const atEnd = out.lastedMs - out.firstChunkMs <= AT_END_MS;
  if (!atEnd) return "streamed";
  return out.firstChunkMs >= halfMs ? "buffered" : "unknown";
}

/** List+watch loop for one resource; see the module header. */
export class Reflector<T extends KubeObject> {
  readonly sink: ResourceSink<T>;
  readonly #t: ApiTransport;
  readonly #spec: ResourceSpec;
  readonly #timings:
    & Required<Omit<ReflectorTimings, "backoff" | "watchdogMs">>
    & Pick<ReflectorTimings, "watchdogMs">;
  readonly #log: Logger;
  readonly #stats: ApiStats | undefined;
  readonly #failures: FailureTracker;
  readonly #stop = new AbortController();
  #running: Promise<void> | null = null;
  /** Advanced by the watches' events and bookmarks. */
  readonly #cursor: WatchCursor = { rv: "" };
  #lists = 0;
  #watches = 0;
  #listedAt = Number.NEGATIVE_INFINITY;
  #garbledAt = Number.NEGATIVE_INFINITY;
  readonly #bounded:
    | Required<Omit<BoundedWatchOptions, "link">> & Pick<BoundedWatchOptions, "link">
    | undefined;
  /** timeoutSeconds of the watch in flight (or the last one). */
  #watchTimeoutS = 0;
  /** Bounded watches in a row that looked buffered. */
  #bufferedInARow = 0;
  /** Watches gave way to resourceVersion=0 LISTs every interval. */
  #listing = false;
  /** When the fallback (or its last failed retry) began. */
  #listingSince = 0;
  /** A watch is being tried again after a fallback. */
  #retrying = false;
  #bufferingWarned = false;
  /**
   * client-go's isLastSyncResourceVersionUnavailable: a list at our resourceVersion failed with 410 or
   * "Too large resource version", so the next one is a consistent read ("") until a list succeeds.
   */
  #rvUnavailable = false;
  /**
   * client-go's paginatedResult: a resourceVersion=0 list came back in pages, so the watch cache is off
   * for this resource and later lists page too.
   */
  #paginated = false;
  /**
   * One response of the whole list was over the size limit: every later list pages, and "0" (which the
   * watch cache answers in one response whatever the limit) becomes a consistent read.
   */
  #oversize = false;

  /** Nothing happens until {@link start}. */
  constructor(opts: ReflectorOptions<T>) {
    this.#t = opts.transport;
    this.#spec = opts.spec;
    this.#log = opts.log ?? opts.transport.log ?? silentLogger;
    this.#stats = opts.stats ?? opts.transport.stats;
    const t = opts.timings ?? {};
    this.#timings = {
      watchTimeoutMinSeconds: t.watchTimeoutMinSeconds ?? 300,
      watchTimeoutMaxSeconds: t.watchTimeoutMaxSeconds ?? 600,
      watchdogMarginMs: t.watchdogMarginMs ?? 30_000,
      watchdogMs: t.watchdogMs,
      shortWatchMs: t.shortWatchMs ?? 1000,
      maxRetryAfterMs: t.maxRetryAfterMs ?? 60_000,
      pageSize: t.pageSize ?? 500,
      maxMessageBytes: t.maxMessageBytes ?? MAX_API_MESSAGE_BYTES,
      maxEventBytes: t.maxEventBytes ?? t.maxMessageBytes ?? MAX_WATCH_EVENT_BYTES,
      random: t.random ?? Math.random,
    };
    if (opts.bounded) {
      if (!(opts.bounded.intervalMs > 0)) {
        throw new Error(`poll interval must be positive, got ${opts.bounded.intervalMs} ms`);
      }
      this.#bounded = {
        intervalMs: opts.bounded.intervalMs,
        relistPeriodMs: opts.bounded.relistPeriodMs ?? 0,
        bufferedLimit: opts.bounded.bufferedLimit ?? 3,
        watchRetryMs: opts.bounded.watchRetryMs ?? 10 * 60_000,
        link: opts.bounded.link,
        keeper: opts.bounded.keeper ?? false,
        relaxedFactor: opts.bounded.relaxedFactor ?? 3,
      };
      if (!(this.#bounded.relaxedFactor >= 1)) {
        throw new Error(`relaxed watch factor must be at least 1, got ${this.#bounded.relaxedFactor}`);
      }
    }
    this.sink = new ResourceSink(opts.spec, opts.handler, this.#log, this.#stats, opts.store);
    this.#failures = new FailureTracker(
      opts.spec.resource,
      this.#log,
      t.backoff,
      this.#timings.maxRetryAfterMs,
      () => this.#t.config.credentials.description,
    );
  }

  /** Poll mode only: true once buffered watches made it fall back to resourceVersion=0 LISTs. */
  get listing(): boolean {
    return this.#listing;
  }

  /** Resolves after the first complete list has been delivered. */
  get synced(): Promise<void> {
    return this.sink.synced;
  }

  /** The resourceVersion the next watch starts from. */
  get lastResourceVersion(): string {
    return this.#cursor.rv;
  }

  /** The backoff state (tests). */
  get backoff(): Backoff {
    return this.#failures.backoff;
  }

  /** Starts the loop (idempotent). */
  start(): void {
    if (this.#running) return;
    // Without a running keeper, nobody else keeps the shared connection busy: nothing relaxes.
    const b = this.#bounded;
    const unkeep = b?.keeper && b.link ? b.link.addKeeper() : () => {};
    this.#running = this.#run().catch((e) => {
      // Unreachable by design; never let a bug become an unhandled rejection.
      this.#log.error(`reflector ${this.#spec.resource} ended unexpectedly: ${errorChain(e)}`);
    }).finally(unkeep);
  }

  /** Aborts the list or watch in flight and any wait; resolves when the loop has ended. */
  async stop(): Promise<void> {
    this.#stop.abort(new DOMException("reflector stopped", "AbortError"));
    await this.#running;
  }

  async #run(): Promise<void> {
    const signal = this.#stop.signal;
    let needList = true;
    while (!signal.aborted) {
      if (this.#listing) {
        if (Date.now() - this.#listingSince < this.#bounded!.watchRetryMs) {
          await this.#pollList(signal);
          continue;
        }
        // One watch decides: live, and watching resumes; buffered again, and listing goes on.
        this.#listing = false;
        this.#retrying = true;
        this.#bufferedInARow = this.#bounded!.bufferedLimit - 1;
      }
      const relist = this.#bounded?.relistPeriodMs ?? 0;
      if (relist > 0 && Date.now() - this.#listedAt >= relist) needList = true;
      if (needList) {
        try {
          await this.#list(signal);
          needList = false;
        } catch (e) {
          if (signal.aborted) return;
          await this.#failures.fail("list", e, signal);
          continue;
        }
      }
      const out = await this.#watch(signal);
      switch (out.kind) {
        case "stopped":
          if (signal.aborted) return;
          // A relaxed watch ended because the link looked buffered: resume at once, at the interval.
          this.#log.debug(`watch ${this.#spec.resource}: the link may buffer; resuming at the poll interval`);
          break;
        case "ended":
          if (out.received === 0 && out.lastedMs < this.#timings.shortWatchMs) {
            // client-go's "very short watch": the server accepts watches and ends them at once; back off.
            await this.#failures.fail(
              "watch",
              new Error(
                `${out.why}; very short watch: it lasted ${out.lastedMs} ms and delivered nothing`,
              ),
              signal,
            );
          } else {
            // An established watch that ended is not a failure: resume at once from the last
            // resourceVersion, and forget earlier failures (the apiserver works).
            this.#failures.backoff.reset();
            const msg = `watch ${this.#spec.resource}: ${out.why} after ${out.lastedMs} ms and ` +
              `${out.received} events; resuming from resourceVersion ${this.#cursor.rv}`;
            if (out.quiet) this.#log.debug(msg);
            else this.#log.info(msg);
          }
          if (this.#bounded) this.#checkBuffered(out);
          break;
        case "garbled":
          // A garbled line is not the apiserver failing: resume soon, without the failure backoff, unless
          // garbage keeps coming (then it is treated as a failure and backs off).
          if (Date.now() - this.#garbledAt < GARBLED_REPEAT_MS) {
            await this.#failures.fail("watch", out.error, signal);
          } else await sleep(GARBLED_RESUME_MS, signal).catch(() => {});
          this.#garbledAt = Date.now();
          break;
        case "expired":
          this.#log.info(`watch ${this.#spec.resource}: ${out.why}; listing again`);
          needList = true;
          await this.#relistPause(signal);
          break;
        case "error":
          if (isExpired(out.error)) {
            this.#log.info(
              `watch ${this.#spec.resource}: resourceVersion ${this.#cursor.rv} expired (410); listing again`,
            );
            needList = true;
            await this.#relistPause(signal);
          } else {
            await this.#failures.fail("watch", out.error, signal);
          }
          break;
      }
    }
  }

  /**
   * Buffering detection for bounded watches: a watch the server closed at its timeout whose headers, or
   * whose first data, arrived only as it ended was held back by something on the way. After
   * `bufferedLimit` of them in a row, watching is no better than listing late: switch to LISTs.
   */
  #checkBuffered(out: Extract<WatchOutcome, { kind: "ended" }>): void {
    if (!out.closedByServer) return; // a cut connection says nothing either way
    const delivery = watchDelivery(out, this.#watchTimeoutS);
    const link = this.#bounded!.link;
    if (delivery === "streamed") link?.proven();
    if (delivery !== "buffered") {
      this.#bufferedInARow = 0;
      if (this.#retrying) {
        this.#retrying = false;
        this.#log.info(`watch ${this.#spec.resource}: watches are delivered as they happen again; watching`);
      }
      return;
    }
    link?.suspect();
    this.#bufferedInARow++;
    const b = this.#bounded!;
    if (this.#bufferedInARow < b.bufferedLimit) return;
    this.#listing = true;
    this.#listingSince = Date.now();
    const msg = this.#retrying
      ? `watch ${this.#spec.resource}: responses are still buffered; listing on`
      : `watch ${this.#spec.resource}: the last ${this.#bufferedInARow} watches delivered their data only when ` +
        `they ended (a proxy on the way buffers responses); listing with resourceVersion=0 every ` +
        `${b.intervalMs} ms instead of watching`;
    this.#retrying = false;
    // Warned once; the periodic retries that find the same proxy are not news.
    if (this.#bufferingWarned) this.#log.debug(msg);
    else this.#log.warn(msg);
    this.#bufferingWarned = true;
  }

  /** One round of the fallback: a LIST from the watch cache, then the interval (or the failure backoff). */
  async #pollList(signal: AbortSignal): Promise<void> {
    try {
      await this.#list(signal, "0");
    } catch (e) {
      if (!signal.aborted) await this.#failures.fail("list", e, signal);
      return;
    }
    await sleep(this.#bounded!.intervalMs, signal);
  }

  /** Bounded watches time out after the poll interval (whole seconds, at least 1). */
  #timeoutSeconds(): number {
    return Math.max(1, Math.round(this.#bounded!.intervalMs / 1000));
  }

  /** A watch other than the keeper, over HTTP/2, on a link that has proven it streams, may run longer. */
  #relaxed(): boolean {
    const b = this.#bounded!;
    return !b.keeper && b.link !== undefined && b.link.relaxed && this.#t.protocol === "h2";
  }

  /** A 410 right after a fresh list means the server cannot serve our watch: back off instead of spinning. */
  async #relistPause(signal: AbortSignal): Promise<void> {
    if (Date.now() - this.#listedAt < this.#timings.shortWatchMs) {
      await this.#failures.fail("watch", new Error("resourceVersion expired right after a list"), signal);
    }
  }

  /** client-go's relistResourceVersion: "" after an unavailable one, "0" before any, else the last seen. */
  #relistResourceVersion(): string {
    if (this.#rvUnavailable) return "";
    return this.#cursor.rv === "" ? "0" : this.#cursor.rv;
  }

  /**
   * One complete LIST, applied to the store. `resourceVersion` forces one (the poll fallback's "0");
   * otherwise {@link #relistResourceVersion}. A list at a resourceVersion that the server cannot serve
   * (410, "Too large resource version") is retried at once as a paginated consistent read, as client-go
   * does; so is one whose single response is over our size limit (client-go has none).
   */
  async #list(signal: AbortSignal, resourceVersion?: "0"): Promise<void> {
    if (this.#lists > 0) this.#stats?.recordRelist(this.#spec.resource);
    this.#lists++;
    let rv = resourceVersion ?? this.#relistResourceVersion();
    if (rv === "0" && this.#oversize) rv = "";
    let res;
    try {
      res = await this.#listAt(rv, signal);
    } catch (e) {
      if (signal.aborted || rv === "") throw e;
      if (isExpired(e) || isTooLargeResourceVersion(e)) {
        this.#log.info(
          `list ${this.#spec.resource}: resourceVersion ${rv} unavailable (${(e as Error).message}); ` +
            `listing again with a consistent read`,
        );
        this.#rvUnavailable = true;
      } else if (e instanceof MessageTooLargeError && !this.#oversize) {
        // Warned once: the watch cache cannot page, so from now on every list is a paged read from etcd.
        this.#log.warn(
          `list ${this.#spec.resource}: ${e.message}; the whole list does not fit in one response: listing ` +
            `in pages of ${this.#timings.pageSize} from now on`,
        );
        this.#oversize = true;
      } else throw e;
      res = await this.#listAt("", signal);
    }
    if (signal.aborted) return;
    if (rv === "0" && res.pages > 1) this.#paginated = true;
    this.#rvUnavailable = false;
    this.#failures.ok("list");
    const n = this.sink.applyList(res.items);
    this.#cursor.rv = res.resourceVersion;
    this.#listedAt = Date.now();
    this.#log.debug(
      `list ${this.#spec.resource}: ${res.items.length} objects in ${res.pages} page(s) at resourceVersion ` +
        `"${rv}", ${n} changes, resourceVersion ${this.#cursor.rv}`,
    );
  }

  /**
   * listAll at `rv`. A list at a resourceVersion N is sent without `limit` (served by the watch cache, not
   * an exact read from etcd that may be compacted) unless lists are paginated for this resource.
   */
  #listAt(rv: string, signal: AbortSignal) {
    const unpaged = rv !== "" && rv !== "0" && !this.#paginated && !this.#oversize;
    return listAll<unknown>(this.#t, {
      resourceVersion: rv,
      path: this.#spec.path,
      resource: this.#spec.resource,
      labelSelector: this.#spec.labelSelector,
      fieldSelector: this.#spec.fieldSelector,
      limit: unpaged ? 0 : this.#timings.pageSize,
      maxPageBytes: this.#timings.maxMessageBytes,
      // Each item checked and reduced as it is decoded: the list as sent is never held whole.
      item: (raw) => this.sink.listItem(raw),
      signal,
      log: this.#log,
    });
  }

  #watch(stopSignal: AbortSignal): Promise<WatchOutcome> {
    const tm = this.#timings;
    let timeoutSeconds: number;
    let marginMs = tm.watchdogMarginMs;
    let relaxed = false;
    if (this.#bounded) {
      relaxed = this.#relaxed();
      timeoutSeconds = Math.round(this.#timeoutSeconds() * (relaxed ? this.#bounded.relaxedFactor : 1));
      // A link that drops idle connections may also drop them silently: notice within about one more interval.
      marginMs = Math.min(marginMs, Math.max(1000, this.#bounded.intervalMs));
    } else {
      const spanS = Math.max(0, tm.watchTimeoutMaxSeconds - tm.watchTimeoutMinSeconds);
      timeoutSeconds = Math.floor(tm.watchTimeoutMinSeconds + tm.random() * spanS);
    }
    const silenceMs = tm.watchdogMs ?? timeoutSeconds * 1000 + marginMs;
    this.#watchTimeoutS = timeoutSeconds;
    if (this.#watches > 0) this.#stats?.recordWatchRestart(this.#spec.resource);
    this.#watches++;
    // A relaxed watch ends as soon as the link looks buffered (it reports "stopped"; the loop resumes).
    let signal = stopSignal;
    let unsubscribe = () => {};
    if (relaxed) {
      const ctl = new AbortController();
      const abort = () => ctl.abort(new DOMException("link may buffer", "AbortError"));
      stopSignal.addEventListener("abort", abort, { once: true });
      const off = this.#bounded!.link!.onSuspect(abort);
      unsubscribe = () => {
        off();
        stopSignal.removeEventListener("abort", abort);
      };
      signal = ctl.signal;
    }
    return watchOnce({
      transport: this.#t,
      spec: this.#spec,
      sink: this.sink,
      stats: this.#stats,
      cursor: this.#cursor,
      timeoutSeconds,
      silenceMs,
      maxEventBytes: tm.maxEventBytes,
      onAccepted: () => this.#failures.ok("watch"),
    }, signal).finally(unsubscribe);
  }
}
