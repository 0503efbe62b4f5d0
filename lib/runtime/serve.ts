/**
 * Serving HTTP: the only module that knows how each runtime opens a listener.
 * - Deno: `Deno.serve({hostname, port, onListen}, handler)`, closed with `shutdown()`;
 * - Bun: `Bun.serve({hostname, port, fetch})`, closed with `stop(true)`.
 * Both bind synchronously and throw on failure with a `code` (EADDRINUSE, EADDRNOTAVAIL, EACCES, ...);
 * that becomes one clear error: `cannot listen on <host>:<port>: <reason> (<code>)`.
 * IPv6 hostnames are given bare ("::", "::1"); messages print them bracketed like Go's JoinHostPort.
 * Both runtimes' serve APIs were measured to behave this way (bind errors, IPv6 hosts, shutdown).
 */
import { log } from "../log.ts";
import { joinHostPort } from "../net/go_net.ts";

/** A request handler: Hono's `app.fetch` or any web-standard function. */
export type FetchHandler = (request: Request) => Response | Promise<Response>;

/** Anything with a `fetch` method (a Hono app). */
export interface FetchApp {
  fetch(request: Request): Response | Promise<Response>;
}

/** Where to listen. */
export interface ServeOptions {
  /** IP address or name; "::" and "0.0.0.0" are wildcards (on Linux "::" also accepts IPv4). */
  readonly hostname: string;
  /** 0 picks a free port. */
  readonly port: number;
}

/** A listening server. */
export interface ServedApp {
  /** Bound address, as given. */
  readonly hostname: string;
  /** Bound port (the real one when 0 was asked). */
  readonly port: number;
  /** Stops accepting and closes connections; resolves when the listener is gone. */
  close(): Promise<void>;
}

/** Opens a listener; the signature every server in lib/server takes, so tests can hand in a fake. */
export type ServeFn = (app: FetchApp | FetchHandler, opts: ServeOptions) => Promise<ServedApp>;

/** A failed bind, with the OS error code kept for callers that decide on it (e.g. retry on EADDRINUSE). */
export class ListenError extends Error {
  /** OS error code, e.g. "EADDRINUSE"; "UNKNOWN" when the runtime gave none. */
  readonly code: string;
  /** Address that was asked for. */
  readonly hostname: string;
  /** Port that was asked for. */
  readonly port: number;
  /** Human reason, e.g. "address already in use". */
  readonly reason: string;

  constructor(hostname: string, port: number, code: string, reason: string, cause?: unknown) {
    super(
      `cannot listen on ${joinHostPort(hostname, port)}: ${reason}${code === "UNKNOWN" ? "" : ` (${code})`}`,
      {
        cause,
      },
    );
    this.name = "ListenError";
    this.code = code;
    this.hostname = hostname;
    this.port = port;
    this.reason = reason;
  }
}

const REASONS: Record<string, string> = {
  EADDRINUSE: "address already in use",
  EADDRNOTAVAIL: "cannot assign requested address",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  EAFNOSUPPORT: "address family not supported by protocol",
  EINVAL: "invalid argument",
};

/** Deno error class names for the same conditions. */
const DENO_CODES: Record<string, string> = {
  AddrInUse: "EADDRINUSE",
  AddrNotAvailable: "EADDRNOTAVAIL",
  PermissionDenied: "EACCES",
  NotCapable: "EACCES",
};

/** A bind failure of either runtime as a {@link ListenError}. */
export function toListenError(hostname: string, port: number, e: unknown): ListenError {
  const err = e as { code?: unknown; name?: unknown; message?: unknown };
  let code = typeof err?.code === "string" && err.code !== "" ? err.code : "";
  if (code === "" && typeof err?.name === "string") code = DENO_CODES[err.name] ?? "";
  const message = typeof err?.message === "string" ? err.message : String(e);
  const reason = REASONS[code] ?? message.replace(/\s*\(os error \d+\)$/, "");
  return new ListenError(hostname, port, code === "" ? "UNKNOWN" : code, reason, e);
}

interface DenoServer {
  addr: { hostname: string; port: number };
  shutdown(): Promise<void>;
}
interface DenoLike {
  serve(
    opts: { hostname: string; port: number; onListen: () => void; onError: (e: unknown) => Response },
    handler: FetchHandler,
  ): DenoServer;
}
interface BunServer {
  port: number;
  stop(closeActiveConnections?: boolean): Promise<void> | void;
}
interface BunLike {
  serve(opts: {
    hostname: string;
    port: number;
    development: boolean;
    reusePort: boolean;
    fetch: FetchHandler;
    error: (e: unknown) => Response;
  }): BunServer;
}

const g = globalThis as { Deno?: DenoLike; Bun?: BunLike };

/** A handler that throws answers 500 and is logged; it never takes the listener down. */
export function internalError(e: unknown): Response {
  log.error("HTTP handler failed:", e);
  return new Response("Internal Server Error\n", {
    status: 500,
    headers: { "Content-Type": "text/plain; charset=utf-8" },
  });
}

/** Serves `app` on `hostname:port`; rejects with a {@link ListenError} when the bind fails. */
export function serveApp(app: FetchApp | FetchHandler, opts: ServeOptions): Promise<ServedApp> {
  const { hostname, port } = opts;
  // Call with the request only: Bun passes its server as a second argument, which Hono would take as Env.
  const handler: FetchHandler = typeof app === "function" ? (r) => app(r) : (r) => app.fetch(r);
  try {
    if (g.Deno) {
      const s = g.Deno.serve({ hostname, port, onListen: () => {}, onError: internalError }, handler);
      let closing: Promise<void> | null = null;
      return Promise.resolve({
        hostname,
        port: s.addr.port,
        close: () => (closing ??= s.shutdown()),
      });
    }
    if (g.Bun) {
      // reusePort must be explicit: with development:false Bun turns SO_REUSEPORT on, and a second listener on
      // the same port then silently shares it instead of failing with EADDRINUSE.
      const s = g.Bun.serve({
        hostname,
        port,
        development: false,
        reusePort: false,
        fetch: handler,
        error: internalError,
      });
      let closing: Promise<void> | null = null;
      return Promise.resolve({
        hostname,
        port: s.port,
        close: () => (closing ??= Promise.resolve(s.stop(true))),
      });
    }
  } catch (e) {
    return Promise.reject(toListenError(hostname, port, e));
  }
  return Promise.reject(new Error("serveApp: no supported runtime (Deno or Bun) found"));
}
