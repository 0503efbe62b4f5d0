/**
 * fetch over HTTP/2 (node:http2) for the apiserver, used when the server picks "h2" by ALPN, as client-go
 * does: one TLS connection carries every request and watch as streams, and HPACK sends repeated request and
 * response headers as a few bytes each. That matters on a metered link where poll mode opens a bounded
 * watch per resource every interval. When the server picks HTTP/1.1 (or nothing) the given fallback fetch
 * serves this and every later request. Measured to work on Bun and Deno's node:http2 with a CA, a client
 * certificate and key, bearer tokens, streamed bodies and abort.
 */
import http2 from "node:http2";
import tls from "node:tls";
import type { FetchFn, TlsFetchOptions } from "./fetch_types.ts";

/** As client-go's TLSHandshakeTimeout. */
const HANDSHAKE_TIMEOUT_MS = 10_000;

/** Stream-level receive window: a LIST page of a large cluster should not stall on 64 KiB round trips. */
const WINDOW_BYTES = 4 * 1024 * 1024;

/**
 * Health check of an HTTP/2 connection, as client-go configures golang.org/x/net/http2 (ReadIdleTimeout 30 s,
 * PingTimeout 15 s): after `readIdleMs` without a byte from the server a PING is sent, and the connection is
 * closed when its answer does not come within `pingTimeoutMs`. Without it a connection that a middlebox
 * silently dropped would hold every request and watch on it until their own timeouts, and be reused after.
 */
export interface H2HealthCheck {
  readIdleMs: number;
  pingTimeoutMs: number;
}

/** client-go's values. */
export const DEFAULT_H2_HEALTH_CHECK: H2HealthCheck = { readIdleMs: 30_000, pingTimeoutMs: 15_000 };

/** What {@link createH2Fetch} returns: a fetch plus its close and the protocol it ended up with. */
export interface H2Fetch {
  fetch: FetchFn;
  /** Closes the HTTP/2 connection (requests in flight fail). */
  close(): void;
  /** "h2" once the server chose HTTP/2, "http/1.1" once it did not (then `fallback` serves), else undefined. */
  readonly protocol: "h2" | "http/1.1" | undefined;
}

/**
 * A fetch that speaks HTTP/2 to servers offering it by ALPN and hands every request to `fallback` once a
 * server has not. Connection errors (refused, TLS) are rejected as `TypeError("fetch failed: …")` with the
 * cause, as fetch does; a failed connection is made again on the next request.
 */
