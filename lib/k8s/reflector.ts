/**
 * A list+watch loop for one resource, modelled on client-go's Reflector (tools/cache/reflector.go):
 * - a paginated LIST at the latest resourceVersion, diffed against the store (adds, updates, deletes; the
 *   first list ends with `onSynced`);
 * - a WATCH from the list's resourceVersion with allowWatchBookmarks and timeoutSeconds in [300, 600);
 * - a watch that was established and then ended (server-side timeout, EOF, connection reset or any other
 *   broken stream, the watchdog) after it ran at least 1 s or delivered something is resumed at once from
 *   the last resourceVersion seen (events and bookmarks): no backoff, no relist, and the backoff starts
 *   over. A flaky link that drops the connection every few seconds costs one round trip per drop;
 * - after 410 Gone (HTTP 410, or an ERROR event with code 410 inside a 200 stream), a new LIST at once
 *   whose diff delivers exactly what changed while away;
 * - exponential backoff with jitter (800 ms → 30 s, reset after 2 min without failures) only for attempts
 *   that fail: connect errors, 5xx, 429 (at least its Retry-After), 401/403 (logged once per streak),
 *   ERROR events, a line or page over {@link MAX_API_MESSAGE_BYTES}, and "very short watches" (ended
 *   within 1 s with nothing received);
 * - a watchdog that aborts a watch silent for longer than its timeout plus a margin;
 * - malformed objects are logged with the resource and skipped; a garbled line (not a watch event at
 *   all) is logged and the watch resumes from the last good resourceVersion, so its event is not lost;
 * - the stream is split into lines by {@link LineSplitter}: linear in the bytes received, bounded per line.
 * `stop()` aborts everything and leaves no timer behind.
 */
import { Backoff, type BackoffOptions, sleep } from "./backoff.ts";
import { LineSplitter, MAX_API_MESSAGE_BYTES, MessageTooLargeError } from "./bounded_read.ts";
import { type EndpointSlice, type Node, PROXY_LABEL_SELECTOR, type Service, type Status } from "./objects.ts";
import type { ApiStats } from "./stats.ts";
import {
  ApiError,
  type ApiTransport,
  errorChain,
  isAuthError,
  isExpired,
  listAll,
  type Logger,
  NetworkError,
  silentLogger,
} from "./transport.ts";
import { type KubeObject, objectKey, ObjectStore, type StoreChange } from "./store.ts";

/** Which collection to list and watch, and how to recognise its objects. */
export interface ResourceSpec {
  /** Short name for logs and stats: "services", "endpointslices", "nodes". */
  resource: string;
  /** Collection path, e.g. /api/v1/services. */
  path: string;
  /** apiVersion of the objects (filled into list items, which arrive without it). */
  apiVersion: string;
  /** Expected kind; an object with another kind is skipped. */
  kind: string;
  labelSelector?: string;
  fieldSelector?: string;
}

/** Services, all namespaces, with upstream kube-proxy's label selector. */
export const SERVICES_RESOURCE: ResourceSpec = {
  resource: "services",
  path: "/api/v1/services",
  apiVersion: "v1",
  kind: "Service",
  labelSelector: PROXY_LABEL_SELECTOR,
};

/** EndpointSlices, all namespaces, with the same label selector as Services. */
export const ENDPOINTSLICES_RESOURCE: ResourceSpec = {
  resource: "endpointslices",
  path: "/apis/discovery.k8s.io/v1/endpointslices",
  apiVersion: "discovery.k8s.io/v1",
  kind: "EndpointSlice",
  labelSelector: PROXY_LABEL_SELECTOR,
};

/** The proxy's own Node (fieldSelector metadata.name=<node>). */
export function nodeResource(nodeName: string): ResourceSpec {
  return {
    resource: "nodes",
    path: "/api/v1/nodes",
    apiVersion: "v1",
    kind: "Node",
    fieldSelector: `metadata.name=${nodeName}`,
  };
}

/** Object type per resource spec, for callers that want it. */
export type ObjectOf<S extends string> = S extends "services" ? Service
  : S extends "endpointslices" ? EndpointSlice
  : S extends "nodes" ? Node
  : KubeObject;

/** What a reflector or poller calls. `onSynced` is called once, after the first complete list. */
export interface ResourceEventHandler<T> {
  onAdd(obj: T): void;
  onUpdate(oldObj: T, obj: T): void;
  onDelete(obj: T): void;
  onSynced(): void;
}

