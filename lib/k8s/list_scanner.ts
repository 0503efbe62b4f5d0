/**
 * A byte-level scanner that splits a LIST response body (`{"kind":…,"metadata":{…},"items":[…]}`) into the
 * elements of its top-level `items` array and the rest (the "skeleton"), as the bytes arrive, so that a
 * caller can parse and reduce each item on its own: the whole body text and the whole parsed list never
 * exist at once (a LIST from the watch cache is one response, whatever `limit` says).
 *
 * It tracks only what it must: whether it is inside a string (and after a backslash), the nesting depth,
 * and, at the top level, which key a value belongs to. It validates nothing else: every element and the
 * skeleton (the body with the items array emptied to `[]`) are meant to be given to JSON.parse, which
 * accepts all the pieces exactly when it would accept the whole body (strings are lexed the same way, so
 * the cuts fall outside strings at the array's own depth). A top-level value that is not an object, or an
 * object without an `items` array, is all skeleton.
 *
 * Speed: a byte loop in JavaScript costs about 3–4 ms per MiB, as much as JSON.parse itself. So the
 * elements that begin and end in one chunk are handed out together (one decode and one parse per chunk),
 * and once a chunk the scanner offers its caller the run of bytes up to the last place where an apiserver
 * item seems to begin ({@link TryItemsHandler}): when they parse as whole items they are not scanned at
 * all, so of a compact apiserver List only about one item per chunk is scanned byte by byte.
 */
import { concatBytes } from "./bounded_read.ts";

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COMMA = 0x2c;
const COLON = 0x3a;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;

/** `"items"` as raw key bytes (without the quotes). */
const ITEMS_KEY = [0x69, 0x74, 0x65, 0x6d, 0x73];
/** Top-level keys longer than this (raw) cannot be "items", even spelled with escapes ("\u0069…" is 6 bytes a letter). */
const MAX_KEY_BYTES = 64;

/** A body the scanner cannot split: its structure is broken where the scanner looks (the byte offset says where). */
export class ListSyntaxError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ListSyntaxError";
  }
}

/**
 * Receives `count` complete elements of the items array, the first being element `first`: `bytes` is
 * their text as it stands in the body, separators included (`{…}, {…}`), so `[` + bytes + `]` is a JSON
 * array of them. The bytes are valid only during the call.
 */
export type ItemsHandler = (bytes: Uint8Array, first: number, count: number) => void;

/**
 * Tries `bytes` as a run of whole elements, the first being element `first`, and returns how many they
 * were, or undefined (having done nothing) when `[` + bytes + `]` is not a JSON array. The scanner offers
 * it the bytes from an element's start to a `}` followed by `,{"metadata":` (how an apiserver begins
 * each item); when they parse, that `}` ended an element at the array's depth — a parser reading the body
 * from the same element start takes the same tokens — so its bytes need not be scanned one by one.
 */
export type TryItemsHandler = (bytes: Uint8Array, first: number) => number | undefined;

/** `,{"metadata":` after the comma: where a (compact) apiserver List begins its next item. */
const NEXT_ITEM = new TextEncoder().encode('{"metadata":');

/** Index of the last comma at or after `from` that follows a "}" and precedes `{"metadata":`, or -1. */
function lastItemBoundary(chunk: Uint8Array, from: number): number {
  let k = chunk.length - NEXT_ITEM.length - 1;
  while (k > from) {
    k = chunk.lastIndexOf(COMMA, k);
    if (k <= from) return -1;
    if (chunk[k - 1] === CLOSE_BRACE && startsWithAt(chunk, k + 1, NEXT_ITEM)) return k;
    k--;
  }
  return -1;
}

function startsWithAt(chunk: Uint8Array, at: number, what: Uint8Array): boolean {
  for (let j = 0; j < what.length; j++) if (chunk[at + j] !== what[j]) return false;
  return true;
}

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/**
 * Feed it the body's chunks with {@link push}, then call {@link finish}. The complete elements of the
 * top-level `items` array are handed out (their bytes, valid only during the call) by the end of the
 * {@link push} that brought their closing separator; {@link finish} returns the skeleton bytes.
 */
