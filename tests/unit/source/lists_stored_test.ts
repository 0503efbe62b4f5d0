import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { ProxyHandlers } from "../../../lib/proxy/handlers.ts";
import type { Service } from "../../../lib/k8s/objects.ts";
import { withListsStored } from "../../../lib/source/lists_stored.ts";

/** Handlers that record each call's name into `calls`. */
function recording(calls: string[]): ProxyHandlers {
  return new Proxy({} as ProxyHandlers, {
    get: (_t, name) => (..._args: unknown[]) => void calls.push(String(name)),
  });
}

describe("withListsStored", () => {
  for (
    const order of [["onServicesSynced", "onEndpointSlicesSynced"], [
      "onEndpointSlicesSynced",
      "onServicesSynced",
    ]]
  ) {
    it(`tells once, after both kinds reached the proxier (${order.join(", ")})`, () => {
      const calls: string[] = [];
      const h = withListsStored(recording(calls), () => calls.push("stored"));
      h.onNodeSynced();
      h.onServiceAdd({ metadata: { name: "a", namespace: "ns" } } as Service);
      (h[order[0] as keyof ProxyHandlers] as () => void)();
      assert.ok(!calls.includes("stored"), "not after one kind");
      (h[order[1] as keyof ProxyHandlers] as () => void)();
      // A second round of Synced calls (a later list) tells nothing more.
      h.onServicesSynced();
      h.onEndpointSlicesSynced();
      assert.deepEqual(calls, [
        "onNodeSynced",
        "onServiceAdd",
        order[0],
        order[1],
        "stored",
        "onServicesSynced",
        "onEndpointSlicesSynced",
      ]);
    });
  }
});
