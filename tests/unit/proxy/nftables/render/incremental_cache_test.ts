/**
 * The incremental renderer's cache (lib/proxy/nftables/render/incremental_cache.ts): compactCache copies
 * it without changing it — the same entries in the same order (each store a CompactStore), owners in the
 * same form (one key, or a list), the original untouched, the keys new strings and each owner the copy's
 * own key string, the fragments new objects holding the same service port and endpoints (the proxy
 * state's, not copied). And the owner-list helpers.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  compactCache,
  firstOwner,
  type Fragment,
  type IncrementalCache,
  isOwner,
  type Owners,
  withoutOwner,
  withOwner,
} from "../../../../../lib/proxy/nftables/render/incremental_cache.ts";
import { CompactStore } from "../../../../../lib/proxy/nftables/render/compact_store.ts";
import { makeEndpoint, makeServicePort } from "../../../../support/tracer.ts";

function sample(): IncrementalCache {
  const a = makeServicePort("ns", "a", { clusterIP: "10.0.0.1" });
  const b = makeServicePort("ns", "b", { clusterIP: "10.0.0.2" });
  const owners = new Map<string, Owners>([
    ["service-ips\u000010.0.0.1 . tcp . 80", "ns/a:p"],
    ["cluster-ips\u000010.0.0.1", "ns/a:p"],
    ["no-endpoint-services\u000010.0.0.2 . tcp . 80", ["ns/c:p", "ns/b:p"]],
  ]);
  const fragments = new Map<string, Fragment>([
    ["ns/b:p", { servicePort: b, endpoints: undefined }],
    ["ns/a:p", { servicePort: a, endpoints: [makeEndpoint("10.1.0.1", 80)] }],
  ]);
  return { fragments, owners };
}

test("compactCache copies the cache: same entries and order, in compact stores, new keys and objects", () => {
  const cache = sample();
  const before = { fragments: [...cache.fragments], owners: [...cache.owners] };
  const copy = compactCache(cache);
  assert.deepEqual({ fragments: [...copy.fragments], owners: [...copy.owners] }, before);
  assert.deepEqual({ fragments: [...cache.fragments], owners: [...cache.owners] }, before, "original kept");
  assert.ok(copy.fragments instanceof CompactStore && copy.owners instanceof CompactStore);

  for (const [key, f] of copy.fragments) {
    const o = cache.fragments.get(key)!;
    assert.notEqual(f, o, "a new fragment object");
    assert.equal(f.servicePort, o.servicePort, "the same service port");
    assert.equal(f.endpoints, o.endpoints, "the same endpoints");
  }
  const list = copy.owners.get("no-endpoint-services\u000010.0.0.2 . tcp . 80");
  assert.ok(Array.isArray(list));
  assert.notEqual(list, cache.owners.get("no-endpoint-services\u000010.0.0.2 . tcp . 80"));
  // An owner is the copy's own key string (a fragment's), not a string of its own.
  const copyStore = copy.fragments as CompactStore<Fragment>;
  assert.equal(copy.owners.get("cluster-ips\u000010.0.0.1"), copyStore.keyOf("ns/a:p"));
});

test("owner lists: the first owner in key order, added and removed keys, membership", () => {
  assert.equal(firstOwner("ns/a:p"), "ns/a:p");
  assert.equal(firstOwner(["ns/c:p", "ns/a:p", "ns/b:p"]), "ns/a:p");
  assert.equal(withOwner(undefined, "ns/a:p"), "ns/a:p");
  assert.deepEqual(withOwner("ns/a:p", "ns/b:p"), ["ns/a:p", "ns/b:p"]);
  assert.deepEqual(withOwner(["ns/a:p", "ns/b:p"], "ns/c:p"), ["ns/a:p", "ns/b:p", "ns/c:p"]);
  assert.equal(withoutOwner("ns/a:p", "ns/a:p"), undefined);
  assert.equal(withoutOwner("ns/a:p", "ns/b:p"), "ns/a:p");
  assert.equal(withoutOwner(["ns/a:p", "ns/b:p"], "ns/a:p"), "ns/b:p", "one left: a key again");
  assert.deepEqual(withoutOwner(["ns/a:p", "ns/b:p", "ns/c:p"], "ns/b:p"), ["ns/a:p", "ns/c:p"]);
  assert.ok(isOwner("ns/a:p", "ns/a:p") && isOwner(["ns/a:p", "ns/b:p"], "ns/b:p"));
  assert.ok(!isOwner(undefined, "ns/a:p") && !isOwner("ns/a:p", "ns/b:p") && !isOwner(["ns/a:p"], "ns/b:p"));
});
