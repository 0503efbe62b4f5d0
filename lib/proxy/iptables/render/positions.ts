/**
 * Positions in the shared chains: a service port's block in a shared chain starts after the rules of
 * every earlier key (sorted order) in that chain. An incremental partial sync needs that start for the
 * few service ports whose rules changed, so the rule counts per key are kept in Fenwick trees (one per
 * shared chain, over key indices): a prefix sum or an update costs O(log n) instead of a walk over every
 * Service. Plain Int32Arrays, so copying one for the next render is a memcpy.
 */
import { SHARED_CHAIN_COUNT } from "./shared_chains.ts";

/** Fenwick trees of per-key rule counts, one per shared chain. Immutable unless obtained from clone(). */
export class SharedChainPositions {
  /** Number of keys. */
  readonly size: number;
  /** Chain c's tree occupies [c * (size + 1), (c + 1) * (size + 1)); index 0 of each is unused. */
  readonly #tree: Int32Array;

  private constructor(size: number, tree: Int32Array) {
    this.size = size;
    this.#tree = tree;
  }

  /** Builds the trees in O(keys × chains); `count(i, c)` is key i's rule count in chain c. */
  static build(size: number, count: (i: number, chain: number) => number): SharedChainPositions {
    const stride = size + 1;
    const tree = new Int32Array(SHARED_CHAIN_COUNT * stride);
    for (let c = 0; c < SHARED_CHAIN_COUNT; c++) {
      const base = c * stride;
      for (let i = 1; i <= size; i++) tree[base + i] = count(i - 1, c);
      // Linear-time construction: push each node's sum to its parent.
      for (let i = 1; i <= size; i++) {
        const parent = i + (i & -i);
        if (parent <= size) tree[base + parent] += tree[base + i];
      }
    }
    return new SharedChainPositions(size, tree);
  }

  /** A copy that may be updated (the original stays as it is). */
  clone(): SharedChainPositions {
    return new SharedChainPositions(this.size, this.#tree.slice());
  }

  /** Adds `delta` to key `index`'s count in `chain`. */
  add(chain: number, index: number, delta: number): void {
    if (delta === 0) return;
    const base = chain * (this.size + 1);
    for (let i = index + 1; i <= this.size; i += i & -i) this.#tree[base + i] += delta;
  }

  /** Rules of keys [0, index) in `chain`: where key `index`'s block starts. */
  before(chain: number, index: number): number {
    const base = chain * (this.size + 1);
    let sum = 0;
    for (let i = index; i > 0; i -= i & -i) sum += this.#tree[base + i];
    return sum;
  }

  /** Bytes held (for renderStateSize). */
  get byteLength(): number {
    return this.#tree.byteLength;
  }
}
