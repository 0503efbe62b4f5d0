/**
 * fetch with a per-connection TLS configuration (cluster CA, client certificate, skip-verify).
 * The only module that knows how each runtime spells that:
 * - Deno: `Deno.createHttpClient({ caCerts, cert, key })`, passed to fetch as `client`;
 * - Bun: `fetch(url, { tls: { ca, cert, key, rejectUnauthorized } })`;
 * - anything else (and Deno with insecure-skip-tls-verify, which Deno's HttpClient cannot express):
 *   a small fetch built on `node:https`, which honours the same options everywhere.
 * Chosen because each runtime's own TLS options were measured to work, and node:https covers the rest.
 */
import * as http from "node:http";
import * as https from "node:https";

/** The fetch signature the Kubernetes transport calls. */
export type FetchFn = (input: string | URL, init?: RequestInit) => Promise<Response>;

/** A fetch bound to one TLS configuration; `close()` releases runtime resources (Deno's HttpClient). */
export type TlsFetch = FetchFn & {
  /** Releases the underlying client. Requests in flight may fail afterwards. */
  close(): void;
  /** Which implementation serves requests: "deno", "bun", "node-https" or "global" (plain fetch). */
  readonly implementation: "deno" | "bun" | "node-https" | "global";
  /**
   * Whether response bodies arrive already decoded when the server compressed them (Deno's fetch always
   * decodes; Bun's is told not to, and node:https never does), so the caller decodes exactly once.
   */
  readonly decodesContent: boolean;
};

/** TLS settings for one apiserver connection (PEM strings, already read from files). */
export interface TlsFetchOptions {
  /** Cluster CA bundle; replaces nothing, adds to the runtime's roots (as kubectl does with a CA file). */
  caPem?: string;
  /** Client certificate chain presented to the server (mTLS). */
  certPem?: string;
  /** Private key for `certPem`. */
  keyPem?: string;
  /** Do not verify the server certificate (kubeconfig insecure-skip-tls-verify). */
  insecureSkipVerify?: boolean;
}

// deno-lint-ignore no-explicit-any
const g = globalThis as any;

/** The runtime this process runs on. */
export const runtimeName: "deno" | "bun" | "node" = typeof g.Deno !== "undefined"
  ? "deno"
  : typeof g.Bun !== "undefined"
  ? "bun"
  : "node";

/**
 * Creates a fetch that verifies the server with `caPem` (when given), presents `certPem`/`keyPem` (when
 * given) and skips verification only when `insecureSkipVerify` is set. With no options at all, returns
 * the global fetch. Throws when only one of cert and key is given.
 */
export function createTlsFetch(opts: TlsFetchOptions = {}): TlsFetch {
  if (Boolean(opts.certPem) !== Boolean(opts.keyPem)) {
    throw new Error("TLS client configuration: a client certificate needs its key and a key its certificate");
  }
  const custom = Boolean(opts.caPem || opts.certPem || opts.insecureSkipVerify);
  if (!custom) {
    return withMeta((input, init) => fetch(input, { ...init, ...NO_DECOMPRESS }), () => {}, "global");
  }

  if (runtimeName === "deno" && !opts.insecureSkipVerify) {
    const clientOpts: Record<string, unknown> = {};
    if (opts.caPem) clientOpts.caCerts = [opts.caPem];
    if (opts.certPem) {
      clientOpts.cert = opts.certPem;
      clientOpts.key = opts.keyPem;
    }
    const client = g.Deno.createHttpClient(clientOpts);
    let closed = false;
    return withMeta(
      (input, init) => fetch(input, { ...init, client } as RequestInit),
      () => {
        if (!closed) {
          closed = true;
          client.close();
        }
      },
      "deno",
    );
  }
  if (runtimeName === "bun") {
    const tls: Record<string, unknown> = { rejectUnauthorized: !opts.insecureSkipVerify };
    if (opts.caPem) tls.ca = opts.caPem;
    if (opts.certPem) {
      tls.cert = opts.certPem;
      tls.key = opts.keyPem;
    }
    return withMeta(
      (input, init) => fetch(input, { ...init, tls, ...NO_DECOMPRESS } as RequestInit),
      () => {},
      "bun",
    );
  }
  const agentOpts: https.AgentOptions = {
    keepAlive: true,
    rejectUnauthorized: !opts.insecureSkipVerify,
  };
  if (opts.caPem) agentOpts.ca = opts.caPem;
  if (opts.certPem) {
    agentOpts.cert = opts.certPem;
    agentOpts.key = opts.keyPem;
  }
  const agent = new https.Agent(agentOpts);
  return withMeta((input, init) => nodeFetch(input, init, agent), () => agent.destroy(), "node-https");
}

