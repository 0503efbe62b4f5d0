import { test } from "node:test";
import assert from "node:assert/strict";
import { formatRFC3339Nano, GO_ZERO_TIME, goJSON } from "../../../lib/server/go_json.ts";

test("formatRFC3339Nano trims trailing zeros like Go's RFC3339Nano", () => {
  const t = Date.UTC(2025, 0, 2, 3, 4, 5);
  assert.equal(formatRFC3339Nano(t), "2025-01-02T03:04:05Z", "no fraction, no dot");
  assert.equal(formatRFC3339Nano(t + 120), "2025-01-02T03:04:05.12Z");
  assert.equal(formatRFC3339Nano(t + 1), "2025-01-02T03:04:05.001Z");
  assert.equal(formatRFC3339Nano(t + 999), "2025-01-02T03:04:05.999Z");
  assert.equal(formatRFC3339Nano(t + 0.5), "2025-01-02T03:04:05.0005Z", "sub-millisecond kept to the µs");
  assert.equal(formatRFC3339Nano(t + 123.456), "2025-01-02T03:04:05.123456Z");
  assert.equal(formatRFC3339Nano(t + 999.9999), "2025-01-02T03:04:06Z", "rounds up into the next second");
  assert.equal(formatRFC3339Nano(0), "1970-01-01T00:00:00Z");
});

test("the zero time is Go's", () => {
  assert.equal(formatRFC3339Nano(null), "0001-01-01T00:00:00Z");
  assert.equal(GO_ZERO_TIME, "0001-01-01T00:00:00Z");
  assert.throws(() => formatRFC3339Nano(NaN), /not a finite time/);
});

test("goJSON escapes like Go's json.Marshal and keeps key order", () => {
  assert.equal(goJSON({ b: 1, a: "<x & y>" }), '{"b":1,"a":"\\u003cx \\u0026 y\\u003e"}');
  assert.equal(goJSON({ s: "line\u2028sep" }), '{"s":"line\\u2028sep"}');
  assert.deepEqual(JSON.parse(goJSON({ a: "<&>" })), { a: "<&>" }, "still valid JSON with the same value");
});
