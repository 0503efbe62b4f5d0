import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { ByNamespacedName } from "../../../lib/k8s/by_name.ts";
import { namespacedName } from "../../../lib/k8s/objects.ts";

describe("ByNamespacedName", () => {
  it('holds one value per namespace and name, cluster-scoped ones under the namespace ""', () => {
    const m = new ByNamespacedName<number>();
    m.set("b", "x", 1);
    m.set("a", "y", 2);
    m.set("", "node-1", 3);
    m.set("a", "y", 4); // replaces
    assert.equal(m.size, 3);
    assert.equal(m.get("a", "y"), 4);
    assert.equal(m.get("", "node-1"), 3);
    assert.equal(m.get("b", "y"), undefined);
    assert.equal(m.get("c", "x"), undefined);
    assert.equal(m.delete("b", "nope"), false);
    assert.equal(m.delete("c", "x"), false);
    assert.equal(m.size, 3);
    assert.deepEqual([...m.entries()].sort(), [["", "node-1", 3], ["a", "y", 4], ["b", "x", 1]]);
    assert.equal(m.delete("b", "x"), true);
    assert.equal(m.size, 2);
    assert.deepEqual([...m.entries()].map(([ns]) => ns).sort(), ["", "a"], "an emptied namespace goes");
    m.clear();
    assert.equal(m.size, 0);
    assert.deepEqual([...m.entries()], []);
  });

  it("sorts by the key the caller builds, as strings compare", () => {
    const m = new ByNamespacedName<string>();
    // "a-x/c" < "a/b" as strings ("-" < "/"), though "a" < "a-x" as namespaces.
    for (const [ns, name] of [["a", "b"], ["a-x", "c"], ["", "z"], ["a", "a"]]) {
      m.set(ns, name, `${ns}/${name}`);
    }
    assert.deepEqual(m.sortedBy(namespacedName), ["/z", "a-x/c", "a/a", "a/b"]);
    assert.deepEqual(m.sortedBy((ns, name) => ns ? `${ns}/${name}` : name), ["a-x/c", "a/a", "a/b", "/z"]);
  });
});
