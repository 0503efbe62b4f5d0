/**
 * Compressed responses from the apiserver: the transport asks for `Accept-Encoding: gzip` (the apiserver
 * compresses responses above 128 KiB when asked, APIResponseCompression) and this module turns a response
 * into one whose body is the decoded JSON, streamingly (a watch stream stays a stream), while counting the
 * bytes that crossed the wire.
 *
 * Whether the fetch already decoded the body is a property of the fetch implementation, not something
 * guessed from the bytes: Deno's fetch always decodes (and keeps the Content-Encoding header), Bun's is
 * told not to (`decompress: false`, lib/runtime/fetch_tls.ts) so the compressed bytes can be counted. A
 * body is therefore decoded exactly once.
 */

/** Bytes received for one response body: on the wire and after decoding. */
export interface BodyBytes {
  /** Bytes on the wire (the compressed size when the response was compressed). */
  wire: number;
  /** Bytes after decoding (equal to `wire` when the response was not compressed). */
  decoded: number;
}

/** Receives the byte counts of each body as it is read (once per chunk). */
export type ByteCounter = (wireDelta: number, decodedDelta: number) => void;

/** Options of {@link decodeResponse}. */
export interface DecodeOptions {
  /** The fetch implementation already decodes compressed bodies (lib/runtime/fetch_tls.ts). */
  fetchDecodes: boolean;
  count: ByteCounter;
  /** Names the request in errors ("GET services (list)"). */
  what: string;
  /** The request's abort signal: ends the returned body at once with its reason. */
  signal?: AbortSignal;
}

/**
 * Returns `res` with a body that is decoded (when it carries `Content-Encoding: gzip` and the fetch left
 * it compressed) and counted: `count` is called as chunks pass. When the fetch decoded the body itself,
 * the wire size is known only from Content-Length; without it (a compressed chunked stream) the decoded
 * bytes are counted as wire bytes (an upper bound). Throws for an encoding other than gzip or identity
 * that the fetch left undecoded.
 */
export function decodeResponse(res: Response, opts: DecodeOptions): Response {
  const { fetchDecodes, count, what, signal } = opts;
  if (!res.body) return res;
  const enc = (res.headers.get("content-encoding") ?? "").trim().toLowerCase();
  const compressed = enc !== "" && enc !== "identity";
  if (compressed && enc !== "gzip" && !fetchDecodes) {
    throw new Error(`${what}: response has Content-Encoding ${JSON.stringify(enc)}; only gzip is accepted`);
  }
  let body: ReadableStream<Uint8Array> = res.body;
  if (compressed && !fetchDecodes) {
    const gunzip = new DecompressionStream("gzip") as unknown as TransformStream<Uint8Array, Uint8Array>;
    body = counting(
      counting(body, (n) => count(n, 0), signal).pipeThrough(gunzip),
      (n) => count(0, n),
      signal,
    );
  } else if (compressed) {
    // The fetch decoded it: the wire size is the declared length, counted once up front.
    const declared = Number(res.headers.get("content-length") ?? NaN);
    const known = Number.isFinite(declared) && declared >= 0;
    if (known) count(declared, 0);
    body = counting(body, (n) => count(known ? 0 : n, n), signal);
  } else {
    body = counting(body, (n) => count(n, n), signal);
  }
  const headers = new Headers(res.headers);
  if (compressed) {
    // The body handed on is decoded: its length and encoding are no longer what the headers say.
    headers.delete("content-encoding");
    headers.delete("content-length");
  }
  return new Response(body, { status: res.status, statusText: res.statusText, headers });
}

/**
 * `src` with each chunk counted, ended with the abort reason as soon as `signal` aborts. The abort is
 * wired here on purpose: measured under Deno, a wrapped watch body whose fetch was aborted (the watchdog
 * ending a stalled watch) did not always see the source stream fail, and the watch hung.
 */
function counting(
  src: ReadableStream<Uint8Array>,
  onChunk: (n: number) => void,
  signal: AbortSignal | undefined,
): ReadableStream<Uint8Array> {
  const reader = src.getReader();
  return new ReadableStream<Uint8Array>({
    start(ctl) {
      const onAbort = () => {
        try {
          ctl.error(signal!.reason ?? new DOMException("aborted", "AbortError"));
        } catch { /* already closed */ }
        reader.cancel(signal!.reason).catch(() => {});
      };
      if (signal?.aborted) onAbort();
      else signal?.addEventListener("abort", onAbort, { once: true });
      reader.closed.then(
        () => signal?.removeEventListener("abort", onAbort),
        () => signal?.removeEventListener("abort", onAbort),
      );
    },
    async pull(ctl) {
      const { value, done } = await reader.read();
      if (done) return ctl.close();
      onChunk(value.byteLength);
      ctl.enqueue(value);
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  }, { highWaterMark: 0 });
}
