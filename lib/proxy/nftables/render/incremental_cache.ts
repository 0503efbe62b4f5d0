/**
 * What the incremental renderer (incremental.ts) keeps between syncs, and its compaction after a full
 * sync. Nothing rendered is kept: per service port only the service port and endpoints it was last
 * rendered from (objects the proxy's state holds anyway, until they change), from which its share of the
 * table (elements with their values, chains, affinity sets) is rendered again when a sync needs it; per
 * element only the keys of the service ports wanting it.
 *
 * The cache is built during the full sync's render, so its strings and objects are allocated among the
 * render's hundreds of thousands of short-lived ones; JavaScriptCore never moves a cell, and the blocks
 * holding the cache's few cells each stay mapped after the render's garbage is gone (at 5k Services ~10
 * MiB of cache held ~35 MiB of heap: bench/README.md). A copy made once the render is over lies in
 * blocks of its own, and the originals die with the render's garbage.
 */
import type { EndpointInfo, ServicePortInfo } from "../../types.ts";
import { freshString } from "../../../runtime/fresh_string.ts";
import { CompactStore, type KeyedStore, UNFILLED } from "./compact_store.ts";

/** What a service port was last rendered from: its share of the table follows from these. */
export interface Fragment {
  readonly servicePort: ServicePortInfo;
  /** Its endpoints as the proxy state held them (undefined: none). */
  readonly endpoints: readonly EndpointInfo[] | undefined;
}

/** The keys of the service ports wanting one element: one key, or two or more. */
export type Owners = string | readonly string[];

/** The first of `owners` in key order: the service port whose body a full sync writes. */
export function firstOwner(owners: Owners): string {
  if (typeof owners === "string") return owners;
  let best = owners[0];
  for (const k of owners) if (k < best) best = k;
  return best;
}

/** `owners` with `key` added (it must not be among them). */
export function withOwner(owners: Owners | undefined, key: string): Owners {
  if (owners === undefined) return key;
  return typeof owners === "string" ? [owners, key] : [...owners, key];
}

/** `owners` without `key`; undefined when none is left. */
export function withoutOwner(owners: Owners, key: string): Owners | undefined {
  if (typeof owners === "string") return owners === key ? undefined : owners;
  const rest = owners.filter((k) => k !== key);
  return rest.length === 0 ? undefined : rest.length === 1 ? rest[0] : rest;
}

/** True when `key` is one of `owners`. */
export function isOwner(owners: Owners | undefined, key: string): boolean {
  if (owners === undefined) return false;
  return typeof owners === "string" ? owners === key : owners.includes(key);
}

/** The renderer's per-service-port and per-element state. */
export interface IncrementalCache {
  /** Each service port's inputs, by servicePortKey. */
  readonly fragments: KeyedStore<Fragment>;
  /** Wanting service ports of each element, by element id. */
  readonly owners: KeyedStore<Owners>;
}

/**
 * A copy of `cache` in new objects and strings, in the same order, each store a {@link CompactStore}.
 * The element ids and service port keys are copied once each; an owner is the fragments' own key string.
 * The service ports and endpoints are the proxy state's, not copied. The copies of the keys are made
 * first and the values filled in after, sharing them through the new stores' own keys, so that no Map of
 * every entry or string is built beside the two caches.
 */
export function compactCache(cache: IncrementalCache): IncrementalCache {
  const owners = new CompactStore<Owners>(Array.from(cache.owners.keys(), freshString), UNFILLED);
  const fragments = new CompactStore<Fragment>(Array.from(cache.fragments.keys(), freshString), UNFILLED);
  const servicePort = (key: string): string => fragments.keyOf(key) ?? freshString(key);
  let slot = 0;
  for (const [, o] of cache.owners) {
    owners.fill(slot++, typeof o === "string" ? servicePort(o) : o.map(servicePort));
  }
  slot = 0;
  for (const [, f] of cache.fragments) {
    fragments.fill(slot++, { servicePort: f.servicePort, endpoints: f.endpoints });
  }
  return { fragments, owners };
}