export function createH2Fetch(
  opts: TlsFetchOptions,
  fallback: FetchFn,
  health: H2HealthCheck = DEFAULT_H2_HEALTH_CHECK,
): H2Fetch {
  let protocol: H2Fetch["protocol"];
  let session: Promise<http2.ClientHttp2Session> | undefined;
  let closed = false;
  /** Sockets still in their TLS handshake (close() ends them). */
  const handshaking = new Set<tls.TLSSocket>();
  /** Records a read on a session (for its health check). */
  const alive = new WeakMap<http2.ClientHttp2Session, () => void>();

  const connect = (origin: URL): Promise<http2.ClientHttp2Session> => {
    const p = new Promise<http2.ClientHttp2Session>((resolve, reject) => {
      const socket = tls.connect({
        host: origin.hostname,
        port: Number(origin.port || 443),
        // SNI only for names: an IP address as servername is refused by node:tls.
        servername: /^[\d.]+$|:/.test(origin.hostname) ? undefined : origin.hostname,
        ca: opts.caPem,
        cert: opts.certPem,
        key: opts.keyPem,
        rejectUnauthorized: !opts.insecureSkipVerify,
        ALPNProtocols: ["h2", "http/1.1"],
      });
      const fail = (err: Error) => {
        clearTimeout(handshake);
        reject(new TypeError(`fetch failed: ${err.message}`, { cause: err }));
      };
      // A handshake that never completes (a lost SYN, a silent middlebox) must not hold every later request.
      const handshake = setTimeout(
        () => socket.destroy(new Error(`TLS handshake not done within ${HANDSHAKE_TIMEOUT_MS} ms`)),
        HANDSHAKE_TIMEOUT_MS,
      );
      handshaking.add(socket);
      socket.once("close", () => {
        clearTimeout(handshake);
        handshaking.delete(socket);
      });
      socket.once("error", fail);
      socket.once("secureConnect", () => {
        clearTimeout(handshake);
        handshaking.delete(socket);
        socket.off("error", fail);
        if (socket.alpnProtocol !== "h2") {
          protocol = "http/1.1";
          socket.destroy();
          reject(new FallBack());
          return;
        }
        protocol = "h2";
        const s = http2.connect(origin.origin, {
          createConnection: () => socket,
          settings: { initialWindowSize: WINDOW_BYTES },
        });
        const forget = () => {
          if (session === p) session = undefined;
        };
        s.on("error", forget);
        s.on("close", forget);
        s.on("goaway", forget);
        // Under Deno the session learns of a lost connection after its streams do: a request made in
        // between (a watch resuming at once) went out on the dead session and waited for nothing.
        socket.once("close", forget);
        alive.set(s, watchHealth(s, health));
        resolve(s);
      });
    });
    p.catch(() => {
      if (session === p) session = undefined;
    });
    return p;
  };

  const h2fetch = async (input: string | URL, init: RequestInit = {}, retried = false): Promise<Response> => {
    const url = new URL(String(input));
    if (protocol === "http/1.1" || url.protocol !== "https:") return fallback(input, init);
    if (closed) throw new TypeError("fetch failed: client closed");
    const signal = init.signal ?? undefined;
    if (signal?.aborted) throw signal.reason ?? new DOMException("The operation was aborted.", "AbortError");
    let s: http2.ClientHttp2Session;
    const reused = session !== undefined;
    try {
      s = await abortable(session ??= connect(url), signal);
      // A session the server sent GOAWAY on (or that died) takes no new streams: connect again once.
      if (s.closed || s.destroyed) {
        session = undefined;
        s = await abortable(session = connect(url), signal);
      }
    } catch (e) {
      if (e instanceof FallBack) return fallback(input, init);
      throw e;
    }
    const headers: http2.OutgoingHttpHeaders = {
      ":method": init.method ?? "GET",
      ":path": url.pathname + url.search,
    };
    new Headers(init.headers).forEach((v, k) => (headers[k] = v));
    return await new Promise<Response>((resolve, reject) => {
      // Connect again, once, when the request never got to the server: Bun leaves a session that received
      // GOAWAY open but refuses new streams on it; and a reused connection the server has just closed fails
      // the write (EPIPE, ECONNRESET) before the session learns it is gone. Only bodiless requests (GET)
      // are sent twice, as Go's transport does on a dead reused connection.
      const goneAway = (e: unknown) => {
        if (retried || init.body != null) return false;
        const code = (e as NodeJS.ErrnoException)?.code;
        return code === "ERR_HTTP2_GOAWAY_SESSION" ||
          (reused && (code === "EPIPE" || code === "ECONNRESET" || code === "ERR_HTTP2_INVALID_SESSION"));
      };
      // A stream the server refused (RST_STREAM REFUSED_STREAM) was not processed (RFC 9113 section 8.7): Go's
      // transport sends such a request again. Bun reports no reset code (rstCode 0 after the server's
      // RST_STREAM, and no 'error'), so there a bodiless request reset before its response goes again too:
      // a GET may be repeated, and a second reset fails it.
      const refused = (code: number | undefined) =>
        !retried && init.body == null &&
        (code === http2.constants.NGHTTP2_REFUSED_STREAM || !code);
      const again = () => {
        session = undefined;
        s.close(); // streams still open on it may finish
        return h2fetch(input, init, true);
      };
      let responded = false;
      /** Set once the request's promise is settled or handed to `again` (an error, then close, both come). */
      let settled = false;
      let stream: http2.ClientHttp2Stream;
      try {
        stream = s.request(headers);
      } catch (e) {
        if (goneAway(e)) {
          resolve(again());
          return;
        }
        reject(new TypeError(`fetch failed: ${(e as Error).message}`, { cause: e }));
        return;
      }
      const reason = () => signal?.reason ?? new DOMException("The operation was aborted.", "AbortError");
      let body: ReadableStreamDefaultController<Uint8Array> | undefined;
      const onAbort = () => {
        settled = true;
        stream.close(http2.constants.NGHTTP2_CANCEL);
        reject(reason());
        try {
          body?.error(reason());
        } catch { /* already closed */ }
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      const done = () => signal?.removeEventListener("abort", onAbort);
      stream.on("error", (err) => {
        done();
        if (!responded && !settled && (goneAway(err) || (isStreamReset(err) && refused(stream.rstCode)))) {
          settled = true;
          resolve(again());
          return;
        }
        settled = true;
        const e = signal?.aborted ? reason() : new TypeError(`fetch failed: ${err.message}`, { cause: err });
        reject(e);
        try {
          body?.error(e);
        } catch { /* already closed */ }
      });
      // A stream closed before its response without an 'error' (Bun, on the server's RST_STREAM) would
      // otherwise leave the request waiting for ever.
      stream.on("close", () => {
        if (responded || settled) return;
        settled = true;
        done();
        const code = stream.rstCode;
        if (refused(code)) {
          resolve(again());
          return;
        }
        reject(
          new TypeError(
            `fetch failed: HTTP/2 stream reset before its response (code ${
              code ? codeName(code) : "unknown"
            })`,
          ),
        );
      });
      const touch = alive.get(s);
      stream.once("response", (h) => {
        responded = true;
        settled = true;
        touch?.();
        const status = Number(h[":status"] ?? 0);
        const respHeaders = new Headers();
        for (const [k, v] of Object.entries(h)) {
          if (k.startsWith(":") || v === undefined) continue;
          if (Array.isArray(v)) { for (const one of v) respHeaders.append(k, one); }
          else respHeaders.set(k, String(v));
        }
        const nullBody = status === 204 || status === 304;
        const rs = nullBody ? null : new ReadableStream<Uint8Array>({
          start(c) {
            body = c;
            stream.on("data", (chunk: Uint8Array) => {
              touch?.();
              c.enqueue(new Uint8Array(chunk));
            });
            let ended = false;
            stream.on("end", () => (ended = true));
            // Settle on 'close': only a stream that ended and was not reset is a complete body (a reset
            // can follow the last data frame, and a lost connection never ends the stream).
            stream.on("close", () => {
              done();
              const clean = ended && (stream.rstCode ?? 0) === http2.constants.NGHTTP2_NO_ERROR;
              try {
                if (clean) c.close();
                else {
                  c.error(
                    signal?.aborted ? reason() : new TypeError(
                      `fetch: HTTP/2 stream closed mid-body (code ${stream.rstCode ?? "none"})`,
                    ),
                  );
                }
              } catch { /* already settled */ }
            });
          },
          cancel() {
            done();
            stream.close(http2.constants.NGHTTP2_CANCEL);
          },
        });
        if (nullBody) stream.resume();
        resolve(new Response(rs, { status, headers: respHeaders }));
      });
      const b = init.body;
      if (typeof b === "string" || b instanceof Uint8Array) stream.end(b);
      else stream.end();
    });
  };

  return {
    fetch: h2fetch,
    close() {
      closed = true;
      for (const sock of handshaking) sock.destroy(new Error("client closed"));
      session?.then((s) => s.destroy(), () => {});
      session = undefined;
    },
    get protocol() {
      return protocol;
    },
  };
}

/**
 * Runs the {@link H2HealthCheck} on session `s` until it closes; returns the function that records a read
 * (the session reads its socket natively, so reads are seen as responses, data frames and PING answers).
 */
function watchHealth(s: http2.ClientHttp2Session, h: H2HealthCheck): () => void {
  let lastRead = Date.now();
  let pinging = false;
  const timer = setInterval(() => {
    if (pinging || Date.now() - lastRead < h.readIdleMs) return;
    pinging = true;
    const deadline = setTimeout(() => {
      s.destroy(new Error(`HTTP/2 connection: no answer to a PING within ${h.pingTimeoutMs} ms`));
    }, h.pingTimeoutMs);
    const answered = () => {
      clearTimeout(deadline);
      pinging = false;
      lastRead = Date.now();
    };
    try {
      if (!s.ping(answered)) answered();
    } catch {
      answered();
    }
  }, Math.max(10, Math.min(h.readIdleMs, h.pingTimeoutMs) / 2));
  (timer as { unref?: () => void }).unref?.();
  s.once("close", () => clearInterval(timer));
  return () => (lastRead = Date.now());
}

/** `p`, or the abort reason of `signal` when that comes first (the connection attempt goes on for others). */
function abortable<T>(p: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return p;
  return new Promise<T>((resolve, reject) => {
    const onAbort = () =>
      reject(signal.reason ?? new DOMException("The operation was aborted.", "AbortError"));
    if (signal.aborted) return onAbort();
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** The server did not pick h2: the request goes to the fallback fetch. */
class FallBack extends Error {}

/** Whether `e` is node:http2's error for a stream the peer reset (ERR_HTTP2_STREAM_ERROR). */
function isStreamReset(e: unknown): boolean {
  return (e as NodeJS.ErrnoException)?.code === "ERR_HTTP2_STREAM_ERROR";
}

/** RFC 9113 section 7 error codes, by number, named as node:http2 names them. */
const ERROR_CODES = [
  "NO_ERROR",
  "PROTOCOL_ERROR",
  "INTERNAL_ERROR",
  "FLOW_CONTROL_ERROR",
  "SETTINGS_TIMEOUT",
  "STREAM_CLOSED",
  "FRAME_SIZE_ERROR",
  "REFUSED_STREAM",
  "CANCEL",
  "COMPRESSION_ERROR",
  "CONNECT_ERROR",
  "ENHANCE_YOUR_CALM",
  "INADEQUATE_SECURITY",
  "HTTP_1_1_REQUIRED",
];

/** "NGHTTP2_REFUSED_STREAM" for 7, and so on; the number for a code RFC 9113 does not define. */
function codeName(code: number): string {
  const name = ERROR_CODES[code];
  return name ? `NGHTTP2_${name}` : String(code);
}
