/**
 * freshString (lib/runtime/fresh_string.ts) returns the same characters for every kind of string: empty,
 * ASCII, latin1, characters above latin1, astral ones and lone surrogates (which a UTF-8 round trip
 * would replace). Whether the copy is a new cell is the runtime's business and shows only in heap
 * figures (bench/README.md).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { freshString } from "../../../lib/runtime/fresh_string.ts";

test("freshString keeps every string's characters", () => {
  const long = "endpoint-ABCDEFGH-ns/name/tcp/http__10.0.0.1/80".repeat(100);
  for (
    const s of [
      "",
      "a",
      "service-ips\u0000172.30.0.41 . tcp . 80",
      "caf\u00e9 \u00ff",
      "\u20ac \u4e2d",
      "\ud83d\ude00 astral",
      "lone \ud800 surrogate",
      "trailing \udfff",
      long,
      long.slice(10, 200),
      "x".repeat(70_000) + "\u20ac",
    ]
  ) {
    const c = freshString(s);
    assert.equal(c.length, s.length);
    assert.equal(c, s);
  }
});
