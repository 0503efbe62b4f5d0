/**
 * Builds an iptables-restore payload as a list of moderately sized flat strings, writing each line's
 * pieces straight into a byte buffer instead of making a string per line. A full sync at 10k Services is
 * ~310k lines; a template literal per line is a rope of several string cells that is flattened into a
 * copy when joined, so the lines alone made ~80 MB of garbage per full render, which set the agent's peak
 * RSS (bench/render_peak.ts). Here the hot lines (own_chains.ts) are written piece by piece (`put`,
 * `putRange`, `end`): the buffer's bytes become a chunk string when the chunk is cut, and nothing else
 * is allocated per line. `line` still takes a whole line for the rarer ones.
 *
 * The rule text is ASCII (validate.ts admits nothing else into the payload); any other character is
 * written as UTF-8 and its chunk decoded as UTF-8, which is also what the stdin writer sends.
 */
import { Buffer } from "node:buffer";

/** A chunk is cut once it holds this many bytes (auto-cut writers), at the end of a line. */
const FLUSH_BYTES = 64 * 1024;
/** First buffer size: incremental renders make several small writers per sync. */
const INITIAL_BYTES = 1024;

/** Collects lines ("\n"-terminated in the output) into flat chunks. */
export class PayloadWriter {
  readonly #chunks: string[] = [];
  readonly #flushBytes: number;
  #buf: Buffer = Buffer.allocUnsafe(INITIAL_BYTES);
  #len = 0;
  /** The pending bytes hold a non-ASCII character (UTF-8 encoded). */
  #utf8 = false;
  #count = 0;
  #pending = 0;

  /**
   * `flushBytes`: a chunk is cut at the end of the first line that brings it to this many bytes; Infinity
   * leaves every cut to the caller (`take`), e.g. so that text ends where a service port's chains do.
   */
  constructor(flushBytes = FLUSH_BYTES) {
    this.#flushBytes = flushBytes;
  }

  /** Appends `s` to the current line. */
  put(s: string): void {
    this.putRange(s, 0, s.length);
  }

  /** Appends `s.slice(start, end)` to the current line, without making that string. */
  putRange(s: string, start: number, end: number): void {
    let o = this.#len;
    if (o + end - start > this.#buf.length) this.#grow(end - start);
    const b = this.#buf;
    for (let i = start; i < end; i++) {
      const c = s.charCodeAt(i);
      if (c > 0x7f) {
        this.#len = o;
        this.#putWide(s.slice(i, end));
        return;
      }
      b[o++] = c;
    }
    this.#len = o;
  }

  /** Ends the current line. */
  end(): void {
    if (this.#len >= this.#buf.length) this.#grow(1);
    this.#buf[this.#len++] = 10;
    this.#count++;
    this.#pending++;
    if (this.#len >= this.#flushBytes) this.#flush();
  }

  /** Appends one line (without its newline). */
  line(s: string): void {
    this.putRange(s, 0, s.length);
    this.end();
  }

  /** Appends lines. */
  lines(ls: readonly string[]): void {
    for (const l of ls) this.line(l);
  }

  /**
   * The pending lines as one string, not kept ("" when none): for a writer reused to render text on
   * demand, whose chunks must not pile up in it.
   */
  take(): string {
    if (this.#pending === 0) return "";
    const text = this.#buf.toString(this.#utf8 ? "utf8" : "latin1", 0, this.#len);
    this.#len = 0;
    this.#pending = 0;
    this.#utf8 = false;
    return text;
  }

  /** Lines written so far. */
  get count(): number {
    return this.#count;
  }

  /** The chunks so far; each ends with "\n", so their concatenation is the text. */
  chunks(): string[] {
    this.#flush();
    return this.#chunks;
  }

  #flush(): void {
    if (this.#pending === 0) return;
    this.#chunks.push(this.#buf.toString(this.#utf8 ? "utf8" : "latin1", 0, this.#len));
    this.#len = 0;
    this.#pending = 0;
    this.#utf8 = false;
  }

  /** Room for `n` more bytes: the buffer doubles (pending lines are never split across chunks). */
  #grow(n: number): void {
    let size = this.#buf.length * 2;
    while (size < this.#len + n) size *= 2;
    const next = Buffer.allocUnsafe(size);
    this.#buf.copy(next, 0, 0, this.#len);
    this.#buf = next;
  }

  #putWide(s: string): void {
    const n = Buffer.byteLength(s, "utf8");
    if (this.#len + n > this.#buf.length) this.#grow(n);
    this.#len += this.#buf.write(s, this.#len, "utf8");
    this.#utf8 = true;
  }
}

/** The chunks of several writers, in order. */
export function concatChunks(writers: readonly PayloadWriter[]): string[] {
  const out: string[] = [];
  for (const w of writers) for (const c of w.chunks()) out.push(c);
  return out;
}
