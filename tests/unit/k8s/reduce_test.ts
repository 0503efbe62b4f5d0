import { test } from "node:test";
import assert from "node:assert/strict";
import { LAST_APPLIED_ANNOTATION, reduceObject } from "../../../lib/k8s/reduce.ts";
import { ResourceSink } from "../../../lib/k8s/resource_sink.ts";
import { ENDPOINTSLICES_RESOURCE, SERVICES_RESOURCE } from "../../../lib/k8s/resource.ts";
import { silentLogger } from "../../../lib/k8s/transport.ts";
import type { KubeObject } from "../../../lib/k8s/store.ts";

const managed = [{ manager: "kubectl", operation: "Apply", fieldsV1: { "f:spec": {} } }];

test("reduceObject drops managedFields, ownerReferences, the last-applied annotation and endpoints' targetRef", () => {
  const slice = {
    kind: "EndpointSlice",
    metadata: {
      name: "s-1",
      namespace: "ns",
      resourceVersion: "7",
      uid: "u",
      labels: { "kubernetes.io/service-name": "s" },
      annotations: {
        [LAST_APPLIED_ANNOTATION]: "{…}",
        "endpoints.kubernetes.io/last-change-trigger-time": "t",
      },
      managedFields: managed,
      ownerReferences: [{ kind: "Service", name: "s" }],
    },
    addressType: "IPv4",
    endpoints: [
      { addresses: ["10.0.0.1"], targetRef: { kind: "Pod", name: "p", uid: "x" }, nodeName: "n" },
      { addresses: ["10.0.0.2"] },
    ],
    ports: [{ port: 80 }],
  };
  const before = structuredClone(slice);
  assert.deepEqual(reduceObject(slice as KubeObject), {
    kind: "EndpointSlice",
    metadata: {
      name: "s-1",
      namespace: "ns",
      resourceVersion: "7",
      uid: "u",
      labels: { "kubernetes.io/service-name": "s" },
      annotations: { "endpoints.kubernetes.io/last-change-trigger-time": "t" },
    },
    addressType: "IPv4",
    endpoints: [{ addresses: ["10.0.0.1"], nodeName: "n" }, { addresses: ["10.0.0.2"] }],
    ports: [{ port: 80 }],
  });
  assert.deepEqual(slice, before, "the input is not changed");
  // Only the last-applied annotation: the annotations object goes with it.
  const svc = { kind: "Service", metadata: { name: "a", annotations: { [LAST_APPLIED_ANNOTATION]: "{}" } } };
  assert.deepEqual(reduceObject(svc), { kind: "Service", metadata: { name: "a" } });
  // Nothing to drop: the same object.
  const plain = { kind: "Service", metadata: { name: "b", annotations: { x: "y" } }, spec: {} };
  assert.equal(reduceObject(plain), plain);
});

test("the resource sink stores and delivers reduced objects, from lists and watch events alike", () => {
  const added: KubeObject[] = [];
  const handler = {
    onAdd: (o: KubeObject) => added.push(o),
    onUpdate: () => {},
    onDelete: () => {},
    onSynced: () => {},
  };
  const services = new ResourceSink<KubeObject>(SERVICES_RESOURCE, handler, silentLogger);
  services.applyList([{
    metadata: { name: "a", namespace: "ns", resourceVersion: "1", managedFields: managed },
  }]);
  assert.deepEqual(added[0], {
    kind: "Service",
    apiVersion: "v1",
    metadata: { name: "a", namespace: "ns", resourceVersion: "1" },
  });
  assert.equal(services.store.get("ns/a"), added[0]);
  const slices = new ResourceSink<KubeObject>(ENDPOINTSLICES_RESOURCE, handler, silentLogger);
  const event = slices.check({
    kind: "EndpointSlice",
    apiVersion: "discovery.k8s.io/v1",
    metadata: { name: "s", namespace: "ns", managedFields: managed },
    endpoints: [{ addresses: ["10.0.0.1"], targetRef: { kind: "Pod", name: "p" } }],
  });
  assert.deepEqual(event, {
    ok: {
      kind: "EndpointSlice",
      apiVersion: "discovery.k8s.io/v1",
      metadata: { name: "s", namespace: "ns" },
      endpoints: [{ addresses: ["10.0.0.1"] }],
    },
  });
});

test("list items are checked and reduced once, as they are decoded (listItem); a bad one is reported at applyList", () => {
  const added: KubeObject[] = [];
  const warned: string[] = [];
  const log = { ...silentLogger, warn: (m: string) => warned.push(m) };
  const handler = {
    onAdd: (o: KubeObject) => added.push(o),
    onUpdate: () => {},
    onDelete: () => {},
    onSynced: () => {},
  };
  const services = new ResourceSink<KubeObject>(SERVICES_RESOURCE, handler, log);
  const item = services.listItem({
    metadata: { name: "a", namespace: "ns", resourceVersion: "1", managedFields: managed },
  }) as KubeObject;
  assert.deepEqual(item, {
    kind: "Service",
    apiVersion: "v1",
    metadata: { name: "a", namespace: "ns", resourceVersion: "1" },
  });
  const bad = { metadata: { namespace: "ns" } };
  assert.equal(services.listItem(bad), bad, "a bad item is kept as it came, to be reported with the list");
  assert.deepEqual(warned, []);
  services.applyList([item, bad]);
  assert.equal(added.length, 1);
  assert.equal(added[0], item, "the decoded item is stored as it is: not copied again");
  assert.equal(warned.length, 1);
  assert.match(warned[0], /^list services: skipping malformed input \(metadata\.name is missing\)/);
});
