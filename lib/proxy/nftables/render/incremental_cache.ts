/**
 * What the incremental renderer (incremental.ts) keeps between syncs, and its compaction after a full
 * sync. The cache is built during the full sync's render, so its strings and objects are allocated among
 * the render's hundreds of thousands of short-lived ones; JavaScriptCore never moves a cell, and the
 * blocks holding the cache's few cells each stay mapped after the render's garbage is gone (at 5k
 * Services ~10 MiB of cache held ~35 MiB of heap: bench/README.md). A copy made once the render is over
 * lies in blocks of its own, and the originals die with the render's garbage.
 */
import { freshString } from "../../../runtime/fresh_string.ts";
import type { CodedNames } from "./coded_names.ts";
import { CompactStore, type KeyedStore, UNFILLED } from "./compact_store.ts";

/** A service port's cached share of the table (no rendered text: a changed port is rendered again). */
export interface Fragment {
  /** Ids of the elements it wants (see elementId in incremental.ts), each once. */
  readonly elementIds: readonly string[];
  /** Its per-service and per-endpoint chains, coded against its key (coded_names.ts). */
  readonly chains: CodedNames;
  /** Its ClientIP affinity sets, coded likewise. */
  readonly affinitySets: CodedNames;
  readonly noLocalInternal: boolean;
  readonly noLocalExternal: boolean;
}

/** Element value ("" for a set element) and comment as written. */
export interface ElementBody {
  readonly value: string;
  readonly comment: string | undefined;
}

/** The body of every set element without a comment (most of them): one shared object. */
export const PLAIN: ElementBody = Object.freeze({ value: "", comment: undefined });

/** The one service port wanting an element, with the body it writes (the record is that body). */
export interface Owned extends ElementBody {
  readonly owner: string;
}

/**
 * The service ports wanting one element and the body each would write. One owner (the common case, no
 * Map per element): its servicePortKey alone when the body is PLAIN, else an {@link Owned} record; a Map
 * from the second owner on.
 */
export type Owners = string | Owned | Map<string, ElementBody>;

/** The Owners form of a single owner `owner` writing `body`. */
export function singleOwner(owner: string, body: ElementBody): string | Owned {
  if (body === PLAIN) return owner;
  const o = body as Partial<Owned>;
  return o.owner === owner ? body as Owned : { owner, value: body.value, comment: body.comment };
}

/** The servicePortKey of a single-owner form. */
export function ownerOf(o: string | Owned): string {
  return typeof o === "string" ? o : o.owner;
}

/** The body a single-owner form writes. */
export function bodyOf(o: string | Owned): ElementBody {
  return typeof o === "string" ? PLAIN : o;
}

/**
 * The renderer's per-service-port and per-element state. What the last sync left in the kernel is not
 * kept beside it: each element holds the body of its first wanting service port in key order.
 */
export interface IncrementalCache {
  /** Each service port's share, by servicePortKey. */
  readonly fragments: KeyedStore<Fragment>;
  /** Wanting service ports of each element, by element id. */
  readonly owners: KeyedStore<Owners>;
}

/**
 * A copy of `cache` in new objects and strings, in the same order, each store a {@link CompactStore}. A
 * string the cache holds in several places (an element id in its owners' and its service ports' entries,
 * a service port's key, a comment) is copied once and shared as before; {@link PLAIN} stays PLAIN. The
 * copies of the keys are made first and the values are filled in after, sharing them through the new
 * stores' own keys, so that no Map of every entry or string is built beside the two caches (at 10k
 * Services those were ~10 MiB at the first sync's peak).
 */
export function compactCache(cache: IncrementalCache): IncrementalCache {
  const owners = new CompactStore<Owners>(Array.from(cache.owners.keys(), freshString), UNFILLED);
  const fragments = new CompactStore<Fragment>(Array.from(cache.fragments.keys(), freshString), UNFILLED);
  // Comments are few and repeat (one per Service on its ports' elements): the only strings shared by map.
  const comments = new Map<string, string>();
  const comment = (c: string | undefined): string | undefined => {
    if (c === undefined) return undefined;
    let copy = comments.get(c);
    if (copy === undefined) comments.set(c, copy = freshString(c));
    return copy;
  };
  const servicePort = (key: string): string => fragments.keyOf(key) ?? freshString(key);
  const body = (b: ElementBody): ElementBody =>
    b === PLAIN ? PLAIN : { value: freshString(b.value), comment: comment(b.comment) };
  const names = (n: CodedNames): CodedNames => typeof n === "string" ? freshString(n) : n.map(freshString);
  let slot = 0;
  for (const [, o] of cache.owners) {
    let copy: Owners;
    if (o instanceof Map) {
      const m = new Map<string, ElementBody>();
      for (const [owner, b] of o) m.set(servicePort(owner), body(b));
      copy = m;
    } else if (typeof o === "string") copy = servicePort(o);
    else copy = { owner: servicePort(o.owner), value: freshString(o.value), comment: comment(o.comment) };
    owners.fill(slot++, copy);
  }
  slot = 0;
  for (const [, f] of cache.fragments) {
    fragments.fill(slot++, {
      elementIds: f.elementIds.map((id) => owners.keyOf(id) ?? freshString(id)),
      chains: names(f.chains),
      affinitySets: names(f.affinitySets),
      noLocalInternal: f.noLocalInternal,
      noLocalExternal: f.noLocalExternal,
    });
  }
  return { fragments, owners };
}