/**
 * The store, the handler and the synced promise of one resource, plus validation of incoming objects.
 * Shared by {@link Reflector} and the poller so both deliver identical events for identical server state.
 */
export class ResourceSink<T extends KubeObject> {
  readonly spec: ResourceSpec;
  readonly store: ObjectStore<T>;
  readonly synced: Promise<void>;
  #resolveSynced!: () => void;
  #hasSynced = false;
  readonly #handler: ResourceEventHandler<T>;
  readonly #log: Logger;
  readonly #stats: ApiStats | undefined;

  /** `store` defaults to a new empty store. */
  constructor(
    spec: ResourceSpec,
    handler: ResourceEventHandler<T>,
    log: Logger,
    stats?: ApiStats,
    store?: ObjectStore<T>,
  ) {
    this.spec = spec;
    this.#handler = handler;
    this.#log = log;
    this.#stats = stats;
    this.store = store ?? new ObjectStore<T>();
    this.synced = new Promise((r) => (this.#resolveSynced = r));
  }

  /** Whether the first list completed. */
  get hasSynced(): boolean {
    return this.#hasSynced;
  }

  /**
   * Returns the object with apiVersion/kind filled in, or a reason why it must be skipped: not an object,
   * wrong kind, missing metadata.name.
   */
  check(obj: unknown): { ok: T } | { bad: string } {
    if (typeof obj !== "object" || obj === null || Array.isArray(obj)) {
      return { bad: "object is not a JSON object" };
    }
    const o = obj as KubeObject & { apiVersion?: string };
    if (o.kind !== undefined && o.kind !== this.spec.kind) {
      return { bad: `kind is ${JSON.stringify(o.kind)}, want ${this.spec.kind}` };
    }
    const name = o.metadata?.name;
    if (typeof name !== "string" || name === "") return { bad: "metadata.name is missing" };
    const ns = o.metadata?.namespace;
    if (ns !== undefined && typeof ns !== "string") return { bad: "metadata.namespace is not a string" };
    if (o.kind === undefined || o.apiVersion === undefined) {
      // List items arrive without type meta; give them the watch events' shape (kind first, as the
      // apiserver encodes it) so both paths deliver byte-identical objects.
      const { kind: _k, apiVersion, ...rest } = o;
      return {
        ok: { kind: this.spec.kind, apiVersion: apiVersion ?? this.spec.apiVersion, ...rest } as unknown as T,
      };
    }
    return { ok: o as T };
  }

  /** Logs and counts one skipped line or object. */
  malformed(where: string, why: string, raw: unknown): void {
    this.#stats?.recordMalformed(this.spec.resource);
    const text = typeof raw === "string" ? raw : safeJson(raw);
    const shown = text.length > 200 ? `${text.slice(0, 200)}…` : text;
    this.#log.warn(`${where} ${this.spec.resource}: skipping malformed input (${why}): ${shown}`);
  }

  /** Diffs a complete list into the store, emits the changes, and marks the resource synced. */
  applyList(rawItems: unknown[]): number {
    const items: T[] = [];
    for (const raw of rawItems) {
      const c = this.check(raw);
      if ("bad" in c) this.malformed("list", c.bad, raw);
      else items.push(c.ok);
    }
    const changes = this.store.replace(items);
    for (const ch of changes) this.emit(ch);
    if (!this.#hasSynced) {
      this.#hasSynced = true;
      try {
        this.#handler.onSynced();
      } catch (e) {
        this.#log.error(`${this.spec.resource}: synced handler threw: ${errorChain(e)}`);
      }
      this.#resolveSynced();
    }
    return changes.length;
  }

  /** Calls the handler for one change; a throwing handler is logged, never fatal. */
  emit(ch: StoreChange<T>): void {
    try {
      if (ch.type === "add") this.#handler.onAdd(ch.object);
      else if (ch.type === "update") this.#handler.onUpdate(ch.old, ch.object);
      else this.#handler.onDelete(ch.object);
    } catch (e) {
      this.#log.error(
        `${this.spec.resource} ${ch.type} ${objectKey(ch.object)}: handler threw: ${errorChain(e)}`,
      );
    }
  }
}

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
  /** Largest watch event line and LIST page body (bytes, default {@link MAX_API_MESSAGE_BYTES}). */
  maxMessageBytes?: number;
  /** Random source for timeoutSeconds (tests). */
  random?: () => number;
}

