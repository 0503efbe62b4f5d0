/**
 * The HTTP side of talking to the apiserver: authentication headers and client certificates (from
 * {@link Credentials}), the per-runtime TLS fetch, `Accept: application/json`, `Accept-Encoding: gzip` with
 * streaming decoding and a count of the bytes received (lib/k8s/content_encoding.ts), the
 * `edgeproxy/<version>` user agent, client-side rate limiting (clientConnection.qps/burst), request timeouts, bounded response
 * bodies ({@link MAX_API_MESSAGE_BYTES}), LIST bodies decoded item by item as they arrive
 * (lib/k8s/list_decode.ts: each item parsed and reduced alone, the whole body never held), and turning
 * error responses into a typed {@link ApiError} parsed from the meta/v1 Status body.
 */
import pkg from "../../package.json" with { type: "json" };
import { createTlsFetch, type TlsFetch, type TlsFetchOptions } from "../runtime/fetch_tls.ts";
import { collectGarbage } from "../runtime/memory.ts";
import {
  MAX_API_MESSAGE_BYTES,
  MessageTooLargeError,
  readBounded,
  readBoundedChunks,
} from "./bounded_read.ts";
import { type BodyBytes, decodeResponse } from "./content_encoding.ts";
import type { AuthMaterial } from "./credentials.ts";
import { ListDecodeError, ListDecoder } from "./list_decode.ts";
import type { RestConfig } from "./rest_config.ts";
import type { ObjectList, Status } from "./objects.ts";
import { RateLimiter } from "./rate_limiter.ts";
import { type ApiStats, type ApiVerb, ERROR_CODE } from "./stats.ts";

/** The logging surface this package uses (lib/log.ts's consola instance satisfies it). */
export interface Logger {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

/** A logger that drops everything (default when none is given). */
export const silentLogger: Logger = { debug() {}, info() {}, warn() {}, error() {} };

/** How much of an error answer's body is read: a Status is small; the rest is not needed. */
const ERROR_BODY_BYTES = 64 * 1024;

/** User agent sent with every request. */
export const USER_AGENT = `edgeproxy/${pkg.version}`;

/** An HTTP error answer from the apiserver, with the Status fields it carried. */
export class ApiError extends Error {
  /** HTTP status (or Status.code of a watch ERROR event). */
  readonly code: number;
  /** Status.reason ("Expired", "Gone", "Unauthorized", …), or the HTTP status text. */
  readonly reason: string;
  /** Retry-After in ms, when the server sent one (429, 503). */
  readonly retryAfterMs: number | undefined;

  constructor(code: number, reason: string, message: string, retryAfterMs?: number) {
    super(message);
    this.name = "ApiError";
    this.code = code;
    this.reason = reason;
    this.retryAfterMs = retryAfterMs;
  }

  /** Builds the error from a Status object (HTTP body or watch ERROR event). */
  static fromStatus(
    status: Partial<Status> | undefined,
    httpCode: number,
    what: string,
    retryAfterMs?: number,
  ) {
    const code = typeof status?.code === "number" && status.code > 0 ? status.code : httpCode;
    const reason = status?.reason || defaultReason(code);
    const msg = status?.message
      ? `${what}: ${code} ${reason}: ${status.message}`
      : `${what}: ${code} ${reason}`;
    return new ApiError(code, reason, msg, retryAfterMs);
  }
}

/** A request that got no HTTP answer: refused, reset, TLS failure, DNS, timeout. */
export class NetworkError extends Error {
  /** The connection was refused (apiserver down): retry the watch, no need to relist. */
  readonly refused: boolean;
  /** Our own request timeout fired. */
  readonly timedOut: boolean;

