/**
 * The test apiserver's object store: one global, increasing resourceVersion (as etcd's revision), a
 * bounded history of changes for watch resume, and snapshots at an older resourceVersion (for `continue`
 * tokens and `resourceVersionMatch=Exact`). Everything below the compaction mark is gone, as in etcd.
 */

/** The resources the test apiserver serves. */
export type ResourceKind = "services" | "endpointslices" | "nodes" | "servicecidrs";

/** Any stored object: a JSON object with metadata. */
export type KubeObject = Record<string, unknown> & {
  metadata?: {
    name?: string;
    namespace?: string;
    resourceVersion?: string;
    uid?: string;
    creationTimestamp?: string;
    labels?: Record<string, string>;
    [k: string]: unknown;
  };
};

/** Static facts about a resource. */
export interface ResourceInfo {
  kind: string;
  listKind: string;
  apiVersion: string;
  namespaced: boolean;
  /** Field labels the apiserver accepts in fieldSelector for this resource. */
  fields: readonly string[];
}

/** Facts about each served resource, as the real apiserver registers them. */
export const RESOURCES: Record<ResourceKind, ResourceInfo> = {
  services: {
    kind: "Service",
    listKind: "ServiceList",
    apiVersion: "v1",
    namespaced: true,
    fields: ["metadata.name", "metadata.namespace", "spec.clusterIP", "spec.type"],
  },
  endpointslices: {
    kind: "EndpointSlice",
    listKind: "EndpointSliceList",
    apiVersion: "discovery.k8s.io/v1",
    namespaced: true,
    fields: ["metadata.name", "metadata.namespace", "addressType"],
  },
  nodes: {
    kind: "Node",
    listKind: "NodeList",
    apiVersion: "v1",
    namespaced: false,
    fields: ["metadata.name", "spec.unschedulable"],
  },
  servicecidrs: {
    kind: "ServiceCIDR",
    listKind: "ServiceCIDRList",
    apiVersion: "networking.k8s.io/v1",
    namespaced: false,
    fields: ["metadata.name"],
  },
};

/** One change, as the watch cache keeps it: the object after (or, for DELETED, at) the change and before. */
export interface StoreEvent {
  rv: number;
  kind: ResourceKind;
  type: "ADDED" | "MODIFIED" | "DELETED";
  object: KubeObject;
  prev?: KubeObject;
}

/** Thrown by the store for client mistakes (already exists, not found, missing name). */
export class StoreError extends Error {
  constructor(message: string, readonly reason: "AlreadyExists" | "NotFound" | "Invalid") {
    super(message);
  }
}

/** `ns/name` for namespaced objects, `name` otherwise; also the list sort key. */
export function objectKey(kind: ResourceKind, ns: string | undefined, name: string): string {
  return RESOURCES[kind].namespaced ? `${ns ?? ""}/${name}` : name;
}

/** Deep copy via JSON (objects are plain JSON). */
export function clone<T>(o: T): T {
  return JSON.parse(JSON.stringify(o));
}

/** Fields the server owns; a write that differs only in these is a no-op (no new resourceVersion). */
function comparable(o: KubeObject): string {
  const c = clone(o);
  delete c.kind;
  delete c.apiVersion;
  if (c.metadata) {
    delete c.metadata.resourceVersion;
    delete c.metadata.uid;
    delete c.metadata.creationTimestamp;
    delete c.metadata.generation;
  }
  return JSON.stringify(c);
}

/** ObjectMeta field order of the apiserver's JSON encoding (Go struct order). */
const META_ORDER = [
  "name",
  "generateName",
  "namespace",
  "selfLink",
  "uid",
  "resourceVersion",
  "generation",
  "creationTimestamp",
  "deletionTimestamp",
  "deletionGracePeriodSeconds",
  "labels",
  "annotations",
  "ownerReferences",
  "finalizers",
  "managedFields",
];

/** Re-orders metadata keys as the apiserver writes them (unknown keys last, in input order). */
function orderMeta(obj: KubeObject): KubeObject {
  const m = obj.metadata!;
  const keys = Object.keys(m).sort((a, b) => {
    const ia = META_ORDER.indexOf(a), ib = META_ORDER.indexOf(b);
    return (ia < 0 ? META_ORDER.length : ia) - (ib < 0 ? META_ORDER.length : ib);
  });
  obj.metadata = Object.fromEntries(keys.map((k) => [k, m[k]]));
  return obj;
}

