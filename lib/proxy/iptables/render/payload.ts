/**
 * Builds an iptables-restore payload as a list of moderately sized flat strings instead of one array of
 * every line. A full sync at 10k Services is ~330k lines; each line is a concatenation (a rope of several
 * string nodes until it is flattened), so holding them all until a final join cost ~100 MB of transient
 * heap. Here lines are joined every FLUSH_LINES lines, and only the flat chunks (the payload's own bytes)
 * live until the end.
 */

/** Lines per chunk (~40 KB of rules). */
const FLUSH_LINES = 512;

/** Collects lines ("\n"-terminated in the output) into flat chunks. */
export class PayloadWriter {
  readonly #chunks: string[] = [];
  readonly #pending: string[] = [];
  readonly #flushLines: number;
  #count = 0;

  /**
   * `flushLines`: a chunk is cut after this many lines; Infinity leaves every cut to the caller (`cut`),
   * e.g. so that chunks end where a service port's chains do.
   */
  constructor(flushLines = FLUSH_LINES) {
    this.#flushLines = flushLines;
  }

  /** Appends one line (without its newline). */
  line(s: string): void {
    this.#pending.push(s);
    this.#count++;
    if (this.#pending.length >= this.#flushLines) this.#flush();
  }

  /** Lines written since the last chunk was cut. */
  get pendingLines(): number {
    return this.#pending.length;
  }

  /** Ends the current chunk here and returns it ("" when no line is pending; nothing is added then). */
  cut(): string {
    if (this.#pending.length === 0) return "";
    this.#flush();
    return this.#chunks[this.#chunks.length - 1];
  }

  /** Appends lines. */
  lines(ls: readonly string[]): void {
    for (const l of ls) this.line(l);
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
    if (this.#pending.length === 0) return;
    this.#pending.push("");
    this.#chunks.push(this.#pending.join("\n"));
    this.#pending.length = 0;
  }
}

/** The chunks of several writers, in order. */
export function concatChunks(writers: readonly PayloadWriter[]): string[] {
  const out: string[] = [];
  for (const w of writers) for (const c of w.chunks()) out.push(c);
  return out;
}
