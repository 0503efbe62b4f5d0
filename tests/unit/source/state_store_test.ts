import { test } from "node:test";
import assert from "node:assert/strict";
import type { EndpointSlice, Node, Service } from "../../../lib/k8s/objects.ts";
import type { ProxyHandlers } from "../../../lib/proxy/handlers.ts";
import { StateStore } from "../../../lib/source/state_store.ts";

function recorder(): { events: string[]; handlers: ProxyHandlers } {
  const events: string[] = [];
  const n = (o: { metadata?: { namespace?: string; name?: string } }) =>
    `${o.metadata?.namespace ?? ""}/${o.metadata?.name}`;
  return {
    events,
    handlers: {
      onServiceAdd: (s: Service) => events.push(`svc+ ${n(s)}`),
      onServiceUpdate: (_o: Service, s: Service) => events.push(`svc~ ${n(s)}`),
      onServiceDelete: (s: Service) => events.push(`svc- ${n(s)}`),
      onServicesSynced: () => events.push("svc synced"),
      onEndpointSliceAdd: (s: EndpointSlice) => events.push(`eps+ ${n(s)}`),
      onEndpointSliceUpdate: (_o: EndpointSlice, s: EndpointSlice) => events.push(`eps~ ${n(s)}`),
      onEndpointSliceDelete: (s: EndpointSlice) => events.push(`eps- ${n(s)}`),
      onEndpointSlicesSynced: () => events.push("eps synced"),
      onNodeAdd: (x: Node) => events.push(`node+ ${n(x)}`),
      onNodeUpdate: (_o: Node, x: Node) => events.push(`node~ ${n(x)}`),
      onNodeDelete: (x: Node) => events.push(`node- ${n(x)}`),
      onNodeSynced: () => events.push("node synced"),
    },
  };
}

const svc = (name: string, rv: string, ip = "172.30.0.1"): Service => ({
  metadata: { namespace: "ns", name, resourceVersion: rv },
  spec: { clusterIP: ip },
});

test("cache objects are replaced by the live list without churn or ghosts", () => {
  const { events, handlers } = recorder();
  const store = new StateStore(handlers);
  store.loadFromCache({
    services: [svc("kept", "1"), svc("changed", "1"), svc("gone", "1")],
    endpointSlices: [],
    node: { metadata: { name: "n1", resourceVersion: "3" } },
  });
  assert.equal(store.servingFromCache, true);
  assert.deepEqual(events, [
    "svc+ ns/kept",
    "svc+ ns/changed",
    "svc+ ns/gone",
    "node+ /n1",
    "svc synced",
    "eps synced",
    "node synced",
  ]);
  events.length = 0;

  // The apiserver comes back: its first list.
  store.onServiceAdd(svc("kept", "1"));
  store.onServiceAdd(svc("changed", "2", "172.30.0.2"));
  store.onServiceAdd(svc("new", "7"));
  store.onServicesSynced();
  store.onEndpointSlicesSynced();
  store.onNodeAdd({ metadata: { name: "n1", resourceVersion: "3" } });
  store.onNodeSynced();
  assert.deepEqual(events, ["svc~ ns/changed", "svc+ ns/new", "svc- ns/gone"]);
  assert.equal(store.servingFromCache, false);
  assert.deepEqual(store.snapshot().services.map((s) => s.metadata?.name), ["changed", "kept", "new"]);
});

test("synced callbacks are forwarded once, and a live object is never overwritten by the cache", () => {
  const { events, handlers } = recorder();
  const store = new StateStore(handlers);
  store.onServiceAdd(svc("a", "5"));
  store.onServicesSynced();
  store.onServicesSynced();
  store.loadFromCache({ services: [svc("a", "1", "172.30.0.9")], endpointSlices: [], node: null });
  assert.deepEqual(events, ["svc+ ns/a", "svc synced", "eps synced", "node synced"]);
  assert.equal(store.snapshot().services[0].metadata?.resourceVersion, "5");
});

test("version changes only when something is forwarded", () => {
  const { handlers } = recorder();
  const store = new StateStore(handlers);
  const v0 = store.version;
  store.onServiceAdd(svc("a", "1"));
  const v1 = store.version;
  store.onServiceUpdate(svc("a", "1"), svc("a", "1"));
  assert.ok(v1 > v0);
  assert.equal(store.version, v1);
  store.onServiceDelete(svc("missing", "1"));
  assert.equal(store.version, v1);
});

test("liveSynced needs the live lists of Services, EndpointSlices and the Node; a cache load is not live", () => {
  const { handlers } = recorder();
  const store = new StateStore(handlers);
  store.loadFromCache({ services: [svc("a", "1")], endpointSlices: [], node: null });
  assert.equal(store.liveSynced, false);
  store.onServicesSynced();
  store.onEndpointSlicesSynced();
  assert.equal(store.liveSynced, false, "the Node has not been listed yet");
  assert.equal(store.servingFromCache, true);
  store.onNodeSynced();
  assert.equal(store.liveSynced, true);
  assert.equal(store.servingFromCache, false);
});

test("a cache loaded after the live lists of some kinds adds nothing of those kinds (no ghosts)", () => {
  const { events, handlers } = recorder();
  const store = new StateStore(handlers);
  store.onServiceAdd(svc("live", "2"));
  store.onServicesSynced();
  store.onEndpointSlicesSynced();
  events.length = 0;
  // The Node list is late, the cache deadline passes: only the Node may come from the cache.
  store.loadFromCache({
    services: [svc("live", "1", "172.30.0.9"), svc("deleted-meanwhile", "1")],
    endpointSlices: [{ metadata: { namespace: "ns", name: "gone-1" }, addressType: "IPv4", endpoints: [] }],
    node: { metadata: { name: "n1" } },
  });
  assert.deepEqual(events, ["node+ /n1", "node synced"]);
  assert.deepEqual(store.snapshot().services.map((s) => s.metadata?.name), ["live"]);
  assert.equal(store.servingFromCache, true);
  store.onNodeAdd({ metadata: { name: "n1", resourceVersion: "4" } });
  store.onNodeSynced();
  assert.equal(store.servingFromCache, false);
});
