/**
 * A string-keyed store for the incremental renderer's cache after a full sync: the keys in one array and
 * the values in another, found through an open-addressing index of 32-bit slots (a typed array, outside
 * the collected heap). A JavaScriptCore Map costs ~120 bytes per entry at the cache's sizes (10k
 * Services: ~28k elements, ~13k service ports); these arrays ~16, the index 4–8. Later syncs change it
 * in place: a key it was built with keeps its slot (a deleted one is a hole that a set fills again), and
 * a key it was not built with goes into a Map beside the arrays. Endpoint changes add no key (element
 * ids and service ports stay), so that Map holds only what new service ports brought since the full
 * sync. Each operation hashes its key once and compares it with one or a few keys: a sync's cost
 * follows its change, not the number of services.
 */

/** The part of a Map the renderer uses; a Map is one, and so is a {@link CompactStore}. */
export interface KeyedStore<V> extends Iterable<[string, V]> {
  readonly size: number;
  get(key: string): V | undefined;
  has(key: string): boolean;
  set(key: string, value: V): this;
  delete(key: string): boolean;
  keys(): IterableIterator<string>;
}

/** The second argument of {@link CompactStore}'s constructor form whose values are filled in afterwards. */
export const UNFILLED: unique symbol = Symbol("unfilled");

/** FNV-1a over a string's UTF-16 code units. */
function hashOf(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** A {@link KeyedStore} in two arrays with a hash index, and a Map of later keys. */
export class CompactStore<V> implements KeyedStore<V> {
  /** The keys it was built with, in the order given, each once. */
  readonly #keys: string[];
  /** The value of each of #keys; undefined once deleted. */
  readonly #values: (V | undefined)[];
  /** Keys set after it was built that are not among #keys. */
  readonly #later = new Map<string, V>();
  /** Slot + 1 of each key in #keys at its hash's first free place from there on (0: free). */
  readonly #index: Int32Array;
  readonly #mask: number;
  #size: number;

  /** A store of `entries` (later duplicates of a key win, as in a Map). */
  constructor(entries: Iterable<readonly [string, V]>);
  /**
   * A store of `keys` (each once) whose values {@link fill} sets before any other use: its keys can be
   * looked up ({@link keyOf}) while the values are made, and no Map of the entries is built on the way.
   */
  constructor(keys: string[], unfilled: typeof UNFILLED);
  constructor(entries: Iterable<readonly [string, V]> | string[], unfilled?: typeof UNFILLED) {
    let keys: string[];
    if (unfilled === UNFILLED) {
      keys = entries as string[];
      this.#values = new Array(keys.length).fill(undefined);
    } else {
      const map = entries instanceof Map
        ? entries as Map<string, V>
        : new Map(entries as Iterable<[string, V]>);
      keys = [...map.keys()];
      this.#values = keys.map((k) => map.get(k));
    }
    this.#keys = keys;
    this.#size = keys.length;
    // At most half full: probes stay short.
    let capacity = 8;
    while (capacity < 2 * keys.length) capacity *= 2;
    this.#index = new Int32Array(capacity);
    this.#mask = capacity - 1;
    for (let i = 0; i < keys.length; i++) {
      let at = hashOf(keys[i]) & this.#mask;
      while (this.#index[at] !== 0) at = (at + 1) & this.#mask;
      this.#index[at] = i + 1;
    }
  }

  /** Sets the value of the key at `slot` of the keys given to the constructor (see its second form). */
  fill(slot: number, value: V): void {
    this.#values[slot] = value;
  }

  /** This store's own string equal to `key` (a key it was built with), or undefined. */
  keyOf(key: string): string | undefined {
    const i = this.#slot(key);
    return i >= 0 ? this.#keys[i] : undefined;
  }

  /** The number of keys with a value. */
  get size(): number {
    return this.#size;
  }

  /** The slot of `key` in #keys, or -1. */
  #slot(key: string): number {
    const index = this.#index;
    for (let at = hashOf(key) & this.#mask;; at = (at + 1) & this.#mask) {
      const i = index[at] - 1;
      if (i < 0) return -1;
      if (this.#keys[i] === key) return i;
    }
  }

  get(key: string): V | undefined {
    const i = this.#slot(key);
    return i >= 0 ? this.#values[i] : this.#later.get(key);
  }

  has(key: string): boolean {
    return this.get(key) !== undefined;
  }

  set(key: string, value: V): this {
    if (value === undefined) throw new TypeError("CompactStore: undefined is not a value");
    const i = this.#slot(key);
    if (i >= 0) {
      if (this.#values[i] === undefined) this.#size++;
      this.#values[i] = value;
    } else {
      if (!this.#later.has(key)) this.#size++;
      this.#later.set(key, value);
    }
    return this;
  }

  delete(key: string): boolean {
    const i = this.#slot(key);
    if (i >= 0) {
      if (this.#values[i] === undefined) return false;
      this.#values[i] = undefined;
    } else if (!this.#later.delete(key)) return false;
    this.#size--;
    return true;
  }

  /** The keys with a value: those it was built with in the order given, then the later ones as set. */
  *keys(): IterableIterator<string> {
    for (const [k] of this) yield k;
  }

  /** Entries in the order of {@link keys}. */
  *[Symbol.iterator](): IterableIterator<[string, V]> {
    const keys = this.#keys;
    const values = this.#values;
    for (let i = 0; i < keys.length; i++) {
      const v = values[i];
      if (v !== undefined) yield [keys[i], v];
    }
    yield* this.#later;
  }
}