  constructor(message: string, opts: { cause?: unknown; refused?: boolean; timedOut?: boolean } = {}) {
    super(message, { cause: opts.cause });
    this.name = "NetworkError";
    this.refused = opts.refused ?? false;
    this.timedOut = opts.timedOut ?? false;
  }
}

/** 410: the resourceVersion is too old; list again. */
export function isExpired(err: unknown): boolean {
  return err instanceof ApiError && (err.code === 410 || err.reason === "Expired" || err.reason === "Gone");
}

/**
 * 504 "Too large resource version": a read at a resourceVersion the apiserver's watch cache has not reached
 * (it waited ~3 s for it). client-go then lists again with resourceVersion="" (a consistent read).
 */
export function isTooLargeResourceVersion(err: unknown): boolean {
  return err instanceof ApiError && (err.code === 504 || err.reason === "Timeout") &&
    /too large resource version/i.test(err.message);
}

/** 401 or 403. */
export function isAuthError(err: unknown): boolean {
  return err instanceof ApiError && (err.code === 401 || err.code === 403);
}

/** Whether `err` is the abort of a signal we were given. */
export function isAbort(err: unknown, signal?: AbortSignal): boolean {
  return Boolean(signal?.aborted) || (err instanceof DOMException && err.name === "AbortError") ||
    (err instanceof Error && err.name === "AbortError");
}

/** Options of {@link ApiTransport}. */
export interface ApiTransportOptions {
  config: RestConfig;
  /** clientConnection.qps (0 = default 5, negative = unlimited). */
  qps?: number;
  /** clientConnection.burst (0 = default 10). */
  burst?: number;
  stats?: ApiStats;
  log?: Logger;
  /** Timeout (ms) for non-watch requests, headers and body. Default 60 000. */
  requestTimeoutMs?: number;
  userAgent?: string;
  /** Largest response body accepted (bytes, default {@link MAX_API_MESSAGE_BYTES}). */
  maxResponseBytes?: number;
  /** Replaces {@link createTlsFetch} (tests). */
  fetchFactory?: (tls: TlsFetchOptions) => TlsFetch;
}

/** One non-watch request. */
export interface RequestOptions {
  method?: "GET" | "POST";
  /** Path under the server URL, starting with "/". */
  path: string;
  query?: Record<string, string | undefined>;
  body?: unknown;
  verb: ApiVerb;
  /** Resource label for stats and messages ("services", …). */
  resource: string;
  signal?: AbortSignal;
  timeoutMs?: number;
  /** Largest response body accepted (bytes; default the transport's `maxResponseBytes`). */
  maxBytes?: number;
  /**
   * The answer is a List: decode it item by item as it arrives (lib/k8s/list_decode.ts), each element
   * of its `items` through this function, so the whole body text and the list as sent never exist at once.
   */
  listItem?: (raw: unknown) => unknown;
}

/** Rate-limited, authenticated JSON requests and watch streams against one apiserver. */
export class ApiTransport {
  readonly config: RestConfig;
  readonly limiter: RateLimiter;
  readonly stats: ApiStats | undefined;
  readonly log: Logger;
  readonly #timeoutMs: number;
  readonly #userAgent: string;
  readonly #maxResponseBytes: number;
  readonly #fetchFactory: (tls: TlsFetchOptions) => TlsFetch;
  #fetch: { key: string; fetch: TlsFetch } | null = null;
  #closed = false;
  readonly #received: BodyBytes = { wire: 0, decoded: 0 };

  /** Creates the transport; nothing connects until the first request. */
  constructor(opts: ApiTransportOptions) {
    this.config = opts.config;
    this.limiter = new RateLimiter(opts.qps ?? 0, opts.burst ?? 0);
    this.stats = opts.stats;
    this.log = opts.log ?? silentLogger;
    this.#timeoutMs = opts.requestTimeoutMs ?? 60_000;
    this.#userAgent = opts.userAgent ?? USER_AGENT;
    this.#maxResponseBytes = opts.maxResponseBytes ?? MAX_API_MESSAGE_BYTES;
    this.#fetchFactory = opts.fetchFactory ?? createTlsFetch;
  }

  /**
   * Response body bytes received so far over all requests and watches: on the wire (compressed when the
   * server compressed) and decoded. Headers and TLS framing are not included.
   */
  get bytesReceived(): Readonly<BodyBytes> {
    return { ...this.#received };
  }

  /**
   * The HTTP version the server chose ("h2" or "http/1.1"), or undefined before the first connection or
   * with a fetch that does not say. Poll mode relaxes bounded watches only over HTTP/2 (one connection).
   */
  get protocol(): "h2" | "http/1.1" | undefined {
    return this.#fetch?.fetch.protocol;
  }

  /** Full URL for a path and query (undefined and "" values are left out). */
  url(path: string, query: Record<string, string | undefined> = {}): string {
    const u = new URL(this.config.server + path);
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== "") u.searchParams.set(k, v);
    return u.toString();
  }

