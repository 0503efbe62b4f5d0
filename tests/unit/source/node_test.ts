import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { EndpointSlice, Node, Service } from "../../../lib/k8s/objects.ts";
import { sanitizeNode } from "../../../lib/source/node_shape.ts";
import { withNodeValidation } from "../../../lib/source/node_validation.ts";
import type { ProxyHandlers } from "../../../lib/proxy/handlers.ts";

const GOOD: Node = {
  metadata: {
    name: "edge-node-1",
    labels: { "topology.kubernetes.io/zone": "z1" },
    deletionTimestamp: "2025-01-01T00:00:00Z",
  },
  spec: {
    podCIDR: "10.244.1.0/24",
    podCIDRs: ["10.244.1.0/24"],
    taints: [{ key: "k", effect: "NoSchedule" }],
  },
  status: { addresses: [{ type: "InternalIP", address: "192.168.0.2" }] },
};

function check(node: unknown): { node: Node; warnings: string[] } {
  const warnings: string[] = [];
  return { node: sanitizeNode(node as Node, (m) => warnings.push(m)), warnings };
}

describe("sanitizeNode", () => {
  it("keeps a well-formed Node as it is, without warnings", () => {
    const { node, warnings } = check(GOOD);
    assert.deepEqual(node, GOOD);
    assert.deepEqual(warnings, []);
  });

  it("treats fields of the wrong shape as absent, one warning each, and keeps the rest", () => {
    const { node, warnings } = check({
      metadata: { name: "edge-node-1", labels: ["zone=z1"], deletionTimestamp: 5 },
      spec: { podCIDR: 24, podCIDRs: "10.244.1.0/24", taints: "NoSchedule", unschedulable: true },
      status: { addresses: { InternalIP: "192.168.0.2" } },
    });
    assert.deepEqual(node, {
      metadata: { name: "edge-node-1" },
      spec: { unschedulable: true },
      status: {},
    });
    assert.deepEqual(warnings, [
      'ignoring metadata.labels of Node edge-node-1: must be a map (got ["zone=z1"])',
      "ignoring metadata.deletionTimestamp of Node edge-node-1: must be a string (got 5)",
      "ignoring spec.podCIDR of Node edge-node-1: must be a string (got 24)",
      'ignoring spec.podCIDRs of Node edge-node-1: must be a list (got "10.244.1.0/24")',
      'ignoring spec.taints of Node edge-node-1: must be a list (got "NoSchedule")',
      'ignoring status.addresses of Node edge-node-1: must be a list (got {"InternalIP":"192.168.0.2"})',
    ]);
  });

  it("drops entries of the wrong shape inside lists and maps", () => {
    const { node, warnings } = check({
      metadata: { name: "n", labels: { a: "1", b: 2 } },
      spec: { podCIDRs: ["10.244.1.0/24", 7], taints: [null, { key: "k" }] },
    });
    assert.deepEqual(node, {
      metadata: { name: "n", labels: { a: "1" } },
      spec: { podCIDRs: ["10.244.1.0/24"], taints: [{ key: "k" }] },
    });
    assert.equal(warnings.length, 3);
    assert.equal(warnings[0], 'ignoring metadata.labels["b"] of Node n: must be a string (got 2)');
  });

  it("treats a non-object metadata, spec or status as absent", () => {
    const { node, warnings } = check({ metadata: "n", spec: [], status: 1 });
    assert.deepEqual(node, {});
    assert.equal(warnings.length, 3);
  });
});

describe("withNodeValidation (every source's Node passes it in the agent)", () => {
  it("forwards shape-checked Nodes, warns once while a problem persists, passes other objects through", () => {
    const seen: Node[] = [];
    const other: string[] = [];
    const downstream = {
      onNodeAdd: (n: Node) => seen.push(n),
      onNodeUpdate: (_o: Node, n: Node) => seen.push(n),
      onNodeDelete: (n: Node) => seen.push(n),
      onServiceAdd: (s: Service) => other.push(s.metadata!.name!),
      onEndpointSliceAdd: (s: EndpointSlice) => other.push(s.metadata!.name!),
    } as unknown as ProxyHandlers;
    const warnings: string[] = [];
    const h = withNodeValidation(downstream, (m) => warnings.push(m));
    const bad = { metadata: { name: "n", labels: "x" } } as unknown as Node;
    h.onNodeAdd(bad);
    h.onNodeUpdate(bad, structuredClone(bad));
    h.onNodeUpdate(bad, structuredClone(bad));
    assert.deepEqual(seen, [{ metadata: { name: "n" } }, { metadata: { name: "n" } }, {
      metadata: { name: "n" },
    }]);
    assert.deepEqual(warnings, ['ignoring metadata.labels of Node n: must be a map (got "x")']);
    h.onNodeUpdate(bad, { metadata: { name: "n", labels: { a: "1" } } });
    h.onNodeUpdate(bad, bad);
    assert.equal(warnings.length, 2, "warned again after the problem went away and came back");
    h.onServiceAdd({ metadata: { name: "s" } });
    h.onEndpointSliceAdd({ metadata: { name: "e" } });
    assert.deepEqual(other, ["s", "e"]);
  });
});
