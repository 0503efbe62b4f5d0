/**
 * CompactStore (lib/proxy/nftables/render/compact_store.ts) answers as a Map of the same entries through
 * any sequence of sets and deletes: of keys it was built with (deleted, set again), of keys added later,
 * of keys never there; its size and entries follow; it iterates the built keys in the order given, then
 * the later ones as set. Thousands of keys (hash collisions among them) answer the same.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { CompactStore, UNFILLED } from "../../../../../lib/proxy/nftables/render/compact_store.ts";
import { mulberry32 } from "../../../../support/random.ts";

/** Same entries, size and lookups for every key of `universe`. */
function assertSame(
  store: CompactStore<number>,
  map: Map<string, number>,
  universe: readonly string[],
): void {
  assert.equal(store.size, map.size);
  const sort = (e: [string, number][]) => e.sort(([a], [b]) => a < b ? -1 : a > b ? 1 : 0);
  assert.deepEqual(sort([...store]), sort([...map]));
  assert.deepEqual([...store.keys()].sort(), [...map.keys()].sort());
  for (const k of universe) {
    assert.equal(store.get(k), map.get(k), k);
    assert.equal(store.has(k), map.has(k), k);
  }
}

for (const seed of [1, 2, 3]) {
  test(`random sets and deletes (seed ${seed}): a CompactStore answers as a Map`, () => {
    const rnd = mulberry32(seed);
    // Element-id-like keys: shared prefixes, a NUL, and some only ever set later.
    const universe = Array.from({ length: 60 }, (_, i) => `c${i % 3}\u0000${(i * 7919) % 97} . tcp`);
    universe.push("", "\u0000", "~", "Z");
    const map = new Map<string, number>();
    for (const k of universe) if (rnd() < 0.5) map.set(k, Math.floor(rnd() * 5));
    const store = new CompactStore(map);
    assertSame(store, map, universe);
    for (let step = 0; step < 2000; step++) {
      const k = universe[Math.floor(rnd() * universe.length)];
      if (rnd() < 0.5) {
        const v = Math.floor(rnd() * 5);
        assert.equal(store.set(k, v), store);
        map.set(k, v);
      } else assert.equal(store.delete(k), map.delete(k), `delete ${k}`);
      if (step % 50 === 0) assertSame(store, map, universe);
    }
    assertSame(store, map, universe);
  });
}

test("a CompactStore iterates its built keys in the order given, then later keys as set", () => {
  const store = new CompactStore<string>([["b", "1"], ["a", "2"], ["c", "3"], ["a", "4"]]);
  assert.deepEqual([...store], [["b", "1"], ["a", "4"], ["c", "3"]]);
  store.delete("b");
  store.set("z", "5");
  store.set("d", "6");
  store.set("b", "7");
  assert.deepEqual([...store.keys()], ["b", "a", "c", "z", "d"]);
  assert.equal(store.size, 5);
  assert.equal(store.delete("q"), false);
  assert.equal(store.delete("b"), true);
  assert.equal(store.delete("b"), false);
  assert.equal(store.size, 4);
  assert.throws(() => store.set("a", undefined as unknown as string), /undefined is not a value/);
  assert.equal(new CompactStore([]).size, 0);
});

test("a large CompactStore: every key found, absent ones not, after deletes and refills", () => {
  const keys = Array.from(
    { length: 5000 },
    (_, i) => `service-ips\u000010.${i >> 8}.${i & 255}.1 . tcp . 80`,
  );
  const store = new CompactStore(keys.map((k, i) => [k, i] as const));
  for (let i = 0; i < keys.length; i++) assert.equal(store.get(`${keys[i]}`), i);
  for (let i = 0; i < keys.length; i += 3) store.delete(keys[i]);
  for (let i = 0; i < keys.length; i++) assert.equal(store.get(keys[i]), i % 3 === 0 ? undefined : i);
  assert.equal(store.get("service-ips\u000010.0.0.1 . tcp . 81"), undefined);
  for (let i = 0; i < keys.length; i += 3) store.set(keys[i], -i);
  assert.equal(store.size, keys.length);
  for (let i = 0; i < keys.length; i++) assert.equal(store.get(keys[i]), i % 3 === 0 ? -i : i);
});

test("a CompactStore built from its keys alone: values filled by slot, keys found before they are, then a Map's answers", () => {
  const keys = Array.from(
    { length: 3000 },
    (_, i) => `service-ips\u000010.0.${i >> 8}.${i & 255} . tcp . 80`,
  );
  const store = new CompactStore<number>(keys, UNFILLED);
  // Before filling: its own key strings are found (equal strings answer), others are not.
  for (const k of keys) assert.equal(store.keyOf(`${k}`), k);
  assert.equal(store.keyOf("service-ips\u000010.9.9.9 . tcp . 80"), undefined);
  keys.forEach((_, i) => store.fill(i, i * 2));
  const map = new Map(keys.map((k, i) => [k, i * 2]));
  assertSame(store, map, [...keys, "absent"]);
  assert.deepEqual([...store.keys()], keys, "in the order given");
  // Later keys are not its own: keyOf answers only for the keys it was built with.
  store.set("later", 1);
  map.set("later", 1);
  assert.equal(store.keyOf("later"), undefined);
  assertSame(store, map, [...keys, "later"]);
});
