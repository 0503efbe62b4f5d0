import { test } from "node:test";
import assert from "node:assert/strict";
import { parseManifestText } from "../../../lib/source/manifests.ts";

test("multi-document YAML: each object with its key; empty documents are skipped", () => {
  const text = [
    "---",
    "apiVersion: v1",
    "kind: Service",
    "metadata: {name: web, namespace: shop}",
    "spec: {clusterIP: 10.96.0.20}",
    "---",
    "# only a comment",
    "---",
    "apiVersion: discovery.k8s.io/v1",
    "kind: EndpointSlice",
    "metadata: {name: web-abc, labels: {kubernetes.io/service-name: web}}",
    "addressType: IPv4",
    "endpoints: [{addresses: [10.244.1.5]}]",
    "---",
    "apiVersion: v1",
    "kind: Node",
    "metadata: {name: edge-node-1, namespace: ignored}",
    "",
  ].join("\n");
  const p = parseManifestText(text, "site.yaml");
  assert.deepEqual(p.errors, []);
  assert.deepEqual(p.objects.map((o) => [o.kind, o.key, o.origin]), [
    // A leading `---` opens document 1 (YAML numbering); the comment-only document 2 is empty.
    ["Service", "Service/shop/web", "manifests site.yaml document 1"],
    ["EndpointSlice", "EndpointSlice/default/web-abc", "manifests site.yaml document 3"],
    ["Node", "Node/edge-node-1", "manifests site.yaml document 4"],
  ]);
  assert.equal(p.objects[1].object.metadata?.namespace, "default", "kubectl's default namespace");
  assert.equal(p.objects[2].object.metadata?.namespace, undefined, "Nodes are cluster-scoped");
});

test("kubectl get -o yaml List documents: kind List and typed lists (items without kind)", () => {
  const list = JSON.stringify({
    apiVersion: "v1",
    kind: "List",
    metadata: { resourceVersion: "" },
    items: [
      { apiVersion: "v1", kind: "Service", metadata: { name: "a", namespace: "x" } },
      { apiVersion: "v1", kind: "Node", metadata: { name: "n1" } },
    ],
  });
  const p1 = parseManifestText(list, "dump.json");
  assert.deepEqual(p1.errors, []);
  assert.deepEqual(p1.objects.map((o) => [o.key, o.origin]), [
    ["Service/x/a", "manifests dump.json document 1: items[0]"],
    ["Node/n1", "manifests dump.json document 1: items[1]"],
  ]);
  const typed = [
    "apiVersion: discovery.k8s.io/v1",
    "kind: EndpointSliceList",
    "metadata: {resourceVersion: '123'}",
    "items:",
    "- metadata: {name: s1, namespace: x}",
    "  addressType: IPv4",
    "- metadata: {name: s2, namespace: x}",
    "  addressType: IPv4",
  ].join("\n");
  const p2 = parseManifestText(typed, "slices.yaml");
  assert.deepEqual(p2.errors, []);
  assert.deepEqual(p2.objects.map((o) => [o.key, o.object.kind, o.object.apiVersion]), [
    ["EndpointSlice/x/s1", "EndpointSlice", "discovery.k8s.io/v1"],
    ["EndpointSlice/x/s2", "EndpointSlice", "discovery.k8s.io/v1"],
  ]);
});

test("invalid documents give one exact line each; valid ones still apply", () => {
  const text = [
    "apiVersion: v1",
    "kind: Service",
    "metadata: {name: ok, namespace: a}",
    "---",
    "apiVersion: v1",
    "metadata: {name: nokind}",
    "---",
    "kind: Service",
    "metadata: {name: noapiversion}",
    "---",
    "apiVersion: v1",
    "kind: Service",
    "metadata: {namespace: a}",
    "---",
    "apiVersion: discovery.k8s.io/v1beta1",
    "kind: EndpointSlice",
    "metadata: {name: old}",
    "---",
    "- just",
    "- a list",
    "---",
    "apiVersion: v1",
    "kind: Service",
    "metadata: {name: badlabel, labels: {enabled: true}}",
    "---",
    "apiVersion: apps/v1",
    "kind: Deployment",
    "metadata: {name: not-ours}",
    "---",
    "apiVersion: v1",
    "kind: List",
    "items:",
    "- {apiVersion: v1, kind: Node}",
    "- {apiVersion: v1, kind: Node, metadata: {name: n2}}",
    "---",
    "apiVersion: v1",
    "kind: Service",
    "metadata: {name: ok2, namespace: a}",
  ].join("\n");
  const p = parseManifestText(text, "/etc/edgeproxy/site.yaml");
  assert.deepEqual(p.errors, [
    "manifests /etc/edgeproxy/site.yaml document 2: missing kind",
    "manifests /etc/edgeproxy/site.yaml document 3: Service: missing apiVersion",
    "manifests /etc/edgeproxy/site.yaml document 4: Service: missing metadata.name",
    'manifests /etc/edgeproxy/site.yaml document 5: EndpointSlice: apiVersion "discovery.k8s.io/v1beta1" is not ' +
    "supported (want discovery.k8s.io/v1)",
    "manifests /etc/edgeproxy/site.yaml document 6: not an object (array)",
    'manifests /etc/edgeproxy/site.yaml document 7: Service badlabel: metadata.labels["enabled"] is not a string (true)',
    "manifests /etc/edgeproxy/site.yaml document 9: items[0]: Node: missing metadata.name",
  ]);
  assert.equal(p.syntaxError, false);
  assert.deepEqual(p.objects.map((o) => o.key), ["Service/a/ok", "Node/n2", "Service/a/ok2"]);
});

test("a YAML syntax error is isolated to its document and flagged", () => {
  const text = [
    "apiVersion: v1",
    "kind: Service",
    "metadata: {name: ok, namespace: a}",
    "---",
    "apiVersion: v1",
    "kind: Service",
    "metadata: {name: broken",
    "---",
    "apiVersion: v1",
    "kind: Node",
    "metadata: {name: n1}",
  ].join("\n");
  const p = parseManifestText(text, "f.yaml");
  assert.equal(p.syntaxError, true);
  assert.equal(p.errors.length, 1);
  assert.match(p.errors[0], /^manifests f\.yaml document 2: /);
  assert.ok(!p.errors[0].includes("\n"), "one line");
  assert.deepEqual(p.objects.map((o) => o.key), ["Service/a/ok", "Node/n1"]);
});

test("duplicate keys in one mapping are a syntax error, as for kubectl", () => {
  const p = parseManifestText("apiVersion: v1\nkind: Node\nkind: Node\nmetadata: {name: n}\n", "d.yaml");
  assert.equal(p.objects.length, 0);
  assert.equal(p.errors.length, 1);
  assert.match(p.errors[0], /^manifests d\.yaml document 1: /);
});
