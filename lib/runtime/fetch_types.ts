/** The types of the TLS fetch (lib/runtime/fetch_tls.ts) and its HTTP/2 path (fetch_h2.ts). */

/** The fetch signature the Kubernetes transport calls. */
export type FetchFn = (input: string | URL, init?: RequestInit) => Promise<Response>;

/** A fetch bound to one TLS configuration; `close()` releases runtime resources (Deno's HttpClient). */
export type TlsFetch = FetchFn & {
  /** Releases the underlying client. Requests in flight may fail afterwards. */
  close(): void;
  /**
   * Which HTTP/1.1 implementation serves requests when HTTP/2 is not used: "deno", "bun", "node-https" or
   * "global" (plain fetch).
   */
  readonly implementation: "deno" | "bun" | "node-https" | "global";
  /**
   * The HTTP version the server chose by ALPN: "h2" (node:http2 serves), "http/1.1" (`implementation`
   * serves), or undefined before the first connection (and for plain fetch, which does not probe).
   */
  readonly protocol?: "h2" | "http/1.1";
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
