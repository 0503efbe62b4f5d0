import { test } from "node:test";
import assert from "node:assert/strict";
import { EndpointValueTable } from "../../../lib/k8s/endpoint_values.ts";
import { reduceObject } from "../../../lib/k8s/reduce.ts";
import { ResourceSink } from "../../../lib/k8s/resource_sink.ts";
import { ENDPOINTSLICES_RESOURCE } from "../../../lib/k8s/resource.ts";
import { silentLogger } from "../../../lib/k8s/transport.ts";
import type { KubeObject } from "../../../lib/k8s/store.ts";

// Strings made at run time, as a JSON parser makes them: equal, but not one string constant.
const fresh = (s: string) => [...s].join("");
const ready = () => ({ ready: true, serving: true, terminating: false });

type Ep = {
  addresses: string[];
  conditions?: unknown;
  nodeName?: string;
  zone?: string;
  targetRef?: unknown;
};

test("equal conditions objects become one frozen object, equal node and zone names one string", () => {
  const t = new EndpointValueTable();
  const a: Ep[] = [
    { addresses: ["10.0.0.1"], conditions: ready(), nodeName: fresh("node-1"), zone: fresh("z1") },
    { addresses: ["10.0.0.2"], conditions: ready(), nodeName: fresh("node-1"), zone: fresh("z1") },
  ];
  const b: Ep[] = [{ addresses: ["10.0.0.3"], conditions: ready(), nodeName: fresh("node-1") }];
  const before = JSON.stringify([a, b]);
  const sa = t.share(a) as Ep[];
  const sb = t.share(b) as Ep[];
  // The input is not changed; the output serialises exactly as the input did.
  assert.equal(JSON.stringify([a, b]), before);
  assert.equal(JSON.stringify([sa, sb]), before);
  assert.notEqual(sa, a);
  assert.equal(sa[0].conditions, sa[1].conditions);
  assert.equal(sa[0].conditions, sb[0].conditions);
  assert.ok(Object.isFrozen(sa[0].conditions));
  assert.equal(t.size.conditions, 1);
  assert.equal(t.size.names, 2);
  // Shared already: the same array comes back.
  assert.equal(t.share(sa), sa);
});

test("conditions in another key order, with other keys or non-boolean values are not mixed up", () => {
  const t = new EndpointValueTable();
  const eps: Ep[] = [
    { addresses: ["a"], conditions: { ready: true, serving: true, terminating: false } },
    { addresses: ["b"], conditions: { terminating: false, serving: true, ready: true } },
    { addresses: ["c"], conditions: { ready: true } },
    { addresses: ["d"], conditions: { ready: false } },
    { addresses: ["e"], conditions: {} },
    { addresses: ["f"], conditions: { ready: true, extra: true } },
    { addresses: ["g"], conditions: { ready: "yes" } },
    { addresses: ["h"], conditions: null },
    { addresses: ["i"] },
    { addresses: ["j"], conditions: { ready: true, ready2: true, serving: true, terminating: true } },
  ];
  const before = JSON.stringify(eps);
  const out = t.share(eps) as Ep[];
  assert.equal(JSON.stringify(out), before);
  for (const i of [5, 6, 7, 9]) assert.equal(out[i].conditions, eps[i].conditions, `kept as is: ${i}`);
  assert.ok(!("conditions" in out[8]));
  const again = t.share(structuredClone(eps)) as Ep[];
  for (const i of [0, 1, 2, 3, 4]) assert.equal(again[i].conditions, out[i].conditions, `shared: ${i}`);
  assert.notEqual(out[0].conditions, out[1].conditions); // other order, other serialisation
  assert.equal(t.size.conditions, 5);
});

test("owned endpoints are changed in place", () => {
  const t = new EndpointValueTable();
  t.share([{ addresses: ["x"], conditions: ready(), nodeName: "n" }]);
  const eps: Ep[] = [{ addresses: ["y"], conditions: ready(), nodeName: fresh("n") }];
  const first = eps[0];
  const out = t.share(eps, true) as Ep[];
  assert.equal(out, eps);
  assert.equal(out[0], first);
  assert.ok(Object.isFrozen(first.conditions));
});

test("reduceObject with a table: the same JSON as without, values shared, targetRef still dropped", () => {
  const slice = (n: number) => ({
    kind: "EndpointSlice",
    metadata: { name: `s-${n}`, namespace: "ns" },
    addressType: "IPv4",
    endpoints: [
      {
        addresses: [`10.0.${n}.1`],
        conditions: ready(),
        targetRef: { kind: "Pod", name: "p" },
        nodeName: fresh("n1"),
      },
      { addresses: [`10.0.${n}.2`], conditions: ready(), nodeName: fresh("n1") },
    ],
  });
  const t = new EndpointValueTable();
  const plain = [reduceObject(slice(1) as KubeObject), reduceObject(slice(2) as KubeObject)];
  const inputs = [slice(1), slice(2)];
  const before = JSON.stringify(inputs);
  const shared = inputs.map((s) => reduceObject(s as KubeObject, t)) as unknown as Array<{ endpoints: Ep[] }>;
  assert.equal(JSON.stringify(inputs), before, "input unchanged");
  assert.equal(JSON.stringify(shared), JSON.stringify(plain));
  assert.equal(shared[0].endpoints[0].conditions, shared[1].endpoints[1].conditions);
  assert.ok(!("targetRef" in shared[0].endpoints[0]));
  // A Service is never touched.
  const svc = { kind: "Service", metadata: { name: "a" }, endpoints: [{ conditions: ready() }] };
  assert.equal(reduceObject(svc as KubeObject, t), svc);
});

test("the EndpointSlice sink stores list items and watch objects with shared values", () => {
  const sink = new ResourceSink(ENDPOINTSLICES_RESOURCE, {
    onAdd: () => {},
    onUpdate: () => {},
    onDelete: () => {},
    onSynced: () => {},
  }, silentLogger);
  const item = (n: number) => ({
    metadata: { name: `s-${n}`, namespace: "ns" },
    addressType: "IPv4",
    endpoints: [{ addresses: [`10.0.0.${n}`], conditions: ready(), nodeName: fresh("node-a") }],
  });
  const a = sink.listItem(item(1)) as { endpoints: Ep[] };
  const c = sink.check({ kind: "EndpointSlice", apiVersion: "discovery.k8s.io/v1", ...item(2) });
  assert.ok("ok" in c);
  const b = (c as { ok: { endpoints: Ep[] } }).ok;
  assert.equal(a.endpoints[0].conditions, b.endpoints[0].conditions);
  assert.ok(Object.isFrozen(b.endpoints[0].conditions));
});