/** Options of {@link Reflector}. */
export interface ReflectorOptions<T extends KubeObject> {
  transport: ApiTransport;
  spec: ResourceSpec;
  handler: ResourceEventHandler<T>;
  timings?: ReflectorTimings;
  log?: Logger;
  stats?: ApiStats;
  store?: ObjectStore<T>;
}

/** Decodes one watch line (a line is complete UTF-8: "\n" never occurs inside a character). */
const LINE_DECODER = new TextDecoder();

/** Pause before resuming a watch that delivered a garbled line. */
const GARBLED_RESUME_MS = 500;
/** A second garbled line within this window counts as a failure (backoff). */
const GARBLED_REPEAT_MS = 10_000;

type WatchOutcome =
  /** Established, then ended (server timeout, EOF, broken connection, watchdog); `why` says how. */
  | { kind: "ended"; why: string; lastedMs: number; received: number; quiet: boolean }
  | { kind: "garbled"; error: Error }
  | { kind: "expired"; why: string }
  | { kind: "error"; error: unknown }
  | { kind: "stopped" };

/**
 * Shared failure handling of the reflector and the poller: logs (auth errors once per streak), waits the
 * backoff (at least Retry-After), and reports recovery once.
 */
export class FailureTracker {
  readonly #backoff: Backoff;
  readonly #log: Logger;
  readonly #what: string;
  readonly #maxRetryAfterMs: number;
  readonly #describeCreds: () => string;
  #failing = false;
  #authLogged = false;

  constructor(
    what: string,
    log: Logger,
    backoff: BackoffOptions | undefined,
    maxRetryAfterMs: number,
    creds: () => string,
  ) {
    this.#what = what;
    this.#log = log;
    this.#backoff = new Backoff(backoff);
    this.#maxRetryAfterMs = maxRetryAfterMs;
    this.#describeCreds = creds;
  }

  /** The backoff, for tests and stats. */
  get backoff(): Backoff {
    return this.#backoff;
  }

  /** Logs `err` and waits before the next attempt; resolves false when `signal` aborted the wait. */
  async fail(op: string, err: unknown, signal: AbortSignal): Promise<boolean> {
    let delay = this.#backoff.next();
    if (err instanceof ApiError && err.retryAfterMs !== undefined) {
      delay = Math.max(delay, Math.min(err.retryAfterMs, this.#maxRetryAfterMs));
    }
    const secs = delay < 1000 ? `${delay}ms` : `${(delay / 1000).toFixed(1)}s`;
    if (isAuthError(err)) {
      const msg = `${op} ${this.#what}: the apiserver rejected our credentials (${this.#describeCreds()}): ` +
        `${(err as Error).message}; retrying with backoff`;
      if (!this.#authLogged) this.#log.error(msg);
      else this.#log.debug(`${msg} (again, next try in ${secs})`);
      this.#authLogged = true;
    } else {
      const text = err instanceof ApiError || err instanceof NetworkError ? err.message : errorChain(err);
      this.#log.warn(`${op} ${this.#what} failed: ${text}; retrying in ${secs}`);
    }
    this.#failing = true;
    return await sleep(delay, signal);
  }

  /** Records a success: ends the failure streak (logged once). */
  ok(op: string): void {
    if (this.#failing) this.#log.info(`${op} ${this.#what}: apiserver reachable again`);
    this.#failing = false;
    this.#authLogged = false;
  }
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
  #rv = "";
  #lists = 0;
  #watches = 0;
  #listedAt = Number.NEGATIVE_INFINITY;
  #garbledAt = Number.NEGATIVE_INFINITY;

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
      random: t.random ?? Math.random,
    };
    this.sink = new ResourceSink(opts.spec, opts.handler, this.#log, this.#stats, opts.store);
    this.#failures = new FailureTracker(
      opts.spec.resource,
      this.#log,
      t.backoff,
      this.#timings.maxRetryAfterMs,
      () => this.#t.config.credentials.description,
    );
  }

  /** Resolves after the first complete list has been delivered. */
  get synced(): Promise<void> {
    return this.sink.synced;
  }

  /** The resourceVersion the next watch starts from. */
  get lastResourceVersion(): string {
    return this.#rv;
  }

  /** The backoff state (tests). */
  get backoff(): Backoff {
    return this.#failures.backoff;
  }

  /** Starts the loop (idempotent). */
  start(): void {
    this.#running ??= this.#run().catch((e) => {
      // Unreachable by design; never let a bug become an unhandled rejection.
      this.#log.error(`reflector ${this.#spec.resource} ended unexpectedly: ${errorChain(e)}`);
    });
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
          return;
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
              `${out.received} events; resuming from resourceVersion ${this.#rv}`;
            if (out.quiet) this.#log.debug(msg);
            else this.#log.info(msg);
          }
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
              `watch ${this.#spec.resource}: resourceVersion ${this.#rv} expired (410); listing again`,
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

