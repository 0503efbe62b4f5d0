import { test } from "node:test";
import assert from "node:assert/strict";
import type { EndpointSlice, Node, Service } from "../../../lib/k8s/objects.ts";
import { type FamilyProxier, MetaProxier, type NodeEventHandler } from "../../../lib/proxy/meta_proxier.ts";

/** A proxier that records every call as "name:method". */
function recorder(name: string, calls: string[]): FamilyProxier {
  const rec = (m: string) => () => void calls.push(`${name}:${m}`);
  return {
    start: rec("start"),
    stop: () => {
      calls.push(`${name}:stop`);
      return Promise.resolve();
    },
    onServiceAdd: rec("onServiceAdd"),
    onServiceUpdate: rec("onServiceUpdate"),
    onServiceDelete: rec("onServiceDelete"),
    onServicesSynced: rec("onServicesSynced"),
    onEndpointSliceAdd: rec("onEndpointSliceAdd"),
    onEndpointSliceUpdate: rec("onEndpointSliceUpdate"),
    onEndpointSliceDelete: rec("onEndpointSliceDelete"),
    onEndpointSlicesSynced: rec("onEndpointSlicesSynced"),
    onNodeAdd: rec("onNodeAdd"),
    onNodeUpdate: rec("onNodeUpdate"),
    onNodeDelete: rec("onNodeDelete"),
    onNodeSynced: rec("onNodeSynced"),
  };
}

const svc = { metadata: { name: "s" } } as Service;
const slice = { metadata: { name: "e" } } as EndpointSlice;
const node = { metadata: { name: "n" } } as Node;

test("every handler call reaches every family's proxier, IPv4 first, with its arguments", () => {
  const calls: string[] = [];
  const seen: unknown[][] = [];
  const v4 = recorder("v4", calls);
  const v6 = recorder("v6", calls);
  v6.onServiceUpdate = (o, s) => void seen.push([o, s]);
  const m = new MetaProxier([v4, v6]);
  m.onServiceAdd(svc);
  m.onServiceUpdate(svc, svc);
  m.onServiceDelete(svc);
  m.onServicesSynced();
  m.onEndpointSliceAdd(slice);
  m.onEndpointSliceUpdate(slice, slice);
  m.onEndpointSliceDelete(slice);
  m.onEndpointSlicesSynced();
  m.onNodeSynced();
  const methods = [
    "onServiceAdd",
    "onServiceUpdate",
    "onServiceDelete",
    "onServicesSynced",
    "onEndpointSliceAdd",
    "onEndpointSliceUpdate",
    "onEndpointSliceDelete",
    "onEndpointSlicesSynced",
    "onNodeSynced",
  ];
  assert.deepEqual(
    calls,
    methods.flatMap((x) => x === "onServiceUpdate" ? [`v4:${x}`] : [`v4:${x}`, `v6:${x}`]),
  );
  assert.deepEqual(seen, [[svc, svc]]);
});

test("Node events go to the extra node handlers first, then to the proxiers; the synced signal only to proxiers", () => {
  const calls: string[] = [];
  const health: NodeEventHandler = {
    onNodeAdd: () => void calls.push("health:onNodeAdd"),
    onNodeUpdate: () => void calls.push("health:onNodeUpdate"),
    onNodeDelete: () => void calls.push("health:onNodeDelete"),
  };
  const m = new MetaProxier([recorder("v4", calls), recorder("v6", calls)], [health]);
  m.onNodeAdd(node);
  m.onNodeUpdate(node, node);
  m.onNodeDelete(node);
  m.onNodeSynced();
  assert.deepEqual(calls, [
    "health:onNodeAdd",
    "v4:onNodeAdd",
    "v6:onNodeAdd",
    "health:onNodeUpdate",
    "v4:onNodeUpdate",
    "v6:onNodeUpdate",
    "health:onNodeDelete",
    "v4:onNodeDelete",
    "v6:onNodeDelete",
    "v4:onNodeSynced",
    "v6:onNodeSynced",
  ]);
});

test("start starts every loop; stop resolves only when every loop has stopped", async () => {
  const calls: string[] = [];
  let release: () => void = () => {};
  const slow = recorder("v6", calls);
  slow.stop = () => new Promise<void>((r) => (release = r));
  const m = new MetaProxier([recorder("v4", calls), slow]);
  m.start();
  assert.deepEqual(calls, ["v4:start", "v6:start"]);
  let stopped = false;
  const stopping = m.stop().then(() => (stopped = true));
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(stopped, false);
  release();
  await stopping;
  assert.equal(stopped, true);
});
