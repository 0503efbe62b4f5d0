/**
 * One WATCH request of the reflector, from opening it to its {@link WatchOutcome}:
 * - the stream is split into lines by {@link LineSplitter}: linear in the bytes received, bounded per line;
 * - each line is one watch event: ADDED/MODIFIED/DELETED go through the resource's sink, BOOKMARK and
 *   events advance the {@link WatchCursor}, an ERROR event ends the watch (410 Gone as "expired");
 * - malformed objects are logged with the resource and skipped; a garbled line (not a watch event at
 *   all) ends the watch as "garbled", so the next one resumes from the last good resourceVersion and its
 *   event is not lost;
 * - a watchdog aborts a watch silent for longer than `silenceMs`;
 * - a stream that broke after it was established (reset, EOF mid-chunk, TLS error, the watchdog) "ended";
 *   it did not fail. What to do next is the reflector's decision.
 */
import { LineSplitter, MessageTooLargeError } from "./bounded_read.ts";
import type { Status } from "./objects.ts";
import type { ResourceSpec } from "./resource.ts";
import type { ResourceSink } from "./resource_sink.ts";
import type { ApiStats } from "./stats.ts";
import { ApiError, type ApiTransport, errorChain, isExpired, NetworkError } from "./transport.ts";
import type { KubeObject } from "./store.ts";

/** Decodes one watch line (a line is complete UTF-8: "\n" never occurs inside a character). */
const LINE_DECODER = new TextDecoder();

/** How one watch ended. */
export type WatchOutcome =
  /**
   * Established, then ended (server timeout, EOF, broken connection, watchdog); `why` says how. The
   * timings let the caller tell a buffering middlebox (everything arrives at the end) from a live stream.
   */
  | {
    kind: "ended";
    why: string;
    lastedMs: number;
    received: number;
    quiet: boolean;
    /** The server closed the stream normally (its timeoutSeconds, or EOF), rather than it breaking. */
    closedByServer: boolean;
    /** When the response headers arrived (ms after the request was sent). */
    headersMs: number;
    /** When the first body bytes arrived (ms after the request was sent); null when none did. */
    firstChunkMs: number | null;
  }
  | { kind: "garbled"; error: Error }
  | { kind: "expired"; why: string }
  | { kind: "error"; error: unknown }
  | { kind: "stopped" };

/** The resourceVersion a watch starts from, advanced by each event and bookmark it applies. */
export interface WatchCursor {
  rv: string;
}

/** One watch request. */
export interface WatchRequest<T extends KubeObject> {
  transport: ApiTransport;
  spec: ResourceSpec;
  sink: ResourceSink<T>;
  stats: ApiStats | undefined;
  cursor: WatchCursor;
  /** The watch's timeoutSeconds query parameter. */
  timeoutSeconds: number;
  /** Silence after which the watchdog aborts the watch (ms). */
  silenceMs: number;
  /** Largest watch event line (bytes). */
  maxEventBytes: number;
  /** Called when the apiserver accepted the watch. */
  onAccepted: () => void;
}

