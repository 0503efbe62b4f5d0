/**
 * Decodes a LIST response body item by item as its chunks arrive ({@link ListScanner} finds the items):
 * each item's bytes are parsed alone and handed at once to the caller's `item` function (the reflector's
 * check and reduction, lib/k8s/resource_sink.ts), so what is kept is the reduced objects, never the whole
 * body text nor the whole list as the apiserver sent it (managedFields, last-applied annotations, …).
 *
 * The result is what `JSON.parse` of the whole body would give with `item` applied to each element of
 * its top-level `items` array: the list's other fields (kind, metadata with resourceVersion, continue and
 * remainingItemCount) come from parsing the rest of the body, so a Status object or any other non-List
 * body comes out as it would have, and the caller's checks apply unchanged.
 */
import { ListScanner, ListSyntaxError } from "./list_scanner.ts";

/** A body that is not JSON; `text` is the piece that failed (an item or the rest of the body), for a snippet. */
export class ListDecodeError extends Error {
  /** The text that failed to parse ("" when the failure is structural). */
  readonly text: string;

  constructor(message: string, text: string) {
    super(message);
    this.name = "ListDecodeError";
    this.text = text;
  }
}

/**
 * Items between two `collect` calls of a {@link ListDecoder}. A large LIST decoded item by item leaves each
 * item's full object (managedFields, annotations) as garbage beside the reduced one kept, and the runtime
 * lets the heap grow during the list rather than collect. A forced collection every 2500 items (four at 10k
 * Services) keeps the first sync's peak lower and steadier: iptables mode at 10k, objects as an apiserver
 * sends them, VmHWM 197.9–201.7 MiB against 205.1–230.7, the lists done 0.1–0.6 s later (every 1000 items:
 * ~195 MiB for ~0.5–1 s; bench/README.md).
 */
export const LIST_COLLECT_EVERY = 2500;

/** Options of a {@link ListDecoder}. */
export interface ListDecoderOptions {
  /** Called every `collectEvery` decoded items (the agent: a forced collection). */
  readonly collect?: () => void;
  /** Default {@link LIST_COLLECT_EVERY}. */
  readonly collectEvery?: number;
}

/** Feed it the body's chunks ({@link push}), then {@link finish} returns the decoded body. */
export class ListDecoder<T> {
  readonly #item: (raw: unknown) => T;
  readonly #scanner: ListScanner;
  readonly #utf8 = new TextDecoder();
  readonly #collect: (() => void) | undefined;
  readonly #collectEvery: number;
  #decoded = 0;
  #items: T[] = [];

  /** `item` maps each parsed element of `items` (it must not throw). */
  constructor(item: (raw: unknown) => T, opts: ListDecoderOptions = {}) {
    this.#collect = opts.collect;
    this.#collectEvery = Math.max(1, opts.collectEvery ?? LIST_COLLECT_EVERY);
    this.#item = item;
    this.#scanner = new ListScanner((bytes, first, count) => {
      // A body that repeats the "items" key: JSON.parse keeps the last one, and so does this.
      if (first === 0) this.#items = [];
      const text = this.#utf8.decode(bytes);
      let parsed: unknown[];
      try {
        // The elements of one chunk in one parse: as fast as parsing the whole body at once.
        parsed = count === 1 ? [JSON.parse(text)] : JSON.parse(`[${text}]`);
      } catch (e) {
        throw count === 1 ? itemError(first, text, e) : locateError(bytes, first);
      }
      for (const raw of parsed) this.#items.push(this.#item(raw));
      this.#decodedMore(parsed.length);
    }, {
      tryItems: (bytes, first) => {
        let parsed: unknown[];
        try {
          parsed = JSON.parse(`[${this.#utf8.decode(bytes)}]`);
        } catch {
          return undefined; // not whole items: the scanner goes on byte by byte
        }
        if (first === 0) this.#items = [];
        for (const raw of parsed) this.#items.push(this.#item(raw));
        this.#decodedMore(parsed.length);
        return parsed.length;
      },
    });
  }

  /** Counts `n` more decoded items, collecting when a multiple of the interval is passed. */
  #decodedMore(n: number): void {
    const before = this.#decoded;
    this.#decoded += n;
    if (
      this.#collect &&
      Math.floor(before / this.#collectEvery) !== Math.floor(this.#decoded / this.#collectEvery)
    ) {
      this.#collect();
    }
  }

  /** Scans one chunk, decoding the items it completes. Throws {@link ListDecodeError}. */
  push(chunk: Uint8Array): void {
    try {
      this.#scanner.push(chunk);
    } catch (e) {
      throw e instanceof ListSyntaxError ? new ListDecodeError(e.message, "") : e;
    }
  }

  /**
   * The parsed body, its `items` (when it is an array) replaced by the decoded items. Throws
   * {@link ListDecodeError} for a truncated body or when the rest of the body is not JSON.
   */
  finish(): unknown {
    let skeleton: Uint8Array;
    try {
      skeleton = this.#scanner.finish();
    } catch (e) {
      throw e instanceof ListSyntaxError ? new ListDecodeError(e.message, "") : e;
    }
    const text = new TextDecoder().decode(skeleton);
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch (e) {
      throw new ListDecodeError((e as Error).message, text);
    }
    const list = body as { items?: unknown };
    if (typeof body === "object" && body !== null && Array.isArray(list.items)) {
      // Split items were decoded already; items the scanner did not see (a body it could not split, such
      // as one starting with a byte-order mark) are mapped here.
      // (Of a body that repeats the key, #items holds the last non-empty array's: the last may be empty.)
      const decoded = this.#scanner.itemCount === 0 ? [] : this.#items;
      list.items = this.#scanner.foundItems ? decoded : list.items.map((raw) => this.#item(raw));
    }
    this.#items = [];
    return body;
  }
}

function itemError(index: number, text: string, e: unknown): ListDecodeError {
  return new ListDecodeError(`items[${index}]: ${(e as Error).message}`, text);
}

/** The error of the first element that does not parse among `bytes` (elements `first`…, separators included). */
function locateError(bytes: Uint8Array, first: number): ListDecodeError {
  const utf8 = new TextDecoder();
  let found: ListDecodeError | undefined;
  const one = new ListScanner((b, index) => {
    const text = utf8.decode(b);
    try {
      JSON.parse(text);
    } catch (e) {
      found = itemError(first + index, text, e);
      throw found;
    }
  }, { batch: false });
  try {
    one.push(new TextEncoder().encode('{"items":['));
    one.push(bytes);
    one.push(new TextEncoder().encode("]}"));
  } catch (e) {
    if (found) return found;
    if (e instanceof ListSyntaxError) return new ListDecodeError(e.message, "");
    throw e;
  }
  return new ListDecodeError(`items[${first}…]: not JSON`, utf8.decode(bytes));
}
