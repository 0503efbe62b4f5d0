import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { ProxyHandlers } from "../../../lib/proxy/handlers.ts";
import type { EndpointSlice, Service } from "../../../lib/k8s/objects.ts";
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
      const h = withListsStored(recording(calls), (objects) => calls.push(`stored ${objects}`));
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
        "stored 1",
        "onServicesSynced",
        "onEndpointSlicesSynced",
      ]);
    });
  }

  it("counts the Services and EndpointSlices added before both lists were stored", () => {
    const counted: number[] = [];
    const h = withListsStored(recording([]), (objects) => counted.push(objects));
    for (let i = 0; i < 3; i++) h.onServiceAdd({ metadata: { name: `s${i}`, namespace: "ns" } } as Service);
    h.onServicesSynced();
    for (let i = 0; i < 2; i++) {
      h.onEndpointSliceAdd({ metadata: { name: `e${i}`, namespace: "ns" } } as EndpointSlice);
    }
    h.onServiceUpdate(
      { metadata: { name: "s0", namespace: "ns" } } as Service,
      { metadata: { name: "s0", namespace: "ns" } } as Service,
    );
    h.onEndpointSlicesSynced();
    h.onServiceAdd({ metadata: { name: "late", namespace: "ns" } } as Service);
    assert.deepEqual(counted, [5]);
  });
});