export class ListScanner {
  readonly #onItems: ItemsHandler;
  readonly #tryItems: TryItemsHandler | undefined;
  readonly #batch: boolean;
  /** Bytes scanned so far (for error offsets). */
  #offset = 0;
  #depth = 0;
  #inString = false;
  #escape = false;
  /** Whether the first non-space byte (the top-level value) opened an object. */
  #topObject = false;
  #started = false;
  /** At depth 1 of the top-level object: the next string is a key. */
  #expectKey = false;
  /** Raw bytes of the top-level key being read (null when not reading one). */
  #key: number[] | null = null;
  /** The last top-level key read was "items". */
  #keyIsItems = false;
  /** Between a top-level key's colon and its value. */
  #afterColon = false;
  /** Inside the items array (its elements are at depth 2). */
  #inItems = false;
  /** The current element has a non-space byte. */
  #hasContent = false;
  /** A top-level items array was found (its elements were handed out). */
  #foundItems = false;
  /** Elements handed out in the current items array. */
  #count = 0;
  /** Pieces of the current element from earlier chunks. */
  #elemParts: Uint8Array[] = [];
  #elemBytes = 0;
  /** Skeleton pieces (copies; the skeleton is small for a List). */
  #skeleton: Uint8Array[] = [];
  #skeletonBytes = 0;

  /**
   * `onItems` receives complete elements as they arrive; with `batch` (the default) the elements that
   * begin and end within one chunk come in one call (one decode and one JSON.parse per chunk instead of
   * per item), else one element a call.
   */
  constructor(onItems: ItemsHandler, opts: { batch?: boolean; tryItems?: TryItemsHandler } = {}) {
    this.#onItems = onItems;
    this.#tryItems = opts.tryItems;
    this.#batch = opts.batch ?? true;
  }

  /** Elements handed out so far (of the last `items` array, should the body repeat the key). */
  get itemCount(): number {
    return this.#count;
  }

  /** Whether a top-level `items` array was found: the skeleton's `items` is then an empty placeholder. */
  get foundItems(): boolean {
    return this.#foundItems;
  }