/** Bun's fetch decodes compressed bodies unless told not to; the transport decodes them itself (and counts). */
const NO_DECOMPRESS: Record<string, unknown> = runtimeName === "bun" ? { decompress: false } : {};

function withMeta(f: FetchFn, close: () => void, implementation: TlsFetch["implementation"]): TlsFetch {
  // Deno's fetch (its own client or the global one) always decodes; Bun's and node:https never do here.
  const decodesContent = runtimeName === "deno" && implementation !== "node-https";
  return Object.assign(f, { close, implementation, decodesContent }) as TlsFetch;
}

/**
 * A minimal fetch over node:http(s): method, headers, string/Uint8Array body, abort signal, streamed
 * response body. Enough for the apiserver's JSON requests and watch streams; nothing more.
 */
function nodeFetch(input: string | URL, init: RequestInit = {}, agent: https.Agent): Promise<Response> {
  const url = new URL(String(input));
  const signal = init.signal ?? undefined;
  return new Promise<Response>((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason ?? new DOMException("The operation was aborted.", "AbortError"));
      return;
    }
    const headers: Record<string, string> = {};
    new Headers(init.headers).forEach((v, k) => (headers[k] = v));
    const mod = url.protocol === "https:" ? https : http;
    const req = mod.request(url, {
      method: init.method ?? "GET",
      headers,
      agent: url.protocol === "https:" ? agent : undefined,
    });
    const onAbort = () => {
      const reason = signal?.reason ?? new DOMException("The operation was aborted.", "AbortError");
      req.destroy(reason instanceof Error ? reason : new Error(String(reason)));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    req.on("error", (err) => {
      signal?.removeEventListener("abort", onAbort);
      reject(
        signal?.aborted
          ? (signal.reason ?? err)
          : new TypeError(`fetch failed: ${err.message}`, { cause: err }),
      );
    });
    req.on("response", (res) => {
      const body = new ReadableStream<Uint8Array>({
        start(controller) {
          res.on("data", (chunk: Uint8Array) => controller.enqueue(new Uint8Array(chunk)));
          res.on("end", () => {
            signal?.removeEventListener("abort", onAbort);
            controller.close();
          });
          res.on("error", (err) => {
            signal?.removeEventListener("abort", onAbort);
            controller.error(signal?.aborted ? (signal.reason ?? err) : err);
          });
          res.on("close", () => {
            // A destroyed socket without 'end' (abort, reset) must still settle the stream.
            if (!res.complete) {
              try {
                controller.error(signal?.reason ?? new TypeError("fetch: connection closed mid-body"));
              } catch { /* already closed */ }
            }
          });
        },
        cancel() {
          signal?.removeEventListener("abort", onAbort);
          res.destroy();
        },
      });
      const respHeaders = new Headers();
      for (const [k, v] of Object.entries(res.headers)) {
        if (Array.isArray(v)) { for (const one of v) respHeaders.append(k, one); }
        else if (v !== undefined) respHeaders.set(k, String(v));
      }
      const status = res.statusCode ?? 0;
      const nullBody = status === 204 || status === 304;
      if (nullBody) res.resume();
      resolve(
        new Response(nullBody ? null : body, { status, statusText: res.statusMessage, headers: respHeaders }),
      );
    });
    const b = init.body;
    if (typeof b === "string" || b instanceof Uint8Array) req.end(b);
    else req.end();
  });
}
