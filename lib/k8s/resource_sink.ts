/**
 * Where one resource's objects go: its {@link ObjectStore}, its handler and its synced promise, plus the
 * check of each incoming object. Shared by the reflector and the poller so both deliver identical events
 * for identical server state.
 */
import type { ResourceEventHandler, ResourceSpec } from "./resource.ts";
import type { ApiStats } from "./stats.ts";
import { errorChain, type Logger } from "./transport.ts";
import { type KubeObject, objectKey, ObjectStore, type StoreChange } from "./store.ts";
import { reduceObject } from "./reduce.ts";
import { EndpointValueTable } from "./endpoint_values.ts";

/** The store, the handler and the synced promise of one resource; see the module header. */
export class ResourceSink<T extends KubeObject> {
  readonly spec: ResourceSpec;
  readonly store: ObjectStore<T>;
  readonly synced: Promise<void>;
  #resolveSynced!: () => void;
  #hasSynced = false;
  readonly #handler: ResourceEventHandler<T>;
  readonly #log: Logger;
  readonly #stats: ApiStats | undefined;
  /** Endpoint values shared between this resource's objects (only EndpointSlices have any). */
  readonly #values = new EndpointValueTable();

  /** `store` defaults to a new empty store. */
  constructor(
    spec: ResourceSpec,
    handler: ResourceEventHandler<T>,
    log: Logger,
    stats?: ApiStats,
    store?: ObjectStore<T>,
  ) {
    this.spec = spec;
    this.#handler = handler;
    this.#log = log;
    this.#stats = stats;
    this.store = store ?? new ObjectStore<T>();
    this.synced = new Promise((r) => (this.#resolveSynced = r));
  }

  /** Whether the first list completed. */
  get hasSynced(): boolean {
    return this.#hasSynced;
  }

  /**
   * Returns the object with apiVersion/kind filled in and without what the proxy never reads
   * (reduce.ts), or a reason why it must be skipped: not an object, wrong kind, missing metadata.name.
   */
  check(obj: unknown): { ok: T } | { bad: string } {
    if (typeof obj !== "object" || obj === null || Array.isArray(obj)) {
      return { bad: "object is not a JSON object" };
    }
    const o = obj as KubeObject & { apiVersion?: string };
    if (o.kind !== undefined && o.kind !== this.spec.kind) {
      return { bad: `kind is ${JSON.stringify(o.kind)}, want ${this.spec.kind}` };
    }
    const name = o.metadata?.name;
    if (typeof name !== "string" || name === "") return { bad: "metadata.name is missing" };
    const ns = o.metadata?.namespace;
    if (ns !== undefined && typeof ns !== "string") return { bad: "metadata.namespace is not a string" };
    if (o.kind === undefined || o.apiVersion === undefined) {
      // List items arrive without type meta; give them the watch events' shape (kind first, as the
      // apiserver encodes it) so both paths deliver byte-identical objects.
      const { kind: _k, apiVersion, ...rest } = o;
      return {
        ok: reduceObject(
          { kind: this.spec.kind, apiVersion: apiVersion ?? this.spec.apiVersion, ...rest } as unknown as T,
          this.#values,
        ),
      };
    }
    return { ok: reduceObject(o as T, this.#values) };
  }

  /**
   * One list item as it is decoded (listAll's `item`): the checked, reduced object, or the item as it came
   * when it must be skipped ({@link applyList} reports it then, once the list is complete). Checking
   * again in {@link applyList} returns a checked object itself, so the list is reduced exactly once.
   */
  listItem(raw: unknown): unknown {
    const c = this.check(raw);
    return "ok" in c ? c.ok : raw;
  }

  /** Logs and counts one skipped line or object. */
  malformed(where: string, why: string, raw: unknown): void {
    this.#stats?.recordMalformed(this.spec.resource);
    const text = typeof raw === "string" ? raw : safeJson(raw);
    const shown = text.length > 200 ? `${text.slice(0, 200)}…` : text;
    this.#log.warn(`${where} ${this.spec.resource}: skipping malformed input (${why}): ${shown}`);
  }

  /**
   * Diffs a complete list into the store, emits the changes, and marks the resource synced. The items are
   * checked here (those that went through {@link listItem} already are returned as they are).
   */
  applyList(rawItems: unknown[]): number {
    const items: T[] = [];
    for (const raw of rawItems) {
      const c = this.check(raw);
      if ("bad" in c) this.malformed("list", c.bad, raw);
      else items.push(c.ok);
    }
    const changes = this.store.replace(items);
    for (const ch of changes) this.emit(ch);
    if (!this.#hasSynced) {
      this.#hasSynced = true;
      try {
        this.#handler.onSynced();
      } catch (e) {
        this.#log.error(`${this.spec.resource}: synced handler threw: ${errorChain(e)}`);
      }
      this.#resolveSynced();
    }
    return changes.length;
  }

  /** Calls the handler for one change; a throwing handler is logged, never fatal. */
  emit(ch: StoreChange<T>): void {
    try {
      if (ch.type === "add") this.#handler.onAdd(ch.object);
      else if (ch.type === "update") this.#handler.onUpdate(ch.old, ch.object);
      else this.#handler.onDelete(ch.object);
    } catch (e) {
      this.#log.error(
        `${this.spec.resource} ${ch.type} ${objectKey(ch.object)}: handler threw: ${errorChain(e)}`,
      );
    }
  }
}

function safeJson(v: unknown): string {
  try {
    return JSON.stringify(v) ?? String(v);
  } catch {
    return String(v);
  }
}