  #fetchFor(auth: AuthMaterial): TlsFetch {
    const key = `${auth.certPem ?? ""}\u0000${auth.keyPem ?? ""}`;
    if (this.#fetch?.key === key) return this.#fetch.fetch;
    // A new client certificate (exec plugin rotation) needs a new TLS client.
    this.#fetch?.fetch.close();
    const f = this.#fetchFactory({
      caPem: this.config.caPem,
      certPem: auth.certPem,
      keyPem: auth.keyPem,
      insecureSkipVerify: this.config.insecureSkipTlsVerify,
    });
    this.#fetch = { key, fetch: f };
    return f;
  }

  #headers(auth: AuthMaterial, hasBody: boolean): Headers {
    const h = new Headers({
      Accept: "application/json",
      // The apiserver compresses large responses when asked (APIResponseCompression): a LIST of 10k
      // Services shrinks about tenfold.
      "Accept-Encoding": "gzip",
      "User-Agent": this.#userAgent,
    });
    if (auth.authorization) h.set("Authorization", auth.authorization);
    if (hasBody) h.set("Content-Type", "application/json");
    return h;
  }

  /**
   * Sends one request (after taking a rate-limit token) and returns the parsed JSON body. Throws
   * {@link ApiError} for HTTP errors, {@link NetworkError} when no answer came,
   * {@link MessageTooLargeError} when the body is larger than the limit, or the abort reason when `signal`
   * aborted. A 401 makes the credentials refresh; when that yields different material the request
   * is retried once at once (a rotated token should not wait for a backoff).
   */
  async request<T = unknown>(opts: RequestOptions): Promise<T> {
    const res = await this.#send(opts, opts.timeoutMs ?? this.#timeoutMs, false);
    return res as T;
  }

  /**
   * Opens a watch stream (one rate-limit token per start) and returns the response, whose body the caller
   * reads and must cancel or drain. Errors as {@link request}. No timeout: the caller's `signal` (its
   * watchdog) bounds it.
   */
  async openWatch(opts: Omit<RequestOptions, "verb" | "method" | "body" | "timeoutMs">): Promise<Response> {
    return await this.#send({ ...opts, verb: "watch" }, 0, true) as Response;
  }

  async #send(opts: RequestOptions, timeoutMs: number, stream: boolean): Promise<unknown> {
    if (this.#closed) throw new Error("apiserver transport is closed");
    const what = `${opts.method ?? "GET"} ${opts.resource} (${opts.verb})`;
    for (let attempt = 0;; attempt++) {
      await this.limiter.acquire(opts.signal);
      const auth = await this.config.credentials.get();
      const fetchFn = this.#fetchFor(auth);
      const ctl = new AbortController();
      const onAbort = () => ctl.abort(opts.signal?.reason);
      opts.signal?.addEventListener("abort", onAbort, { once: true });
      let timedOut = false;
      const timer = timeoutMs > 0
        ? setTimeout(() => {
          timedOut = true;
          ctl.abort(new DOMException("request timed out", "TimeoutError"));
        }, timeoutMs)
        : undefined;
      const cleanup = () => {
        clearTimeout(timer);
        opts.signal?.removeEventListener("abort", onAbort);
      };
      const url = this.url(opts.path, opts.query);
      let res: Response;
      const sentAt = performance.now();
      try {
        res = await fetchFn(url, {
          method: opts.method ?? "GET",
          headers: this.#headers(auth, opts.body !== undefined),
          body: opts.body !== undefined ? JSON.stringify(opts.body) : undefined,
          signal: ctl.signal,
        });
      } catch (e) {
        cleanup();
        throw this.#networkError(e, opts, what, timedOut, timeoutMs);
      }
      this.stats?.recordRequest(opts.resource, opts.verb, res.status, performance.now() - sentAt, url);
      let handedOver = false;
      try {
        res = decodeResponse(res, {
          fetchDecodes: fetchFn.decodesContent ?? false,
          count: (w, d) => {
            this.#received.wire += w;
            this.#received.decoded += d;
          },
          what,
          signal: ctl.signal,
        });
        if (!res.ok) {
          let text = "";
          try {
            text = await readBounded(res, { limit: ERROR_BODY_BYTES, what, truncate: true });
          } catch { /* the status line is enough */ }
          const err = ApiError.fromStatus(parseStatus(text), res.status, what, retryAfter(res.headers));
          if (res.status === 401 && attempt === 0 && await this.#refreshChanged(auth)) continue;
          throw err;
        }
        if (stream) {
          clearTimeout(timer);
          handedOver = true;
          return res;
        }
        const limit = opts.maxBytes ?? this.#maxResponseBytes;
        if (opts.listItem) return await readList(res, { limit, what }, opts.listItem);
        const text = await readBounded(res, { limit, what });
        try {
          return JSON.parse(text);
        } catch {
          throw new ApiError(
            res.status,
            "InvalidResponse",
            `${what}: response is not JSON: ${snippet(text)}`,
          );
        }
      } catch (e) {
        if (e instanceof ApiError || e instanceof MessageTooLargeError) throw e;
        throw this.#networkError(e, opts, what, timedOut, timeoutMs);
      } finally {
        // a returned stream keeps the caller's abort link (its body must stop when the caller aborts)
        if (!handedOver) cleanup();
      }
    }
  }

  async #refreshChanged(before: AuthMaterial): Promise<boolean> {
    this.config.credentials.invalidate();
    try {
      const after = await this.config.credentials.get();
      return after.authorization !== before.authorization || after.certPem !== before.certPem;
    } catch (e) {
      this.log.warn(
        `refreshing apiserver credentials (${this.config.credentials.description}): ${(e as Error).message}`,
      );
      return false;
    }
  }

  #networkError(e: unknown, opts: RequestOptions, what: string, timedOut: boolean, timeoutMs: number): Error {
    if (opts.signal?.aborted) return e instanceof Error ? e : new DOMException("aborted", "AbortError");
    this.stats?.recordRequest(opts.resource, opts.verb, ERROR_CODE, undefined, this.config.server);
    if (timedOut) {
      return new NetworkError(`${what}: no answer within ${timeoutMs} ms`, { cause: e, timedOut: true });
    }
    const detail = errorChain(e);
    return new NetworkError(`${what} ${this.config.server}: ${detail}`, {
      cause: e,
      refused: /ECONNREFUSED|connection refused|Unable to connect/i.test(detail),
    });
  }

  /** Closes the TLS client; later requests fail. */
  close(): void {
    this.#closed = true;
    this.#fetch?.fetch.close();
    this.#fetch = null;
  }
}