/** The object store and change history. */
export class ObjectStore {
  #objects: Record<ResourceKind, Map<string, KubeObject>> = {
    services: new Map(),
    endpointslices: new Map(),
    nodes: new Map(),
    servicecidrs: new Map(),
  };
  #history: StoreEvent[] = [];
  #rv: number;
  #compacted: number;
  #uidCounter = 0;
  #listeners = new Set<(e: StoreEvent) => void>();

  /** `historyLimit`: how many changes are kept for watch resume; `startRv`: the first resourceVersion. */
  constructor(readonly historyLimit: number, startRv = 1000) {
    this.#rv = startRv;
    this.#compacted = startRv;
  }

  /** Current (latest) resourceVersion. */
  get rv(): number {
    return this.#rv;
  }

  /** Oldest resourceVersion a watch may resume from (older → 410 Expired). */
  get compactedRv(): number {
    return this.#compacted;
  }

  /** Registers a change listener; returns the unregister function. */
  subscribe(fn: (e: StoreEvent) => void): () => void {
    this.#listeners.add(fn);
    return () => this.#listeners.delete(fn);
  }

  #record(e: StoreEvent): void {
    this.#history.push(e);
    while (this.#history.length > this.historyLimit) this.#compacted = this.#history.shift()!.rv;
    for (const fn of [...this.#listeners]) fn(e);
  }

  #keyOf(kind: ResourceKind, obj: KubeObject): string {
    const name = obj.metadata?.name;
    if (typeof name !== "string" || name === "") {
      throw new StoreError(`${kind}: metadata.name: Required value: name is required`, "Invalid");
    }
    if (RESOURCES[kind].namespaced && !obj.metadata?.namespace) {
      obj.metadata!.namespace = "default";
    }
    if (!RESOURCES[kind].namespaced) delete obj.metadata!.namespace;
    return objectKey(kind, obj.metadata!.namespace, name);
  }

  /** Stores a new object; assigns resourceVersion, uid and creationTimestamp. Throws if it exists. */
  create(kind: ResourceKind, input: KubeObject): KubeObject {
    const obj = clone(input);
    obj.metadata ??= {};
    const key = this.#keyOf(kind, obj);
    if (this.#objects[kind].has(key)) {
      throw new StoreError(`${kind} "${obj.metadata.name}" already exists`, "AlreadyExists");
    }
    delete obj.kind;
    delete obj.apiVersion;
    this.#rv++;
    obj.metadata.resourceVersion = String(this.#rv);
    obj.metadata.uid ??= this.#newUid();
    obj.metadata.creationTimestamp ??= new Date().toISOString().replace(/\.\d+Z$/, "Z");
    orderMeta(obj);
    this.#objects[kind].set(key, obj);
    this.#record({ rv: this.#rv, kind, type: "ADDED", object: obj });
    return clone(obj);
  }

  /**
   * Replaces an existing object (server-owned metadata is kept). A write that changes nothing keeps the old
   * resourceVersion and emits no event, as the real apiserver does. Throws NotFound if it does not exist.
   */
  update(kind: ResourceKind, input: KubeObject): KubeObject {
    const obj = clone(input);
    obj.metadata ??= {};
    const key = this.#keyOf(kind, obj);
    const prev = this.#objects[kind].get(key);
    if (!prev) throw new StoreError(`${kind} "${obj.metadata.name}" not found`, "NotFound");
    delete obj.kind;
    delete obj.apiVersion;
    obj.metadata.uid = prev.metadata!.uid;
    obj.metadata.creationTimestamp = prev.metadata!.creationTimestamp;
    if (comparable(obj) === comparable(prev)) return clone(prev);
    this.#rv++;
    obj.metadata.resourceVersion = String(this.#rv);
    orderMeta(obj);
    this.#objects[kind].set(key, obj);
    this.#record({ rv: this.#rv, kind, type: "MODIFIED", object: obj, prev });
    return clone(obj);
  }

  /** Deletes an object; the DELETED event carries its last state with the deletion's resourceVersion. */
  remove(kind: ResourceKind, namespace: string, name: string): void {
    const key = objectKey(kind, namespace, name);
    const prev = this.#objects[kind].get(key);
    if (!prev) throw new StoreError(`${kind} "${name}" not found`, "NotFound");
    this.#objects[kind].delete(key);
    this.#rv++;
    const tomb = clone(prev);
    tomb.metadata!.resourceVersion = String(this.#rv);
    this.#record({ rv: this.#rv, kind, type: "DELETED", object: tomb, prev });
  }

  /** One object, or undefined. */
  get(kind: ResourceKind, namespace: string | undefined, name: string): KubeObject | undefined {
    const o = this.#objects[kind].get(objectKey(kind, namespace, name));
    return o && clone(o);
  }

  /**
   * Current objects of a kind, sorted by namespace/name: copies, or with `copy` false the stored objects
   * themselves, for a caller that only serializes them (a LIST page: copying every object for every page
   * made a paged list quadratic, seconds at 10k objects).
   */
  list(kind: ResourceKind, copy = true): KubeObject[] {
    const sorted = [...this.#objects[kind].entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return sorted.map(([, o]) => (copy ? clone(o) : o));
  }

  /**
   * The objects of a kind as they were at resourceVersion `rv` (sorted), rebuilt by undoing newer history.
   * Returns undefined when `rv` is below the compaction mark (the caller answers 410 Expired). `copy` as
   * for {@link list}.
   */
  listAt(kind: ResourceKind, rv: number, copy = true): KubeObject[] | undefined {
    if (rv < this.#compacted) return undefined;
    const state = new Map(this.#objects[kind]);
    for (let i = this.#history.length - 1; i >= 0 && this.#history[i].rv > rv; i--) {
      const e = this.#history[i];
      if (e.kind !== kind) continue;
      const key = objectKey(kind, e.object.metadata?.namespace, e.object.metadata!.name!);
      if (e.type === "ADDED") state.delete(key);
      else state.set(key, e.prev!);
    }
    return [...state.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map((
      [, o],
    ) => (copy ? clone(o) : o));
  }

  /** Changes after `rv` (exclusive), or undefined when `rv` is below the compaction mark. */
  eventsSince(rv: number): StoreEvent[] | undefined {
    if (rv < this.#compacted) return undefined;
    return this.#history.filter((e) => e.rv > rv);
  }

  /** Drops all history: resuming from any resourceVersion older than the current one gives 410. */
  compact(): void {
    this.#history = [];
    this.#compacted = this.#rv;
  }

  /**
   * Simulates an etcd restore with `--bump-revision --mark-compacted`: the revision jumps ahead and every
   * older resourceVersion is compacted. Stored objects keep their (now old) resourceVersions.
   */
  restore(bump = 100000): void {
    this.#rv += bump;
    this.compact();
  }

  #newUid(): string {
    const n = (++this.#uidCounter).toString(16).padStart(12, "0");
    const r = crypto.randomUUID();
    return `${r.slice(0, 24)}${n}`;
  }
}
