import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { requestsToReachAll } from "../../support/e2e_flows.ts";

describe("requestsToReachAll (real-traffic flows spread over endpoints)", () => {
  it("sends enough requests that missing the rarest owner has odds below one in a million", () => {
    for (
      const owners of [["a", "b"], ["a", "b", "b"], ["a", "b", "c"], ["a", "a", "b", "c"], [
        "a",
        "b",
        "c",
        "d",
      ]]
    ) {
      const n = requestsToReachAll(owners);
      const counts = new Map<string, number>();
      for (const o of owners) counts.set(o, (counts.get(o) ?? 0) + 1);
      const rarest = Math.min(...counts.values()) / owners.length;
      assert.ok((1 - rarest) ** n < 1e-6, `${owners}: ${n}`);
      assert.ok((1 - rarest) ** (n - 1) >= 1e-6, `${owners}: ${n} is the smallest such count`);
    }
  });

  it("counts a shared owner once per endpoint: 3 endpoints on 2 owners need more than 2 equal owners", () => {
    assert.equal(requestsToReachAll(["pod1", "remote"]), 20);
    assert.equal(requestsToReachAll(["pod1", "remote", "remote"]), 35);
  });
});
