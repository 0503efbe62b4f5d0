/**
 * The last known copy of every object of one resource, keyed by "namespace/name" (or "name" when
 * cluster-scoped), and the pure diff logic that turns lists and watch events into add/update/delete
 * changes. Shared by the watch reflector and the poller so both emit exactly the same events for the
 * same server state. No I/O, no clock.
 */
import { namespacedName, type ObjectMeta } from "./objects.ts";
import { ByNamespacedName } from "./by_name.ts";

/** Anything with Kubernetes metadata. */
export interface KubeObject {
  kind?: string;
  metadata?: ObjectMeta;
}

/** One change to hand to the handlers. */
export type StoreChange<T> =
  | { type: "add"; object: T }
  | { type: "update"; old: T; object: T }
  | { type: "delete"; object: T };

/** "namespace/name", or "name" for cluster-scoped objects (client-go's MetaNamespaceKeyFunc). */
export function objectKey(obj: KubeObject): string {
  const m = obj.metadata ?? {};
  return m.namespace ? namespacedName(m.namespace, m.name ?? "") : `${m.name ?? ""}`;
}

/** The namespace ("" when cluster-scoped, as in objectKey) and name of `obj`. */
function partsOf(obj: KubeObject): [string, string] {
  const m = obj.metadata ?? {};
  return [m.namespace || "", m.name ?? ""];
}

/** objectKey of a namespace and name. */
function keyOfParts(namespace: string, name: string): string {
  return namespace ? namespacedName(namespace, name) : name;
}

/** Keyed store of the last object seen for each key (held by namespace and name, see by_name.ts). */
export class ObjectStore<T extends KubeObject> {
  readonly #items = new ByNamespacedName<T>();

  /** Number of objects held. */
  get size(): number {
    return this.#items.size;
  }

  /** The object under `key`, if any. */
  get(key: string): T | undefined {
    // A namespace holds no "/", so the first one ends it; a key without one, or a cluster-scoped name a
    // broken server sent with a "/" in it, is a name under "".
    const slash = key.indexOf("/");
    return (slash < 0 ? undefined : this.#items.get(key.slice(0, slash), key.slice(slash + 1))) ??
      this.#items.get("", key);
  }

  /** Every key, sorted. */
  keys(): string[] {
    return [...this.#items.entries()].map(([ns, name]) => keyOfParts(ns, name)).sort();
  }

  /** Every object, sorted by key. */
  list(): T[] {
    return this.#items.sortedBy(keyOfParts);
  }

  /** Drops everything (no changes reported). */
  clear(): void {
    this.#items.clear();
  }

  /**
   * Makes the store equal to a complete list and returns what changed: adds and updates in list order, then
   * deletes in key order. An object whose resourceVersion is unchanged is not reported. When a key appears
   * twice in `items`, the later copy wins.
   */
  replace(items: readonly T[]): StoreChange<T>[] {
    const incoming = new Map<string, T>();
    for (const it of items) incoming.set(objectKey(it), it);
    const changes: StoreChange<T>[] = [];
    for (const obj of incoming.values()) {
      const old = this.#items.get(...partsOf(obj));
      if (!old) changes.push({ type: "add", object: obj });
      else if (!sameVersion(old, obj)) changes.push({ type: "update", old, object: obj });
    }
    const gone: Array<[string, string, string, T]> = [];
    for (const [ns, name, obj] of this.#items.entries()) {
      const key = keyOfParts(ns, name);
      if (!incoming.has(key)) gone.push([key, ns, name, obj]);
    }
    gone.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    for (const [, ns, name, obj] of gone) {
      changes.push({ type: "delete", object: obj });
      this.#items.delete(ns, name);
    }
    for (const obj of incoming.values()) this.#items.set(...partsOf(obj), obj);
    return changes;
  }

  /**
   * Applies one watch event and returns the resulting change, or null when it changes nothing (an ADDED or
   * MODIFIED carrying the resourceVersion already held, a DELETED for an unknown key). ADDED for a known key
   * becomes an update and MODIFIED for an unknown key an add, so replays after a reconnect never duplicate.
   */
  apply(type: "ADDED" | "MODIFIED" | "DELETED", obj: T): StoreChange<T> | null {
    const [ns, name] = partsOf(obj);
    const old = this.#items.get(ns, name);
    if (type === "DELETED") {
      if (!old) return null;
      this.#items.delete(ns, name);
      return { type: "delete", object: obj };
    }
    if (!old) {
      this.#items.set(ns, name, obj);
      return { type: "add", object: obj };
    }
    if (sameVersion(old, obj)) return null;
    this.#items.set(ns, name, obj);
    return { type: "update", old, object: obj };
  }
}

function sameVersion(a: KubeObject, b: KubeObject): boolean {
  const ra = a.metadata?.resourceVersion;
  const rb = b.metadata?.resourceVersion;
  // Objects without a resourceVersion (hand-written lists) compare by content instead.
  if (ra === undefined || rb === undefined) return JSON.stringify(a) === JSON.stringify(b);
  return ra === rb && a.metadata?.uid === b.metadata?.uid;
}
