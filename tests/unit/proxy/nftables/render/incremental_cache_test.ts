/**
 * compactCache (lib/proxy/nftables/render/incremental_cache.ts) copies the incremental renderer's cache
 * without changing it: the same entries in the same order, owners inline or as a Map as before, PLAIN
 * still PLAIN, the original untouched, and no object of the copy is one of the original's (the copy
 * must not keep the original's cells alive).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  compactCache,
  type ElementBody,
  type IncrementalCache,
  type Owners,
  PLAIN,
} from "../../../../../lib/proxy/nftables/render/incremental_cache.ts";

function sample(): { cache: IncrementalCache; goto: ElementBody; drop: ElementBody } {
  const goto: ElementBody = { value: "goto service-AAA-ns/a/tcp/p", comment: undefined };
  const drop: ElementBody = { value: "drop", comment: "ns/b:p" };
  const other: ElementBody = { value: "goto service-CCC-ns/c/tcp/p", comment: undefined };
  const owners = new Map<string, Owners>([
    ["service-ips\u000010.0.0.1 . tcp . 80", { owner: "ns/a:p", body: goto }],
    ["cluster-ips\u000010.0.0.1", { owner: "ns/a:p", body: PLAIN }],
    ["no-endpoint-services\u000010.0.0.2 . tcp . 80", new Map([["ns/b:p", drop], ["ns/c:p", other]])],
  ]);
  const fragments = new Map([
    ["ns/b:p", {
      elementIds: ["no-endpoint-services\u000010.0.0.2 . tcp . 80"],
      chains: [],
      affinitySets: [],
      noLocalInternal: true,
      noLocalExternal: false,
    }],
    ["ns/a:p", {
      elementIds: ["service-ips\u000010.0.0.1 . tcp . 80", "cluster-ips\u000010.0.0.1"],
      chains: ["service-AAA-ns/a/tcp/p", "endpoint-BBB-ns/a/tcp/p__10.1.0.1/80"],
      affinitySets: ["affinity-BBB-ns/a/tcp/p__10.1.0.1/80"],
      noLocalInternal: false,
      noLocalExternal: true,
    }],
  ]);
  return { cache: { fragments, owners }, goto, drop };
}

/** A plain-data view of a cache: Maps as entry lists, in order. */
function plain(c: IncrementalCache): unknown {
  const owners = [...c.owners].map(([id, o]) => [id, o instanceof Map ? ["map", [...o]] : ["inline", o]]);
  return { fragments: [...c.fragments], owners };
}

test("compactCache copies the cache: same entries and order, new objects, PLAIN kept", () => {
  const { cache, goto, drop } = sample();
  const before = structuredClone(plain(cache));
  const copy = compactCache(cache);
  assert.deepEqual(plain(copy), before);
  assert.deepEqual(plain(cache), before, "the original is left as it was");

  assert.notEqual(copy.fragments, cache.fragments);
  assert.notEqual(copy.owners, cache.owners);
  for (const [key, f] of copy.fragments) {
    const o = cache.fragments.get(key)!;
    assert.notEqual(f, o);
    assert.notEqual(f.elementIds, o.elementIds);
    assert.notEqual(f.chains, o.chains);
    assert.notEqual(f.affinitySets, o.affinitySets);
  }

  const id = "service-ips\u000010.0.0.1 . tcp . 80";
  const inline = copy.owners.get(id) as { owner: string; body: ElementBody };
  assert.notEqual(inline, cache.owners.get(id));
  assert.notEqual(inline.body, goto);

  const plainId = "cluster-ips\u000010.0.0.1";
  assert.equal((copy.owners.get(plainId) as { body: ElementBody }).body, PLAIN);

  const mapId = "no-endpoint-services\u000010.0.0.2 . tcp . 80";
  const map = copy.owners.get(mapId);
  assert.ok(map instanceof Map && map !== cache.owners.get(mapId));
  assert.notEqual(map.get("ns/b:p"), drop);
});
