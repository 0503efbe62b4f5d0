/**
 * Which service ports an incremental sync processes: from changedServices alone when it accounts for
 * every key (O(changed · log n)), else by comparing every current key with the previous render's facts.
 * Also merges added and removed keys into the sorted key order the shared-chain positions follow.
 */
import type { RenderState, ServicePortFacts } from "./state.ts";
import { isWritten } from "./service_port.ts";
import type { RenderInput } from "./input.ts";

/** Index of `key` in the sorted `keys`, or -1. */
function indexOfKey(keys: readonly string[], key: string): number {
  const i = lowerBound(keys, key);
  return i < keys.length && keys[i] === key ? i : -1;
}

/** First index whose key is >= `key` (sorted `keys`). */
function lowerBound(keys: readonly string[], key: string): number {
  let lo = 0;
  let hi = keys.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (keys[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Which service ports an incremental sync processes, and the key order after it. */
export interface IncrementalPlan {
  /** Current keys, sorted. */
  readonly keys: readonly string[];
  /** Facts per key: the previous ones (replaced as keys are processed), null for new keys. */
  readonly facts: (ServicePortFacts | null)[];
  /** Indices (into keys) to process, ascending. */
  readonly process: number[];
  /** Previous facts of each processed key (same order), null when it is new. */
  readonly old: (ServicePortFacts | null)[];
  /** Previous facts of the keys that are gone, in key order. */
  readonly removed: ServicePortFacts[];
  readonly removedKeys: string[];
  /** Keys were added or removed (indices shifted). */
  readonly membershipChanged: boolean;
}

/**
 * The plan from changedServices alone: the named keys, and the previous keys of the named Services.
 * Returns null when the Map holds keys that this does not account for (a new port of a Service named
 * only as "namespace/name"): the caller then scans.
 */
export function planFromChanges(input: RenderInput, prev: RenderState): IncrementalPlan | null {
  const pk = prev.keys;
  const candidates = new Set<string>();
  for (const e of input.changedServices) {
    candidates.add(e);
    // A Service's ports: "ns/name/PROTO" (unnamed port) and "ns/name:port/PROTO".
    for (const prefix of [e + "/", e + ":"]) {
      for (let j = lowerBound(pk, prefix); j < pk.length && pk[j].startsWith(prefix); j++) {
        candidates.add(pk[j]);
      }
    }
  }
  const dirty: number[] = [];
  const added: string[] = [];
  const removedIdx: number[] = [];
  for (const k of candidates) {
    const pi = indexOfKey(pk, k);
    const present = input.services.has(k);
    if (pi >= 0) (present ? dirty : removedIdx).push(pi);
    else if (present) added.push(k);
  }
  if (pk.length - removedIdx.length + added.length !== input.services.size) return null;
  dirty.sort((a, b) => a - b);
  removedIdx.sort((a, b) => a - b);
  const removed = removedIdx.map((i) => prev.facts[i]);
  const removedKeys = removedIdx.map((i) => pk[i]);
  if (added.length === 0 && removedIdx.length === 0) {
    return {
      keys: pk,
      facts: prev.facts.slice(),
      process: dirty,
      old: dirty.map((i) => prev.facts[i]),
      removed,
      removedKeys,
      membershipChanged: false,
    };
  }
  // Merge the surviving previous keys with the new ones.
  added.sort();
  const dirtySet = new Set(dirty);
  const removedSet = new Set(removedIdx);
  const keys: string[] = [];
  const facts: (ServicePortFacts | null)[] = [];
  const process: number[] = [];
  const old: (ServicePortFacts | null)[] = [];
  let a = 0;
  for (let i = 0; i <= pk.length; i++) {
    const k = i < pk.length ? pk[i] : null;
    while (a < added.length && (k === null || added[a] < k)) {
      process.push(keys.length);
      old.push(null);
      keys.push(added[a++]);
      facts.push(null);
    }
    if (k === null || removedSet.has(i)) continue;
    if (dirtySet.has(i)) {
      process.push(keys.length);
      old.push(prev.facts[i]);
    }
    keys.push(k);
    facts.push(prev.facts[i]);
  }
  return { keys, facts, process, old, removed, removedKeys, membershipChanged: true };
}

/**
 * The plan by scanning every current key: named, new, or with a ServicePortInfo or endpoints array
 * other than the previous render's (all of them when the render context changed).
 */
export function planByScan(input: RenderInput, prev: RenderState, sameContext: boolean): IncrementalPlan {
  const sorted = [...input.services.keys()].sort();
  const pk = prev.keys;
  const facts: (ServicePortFacts | null)[] = new Array(sorted.length);
  const process: number[] = [];
  const old: (ServicePortFacts | null)[] = [];
  const removed: ServicePortFacts[] = [];
  const removedKeys: string[] = [];
  let added = 0;
  let pi = 0;
  for (let i = 0; i < sorted.length; i++) {
    const key = sorted[i];
    while (pi < pk.length && pk[pi] < key) {
      removed.push(prev.facts[pi]);
      removedKeys.push(pk[pi++]);
    }
    if (pi < pk.length && pk[pi] === key) {
      const f = prev.facts[pi++];
      facts[i] = f;
      const svc = input.services.get(key)!;
      if (
        !sameContext || f.svc !== svc || f.endpoints !== input.endpoints.get(key) ||
        isWritten(input, key, svc)
      ) {
        process.push(i);
        old.push(f);
      }
    } else {
      facts[i] = null;
      process.push(i);
      old.push(null);
      added++;
    }
  }
  while (pi < pk.length) {
    removed.push(prev.facts[pi]);
    removedKeys.push(pk[pi++]);
  }
  const membershipChanged = added > 0 || removed.length > 0;
  return {
    keys: membershipChanged ? sorted : pk,
    facts,
    process,
    old,
    removed,
    removedKeys,
    membershipChanged,
  };
}