/** Result of {@link listAll}. */
export interface ListResult<T> {
  items: T[];
  /** The list's metadata.resourceVersion: where a watch should start. */
  resourceVersion: string;
  /** Requests it took (pages, including restarts). */
  pages: number;
}

/** Options of {@link listAll}. */
export interface ListAllOptions<T = unknown> {
  path: string;
  resource: string;
  labelSelector?: string;
  fieldSelector?: string;
  /** Page size (default 500, as client-go's pager); 0 sends no limit (one response). */
  limit?: number;
  /**
   * "0" lists from the apiserver's watch cache (any recent state, cheap for the server; the cache ignores
   * `limit` and answers in one response); a resourceVersion N lists a state not older than N (from the
   * watch cache when sent without `limit`); unset lists at the latest resourceVersion (a consistent read).
   * Continue pages never send it.
   */
  resourceVersion?: string;
  signal?: AbortSignal;
  /** Largest page body accepted (bytes; default the transport's limit, {@link MAX_API_MESSAGE_BYTES}). */
  maxPageBytes?: number;
  /** How often an expired continue token may restart the list (default 3). */
  maxRestarts?: number;
  /**
   * Applied to each item as soon as it is parsed, before the next one is (default: none): the reflector
   * checks and reduces it here (ResourceSink.listItem), so the objects as sent are never all alive at once.
   */
  item?: (raw: unknown) => T;
  log?: Logger;
}

/**
 * A complete paginated LIST (limit + continue), read at the latest resourceVersion (or from the watch
 * cache with `resourceVersion: "0"`). When a continue token
 * expires (410) the list starts over from the first page, since pages of different snapshots must not mix.
 */
