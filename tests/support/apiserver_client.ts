/**
 * A tiny HTTPS client for tests that talk to the test apiserver with plain `fetch`: the runtime-specific TLS
 * option (Deno: `client: Deno.createHttpClient(...)`, Bun: `tls: {...}`) is set here, plus a line reader for
 * watch streams. Test code only; the product's transport lives in lib/k8s.
 */
import { rmSync } from "node:fs";
import process from "node:process";
import type { TestApiserver } from "./apiserver.ts";
import { generateTestCerts } from "./certs.ts";

// deno-lint-ignore no-explicit-any
const g = globalThis as any;

let sharedCerts: Promise<string> | undefined;

/**
 * A certificate directory generated once per test process (pass as `tlsDir` to skip regenerating). Call
 * removeSharedCertsDir() from an `after` hook; as a fallback it is removed at process exit (Bun).
 */
export function sharedCertsDir(): Promise<string> {
  sharedCerts ??= generateTestCerts().then((c) => {
    process.once("exit", () => rmSync(c.dir, { recursive: true, force: true }));
    return c.dir;
  });
  return sharedCerts;
}

/** Removes the shared certificate directory, if one was made (the next sharedCertsDir() makes a new one). */
export async function removeSharedCertsDir(): Promise<void> {
  if (!sharedCerts) return;
  const dir = await sharedCerts;
  sharedCerts = undefined;
  rmSync(dir, { recursive: true, force: true });
}

/** Options of TestHttpClient. */
export interface TestHttpClientOptions {
  /** Present the generated client certificate (CN=system:kube-proxy). */
  clientCert?: boolean;
  /** Send `Authorization: Bearer <token>` (default: the server's token unless clientCert is set). */
  token?: string | null;
  /** Trust this CA instead of the server's. */
  caPem?: string;
  /** Present this certificate/key instead of the generated client certificate. */
  certPem?: string;
  keyPem?: string;
}

/** fetch bound to the test apiserver's CA (and optionally its client certificate). */
export class TestHttpClient {
  // deno-lint-ignore no-explicit-any
  #extra: any;
  #token: string | null;
  #base: string;

  constructor(readonly server: TestApiserver, opts: TestHttpClientOptions = {}) {
    const ca = opts.caPem ?? server.caPem;
    const cert = opts.certPem ?? (opts.clientCert ? server.certs.clientCertPem : undefined);
    const key = opts.keyPem ?? (opts.clientCert ? server.certs.clientKeyPem : undefined);
    if (g.Deno) {
      this.#extra = {
        client: g.Deno.createHttpClient(cert ? { caCerts: [ca], cert, key } : { caCerts: [ca] }),
      };
    } else {
      this.#extra = { tls: cert ? { ca, cert, key } : { ca } };
    }
    this.#token = opts.token === undefined ? (cert ? null : server.token) : opts.token;
    this.#base = server.url;
  }

  /** Fetches `path` (relative to the server URL, query included). */
  fetch(path: string, init: RequestInit = {}): Promise<Response> {
    const headers = new Headers(init.headers);
    if (this.#token !== null && !headers.has("authorization")) {
      headers.set("authorization", `Bearer ${this.#token}`);
    }
    return fetch(this.#base.replace(/:\d+$/, `:${this.server.port}`) + path, {
      ...init,
      headers,
      ...this.#extra,
    });
  }

  /** GETs `path` and parses the JSON body; returns status and body. */
  // deno-lint-ignore no-explicit-any
  async getJson(path: string, headers?: Record<string, string>): Promise<{ status: number; body: any }> {
    const r = await this.fetch(path, { headers });
    const text = await r.text();
    return { status: r.status, body: text.startsWith("{") ? JSON.parse(text) : { text } };
  }

  /** Opens a watch (`path` should carry `watch=1`) and returns a reader of its events. */
  async watch(path: string): Promise<WatchReader> {
    const ac = new AbortController();
    const r = await this.fetch(path, { signal: ac.signal });
    return new WatchReader(r, ac);
  }

  /** Releases the underlying HTTP client (Deno keeps a resource open otherwise). */
  close(): void {
    this.#extra.client?.close();
  }
}

/** A watch event as read from the stream (or the raw line if it was not JSON). */
export interface ReadEvent {
  type: string;
  // deno-lint-ignore no-explicit-any
  object: any;
  raw: string;
}

/** Reads a watch stream line by line. */
export class WatchReader {
  #reader: ReadableStreamDefaultReader<string> | undefined;
  #buf = "";
  #ended = false;

  constructor(readonly response: Response, readonly abort: AbortController) {
    this.#reader = response.body?.pipeThrough(new TextDecoderStream()).getReader();
  }

  /** HTTP status of the watch request. */
  get status(): number {
    return this.response.status;
  }

  /**
   * The next line as an event: `{type:"END"}` when the server ended the stream cleanly, `{type:"BROKEN"}` when
   * the connection failed, `{type:"GARBAGE", raw}` for a line that is not JSON. Rejects after `timeoutMs`.
   */
  async next(timeoutMs = 5000): Promise<ReadEvent> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const nl = this.#buf.indexOf("\n");
      if (nl >= 0) {
        const raw = this.#buf.slice(0, nl);
        this.#buf = this.#buf.slice(nl + 1);
        try {
          const ev = JSON.parse(raw);
          return { type: ev.type, object: ev.object, raw };
        } catch {
          return { type: "GARBAGE", object: undefined, raw };
        }
      }
      if (this.#ended || !this.#reader) return { type: "END", object: undefined, raw: "" };
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`watch: no event within ${timeoutMs} ms`);
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timeout = new Promise<"timeout">((r) => timer = setTimeout(() => r("timeout"), left));
      try {
        const res = await Promise.race([this.#reader.read(), timeout]);
        if (res === "timeout") throw new Error(`watch: no event within ${timeoutMs} ms`);
        if (res.done) this.#ended = true;
        else this.#buf += res.value;
      } catch (err) {
        if (String(err).includes("no event within")) throw err;
        this.#ended = true;
        return { type: "BROKEN", object: undefined, raw: String(err) };
      } finally {
        clearTimeout(timer);
      }
    }
  }

  /** Next event that is not a BOOKMARK. */
  async nextNonBookmark(timeoutMs = 5000): Promise<ReadEvent> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const e = await this.next(Math.max(1, deadline - Date.now()));
      if (e.type !== "BOOKMARK") return e;
    }
  }

  /** Aborts the request and releases the stream. */
  async close(): Promise<void> {
    this.abort.abort();
    try {
      await this.#reader?.cancel();
    } catch { /* already aborted */ }
  }
}
