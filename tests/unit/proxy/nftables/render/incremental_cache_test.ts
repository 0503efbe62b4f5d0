/**
 * compactCache (lib/proxy/nftables/render/incremental_cache.ts) copies the incremental renderer's cache
 * without changing it: the same entries in the same order (each store a CompactStore), owners in the same
 * form (a key alone, one record, a Map; coded names as a string or kept whole), PLAIN still PLAIN, the
 * original untouched, and no object of the copy is one of the original's (the copy must not keep the
 * original's cells alive).
 * The single-owner forms answer as the records they replace.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  bodyOf,
  compactCache,
  type ElementBody,
  type IncrementalCache,
  type Owned,
  ownerOf,
  type Owners,
  PLAIN,
  singleOwner,
} from "../../../../../lib/proxy/nftables/render/incremental_cache.ts";
import { CompactStore } from "../../../../../lib/proxy/nftables/render/compact_store.ts";

function sample(): { cache: IncrementalCache; goto: ElementBody; drop: ElementBody } {
  const goto: ElementBody = { value: "goto service-AAA-ns/a/tcp/p", comment: undefined };
  const drop: ElementBody = { value: "drop", comment: "ns/b:p" };
  const other: ElementBody = { value: "goto service-CCC-ns/c/tcp/p", comment: undefined };
  const owners = new Map<string, Owners>([
    ["service-ips\u000010.0.0.1 . tcp . 80", { owner: "ns/a:p", ...goto }],
    ["cluster-ips\u000010.0.0.1", "ns/a:p"],
    ["no-endpoint-services\u000010.0.0.2 . tcp . 80", new Map([["ns/b:p", drop], ["ns/c:p", other]])],
  ]);
  const fragments = new Map([
    ["ns/b:p", {
      elementIds: ["no-endpoint-services\u000010.0.0.2 . tcp . 80"],
      chains: "",
      affinitySets: ["kept\nwhole"],
      noLocalInternal: true,
      noLocalExternal: false,
    }],
    ["ns/a:p", {
      elementIds: ["service-ips\u000010.0.0.1 . tcp . 80", "cluster-ips\u000010.0.0.1"],
      chains: "0AAAAAAAA\n4BBBBBBBB__10.1.0.1/80",
      affinitySets: "5BBBBBBBB__10.1.0.1/80",
      noLocalInternal: false,
      noLocalExternal: true,
    }],
  ]);
  return { cache: { fragments, owners }, goto, drop };
}

/** A plain-data view of a cache: Maps and stores as entry lists, in order. */
function plain(c: IncrementalCache): unknown {
  const owners = [...c.owners].map((
    [id, o],
  ) => [id, o instanceof Map ? ["map", [...o]] : typeof o === "string" ? ["key", o] : ["record", { ...o }]]);
  return { fragments: [...c.fragments], owners };
}

test("compactCache copies the cache: same entries and order, in compact stores, new objects, PLAIN kept", () => {
  const { cache, goto, drop } = sample();
  const before = structuredClone(plain(cache));
  const copy = compactCache(cache);
  assert.deepEqual(plain(copy), before);
  assert.deepEqual(plain(cache), before, "the original is left as it was");
  assert.ok(copy.fragments instanceof CompactStore && copy.owners instanceof CompactStore);

  assert.notEqual(copy.fragments, cache.fragments);
  assert.notEqual(copy.owners, cache.owners);
  for (const [key, f] of copy.fragments) {
    const o = cache.fragments.get(key)!;
    assert.notEqual(f, o);
    assert.notEqual(f.elementIds, o.elementIds);
    if (typeof f.affinitySets !== "string") assert.notEqual(f.affinitySets, o.affinitySets);
  }

  const id = "service-ips\u000010.0.0.1 . tcp . 80";
  const record = copy.owners.get(id) as Owned;
  assert.notEqual(record, cache.owners.get(id));
  assert.notEqual(record, goto);
  assert.deepEqual(bodyOf(record), { owner: "ns/a:p", ...goto });

  const plainId = "cluster-ips\u000010.0.0.1";
  assert.equal(bodyOf(copy.owners.get(plainId) as string), PLAIN);

  const mapId = "no-endpoint-services\u000010.0.0.2 . tcp . 80";
  const map = copy.owners.get(mapId);
  assert.ok(map instanceof Map && map !== cache.owners.get(mapId));
  assert.notEqual(map.get("ns/b:p"), drop);
});

test("single-owner forms: a PLAIN body is the key alone, any other a record that is its body", () => {
  const goto: ElementBody = { value: "goto service-AAA-ns/a/tcp/p", comment: undefined };
  const drop: ElementBody = { value: "drop", comment: "ns/b:p" };
  assert.equal(singleOwner("ns/a:p", PLAIN), "ns/a:p");
  assert.equal(ownerOf("ns/a:p"), "ns/a:p");
  assert.equal(bodyOf("ns/a:p"), PLAIN);
  for (const body of [goto, drop]) {
    const o = singleOwner("ns/a:p", body);
    assert.equal(ownerOf(o), "ns/a:p");
    assert.deepEqual({ value: bodyOf(o).value, comment: bodyOf(o).comment }, body);
    // A record already of that owner is taken as it is; one of another owner is not.
    assert.equal(singleOwner("ns/a:p", bodyOf(o)), o);
    const moved = singleOwner("ns/c:p", bodyOf(o));
    assert.equal(ownerOf(moved), "ns/c:p");
    assert.equal(ownerOf(o), "ns/a:p");
    assert.deepEqual({ value: bodyOf(moved).value, comment: bodyOf(moved).comment }, body);
  }
});
