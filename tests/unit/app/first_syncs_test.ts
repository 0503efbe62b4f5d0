import { test } from "node:test";
import assert from "node:assert/strict";
import { FirstSyncs } from "../../../lib/app/first_syncs.ts";

test("post-sync work waits until every family has completed a first sync", () => {
  const g = new FirstSyncs(["IPv4", "IPv6"], 120_000);
  assert.equal(g.synced("IPv6", 1_000), false, "IPv4's first sync is still running");
  assert.equal(g.synced("IPv6", 2_000), false);
  assert.equal(g.synced("IPv4", 20_000), true);
  assert.equal(g.synced("IPv6", 21_000), true, "from then on every sync");
});

test("a family that never syncs holds the work back at most maxHoldMs after the first sync", () => {
  const g = new FirstSyncs(["IPv4", "IPv6"], 120_000);
  assert.equal(g.synced("IPv4", 5_000), false);
  assert.equal(g.synced("IPv4", 124_999), false);
  assert.equal(g.synced("IPv4", 125_000), true);
});

test("a single family is never held back", () => {
  assert.equal(new FirstSyncs(["IPv4"], 120_000).synced("IPv4", 0), true);
});