  /** A 410 right after a fresh list means the server cannot serve our watch: back off instead of spinning. */
  async #relistPause(signal: AbortSignal): Promise<void> {
    if (Date.now() - this.#listedAt < this.#timings.shortWatchMs) {
      await this.#failures.fail("watch", new Error("resourceVersion expired right after a list"), signal);
    }
  }

  async #list(signal: AbortSignal): Promise<void> {
    if (this.#lists > 0) this.#stats?.recordRelist(this.#spec.resource);
    this.#lists++;
    const res = await listAll<unknown>(this.#t, {
      path: this.#spec.path,
      resource: this.#spec.resource,
      labelSelector: this.#spec.labelSelector,
      fieldSelector: this.#spec.fieldSelector,
      limit: this.#timings.pageSize,
      maxPageBytes: this.#timings.maxMessageBytes,
      signal,
      log: this.#log,
    });
    if (signal.aborted) return;
    this.#failures.ok("list");
    const n = this.sink.applyList(res.items);
    this.#rv = res.resourceVersion;
    this.#listedAt = Date.now();
    this.#log.debug(
      `list ${this.#spec.resource}: ${res.items.length} objects in ${res.pages} page(s), ${n} changes, ` +
        `resourceVersion ${this.#rv}`,
    );
  }

  async #watch(stopSignal: AbortSignal): Promise<WatchOutcome> {
    const tm = this.#timings;
    const spanS = Math.max(0, tm.watchTimeoutMaxSeconds - tm.watchTimeoutMinSeconds);
    const timeoutSeconds = Math.floor(tm.watchTimeoutMinSeconds + tm.random() * spanS);
    const silenceMs = tm.watchdogMs ?? timeoutSeconds * 1000 + tm.watchdogMarginMs;
    if (this.#watches > 0) this.#stats?.recordWatchRestart(this.#spec.resource);
    this.#watches++;

    const ctl = new AbortController();
    if (stopSignal.aborted) return { kind: "stopped" }; // stop() during the list: its event already fired
    const onStop = () => ctl.abort(stopSignal.reason);
    stopSignal.addEventListener("abort", onStop, { once: true });
    let stalled = false;
    let watchdog: ReturnType<typeof setTimeout> | undefined;
    const kick = () => {
      clearTimeout(watchdog);
      watchdog = setTimeout(() => {
        stalled = true;
        ctl.abort(new DOMException("watch silent", "TimeoutError"));
      }, silenceMs);
    };
    kick();
    const started = Date.now();
    let received = 0;
    let established = false;
    let reader: ReadableStreamDefaultReader<Uint8Array> | undefined;
    const ended = (why: string, quiet = false): WatchOutcome => ({
      kind: "ended",
      why,
      lastedMs: Date.now() - started,
      received,
      quiet,
    });
    try {
      const res = await this.#t.openWatch({
        path: this.#spec.path,
        query: {
          watch: "true",
          resourceVersion: this.#rv,
          allowWatchBookmarks: "true",
          timeoutSeconds: String(timeoutSeconds),
          labelSelector: this.#spec.labelSelector,
          fieldSelector: this.#spec.fieldSelector,
        },
        resource: this.#spec.resource,
        signal: ctl.signal,
      });
      kick();
      this.#failures.ok("watch");
      if (!res.body) {
        return { kind: "error", error: new Error(`watch ${this.#spec.resource}: response has no body`) };
      }
      established = true;
      reader = res.body.getReader();
      const splitter = new LineSplitter(tm.maxMessageBytes, `watch ${this.#spec.resource}`);
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        kick();
        this.#stats?.recordContact(this.#spec.resource);
        for (const line of splitter.push(value)) {
          const r = this.#handleLine(line);
          if (r === null) continue;
          received++;
          if (r !== true) return r;
        }
      }
      const last = splitter.finish();
      if (last) {
        const r = this.#handleLine(last);
        if (r !== null && r !== true) return r;
      }
      return ended("closed by the server", true);
    } catch (e) {
      if (stopSignal.aborted) return { kind: "stopped" };
      if (e instanceof MessageTooLargeError) return { kind: "error", error: e };
      if (stalled) {
        const why = `watch silent for ${silenceMs} ms (watchdog)`;
        if (established) return ended(why);
        return { kind: "error", error: new Error(`${why}; reconnecting from ${this.#rv}`) };
      }
      // A stream that broke after it was established (reset, EOF mid-chunk, TLS error) is client-go's
      // "probable EOF": the watch ended, it did not fail.
      if (established) return ended(`connection lost (${errorChain(e)})`);
      if (e instanceof ApiError || e instanceof NetworkError) return { kind: "error", error: e };
      return {
        kind: "error",
        error: new NetworkError(
          `watch ${this.#spec.resource} from ${this.#t.config.server}: ${errorChain(e)}`,
          { cause: e },
        ),
      };
    } finally {
      clearTimeout(watchdog);
      stopSignal.removeEventListener("abort", onStop);
      ctl.abort(); // ends the body stream if it is still open
      if (reader) reader.cancel().catch(() => {});
    }
  }

  /**
   * Handles one watch line. Returns null when skipped, true when applied (event or bookmark), or an
   * outcome that ends the watch (ERROR events).
   */
  #handleLine(bytes: Uint8Array): true | null | WatchOutcome {
    const line = LINE_DECODER.decode(bytes).trim();
    if (!line) return null;
    let ev: unknown;
    // A line that is not a watch event at all was garbled on the way: the event it carried is lost, so
    // skipping it would leave the store behind until some later relist. End this watch instead; the
    // next one resumes from the last good resourceVersion and the apiserver sends that event again.
    try {
      ev = JSON.parse(line);
    } catch {
      this.sink.malformed("watch", "line is not JSON", line);
      return {
        kind: "garbled",
        error: new Error(`watch ${this.#spec.resource}: garbled line; resuming from ${this.#rv}`),
      };
    }
    if (typeof ev !== "object" || ev === null || typeof (ev as { type?: unknown }).type !== "string") {
      this.sink.malformed("watch", "line is not a watch event", line);
      return {
        kind: "garbled",
        error: new Error(`watch ${this.#spec.resource}: garbled line; resuming from ${this.#rv}`),
      };
    }
    const { type, object } = ev as { type: string; object: unknown };
    if (typeof object !== "object" || object === null) {
      this.sink.malformed("watch", `${type} event without an object`, line);
      return null;
    }
    const o = object as KubeObject & Status;
    switch (type) {
      case "ERROR": {
        const err = ApiError.fromStatus(o, 500, `watch ${this.#spec.resource}`);
        if (isExpired(err)) return { kind: "expired", why: `watch ended with ${err.code} ${err.reason}` };
        return { kind: "error", error: err };
      }
      case "BOOKMARK": {
        const rv = o.metadata?.resourceVersion;
        if (typeof rv !== "string" || rv === "") {
          this.sink.malformed("watch", "BOOKMARK without metadata.resourceVersion", line);
          return null;
        }
        this.#rv = rv;
        this.#stats?.recordWatchEvent(this.#spec.resource, true);
        return true;
      }
      case "ADDED":
      case "MODIFIED":
      case "DELETED": {
        const c = this.sink.check(object);
        if ("bad" in c) {
          this.sink.malformed("watch", `${type}: ${c.bad}`, object);
          return null;
        }
        const ch = this.sink.store.apply(type, c.ok);
        if (ch) this.sink.emit(ch);
        const rv = c.ok.metadata?.resourceVersion;
        if (typeof rv === "string" && rv !== "") this.#rv = rv;
        this.#stats?.recordWatchEvent(this.#spec.resource);
        return true;
      }
      default:
        this.sink.malformed("watch", `unknown event type ${JSON.stringify(type)}`, line);
        return null;
    }
  }
}

function safeJson(v: unknown): string {
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}
