/**
 * Elements of kube-proxy's sets and maps across syncs (upstream nftElementStorage): a full sync flushes
 * each container and adds every element; a partial sync adds only new elements, replaces (delete, then
 * add) those whose value changed and deletes the ones no longer wanted, from the elements the previous
 * sync left in the kernel.
 */
import type { NftTransaction } from "./transaction.ts";

/** Elements per set or map name: key ("a . b . c") → value ("" for a set element). */
export type NftElementState = ReadonlyMap<string, ReadonlyMap<string, string>>;

/** Told of every `ensure` call, in order, before duplicates are dropped. */
export type ElementObserver = (
  container: string,
  key: readonly string[],
  value: readonly string[] | undefined,
  comment: string | undefined,
) => void;

/** Writes the elements of one sync into a transaction and records the resulting state. */
export class ElementWriter {
  readonly #next = new Map<string, Map<string, string>>();

  /**
   * `previous` is the state after the last applied sync, or null for a full sync (whose containers the
   * setup part of the transaction has flushed).
   */
  constructor(
    readonly tx: NftTransaction,
    readonly previous: NftElementState | null,
    readonly observe: ElementObserver | null = null,
  ) {}

  /** Ensures an element exists with this value (upstream ensureElem). */
  ensure(container: string, key: readonly string[], value?: readonly string[], comment?: string): void {
    this.observe?.(container, key, value, comment);
    const k = key.join(" . ");
    const v = value === undefined ? "" : value.join(" . ");
    let mine = this.#next.get(container);
    if (mine === undefined) this.#next.set(container, mine = new Map());
    if (mine.has(k)) return;
    mine.set(k, v);
    const old = this.previous?.get(container)?.get(k);
    if (old === v) return;
    if (old !== undefined) this.tx.deleteElement(container, key);
    this.tx.addElement(container, key, value, comment);
  }

  /**
   * Deletes the previous sync's elements that were not ensured this time (upstream
   * cleanupLeftoverKeys), in sorted order, and returns the new state.
   */
  finish(): NftElementState {
    if (this.previous !== null) {
      for (const container of [...this.previous.keys()].sort()) {
        const mine = this.#next.get(container);
        for (const k of [...this.previous.get(container)!.keys()].sort()) {
          if (mine === undefined || !mine.has(k)) this.tx.deleteElement(container, k.split(" . "));
        }
      }
    }
    return this.#next;
  }
}
