import { test } from "node:test";
import assert from "node:assert/strict";
import { servicePortNameString } from "../../lib/proxy/types.ts";

test("servicePortNameString omits an empty port name", () => {
  assert.equal(servicePortNameString({ namespace: "ns", name: "a", port: "", protocol: "TCP" }), "ns/a");
  assert.equal(servicePortNameString({ namespace: "ns", name: "a", port: "p", protocol: "TCP" }), "ns/a:p");
});
