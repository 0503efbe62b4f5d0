/**
 * Values keyed by an object's namespace, then its name, with the object's own strings as keys: a Map keyed
 * by a built "namespace/name" holds one more string per object (at 10k Services 20k of them, ~1 MiB of heap,
 * in each store that keeps the objects). Cluster-scoped objects sit under the namespace "".
 */
export class ByNamespacedName<T> {
  readonly #byNamespace = new Map<string, Map<string, T>>();
  #size = 0;

  /** Number of values held. */
  get size(): number {
    return this.#size;
  }

  /** The value under `namespace` and `name`, if any. */
  get(namespace: string, name: string): T | undefined {
    return this.#byNamespace.get(namespace)?.get(name);
  }

  /** Sets the value under `namespace` and `name`. */
  set(namespace: string, name: string, value: T): void {
    let names = this.#byNamespace.get(namespace);
    if (names === undefined) this.#byNamespace.set(namespace, names = new Map());
    const before = names.size;
    names.set(name, value);
    this.#size += names.size - before;
  }

  /** Removes the value under `namespace` and `name`; true when there was one. */
  delete(namespace: string, name: string): boolean {
    const names = this.#byNamespace.get(namespace);
    if (names === undefined || !names.delete(name)) return false;
    this.#size--;
    if (names.size === 0) this.#byNamespace.delete(namespace);
    return true;
  }

  /** Drops everything. */
  clear(): void {
    this.#byNamespace.clear();
    this.#size = 0;
  }

  /** Every [namespace, name, value], in no particular order. */
  *entries(): Generator<[string, string, T]> {
    for (const [namespace, names] of this.#byNamespace) {
      for (const [name, value] of names) yield [namespace, name, value];
    }
  }

  /** Every value, sorted by `keyOf(namespace, name)` (code unit order, as `<` compares). */
  sortedBy(keyOf: (namespace: string, name: string) => string): T[] {
    const all: Array<[string, T]> = [];
    for (const [namespace, name, value] of this.entries()) all.push([keyOf(namespace, name), value]);
    return all.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, value]) => value);
  }
}
