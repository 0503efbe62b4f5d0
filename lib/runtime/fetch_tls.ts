/**
 * fetch with a per-connection TLS configuration (cluster CA, client certificate, skip-verify).
 * The only module that knows how each runtime spells that:
 * - Deno: `Deno.createHttpClient({ caCerts, cert, key })`, passed to fetch as `client`;
 * - Bun: `fetch(url, { tls: { ca, cert, key, rejectUnauthorized } })`;
 * - anything else (and Deno with insecure-skip-tls-verify, which Deno's HttpClient cannot express):
 *   a small fetch built on `node:https`, which honours the same options everywhere.
 * Chosen because each runtime's own TLS options were measured to work, and node:https covers the rest.
 * With a custom TLS configuration (always the case for an apiserver), HTTP/2 over node:http2
 * (lib/runtime/fetch_h2.ts) serves every request when the server offers it by ALPN, as client-go does; the
 * fetch above is the fallback for servers that speak only HTTP/1.1.
 */
import * as http from "node:http";
import * as https from "node:https";
import { createH2Fetch } from "./fetch_h2.ts";

export type { FetchFn, TlsFetch, TlsFetchOptions } from "./fetch_types.ts";
import type { FetchFn, TlsFetch, TlsFetchOptions } from "./fetch_types.ts";

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
  const h1 = createHttp1Fetch(opts);
  if (h1.implementation === "global") return h1;
  const h2 = createH2Fetch(opts, h1);
  return Object.defineProperties(h2.fetch, {
    close: {
      value: () => {
        h2.close();
        h1.close();
      },
    },
    implementation: { value: h1.implementation },
    protocol: { get: () => h2.protocol },
    // node:http2 hands bodies over as sent; the HTTP/1.1 fetch may decode (Deno's).
    decodesContent: { get: () => h2.protocol === "h2" ? false : h1.decodesContent },
  }) as TlsFetch;
}

/** The HTTP/1.1 fetch of this runtime for `opts` (see the module comment). */
function createHttp1Fetch(opts: TlsFetchOptions): TlsFetch {
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