/** Runs one watch until it ends, fails or `stopSignal` aborts it; see the module header. */
export async function watchOnce<T extends KubeObject>(
  req: WatchRequest<T>,
  stopSignal: AbortSignal,
): Promise<WatchOutcome> {
  const { spec, silenceMs } = req;
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
  let headersMs = 0;
  let firstChunkMs: number | null = null;
  const ended = (why: string, quiet = false): WatchOutcome => ({
    kind: "ended",
    why,
    lastedMs: Date.now() - started,
    received,
    quiet,
    closedByServer: quiet,
    headersMs,
    firstChunkMs,
  });
  try {
    const res = await req.transport.openWatch({
      path: spec.path,
      query: {
        watch: "true",
        resourceVersion: req.cursor.rv,
        allowWatchBookmarks: "true",
        timeoutSeconds: String(req.timeoutSeconds),
        labelSelector: spec.labelSelector,
        fieldSelector: spec.fieldSelector,
      },
      resource: spec.resource,
      signal: ctl.signal,
    });
    headersMs = Date.now() - started;
    kick();
    req.onAccepted();
    if (!res.body) {
      return { kind: "error", error: new Error(`watch ${spec.resource}: response has no body`) };
    }
    established = true;
    reader = res.body.getReader();
    const splitter = new LineSplitter(req.maxEventBytes, `watch ${spec.resource}`);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      firstChunkMs ??= Date.now() - started;
      kick();
      req.stats?.recordContact(spec.resource);
      for (const line of splitter.push(value)) {
        const r = handleLine(req, line);
        if (r === null) continue;
        received++;
        if (r !== true) return r;
      }
    }
    const last = splitter.finish();
    if (last) {
      const r = handleLine(req, last);
      if (r !== null && r !== true) return r;
    }
    return ended("closed by the server", true);
  } catch (e) {
    if (stopSignal.aborted) return { kind: "stopped" };
    if (e instanceof MessageTooLargeError) return { kind: "error", error: e };
    if (stalled) {
      const why = `watch silent for ${silenceMs} ms (watchdog)`;
      if (established) return ended(why);
      return { kind: "error", error: new Error(`${why}; reconnecting from ${req.cursor.rv}`) };
    }
    // A stream that broke after it was established (reset, EOF mid-chunk, TLS error) is client-go's
    // "probable EOF": the watch ended, it did not fail.
    if (established) return ended(`connection lost (${errorChain(e)})`);
    if (e instanceof ApiError || e instanceof NetworkError) return { kind: "error", error: e };
    return {
      kind: "error",
      error: new NetworkError(
        `watch ${spec.resource} from ${req.transport.config.server}: ${errorChain(e)}`,
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
function handleLine<T extends KubeObject>(
  req: WatchRequest<T>,
  bytes: Uint8Array,
): true | null | WatchOutcome {
  const { sink, cursor } = req;
  const resource = req.spec.resource;
  const line = LINE_DECODER.decode(bytes).trim();
  if (!line) return null;
  let ev: unknown;
  // A line that is not a watch event at all was garbled on the way: the event it carried is lost, so
  // skipping it would leave the store behind until some later relist. End this watch instead; the
  // next one resumes from the last good resourceVersion and the apiserver sends that event again.
  try {
    ev = JSON.parse(line);
  } catch {
    sink.malformed("watch", "line is not JSON", line);
    return {
      kind: "garbled",
      error: new Error(`watch ${resource}: garbled line; resuming from ${cursor.rv}`),
    };
  }
  if (typeof ev !== "object" || ev === null || typeof (ev as { type?: unknown }).type !== "string") {
    sink.malformed("watch", "line is not a watch event", line);
    return {
      kind: "garbled",
      error: new Error(`watch ${resource}: garbled line; resuming from ${cursor.rv}`),
    };
  }
  const { type, object } = ev as { type: string; object: unknown };
  if (typeof object !== "object" || object === null) {
    sink.malformed("watch", `${type} event without an object`, line);
    return null;
  }
  const o = object as KubeObject & Status;
  switch (type) {
    case "ERROR": {
      const err = ApiError.fromStatus(o, 500, `watch ${resource}`);
      if (isExpired(err)) return { kind: "expired", why: `watch ended with ${err.code} ${err.reason}` };
      return { kind: "error", error: err };
    }
    case "BOOKMARK": {
      const rv = o.metadata?.resourceVersion;
      if (typeof rv !== "string" || rv === "") {
        sink.malformed("watch", "BOOKMARK without metadata.resourceVersion", line);
        return null;
      }
      cursor.rv = rv;
      req.stats?.recordWatchEvent(resource, true);
      return true;
    }
    case "ADDED":
    case "MODIFIED":
    case "DELETED": {
      const c = sink.check(object);
      if ("bad" in c) {
        sink.malformed("watch", `${type}: ${c.bad}`, object);
        return null;
      }
      const ch = sink.store.apply(type, c.ok);
      if (ch) sink.emit(ch);
      const rv = c.ok.metadata?.resourceVersion;
      if (typeof rv === "string" && rv !== "") cursor.rv = rv;
      req.stats?.recordWatchEvent(resource);
      return true;
    }
    default:
      sink.malformed("watch", `unknown event type ${JSON.stringify(type)}`, line);
      return null;
  }
}
