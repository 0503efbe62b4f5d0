/**
 * Reading HTTP/1.x requests from a byte stream, for the small server behind the health-check node ports
 * (lib/runtime/serve_small.ts): request line and headers as Go's net/http reads them, bodies skipped. It
 * is pure (bytes in, requests out) so every runtime's socket drives the same code.
 *
 * What a client may send and what comes of it:
 * - a request line `METHOD SP target SP HTTP/1.x` and headers up to {@link MAX_HEADER_BYTES}; a bare LF ends
 *   a line as well as CRLF (Go accepts both);
 * - a body by Content-Length is skipped, byte by byte as it arrives; a chunked body (Transfer-Encoding) is
 *   not read: the request is answered and the connection closed after it;
 * - keep-alive as Go decides it: HTTP/1.1 unless `Connection: close`, HTTP/1.0 only with
 *   `Connection: keep-alive`;
 * - anything malformed ends the connection with Go's answer: 400, 431 for headers too large, 505 for a
 *   version other than 1.x.
 */

/** Bytes of request line plus headers a request may take (Go allows 1 MiB; no health check needs more). */
export const MAX_HEADER_BYTES = 64 * 1024;

/** A request read in full (its body, if any, skipped). */
export interface Http1Request {
  readonly method: string;
  /** The request target as sent (origin form "/path?q", absolute form, or "*"). */
  readonly target: string;
  /** Minor version: 0 for HTTP/1.0, 1 for HTTP/1.1 (and later 1.x). */
  readonly minor: number;
  /** Header fields in order, names as sent, values trimmed. */
  readonly headers: ReadonlyArray<readonly [string, string]>;
  /** Whether the connection is closed after the response. */
  readonly close: boolean;
}

/** A request the reader could not accept: answer `status` and close. */
export interface Http1RequestError {
  readonly status: 400 | 431 | 505;
  /** Why, for the log. */
  readonly reason: string;
}

/** One thing read: a request, or the error that ends the connection. */
export type Http1ReadResult = { request: Http1Request } | { error: Http1RequestError };

/** The end of a header block: a line end, then an empty line (LF alone counts as a line end). */
const BLANK_LINE = /\r?\n\r?\n/g;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** Field values: visible ASCII, obs-text, space and tab (no CR, LF or NUL). */
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/;

/**
 * Reads requests from the bytes of one connection. `push` the bytes as they come; it returns every request
 * completed by them. After an error or a request that closes the connection, nothing more is read.
 */
export class Http1RequestReader {
  /** Header bytes not yet ending in a blank line (latin1, one char per byte). */
  #head = "";
  /** Body bytes of the last request still to skip. */
  #skip = 0;
  #done = false;

  /** Whether the reader has stopped (an error was returned, or a request that closes the connection). */
  get done(): boolean {
    return this.#done;
  }

  /** Reads `bytes`; returns the requests (and at most one error, last) they complete. */
  push(bytes: Uint8Array): Http1ReadResult[] {
    const out: Http1ReadResult[] = [];
    let at = 0;
    while (!this.#done && at < bytes.length) {
      if (this.#skip > 0) {
        const n = Math.min(this.#skip, bytes.length - at);
        this.#skip -= n;
        at += n;
        continue;
      }
      // Latin1 keeps one char per byte, so offsets in #head are byte offsets. Never hold more than the
      // limit plus the blank line's bytes.
      const before = this.#head.length;
      const piece = latin1(bytes, at, Math.min(bytes.length, at + MAX_HEADER_BYTES + 4 - before));
      this.#head += piece;
      BLANK_LINE.lastIndex = Math.max(0, before - 3);
      const m = BLANK_LINE.exec(this.#head);
      if (m === null || m.index > MAX_HEADER_BYTES) {
        at += piece.length;
        if (this.#head.length > MAX_HEADER_BYTES) {
          out.push(this.#fail(431, `request headers over ${MAX_HEADER_BYTES} bytes`));
        }
        continue;
      }
      at += m.index + m[0].length - before;
      // Empty lines before a request line are ignored, as Go does.
      const head = this.#head.slice(0, m.index).replace(/^(?:\r?\n)+/, "");
      this.#head = "";
      if (head !== "") out.push(this.#parse(head));
    }
    return out;
  }

  #fail(status: Http1RequestError["status"], reason: string): Http1ReadResult {
    this.#done = true;
    return { error: { status, reason } };
  }

  #parse(head: string): Http1ReadResult {
    const lines = head.split(/\r?\n/);
    const m = /^([^ ]+) ([^ ]+) HTTP\/(\d)\.(\d)$/.exec(lines[0]);
    if (!m) return this.#fail(400, `malformed request line ${JSON.stringify(lines[0].slice(0, 80))}`);
    const [, method, target, major, minorText] = m;
    if (!TOKEN.test(method)) {
      return this.#fail(400, `malformed method ${JSON.stringify(method.slice(0, 40))}`);
    }
    if (major !== "1") return this.#fail(505, `unsupported protocol version HTTP/${major}.${minorText}`);
    const minor = Number(minorText);
    const headers: [string, string][] = [];
    let length: number | undefined;
    let chunked = false;
    let connection = "";
    for (const line of lines.slice(1)) {
      const i = line.indexOf(":");
      const name = i < 0 ? "" : line.slice(0, i);
      if (!TOKEN.test(name)) {
        return this.#fail(400, `malformed header line ${JSON.stringify(line.slice(0, 80))}`);
      }
      const value = line.slice(i + 1).replace(/^[ \t]+|[ \t]+$/g, "");
      if (!FIELD_VALUE.test(value)) return this.#fail(400, `invalid value of header ${JSON.stringify(name)}`);
      headers.push([name, value]);
      const lower = name.toLowerCase();
      if (lower === "content-length") {
        if (!/^\d{1,15}$/.test(value)) return this.#fail(400, `bad Content-Length ${JSON.stringify(value)}`);
        if (length !== undefined && length !== Number(value)) {
          return this.#fail(400, "conflicting Content-Length");
        }
        length = Number(value);
      } else if (lower === "transfer-encoding") {
        chunked = true;
      } else if (lower === "connection") {
        connection += `,${value.toLowerCase()}`;
      }
    }
    if (minor === 0 && chunked) return this.#fail(400, "Transfer-Encoding in an HTTP/1.0 request");
    const tokens = connection.split(",").map((t) => t.trim());
    let close = minor === 0 ? !tokens.includes("keep-alive") : tokens.includes("close");
    // A chunked body is not read: answer, then close rather than parse the body as the next request.
    if (chunked) close = true;
    else this.#skip = length ?? 0;
    if (close) this.#done = true;
    return { request: { method, target, minor, headers, close } };
  }
}

/** Bytes [from, to) of `b` as latin1 text. */
function latin1(b: Uint8Array, from: number, to: number): string {
  let s = "";
  for (let i = from; i < to; i += 8192) {
    s += String.fromCharCode(...b.subarray(i, Math.min(to, i + 8192)));
  }
  return s;
}