  /** Scans one chunk; throws {@link ListSyntaxError} where the structure is broken, or what a handler throws. */
  push(chunk: Uint8Array): void {
    const n = chunk.length;
    // Start of the current skeleton run or element run within this chunk.
    let runStart = 0;
    // The state lives in locals while the chunk is scanned: this loop sees every byte of the body.
    let depth = this.#depth;
    let inString = this.#inString;
    let escape = this.#escape;
    let inItems = this.#inItems;
    let capturing = this.#key !== null;
    // Elements that began and ended in this chunk, not handed out yet: [batchStart, batchEnd).
    let batchStart = -1;
    let batchEnd = 0;
    let batchCount = 0;
    let triedFast = this.#tryItems === undefined;
    for (let i = 0; i < n; i++) {
      const c = chunk[i];
      if (inString) {
        if (escape) escape = false;
        else if (c === BACKSLASH) escape = true;
        else if (c === QUOTE) {
          inString = false;
          if (capturing) {
            capturing = false;
            this.#endKey();
          }
          continue;
        }
        if (capturing && this.#key!.length <= MAX_KEY_BYTES) this.#key!.push(c);
        continue;
      }
      if (inItems) {
        if (depth > 2) {
          // Inside one element: only strings and nesting matter.
          if (c === QUOTE) inString = true;
          else if (c === OPEN_BRACE || c === OPEN_BRACKET) depth++;
          else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) depth--;
          continue;
        }
        // At the array's own depth: separators, the end, or the start of an element.
        if (c === COMMA || c === CLOSE_BRACKET) {
          if (!this.#hasContent) {
            if (c === COMMA || this.#count + batchCount > 0) {
              throw new ListSyntaxError(`empty element in items at byte ${this.#offset + i}`);
            }
          } else if (this.#elemParts.length > 0 || !this.#batch) {
            // One that began in an earlier chunk is the first to end in this one: the batch is empty.
            this.#emit(chunk, runStart, i);
          } else {
            if (batchStart < 0) batchStart = runStart;
            batchEnd = i;
            batchCount++;
          }
          runStart = i + 1;
          this.#hasContent = false;
          this.#elemParts = [];
          this.#elemBytes = 0;
          if (c === CLOSE_BRACKET) {
            if (batchCount > 0) {
              this.#flush(chunk.subarray(batchStart, batchEnd), batchCount);
              batchStart = -1;
              batchCount = 0;
            }
            inItems = false;
            depth = 1;
            runStart = i; // the "]" goes to the skeleton
          } else if (!triedFast) {
            // Once a chunk: the rest of it up to the last place where an item seems to begin, in one try
            // (see TryItemsHandler); if that is not a run of whole items, it is scanned byte by byte.
            triedFast = true;
            const end = lastItemBoundary(chunk, i + 1);
            if (end > i + 1) {
              if (batchCount > 0) {
                this.#flush(chunk.subarray(batchStart, batchEnd), batchCount);
                batchStart = -1;
                batchCount = 0;
              }
              const got = this.#tryItems!(chunk.subarray(i + 1, end), this.#count);
              if (got !== undefined) {
                this.#count += got;
                i = end; // the comma after the last of them
                runStart = end + 1;
              }
            }
          }
          continue;
        }
        if (c === CLOSE_BRACE) {
          throw new ListSyntaxError(`"}" closes the items array at byte ${this.#offset + i}`);
        }
        if (isSpace(c)) continue;
        this.#hasContent = true;
        if (c === QUOTE) inString = true;
        else if (c === OPEN_BRACE || c === OPEN_BRACKET) depth++;
        continue;
      }
      // Skeleton: the top level and every top-level value but the items array.
      if (isSpace(c)) continue;
      if (!this.#started) {
        this.#started = true;
        this.#topObject = c === OPEN_BRACE;
      }
      if (depth === 1 && this.#topObject) {
        if (this.#afterColon) {
          this.#afterColon = false;
          if (c === OPEN_BRACKET && this.#keyIsItems) {
            // The items array: "[" stays in the skeleton, its elements are handed out.
            this.#addSkeleton(chunk, runStart, i + 1);
            runStart = i + 1;
            inItems = true;
            this.#foundItems = true;
            this.#hasContent = false;
            this.#count = 0;
            this.#elemParts = [];
            this.#elemBytes = 0;
            depth = 2;
            continue;
          }
        } else if (c === COLON) {
          this.#afterColon = true;
          continue;
        } else if (c === COMMA) {
          this.#expectKey = true;
          continue;
        } else if (c === QUOTE && this.#expectKey) {
          this.#expectKey = false;
          this.#key = [];
          capturing = true;
          inString = true;
          continue;
        }
      }
      if (c === QUOTE) inString = true;
      else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
        depth++;
        if (depth === 1 && this.#topObject) this.#expectKey = true;
      } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) depth--;
    }
    this.#depth = depth;
    this.#inString = inString;
    this.#escape = escape;
    this.#inItems = inItems;
    if (batchCount > 0) this.#flush(chunk.subarray(batchStart, batchEnd), batchCount);
    // The rest of the chunk belongs to the current run.
    if (inItems) {
      if (runStart < n) {
        this.#elemParts.push(chunk.subarray(runStart));
        this.#elemBytes += n - runStart;
      }
    } else this.#addSkeleton(chunk, runStart, n);
    this.#offset += n;
  }

  /**
   * The skeleton: every byte but the items array's elements (so `"items":[]`). Throws
   * {@link ListSyntaxError} when the body ended inside the items array.
   */
  finish(): Uint8Array {
    if (this.#inItems) {
      throw new ListSyntaxError(
        `the body ended inside the items array (after ${this.#count} items, ${this.#offset} bytes): truncated`,
      );
    }
    const out = concatBytes(this.#skeleton, this.#skeletonBytes);
    this.#skeleton = [];
    this.#skeletonBytes = 0;
    return out;
  }

  #endKey(): void {
    const k = this.#key!;
    this.#key = null;
    if (k.length === ITEMS_KEY.length) {
      this.#keyIsItems = k.every((b, j) => b === ITEMS_KEY[j]);
    } else if (k.length <= MAX_KEY_BYTES && k.includes(BACKSLASH)) {
      // A key spelled with escapes; JSON.parse reads it as the same key, so must this.
      try {
        this.#keyIsItems = JSON.parse(`"${String.fromCharCode(...k)}"`) === "items";
      } catch {
        this.#keyIsItems = false; // the skeleton's parse reports it
      }
    } else this.#keyIsItems = false;
  }

  /** Hands out the element ending at `end` (exclusive) of `chunk`, whose start is `start` or an earlier chunk. */
  #emit(chunk: Uint8Array, start: number, end: number): void {
    let bytes: Uint8Array;
    if (this.#elemParts.length === 0) bytes = chunk.subarray(start, end);
    else {
      this.#elemParts.push(chunk.subarray(start, end));
      bytes = concatBytes(this.#elemParts, this.#elemBytes + end - start);
      this.#elemParts = [];
      this.#elemBytes = 0;
    }
    this.#onItems(bytes, this.#count++, 1);
  }

  #flush(bytes: Uint8Array, count: number): void {
    const first = this.#count;
    this.#count += count;
    this.#onItems(bytes, first, count);
  }

  #addSkeleton(chunk: Uint8Array, start: number, end: number): void {
    if (end <= start) return;
    this.#skeleton.push(chunk.slice(start, end));
    this.#skeletonBytes += end - start;
  }
}
