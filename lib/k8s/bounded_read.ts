/**
 * Bounded reading of what the apiserver sends, so that a broken or hostile server cannot make the agent
 * hold unbounded memory or spend quadratic time: a whole response body (one LIST page) is read with a byte
 * limit, and a watch stream is split into lines by {@link LineSplitter}, which keeps the bytes of an
 * unfinished line as a list of chunks, scans every byte received exactly once, and refuses a line longer
 * than the limit as soon as the limit is passed (without waiting for its newline).
 */

/**
 * Largest LIST page body (and any other non-watch response) the agent accepts: 64 MiB. A real apiserver
 * never comes close (etcd refuses objects above 1.5 MiB by default, and a LIST page holds at most 500 of
 * them); past this limit the page is dropped with one error naming the resource and the limit, and the
 * request is retried with backoff.
 */
export const MAX_API_MESSAGE_BYTES = 64 * 1024 * 1024;

/**
 * Largest watch event line the agent accepts: 16 MiB. One line carries one object, which etcd caps at
 * 1.5 MiB by default (a few MiB as JSON at most); a lower bound than a page's keeps the three watches'
 * unfinished lines at 48 MiB in all, whatever a broken server streams.
 */
export const MAX_WATCH_EVENT_BYTES = 16 * 1024 * 1024;

/** A response body or a watch line longer than the limit; the request is dropped. */
export class MessageTooLargeError extends Error {
  /** The limit that was passed (bytes). */
  readonly limit: number;

  constructor(message: string, limit: number) {
    super(message);
    this.name = "MessageTooLargeError";
    this.limit = limit;
  }
}

/** "64 MiB" for whole MiB, else "1500 bytes". */
export function formatLimit(bytes: number): string {
  return bytes >= 1024 * 1024 && bytes % (1024 * 1024) === 0
    ? `${bytes / (1024 * 1024)} MiB`
    : `${bytes} bytes`;
}

/** Options of {@link readBounded}. */
export interface ReadBoundedOptions {
  /** Largest body accepted (bytes). */
  limit: number;
  /** Names the body in the error ("GET services (list)"). */
  what: string;
  /** Return the first `limit` bytes instead of failing (error bodies, where a prefix is enough). */
  truncate?: boolean;
}

/**
 * Reads a whole response body as text, at most `opts.limit` bytes: past the limit the body is cancelled
 * and {@link MessageTooLargeError} thrown (or, with `truncate`, the prefix returned). A Content-Length
 * above the limit fails before anything is read.
 */
export async function readBounded(res: Response, opts: ReadBoundedOptions): Promise<string> {
  const parts: Uint8Array[] = [];
  const total = await readBoundedChunks(res, opts, (chunk) => parts.push(chunk));
  return new TextDecoder().decode(concatBytes(parts, total));
}

/**
 * Reads a response body chunk by chunk, handing each to `onChunk` as it arrives, with the limits of
 * {@link readBounded}; returns the bytes read. What `onChunk` throws ends the read (the body is cancelled)
 * and is thrown.
 */
export async function readBoundedChunks(
  res: Response,
  opts: ReadBoundedOptions,
  onChunk: (chunk: Uint8Array) => void,
): Promise<number> {
  const declared = Number(res.headers.get("content-length") ?? NaN);
  const tooLarge = () =>
    new MessageTooLargeError(
      `${opts.what}: response body is larger than the limit of ${formatLimit(opts.limit)}; dropped it`,
      opts.limit,
    );
  if (!res.body) return 0;
  if (!opts.truncate && Number.isFinite(declared) && declared > opts.limit) {
    await res.body.cancel().catch(() => {});
    throw tooLarge();
  }
  const reader = res.body.getReader();
  let total = 0;
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (total + value.length > opts.limit) {
        if (!opts.truncate) throw tooLarge();
        onChunk(value.subarray(0, opts.limit - total));
        total = opts.limit;
        break;
      }
      total += value.length;
      onChunk(value);
    }
  } finally {
    reader.cancel().catch(() => {});
  }
  return total;
}

/**
 * Splits a byte stream into lines (without their "\n"). Linear in the bytes received: each chunk is
 * scanned once from where the previous scan stopped, and an unfinished line is kept as a list of chunks
 * that is joined once, when its newline arrives. "\n" never occurs inside a multi-byte UTF-8 sequence, so
 * every line can be decoded on its own.
 */
export class LineSplitter {
  /** Largest line accepted (bytes, without the newline). */
  readonly limit: number;
  /** Names the stream in the error ("watch services"). */
  readonly what: string;
  #parts: Uint8Array[] = [];
  #held = 0;
  #scanned = 0;

  constructor(limit: number, what: string) {
    this.limit = limit;
    this.what = what;
  }

  /** Bytes looked at so far (tests check that it equals the bytes received: no byte is scanned twice). */
  get scannedBytes(): number {
    return this.#scanned;
  }

  /** Bytes of the unfinished line held now. */
  get heldBytes(): number {
    return this.#held;
  }

  /**
   * Feeds one chunk and returns the lines it completes, in order. Throws {@link MessageTooLargeError} as
   * soon as the unfinished line passes the limit; the splitter holds nothing afterwards.
   */
  push(chunk: Uint8Array): Uint8Array[] {
    const lines: Uint8Array[] = [];
    let pos = 0;
    while (pos < chunk.length) {
      const nl = chunk.indexOf(10, pos);
      const end = nl === -1 ? chunk.length : nl;
      this.#scanned += (nl === -1 ? end : end + 1) - pos;
      if (this.#held + (end - pos) > this.limit) {
        this.#parts = [];
        this.#held = 0;
        throw new MessageTooLargeError(
          `${this.what}: one event line is larger than the limit of ${
            formatLimit(this.limit)
          }; dropped the stream`,
          this.limit,
        );
      }
      if (nl === -1) {
        this.#parts.push(chunk.subarray(pos));
        this.#held += end - pos;
        break;
      }
      const piece = chunk.subarray(pos, end);
      if (this.#parts.length === 0) lines.push(piece);
      else {
        this.#parts.push(piece);
        lines.push(concatBytes(this.#parts, this.#held + piece.length));
        this.#parts = [];
        this.#held = 0;
      }
      pos = nl + 1;
    }
    return lines;
  }

  /** The last line when the stream ended without a final newline (null when there is none). */
  finish(): Uint8Array | null {
    if (this.#parts.length === 0) return null;
    const last = concatBytes(this.#parts, this.#held);
    this.#parts = [];
    this.#held = 0;
    return last;
  }
}

/** `parts` as one array of `total` bytes (the part itself when there is one). */
export function concatBytes(parts: readonly Uint8Array[], total: number): Uint8Array {
  if (parts.length === 1) return parts[0];
  const out = new Uint8Array(total);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}