export async function listAll<T>(t: ApiTransport, opts: ListAllOptions<T>): Promise<ListResult<T>> {
  const limit = opts.limit === 0 ? undefined : String(opts.limit ?? 500);
  const listItem = opts.item ?? ((raw: unknown) => raw);
  let pages = 0;
  for (let restart = 0;; restart++) {
    let items: T[] = [];
    let cont: string | undefined;
    try {
      for (;;) {
        const page = await t.request<ObjectList<T>>({
          path: opts.path,
          query: {
            labelSelector: opts.labelSelector,
            fieldSelector: opts.fieldSelector,
            limit,
            continue: cont,
            resourceVersion: cont === undefined ? opts.resourceVersion : undefined,
          },
          verb: "list",
          resource: opts.resource,
          signal: opts.signal,
          maxBytes: opts.maxPageBytes,
          listItem,
        });
        pages++;
        if (
          typeof page !== "object" || page === null ||
          (page.items !== undefined && !Array.isArray(page.items))
        ) {
          throw new ApiError(200, "InvalidResponse", `list ${opts.resource}: response is not a list`);
        }
        if (page.items) {
          // One response from the watch cache holds every object: no spread of 10k+ arguments, no copy.
          if (items.length === 0) items = page.items;
          else for (const it of page.items) items.push(it);
        }
        cont = page.metadata?.continue || undefined;
        if (!cont) {
          const rv = page.metadata?.resourceVersion ?? "";
          if (!rv) {
            throw new ApiError(
              200,
              "InvalidResponse",
              `list ${opts.resource}: response has no metadata.resourceVersion`,
            );
          }
          return { items, resourceVersion: rv, pages };
        }
      }
    } catch (e) {
      if (cont !== undefined && isExpired(e) && restart < (opts.maxRestarts ?? 3)) {
        opts.log?.info(
          `list ${opts.resource}: continue token expired (410); listing again from the first page`,
        );
        continue;
      }
      throw e;
    }
  }
}

/** A List body decoded item by item; malformed JSON is the same {@link ApiError} as {@link ApiTransport.request}'s. */
async function readList(
  res: Response,
  opts: { limit: number; what: string },
  item: (raw: unknown) => unknown,
): Promise<unknown> {
  const decoder = new ListDecoder(item, { collect: collectGarbage });
  try {
    await readBoundedChunks(res, opts, (chunk) => decoder.push(chunk));
    return decoder.finish();
  } catch (e) {
    if (!(e instanceof ListDecodeError)) throw e;
    const detail = e.text ? `${snippet(e.message)}: ${snippet(e.text)}` : snippet(e.message);
    throw new ApiError(res.status, "InvalidResponse", `${opts.what}: response is not JSON: ${detail}`);
  }
}

function parseStatus(text: string): Partial<Status> | undefined {
  try {
    const s = JSON.parse(text);
    if (s && typeof s === "object" && (s.kind === "Status" || "reason" in s || "message" in s)) return s;
  } catch { /* not JSON: plain-text error page */ }
  return text ? { message: snippet(text) } : undefined;
}

function retryAfter(h: Headers): number | undefined {
  const v = h.get("Retry-After");
  if (!v) return undefined;
  const secs = Number(v);
  if (Number.isFinite(secs) && secs >= 0) return secs * 1000;
  const at = Date.parse(v);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

function defaultReason(code: number): string {
  const reasons: Record<number, string> = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
  };
  return reasons[code] ?? `HTTP${code}`;
}

function snippet(s: string): string {
  const one = s.replace(/\s+/g, " ").trim();
  return one.length > 200 ? `${one.slice(0, 200)}…` : one;
}

/** "outer: inner: innermost" from an error and its causes. */
export function errorChain(e: unknown): string {
  const parts: string[] = [];
  let cur: unknown = e;
  for (let i = 0; cur && i < 5; i++) {
    const msg = cur instanceof Error ? cur.message : String(cur);
    const code = (cur as NodeJS.ErrnoException).code;
    const piece = code && !msg.includes(code) ? `${msg} (${code})` : msg;
    if (!parts.some((p) => p.includes(piece))) parts.push(piece);
    cur = cur instanceof Error ? cur.cause : undefined;
  }
  return parts.join(": ");
}
