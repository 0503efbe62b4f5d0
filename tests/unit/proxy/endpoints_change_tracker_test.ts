import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { Endpoint, EndpointPort, EndpointSlice } from "../../../lib/k8s/objects.ts";
import {
  EndpointsChangeTracker,
  EndpointsMap,
  parseServicePortKey,
} from "../../../lib/proxy/endpoints_change_tracker.ts";
import {
  EndpointSliceCache,
  MAX_SHARED_PLACEMENTS,
  MAX_SHARED_PORT_LISTS,
  sameValue,
} from "../../../lib/proxy/endpoint_slice_cache.ts";
import {
  compareEndpoints,
  endpointInfoEqual,
  newEndpointInfo,
  PackedEndpointInfo,
  plainEndpointInfo,
} from "../../../lib/proxy/endpoints.ts";
import type { IPFamily } from "../../../lib/proxy/types.ts";
import { servicePortKey } from "../../../lib/proxy/types.ts";

const NODE = "test-node";

function slice(
  ns: string,
  service: string,
  sliceName: string,
  endpoints: Endpoint[],
  ports: EndpointPort[],
  addressType = "IPv4",
  annotations: Record<string, string> = {},
): EndpointSlice {
  return {
    metadata: {
      namespace: ns,
      name: sliceName,
      labels: { "kubernetes.io/service-name": service },
      annotations,
    },
    addressType,
    endpoints,
    ports,
  };
}

function setup(ipFamily: IPFamily = "IPv4", trackerStartTime?: Date) {
  const warnings: string[] = [];
  const tracker = new EndpointsChangeTracker({
    nodeName: NODE,
    ipFamily,
    warn: (m) => warnings.push(m),
    trackerStartTime,
  });
  const em = new EndpointsMap();
  return { warnings, tracker, em };
}

const tcp = (name: string | undefined, port: number | undefined): EndpointPort => ({
  name,
  port,
  protocol: "TCP",
});
const key = (ns: string, name: string, port: string, protocol: "TCP" | "UDP" | "SCTP" = "TCP") =>
  servicePortKey({ namespace: ns, name, port, protocol });

describe("EndpointsChangeTracker: address types", () => {
  it("ignores FQDN slices and slices of the other family", () => {
    const { tracker, em, warnings } = setup("IPv4");
    assert.equal(
      tracker.endpointSliceUpdate(
        slice("ns1", "svc1", "s-fqdn", [{ addresses: ["example.com"] }], [tcp("p", 80)], "FQDN"),
        false,
      ),
      false,
    );
    assert.equal(
      tracker.endpointSliceUpdate(
        slice("ns1", "svc1", "s-v6", [{ addresses: ["fd00::1"] }], [tcp("p", 80)], "IPv6"),
        false,
      ),
      false,
    );
    assert.equal(tracker.pendingChanges(), 0);
    em.apply(tracker);
    assert.equal(em.size, 0);
    assert.deepEqual(warnings, []);
  });

  it("warns about an unknown address type", () => {
    const { tracker, warnings } = setup("IPv4");
    assert.equal(tracker.endpointSliceUpdate(slice("ns1", "svc1", "s1", [], [], "IPv5"), false), false);
    assert.deepEqual(warnings, [
      'ignoring EndpointSlice ns1/s1: addressType: must be IPv4, IPv6 or FQDN (got "IPv5")',
    ]);
  });

  it("builds IPv6 endpoints for the IPv6 proxier, normalised and bracketed", () => {
    const { tracker, em, warnings } = setup("IPv6");
    tracker.endpointSliceUpdate(
      slice("ns1", "svc1", "s1", [{ addresses: ["FD00:0:0::0001"] }, { addresses: ["10.0.0.1"] }], [
        tcp("p", 80),
      ], "IPv6"),
      false,
    );
    em.apply(tracker);
    assert.deepEqual(em.get(key("ns1", "svc1", "p"))?.map((e) => [e.ip, e.endpoint]), [[
      "fd00::1",
      "[fd00::1]:80",
    ]]);
    assert.deepEqual(warnings, [
      'ignoring endpoints[1] of EndpointSlice ns1/s1: addresses[0]: not an IPv6 address (got "10.0.0.1")',
    ]);
  });
});

describe("EndpointsChangeTracker: conversion", () => {
  it("reads conditions, node, zone and hints as upstream", () => {
    const { tracker, em } = setup();
    tracker.endpointSliceUpdate(
      slice("ns1", "svc1", "s1", [
        {
          addresses: ["10.0.0.1"],
          nodeName: NODE,
          zone: "z1",
          hints: { forZones: [{ name: "z1" }, { name: "z0" }] },
        },
        {
          addresses: ["10.0.0.2", "10.0.0.99"],
          conditions: { ready: false, serving: true, terminating: true },
        },
        {
          addresses: ["10.0.0.3"],
          conditions: { ready: null, serving: null, terminating: null },
          nodeName: "other",
          hints: { forNodes: [{ name: "other" }], forZones: [] },
        },
      ], [tcp("p", 80)]),
      false,
    );
    em.apply(tracker);
    // Field by field: the cache packs the conditions (PackedEndpointInfo), readers see plain fields.
    assert.deepEqual(em.get(key("ns1", "svc1", "p"))?.map(plainEndpointInfo), [{
      ip: "10.0.0.1",
      port: 80,
      endpoint: "10.0.0.1:80",
      isLocal: true,
      ready: true,
      serving: true,
      terminating: false,
      zoneHints: ["z0", "z1"],
      nodeHints: null,
      nodeName: NODE,
      zone: "z1",
    }, {
      ip: "10.0.0.2",
      port: 80,
      endpoint: "10.0.0.2:80",
      isLocal: false,
      ready: false,
      serving: true,
      terminating: true,
      zoneHints: null,
      nodeHints: null,
      nodeName: "",
      zone: "",
    }, {
      ip: "10.0.0.3",
      port: 80,
      endpoint: "10.0.0.3:80",
      isLocal: false,
      ready: true,
      serving: true,
      terminating: false,
      zoneHints: null,
      nodeHints: ["other"],
      nodeName: "other",
      zone: "",
    }]);
  });

  it("normalises endpoint IPs with leading zeros (TestBadIPs)", () => {
    const { tracker, em } = setup();
    tracker.endpointSliceUpdate(
      slice("ns1", "svc1", "s1", [{ addresses: ["10.180.00.001"] }], [tcp("p80", 80)]),
      false,
    );
    em.apply(tracker);
    assert.deepEqual(em.get(key("ns1", "svc1", "p80"))?.map((e) => e.endpoint), ["10.180.0.1:80"]);
  });

  it("reads a port without name as unnamed and skips a port without number", () => {
    const { tracker, em, warnings } = setup();
    tracker.endpointSliceUpdate(
      slice("ns1", "svc1", "s1", [{ addresses: ["10.0.0.1"] }], [{ port: 80 }, {
        name: "x",
        protocol: "UDP",
      }]),
      false,
    );
    em.apply(tracker);
    assert.deepEqual([...em.keys()], ["ns1/svc1/TCP"]);
    assert.deepEqual(warnings, [
      "ignoring ports[1] of EndpointSlice ns1/s1: port: must be 1-65535 (got <unset>)",
    ]);
  });

  it("sorts endpoints by their ip:port string", () => {
    const { tracker, em } = setup();
    tracker.endpointSliceUpdate(
      slice(
        "ns1",
        "svc1",
        "s1",
        ["10.0.0.10", "10.0.0.9", "10.0.0.1", "10.0.0.100"].map((ip) => ({ addresses: [ip] })),
        [
          tcp("p", 80),
        ],
      ),
      false,
    );
    em.apply(tracker);
    assert.deepEqual(em.get(key("ns1", "svc1", "p"))?.map((e) => e.endpoint), [
      "10.0.0.100:80",
      "10.0.0.10:80",
      "10.0.0.1:80",
      "10.0.0.9:80",
    ]);
  });
});

describe("EndpointsChangeTracker: merging slices", () => {
  it("merges the slices of a Service and dedupes endpoints", () => {
    const { tracker, em } = setup();
    tracker.endpointSliceUpdate(
      slice("ns1", "svc1", "svc1-a", [{ addresses: ["10.0.0.1"] }, { addresses: ["10.0.0.2"] }], [
        tcp("p", 80),
      ]),
      false,
    );
    tracker.endpointSliceUpdate(
      slice("ns1", "svc1", "svc1-b", [{ addresses: ["10.0.0.2"] }, { addresses: ["10.0.0.3"] }], [
        tcp("p", 80),
      ]),
      false,
    );
    tracker.endpointSliceUpdate(
      slice("ns1", "svc2", "svc2-a", [{ addresses: ["10.0.0.9"] }], [tcp("p", 80)]),
      false,
    );
    const result = em.apply(tracker);
    assert.deepEqual(em.get(key("ns1", "svc1", "p"))?.map((e) => e.endpoint), [
      "10.0.0.1:80",
      "10.0.0.2:80",
      "10.0.0.3:80",
    ]);
    assert.deepEqual([...result.changedServices], ["ns1/svc1", "ns1/svc2"]);
  });

  it("holds each endpoint once: a change to one slice reuses the other slices' endpoint records", () => {
    const { tracker, em } = setup();
    const a = slice("ns1", "svc1", "svc1-a", [{ addresses: ["10.0.0.1"] }, { addresses: ["10.0.0.2"] }], [
      tcp("p", 80),
      tcp("q", 81),
    ]);
    tracker.endpointSliceUpdate(a, false);
    tracker.endpointSliceUpdate(
      slice("ns1", "svc1", "svc1-b", [{ addresses: ["10.0.0.3"] }], [tcp("p", 80)]),
      false,
    );
    em.apply(tracker);
    const before = em.get(key("ns1", "svc1", "p"))!;
    const beforeQ = em.get(key("ns1", "svc1", "q"))!;
    // svc1-b changes; svc1-a does not: its records are the same objects, not rebuilt copies
    tracker.endpointSliceUpdate(
      slice("ns1", "svc1", "svc1-b", [{ addresses: ["10.0.0.3"] }, { addresses: ["10.0.0.4"] }], [
        tcp("p", 80),
      ]),
      false,
    );
    em.apply(tracker);
    const after = em.get(key("ns1", "svc1", "p"))!;
    assert.deepEqual(after.map((e) => e.endpoint), [
      "10.0.0.1:80",
      "10.0.0.2:80",
      "10.0.0.3:80",
      "10.0.0.4:80",
    ]);
    assert.notEqual(after, before, "a new array for the changed ServicePort (render facts key on it)");
    assert.equal(after[0], before[0]);
    assert.equal(after[1], before[1]);
    assert.equal(em.get(key("ns1", "svc1", "q"))![0], beforeQ[0]);
  });

  it("a slice without ports still changes when its endpoints do", () => {
    const { tracker, em } = setup();
    tracker.endpointSliceUpdate(slice("ns1", "svc1", "s1", [{ addresses: ["10.0.0.1"] }], []), false);
    em.apply(tracker);
    assert.equal(
      tracker.endpointSliceUpdate(slice("ns1", "svc1", "s1", [{ addresses: ["10.0.0.2"] }], []), false),
      true,
    );
    assert.equal(em.apply(tracker).changedServices.size, 1);
    assert.equal(em.size, 0);
  });

  it("prefers the non-terminating endpoint when the same IP appears twice, in either slice order", () => {
    for (const [first, second] of [["a", "b"], ["b", "a"]]) {
      const { tracker, em } = setup();
      tracker.endpointSliceUpdate(
        slice("ns1", "svc1", `svc1-${first}`, [{
          addresses: ["10.0.0.1"],
          nodeName: "old-node",
          conditions: { ready: false, serving: false, terminating: true },
        }], [tcp("p", 80)]),
        false,
      );
      tracker.endpointSliceUpdate(
        slice("ns1", "svc1", `svc1-${second}`, [{ addresses: ["10.0.0.1"], nodeName: "new-node" }], [
          tcp("p", 80),
        ]),
        false,
      );
      em.apply(tracker);
      const eps = em.get(key("ns1", "svc1", "p"))!;
      assert.equal(eps.length, 1);
      assert.equal(eps[0].terminating, false, `terminating in ${first}`);
      assert.equal(eps[0].nodeName, "new-node");
    }
  });

  it("prefers the non-terminating endpoint when one slice lists the same IP twice, in either order", () => {
    const terminating = {
      addresses: ["10.0.0.1"],
      nodeName: "old-node",
      conditions: { ready: false, serving: false, terminating: true },
    };
    const fresh = { addresses: ["10.0.0.1"], nodeName: "new-node" };
    for (const order of [[terminating, fresh], [fresh, terminating]]) {
      const { tracker, em } = setup();
      tracker.endpointSliceUpdate(
        slice("ns1", "svc1", "svc1-a", [{ addresses: ["10.0.0.2"] }, ...order], [tcp("p", 80)]),
        false,
      );
      em.apply(tracker);
      const eps = em.get(key("ns1", "svc1", "p"))!;
      assert.deepEqual(eps.map((e) => `${e.endpoint} ${e.nodeName || "-"}`), [
        "10.0.0.1:80 new-node",
        "10.0.0.2:80 -",
      ]);
    }
  });

  it("breaks ties by slice name whatever order the slices came in, and after one leaves", () => {
    const { tracker, em } = setup();
    const dup = (name: string) =>
      slice("ns1", "svc1", `svc1-${name}`, [{
        addresses: ["10.0.0.1"],
        nodeName: `node-${name}`,
        conditions: { ready: false, serving: true, terminating: true },
      }], [tcp("p", 80)]);
    // Among equally terminating copies the first slice by name wins (upstream iterates them sorted).
    for (const name of ["c", "a", "d", "b"]) tracker.endpointSliceUpdate(dup(name), false);
    em.apply(tracker);
    assert.equal(em.get(key("ns1", "svc1", "p"))![0].nodeName, "node-a");
    tracker.endpointSliceUpdate(dup("a"), true);
    em.apply(tracker);
    assert.equal(em.get(key("ns1", "svc1", "p"))![0].nodeName, "node-b");
    tracker.endpointSliceUpdate(dup("a"), false);
    tracker.endpointSliceUpdate(dup("b"), true);
    tracker.endpointSliceUpdate(dup("c"), true);
    em.apply(tracker);
    assert.equal(em.get(key("ns1", "svc1", "p"))![0].nodeName, "node-a");
    for (const name of ["a", "d"]) tracker.endpointSliceUpdate(dup(name), true);
    const result = em.apply(tracker);
    assert.equal(em.size, 0);
    assert.deepEqual([...result.updatedServices], [key("ns1", "svc1", "p")]);
    assert.equal(tracker.pendingChanges(), 0);
  });

  it("moves a slice when its Service label changes", () => {
    const { tracker, em } = setup();
    tracker.endpointSliceUpdate(
      slice("ns1", "svc1", "s1", [{ addresses: ["10.0.0.1"] }], [tcp("p", 80)]),
      false,
    );
    em.apply(tracker);
    tracker.endpointSliceUpdate(
      slice("ns1", "svc2", "s1", [{ addresses: ["10.0.0.1"] }], [tcp("p", 80)]),
      false,
    );
    const result = em.apply(tracker);
    assert.deepEqual([...em.keys()], [key("ns1", "svc2", "p")]);
    assert.deepEqual([...result.changedServices].sort(), ["ns1/svc1", "ns1/svc2"]);
  });

  it("follows a relabelled slice by namespace and name: a same-named slice elsewhere stays", () => {
    const { tracker, em } = setup();
    const s = (ns: string, svc: string, ip: string) =>
      slice(ns, svc, "s1", [{ addresses: [ip] }], [tcp("p", 80)]);
    tracker.endpointSliceUpdate(s("ns1", "svc1", "10.0.0.1"), false);
    tracker.endpointSliceUpdate(s("ns2", "svc1", "10.0.0.2"), false);
    tracker.endpointSliceUpdate(
      slice("ns1", "svc1", "s2", [{ addresses: ["10.0.0.9"] }], [tcp("p", 80)]),
      false,
    );
    em.apply(tracker);
    tracker.endpointSliceUpdate(s("ns1", "svc2", "10.0.0.1"), false);
    assert.deepEqual(tracker.pendingServices(), new Set(["ns1/svc1", "ns1/svc2"]));
    em.apply(tracker);
    assert.deepEqual([...em.keys()].sort(), [
      key("ns1", "svc1", "p"),
      key("ns1", "svc2", "p"),
      key("ns2", "svc1", "p"),
    ]);
    assert.deepEqual(em.get(key("ns1", "svc1", "p"))?.map((e) => e.ip), ["10.0.0.9"]);
    tracker.endpointSliceUpdate(
      slice("ns1", "svc1", "s2", [{ addresses: ["10.0.0.9"] }], [tcp("p", 80)]),
      true,
    );
    // Deleted under its new label, then back under the old one: nothing of the move is left behind.
    tracker.endpointSliceUpdate(s("ns1", "svc2", "10.0.0.1"), true);
    em.apply(tracker);
    tracker.endpointSliceUpdate(s("ns1", "svc1", "10.0.0.3"), false);
    assert.deepEqual(tracker.pendingServices(), new Set(["ns1/svc1"]));
    em.apply(tracker);
    assert.deepEqual([...em.keys()].sort(), [key("ns1", "svc1", "p"), key("ns2", "svc1", "p")]);
    assert.deepEqual(em.get(key("ns2", "svc1", "p"))?.map((e) => e.ip), ["10.0.0.2"]);
  });

  it("removes a slice that lost its Service label, with a warning", () => {
    const { tracker, em, warnings } = setup();
    tracker.endpointSliceUpdate(
      slice("ns1", "svc1", "s1", [{ addresses: ["10.0.0.1"] }], [tcp("p", 80)]),
      false,
    );
    em.apply(tracker);
    const unlabelled = slice("ns1", "svc1", "s1", [{ addresses: ["10.0.0.1"] }], [tcp("p", 80)]);
    unlabelled.metadata!.labels = {};
    assert.equal(tracker.endpointSliceUpdate(unlabelled, false), true);
    em.apply(tracker);
    assert.equal(em.size, 0);
    assert.deepEqual(warnings, [
      'ignoring EndpointSlice ns1/s1: metadata.labels["kubernetes.io/service-name"]: missing',
    ]);
  });
});

describe("EndpointsChangeTracker: change detection", () => {
  it("does not count updates that change nothing the proxier uses", () => {
    const { tracker, em } = setup();
    const s1 = slice("ns1", "svc1", "s1", [{ addresses: ["10.0.0.1"] }], [tcp("p", 80)]);
    tracker.endpointSliceUpdate(s1, false);
    em.apply(tracker);
    const s1b = structuredClone(s1);
    s1b.metadata!.resourceVersion = "2";
    s1b.endpoints![0].targetRef = { kind: "Pod", name: "pod-1" };
    assert.equal(tracker.endpointSliceUpdate(s1b, false), false);
    assert.equal(tracker.pendingChanges(), 0);
    assert.equal(em.apply(tracker).changedServices.size, 0);
  });

  it("a slice listing the same endpoints in another order is no change (upstream sorts them)", () => {
    const { tracker, em } = setup();
    const eps = ["10.0.0.3", "10.0.0.1", "10.0.0.2"].map((ip) => ({ addresses: [ip] }));
    tracker.endpointSliceUpdate(slice("ns1", "svc1", "s1", eps, [tcp("p", 80), tcp("q", 81)]), false);
    em.apply(tracker);
    const reordered = slice("ns1", "svc1", "s1", [eps[1], eps[2], eps[0]], [tcp("q", 81), tcp("p", 80)]);
    assert.equal(tracker.endpointSliceUpdate(reordered, false), false);
    assert.equal(tracker.pendingChanges(), 0);
  });

  it("a change of one condition alone is a change", () => {
    for (const field of ["ready", "serving", "terminating"] as const) {
      const { tracker, em } = setup();
      const conditions = { ready: true, serving: true, terminating: false };
      const s1 = slice("ns1", "svc1", "s1", [{ addresses: ["10.0.0.1"], conditions }], [tcp("p", 80)]);
      tracker.endpointSliceUpdate(s1, false);
      em.apply(tracker);
      const flipped = { ...conditions, [field]: !conditions[field] };
      const s2 = slice("ns1", "svc1", "s1", [{ addresses: ["10.0.0.1"], conditions: flipped }], [
        tcp("p", 80),
      ]);
      assert.equal(tracker.endpointSliceUpdate(s2, false), true, field);
      em.apply(tracker);
      assert.equal(em.get(key("ns1", "svc1", "p"))![0][field], flipped[field], field);
    }
  });

  it("collapses a change and its revert, and an add and its delete", () => {
    const { tracker, em } = setup();
    const s1 = slice("ns1", "svc1", "s1", [{ addresses: ["10.0.0.1"] }], [tcp("p", 80)]);
    const s1b = slice("ns1", "svc1", "s1", [{ addresses: ["10.0.0.2"] }], [tcp("p", 80)]);
    tracker.endpointSliceUpdate(s1, false);
    em.apply(tracker);
    assert.equal(tracker.endpointSliceUpdate(s1b, false), true);
    assert.equal(tracker.pendingChanges(), 1);
    assert.deepEqual(tracker.pendingServices(), new Set(["ns1/svc1"]));
    tracker.endpointSliceUpdate(s1, false);
    assert.equal(tracker.pendingChanges(), 0);
    const s2 = slice("ns1", "svc2", "s2", [{ addresses: ["10.0.0.3"] }], [tcp("p", 80)]);
    assert.equal(tracker.endpointSliceUpdate(s2, false), true);
    assert.equal(tracker.endpointSliceUpdate(s2, true), true);
    assert.equal(tracker.pendingChanges(), 0);
    assert.equal(tracker.endpointSliceUpdate(s2, true), false, "deleting an unknown slice changes nothing");
    assert.equal(em.apply(tracker).changedServices.size, 0);
  });

  it("reports UDP endpoints that stop serving, and UDP ports that start serving", () => {
    const { tracker, em } = setup();
    const udp: EndpointPort = { name: "dns", port: 53, protocol: "UDP" };
    const withConditions = (serving: boolean) =>
      slice("ns1", "dns", "s1", [{
        addresses: ["10.0.0.1"],
        conditions: { ready: serving, serving, terminating: !serving },
      }], [
        udp,
      ]);
    tracker.endpointSliceUpdate(withConditions(false), false);
    let result = em.apply(tracker);
    assert.deepEqual(
      [...result.newlyActiveUDPServices],
      [],
      "a non-serving endpoint does not activate the port",
    );
    tracker.endpointSliceUpdate(withConditions(true), false);
    result = em.apply(tracker);
    assert.deepEqual([...result.newlyActiveUDPServices], [key("ns1", "dns", "dns", "UDP")]);
    assert.deepEqual(result.deletedUDPEndpoints, []);
    tracker.endpointSliceUpdate(withConditions(false), false);
    result = em.apply(tracker);
    assert.deepEqual(result.deletedUDPEndpoints, [{
      servicePortKey: key("ns1", "dns", "dns", "UDP"),
      endpoint: "10.0.0.1:53",
      ip: "10.0.0.1",
    }]);
  });

  it("reports the UDP endpoints a Service of several slices loses, change after change", () => {
    const { tracker, em } = setup();
    const udp: EndpointPort = { name: "dns", port: 53, protocol: "UDP" };
    const s = (name: string, ips: string[]) =>
      slice("ns1", "dns", name, ips.map((ip) => ({ addresses: [ip] })), [udp]);
    const gone = (ip: string) => ({
      servicePortKey: key("ns1", "dns", "dns", "UDP"),
      endpoint: `${ip}:53`,
      ip,
    });
    tracker.endpointSliceUpdate(s("a", ["10.0.0.1", "10.0.0.2"]), false);
    tracker.endpointSliceUpdate(s("b", ["10.0.0.3", "10.0.0.2"]), false);
    tracker.endpointSliceUpdate(s("c", ["10.0.0.4"]), false);
    assert.deepEqual(em.apply(tracker).deletedUDPEndpoints, []);
    tracker.endpointSliceUpdate(s("b", ["10.0.0.2"]), false);
    assert.deepEqual(em.apply(tracker).deletedUDPEndpoints, [gone("10.0.0.3")]);
    // 10.0.0.2 is still in slice a: not gone.
    tracker.endpointSliceUpdate(s("b", []), false);
    assert.deepEqual(em.apply(tracker).deletedUDPEndpoints, []);
    tracker.endpointSliceUpdate(s("a", ["10.0.0.1"]), false);
    assert.deepEqual(em.apply(tracker).deletedUDPEndpoints, [gone("10.0.0.2")]);
    tracker.endpointSliceUpdate(s("c", []), true);
    tracker.endpointSliceUpdate(s("b", []), true);
    assert.deepEqual(em.apply(tracker).deletedUDPEndpoints, [gone("10.0.0.4")]);
    tracker.endpointSliceUpdate(s("a", []), true);
    assert.deepEqual(em.apply(tracker).deletedUDPEndpoints, [gone("10.0.0.1")]);
    assert.equal(em.size, 0);
  });

  it("counts distinct local ready IPs per Service, never terminating ones", () => {
    const { tracker, em } = setup();
    tracker.endpointSliceUpdate(
      slice("ns1", "svc1", "s1", [
        { addresses: ["10.0.0.1"], nodeName: NODE },
        {
          addresses: ["10.0.0.2"],
          nodeName: NODE,
          conditions: { ready: false, serving: true, terminating: true },
        },
        { addresses: ["10.0.0.3"], nodeName: "elsewhere" },
      ], [tcp("a", 80), tcp("b", 81)]),
      false,
    );
    em.apply(tracker);
    assert.deepEqual(Object.fromEntries(em.localReadyEndpoints()), { "ns1/svc1": 1 });
  });
});

describe("EndpointsChangeTracker: trigger times", () => {
  const annotation = "endpoints.kubernetes.io/last-change-trigger-time";

  it("records trigger times on add and update, drops them on delete", () => {
    const { tracker, em } = setup("IPv4", new Date("2024-01-01T00:00:00Z"));
    const s = (ip: string, t: string) =>
      slice("ns1", "svc1", "s1", [{ addresses: [ip] }], [tcp("p", 80)], "IPv4", { [annotation]: t });
    tracker.endpointSliceUpdate(s("10.0.0.1", "2024-05-01T10:00:00Z"), false);
    tracker.endpointSliceUpdate(s("10.0.0.2", "2024-05-01T10:00:01.5+02:00"), false);
    tracker.endpointSliceUpdate(s("10.0.0.3", "2023-12-31T23:59:59Z"), false); // before the tracker started
    let result = em.apply(tracker);
    assert.deepEqual(
      result.lastChangeTriggerTimes.get("ns1/svc1")?.map((d) => d.toISOString()),
      ["2024-05-01T10:00:00.000Z", "2024-05-01T08:00:01.500Z"],
    );
    tracker.endpointSliceUpdate(s("10.0.0.4", "2024-05-01T11:00:00Z"), false);
    tracker.endpointSliceUpdate(s("10.0.0.4", "2024-05-01T11:00:00Z"), true);
    result = em.apply(tracker);
    assert.equal(result.lastChangeTriggerTimes.size, 0);
  });

  it("warns about an unparsable trigger time", () => {
    const { tracker, warnings } = setup();
    tracker.endpointSliceUpdate(
      slice("ns1", "svc1", "s1", [{ addresses: ["10.0.0.1"] }], [tcp("p", 80)], "IPv4", {
        [annotation]: "yesterday",
      }),
      false,
    );
    assert.deepEqual(warnings, [
      `EndpointSlice ns1/s1: metadata.annotations["${annotation}"]: not an RFC 3339 time (got "yesterday")`,
    ]);
  });
});

describe("EndpointsChangeTracker: validation", () => {
  it("skips a garbage address with a warning naming the slice and keeps the rest", () => {
    const { tracker, em, warnings } = setup();
    tracker.endpointSliceUpdate(
      slice("ns1", "svc1", "svc1-abc", [
        { addresses: ["10.0.0.1"] },
        { addresses: ["10.0.0.2 -j ACCEPT"] },
        { addresses: [] },
        { addresses: ["10.0.0.3\n-A KUBE-SERVICES -j ACCEPT"] },
        { addresses: ["10.0.0.4"] },
      ], [tcp("p", 80), { name: "--dport 1 -j ACCEPT", port: 81, protocol: "TCP" }, {
        name: "q",
        port: 70000,
        protocol: "TCP",
      }, { name: "r", port: 82, protocol: "ICMP" }]),
      false,
    );
    em.apply(tracker);
    assert.deepEqual([...em.keys()], [key("ns1", "svc1", "p")]);
    assert.deepEqual(em.get(key("ns1", "svc1", "p"))?.map((e) => e.endpoint), ["10.0.0.1:80", "10.0.0.4:80"]);
    assert.deepEqual(warnings, [
      'ignoring ports[1] of EndpointSlice ns1/svc1-abc: name: must be a DNS label (got "--dport 1 -j ACCEPT")',
      "ignoring ports[2] of EndpointSlice ns1/svc1-abc: port: must be 1-65535 (got 70000)",
      'ignoring ports[3] of EndpointSlice ns1/svc1-abc: protocol: must be TCP, UDP or SCTP (got "ICMP")',
      'ignoring endpoints[1] of EndpointSlice ns1/svc1-abc: addresses[0]: not a valid IP address (got "10.0.0.2 -j ACCEPT")',
      "ignoring endpoints[2] of EndpointSlice ns1/svc1-abc: addresses: must be a non-empty list (got [])",
      'ignoring endpoints[3] of EndpointSlice ns1/svc1-abc: addresses[0]: not a valid IP address (got "10.0.0.3\\n-A KUBE-SERVICES -j ACCEPT")',
    ]);
  });

  it("rejects slices whose Service name or namespace could not be a rule comment", () => {
    const { tracker, em, warnings } = setup();
    const good = slice("ns1", "good", "good-1", [{ addresses: ["10.0.0.1"] }], [tcp("p", 80)]);
    const badService = slice("ns1", 'svc" -j ACCEPT', "s1", [{ addresses: ["10.0.0.2"] }], [tcp("p", 80)]);
    const badNamespace = slice("ns1\nx", "svc1", "s2", [{ addresses: ["10.0.0.3"] }], [tcp("p", 80)]);
    const badSliceName = slice("ns1", "svc1", "S 3", [{ addresses: ["10.0.0.4"] }], [tcp("p", 80)]);
    assert.equal(tracker.endpointSliceUpdate(good, false), true);
    assert.equal(tracker.endpointSliceUpdate(badService, false), false);
    assert.equal(tracker.endpointSliceUpdate(badNamespace, false), false);
    assert.equal(tracker.endpointSliceUpdate(badSliceName, false), false);
    em.apply(tracker);
    assert.deepEqual([...em.keys()], [key("ns1", "good", "p")]);
    assert.deepEqual(warnings, [
      `ignoring EndpointSlice ns1/s1: metadata.labels["kubernetes.io/service-name"]: must be a DNS label (got "svc\\" -j ACCEPT")`,
      'ignoring EndpointSlice "ns1\\nx"/s2: metadata.namespace: must be a DNS label (got "ns1\\nx")',
      'ignoring EndpointSlice ns1/"S 3": metadata.name: must be a DNS subdomain (got "S 3")',
    ]);
    for (const w of warnings) assert.ok(!w.includes("\n"));
  });

  it("never throws on malformed slices", () => {
    const garbage: unknown[] = [
      null,
      7,
      { addressType: "IPv4" },
      {
        addressType: "IPv4",
        metadata: { namespace: "ns1", name: "s", labels: { "kubernetes.io/service-name": "x" } },
      },
      {
        addressType: "IPv4",
        metadata: {
          namespace: "ns1",
          name: "s",
          labels: { "kubernetes.io/service-name": "x" },
          annotations: 5,
        },
        endpoints: "nope",
        ports: { 0: 1 },
      },
      {
        addressType: "IPv4",
        metadata: { namespace: "ns1", name: "s", labels: { "kubernetes.io/service-name": "x" } },
        endpoints: [null, 4, { addresses: "10.0.0.1" }, { addresses: [7] }, {
          addresses: ["10.0.0.1"],
          conditions: 3,
          hints: 2,
        }],
        ports: [null, { port: 80, name: 9 }, { port: 80, protocol: 6 }, { port: 80 }],
      },
    ];
    const { tracker, em } = setup();
    for (const g of garbage) {
      assert.doesNotThrow(() => tracker.endpointSliceUpdate(g as EndpointSlice, false));
      assert.doesNotThrow(() => tracker.endpointSliceUpdate(g as EndpointSlice, true));
    }
    assert.doesNotThrow(() => em.apply(tracker));
  });
});

describe("EndpointsChangeTracker: scale", () => {
  it("applies one endpoint change among 10k Services without touching the others", () => {
    const { tracker, em } = setup();
    const make = (i: number, ip: string) =>
      slice(
        "ns",
        `svc${i}`,
        `svc${i}-1`,
        [{ addresses: [ip] }, { addresses: [`10.1.${i >> 8}.${i & 255}`] }],
        [
          tcp("p", 80),
        ],
      );
    for (let i = 0; i < 10000; i++) tracker.endpointSliceUpdate(make(i, "10.0.0.1"), false);
    assert.equal(em.apply(tracker).changedServices.size, 10000);
    assert.equal(em.size, 10000);
    tracker.endpointSliceUpdate(make(777, "10.0.0.2"), false);
    const result = em.apply(tracker);
    assert.deepEqual([...result.changedServices], ["ns/svc777"]);
    assert.deepEqual([...result.updatedServices], [key("ns", "svc777", "p")]);
    assert.equal(em.size, 10000);
    assert.deepEqual(em.get(key("ns", "svc777", "p"))?.map((e) => e.ip), ["10.0.0.2", "10.1.3.9"]);
  });
});

describe("EndpointSliceCache: shared port lists", () => {
  const udp = (name: string, port: number): EndpointPort => ({ name, port, protocol: "UDP" });

  it("keeps one copy of each distinct port list, whatever order a slice lists its ports in", () => {
    const cache = new EndpointSliceCache({ nodeName: NODE, ipFamily: "IPv4", warn: () => {} });
    const ep = [{ addresses: ["10.0.0.1"] }];
    cache.updatePending(slice("ns1", "a", "a-1", ep, [tcp("http", 8080), udp("dns", 53)]), false);
    cache.updatePending(slice("ns1", "b", "b-1", ep, [udp("dns", 53), tcp("http", 8080)]), false);
    cache.updatePending(slice("ns2", "c", "c-1", ep, [tcp("http", 8080), udp("dns", 53)]), false);
    assert.equal(cache.sharedPortLists(), 1);
    cache.updatePending(slice("ns1", "d", "d-1", ep, [tcp("http", 8080)]), false);
    cache.updatePending(slice("ns1", "e", "e-1", ep, [tcp("web", 8080)]), false);
    assert.equal(cache.sharedPortLists(), 3);
    const changes = cache.checkoutChanges();
    assert.deepEqual(
      changes.map((c) => [c.service, [...c.current.keys()]]),
      [
        ["ns1/a", ["ns1/a:dns/UDP", "ns1/a:http/TCP"]],
        ["ns1/b", ["ns1/b:dns/UDP", "ns1/b:http/TCP"]],
        ["ns1/d", ["ns1/d:http/TCP"]],
        ["ns1/e", ["ns1/e:web/TCP"]],
        ["ns2/c", ["ns2/c:dns/UDP", "ns2/c:http/TCP"]],
      ],
    );
  });

  it("stops sharing at the cap and still uses every slice's own ports", () => {
    const cache = new EndpointSliceCache({ nodeName: NODE, ipFamily: "IPv4", warn: () => {} });
    const n = MAX_SHARED_PORT_LISTS + 10;
    for (let i = 0; i < n; i++) {
      cache.updatePending(
        slice("ns1", `s${i}`, `s${i}-1`, [{ addresses: ["10.0.0.1"] }], [tcp("p", 1 + i)]),
        false,
      );
    }
    assert.equal(cache.sharedPortLists(), MAX_SHARED_PORT_LISTS);
    const last = cache.checkoutChanges().find((c) => c.service === `ns1/s${n - 1}`)!;
    assert.deepEqual(last.current.get(`ns1/s${n - 1}:p/TCP`)?.endpoints.map((e) => e.endpoint), [
      `10.0.0.1:${n}`,
    ]);
  });
});

describe("EndpointSliceCache: shared placements", () => {
  const at = (ip: string, nodeName: string, zone = "z1", hints?: Endpoint["hints"]): Endpoint => ({
    addresses: [ip],
    nodeName,
    zone,
    ...(hints ? { hints } : {}),
  });
  const endpointsOf = (
    changes: ReturnType<EndpointSliceCache["checkoutChanges"]>,
    svc: string,
    port: string,
  ) => changes.find((c) => c.service === svc)!.current.get(port)!.endpoints as PackedEndpointInfo[];

  it("endpoints on one node and zone share one placement; hinted ones keep their own; all read back", () => {
    const cache = new EndpointSliceCache({ nodeName: NODE, ipFamily: "IPv4", warn: () => {} });
    const hinted = at("10.0.0.4", "node-b", "z1", { forZones: [{ name: "z1" }] });
    cache.updatePending(
      slice("ns", "a", "a-1", [at("10.0.0.1", "node-b"), at("10.0.0.2", NODE), hinted], [tcp("p", 80)]),
      false,
    );
    cache.updatePending(
      slice("ns", "b", "b-1", [at("10.0.0.3", "node-b"), at("10.0.0.5", "node-b", "z2")], [tcp("p", 80)]),
      false,
    );
    const changes = cache.checkoutChanges();
    const [a1, a2, a4] = endpointsOf(changes, "ns/a", "ns/a:p/TCP");
    const [b3, b5] = endpointsOf(changes, "ns/b", "ns/b:p/TCP");
    assert.equal(a1.placement, b3.placement, "node-b/z1 shared across Services");
    assert.notEqual(a1.placement, a2.placement);
    assert.notEqual(b3.placement, b5.placement, "another zone, another placement");
    assert.equal(cache.sharedPlacements(), 3);
    assert.deepEqual(
      [a1, a2, a4, b5].map((e) => [e.endpoint, e.nodeName, e.zone, e.zoneHints, e.nodeHints, e.isLocal]),
      [
        ["10.0.0.1:80", "node-b", "z1", null, null, false],
        ["10.0.0.2:80", NODE, "z1", null, null, true],
        ["10.0.0.4:80", "node-b", "z1", ["z1"], null, false],
        ["10.0.0.5:80", "node-b", "z2", null, null, false],
      ],
    );
    assert.ok(Object.isFrozen(a1.placement));
  });

  it("a change of node, zone or hints alone is a change", () => {
    const cache = new EndpointSliceCache({ nodeName: NODE, ipFamily: "IPv4", warn: () => {} });
    const apply = (ep: Endpoint) => {
      cache.updatePending(slice("ns", "a", "a-1", [ep], [tcp("p", 80)]), false);
      return cache.checkoutChanges().map((c) => c.service);
    };
    assert.deepEqual(apply(at("10.0.0.1", "node-b")), ["ns/a"]);
    assert.deepEqual(apply(at("10.0.0.1", "node-b")), [], "the same again");
    assert.deepEqual(apply(at("10.0.0.1", "node-c")), ["ns/a"]);
    assert.deepEqual(apply(at("10.0.0.1", "node-c", "z2")), ["ns/a"]);
    assert.deepEqual(apply(at("10.0.0.1", "node-c", "z2", { forNodes: [{ name: "node-c" }] })), ["ns/a"]);
    assert.deepEqual(apply(at("10.0.0.1", "node-c", "z2", { forNodes: [{ name: "node-c" }] })), []);
  });

  it("stops sharing at the cap and still gives every endpoint its own node and zone", () => {
    const cache = new EndpointSliceCache({ nodeName: NODE, ipFamily: "IPv4", warn: () => {} });
    const perSlice = 1024;
    const slices = Math.ceil((MAX_SHARED_PLACEMENTS + 10) / perSlice);
    for (let s = 0; s < slices; s++) {
      const eps = Array.from(
        { length: perSlice },
        (_, i) => at(`10.${s}.${i >> 8}.${i & 255 || 1}`, `n-${s}-${i}`),
      );
      cache.updatePending(slice("ns", `s${s}`, `s${s}-1`, eps, [tcp("p", 80)]), false);
    }
    assert.equal(cache.sharedPlacements(), MAX_SHARED_PLACEMENTS);
    const last = endpointsOf(cache.checkoutChanges(), `ns/s${slices - 1}`, `ns/s${slices - 1}:p/TCP`);
    assert.ok(last.every((e) => e.nodeName.startsWith(`n-${slices - 1}-`) && e.zone === "z1"));
  });
});

describe("PackedEndpointInfo", () => {
  it("reads back every combination of the four conditions", () => {
    for (let bits = 0; bits < 16; bits++) {
      const [isLocal, ready, serving, terminating] = [1, 2, 4, 8].map((b) => (bits & b) !== 0);
      const fields = {
        ip: "fd00::1",
        nodeName: "n",
        zone: "z",
        ready,
        serving,
        terminating,
        zoneHints: ["z"],
        nodeHints: null,
      };
      const ep = newEndpointInfo(fields, 8080, isLocal);
      assert.ok(ep instanceof PackedEndpointInfo);
      assert.deepEqual(plainEndpointInfo(ep), {
        ip: "fd00::1",
        port: 8080,
        endpoint: "[fd00::1]:8080",
        isLocal,
        ready,
        serving,
        terminating,
        zoneHints: ["z"],
        nodeHints: null,
        nodeName: "n",
        zone: "z",
      });
      assert.ok(endpointInfoEqual(ep, plainEndpointInfo(ep)));
      // Change detection compares own fields: the packed conditions and the placement must be among them.
      assert.ok(!sameValue(ep, newEndpointInfo({ ...fields, ready: !ready }, 8080, isLocal)));
      for (const other of [{ nodeName: "m" }, { zone: "y" }, { zoneHints: ["y"] }, { nodeHints: ["n"] }]) {
        assert.ok(
          !sameValue(ep, newEndpointInfo({ ...fields, ...other }, 8080, isLocal)),
          JSON.stringify(other),
        );
      }
      assert.ok(sameValue(ep, newEndpointInfo({ ...fields }, 8080, isLocal)));
    }
  });
});

describe("compareEndpoints", () => {
  it("orders as the ip:port strings compare, without making them", () => {
    // Addresses that are prefixes of each other, share long prefixes, or differ in family; ports of every
    // length, so that the tie-break on the port text (not its number) shows.
    const ips = [
      "10.0.0.1",
      "10.0.0.10",
      "10.0.0.100",
      "10.0.0.2",
      "10.0.1.1",
      "1.2.3.4",
      "192.168.0.1",
      "9.9.9.9",
      "fd00::1",
      "fd00::10",
      "fd00::1:0",
      "fd00::a",
      "2001:db8::1",
      "::1",
    ];
    const ports = [1, 9, 10, 80, 443, 8080, 9000, 65535];
    const eps = ips.flatMap((ip) =>
      ports.map((port) =>
        newEndpointInfo(
          {
            ip,
            nodeName: "",
            zone: "",
            ready: true,
            serving: true,
            terminating: false,
            zoneHints: null,
            nodeHints: null,
          },
          port,
          false,
        )
      )
    );
    const text = (e: { endpoint: string }) => e.endpoint;
    for (const a of eps) {
      for (const b of eps) {
        const want = text(a) < text(b) ? -1 : text(a) > text(b) ? 1 : 0;
        assert.equal(compareEndpoints(a, b), want, `${text(a)} vs ${text(b)}`);
      }
    }
    assert.equal(eps[0].endpoint, "10.0.0.1:1");
    assert.equal(eps.at(-1)!.endpoint, "[::1]:65535");
  });
});

describe("parseServicePortKey", () => {
  it("reads back the name of every key servicePortKey makes", () => {
    for (const port of ["", "http", "p-1"]) {
      for (const protocol of ["TCP", "UDP", "SCTP"] as const) {
        const name = { namespace: "ns-1", name: "svc-2", port, protocol };
        assert.deepEqual(parseServicePortKey(servicePortKey(name)), name);
      }
    }
    for (const bad of ["", "ns", "ns/svc", "ns/svc/tcp", "/svc/TCP", "ns//TCP"]) {
      assert.equal(parseServicePortKey(bad), null, bad);
    }
  });

  it("gives EndpointsMap.portName of present keys only", () => {
    const { tracker, em } = setup();
    tracker.endpointSliceUpdate(
      slice("ns1", "svc1", "s1", [{ addresses: ["10.0.0.1"] }], [tcp("p", 80)]),
      false,
    );
    em.apply(tracker);
    assert.deepEqual(em.portName(key("ns1", "svc1", "p")), {
      namespace: "ns1",
      name: "svc1",
      port: "p",
      protocol: "TCP",
    });
    assert.equal(em.portName(key("ns1", "svc1", "q")), undefined);
  });
});

describe("sameValue (slice change detection without a text copy per slice)", () => {
  it("equal by value; differs on any value, key, order or length", () => {
    const a = {
      ports: [{ name: "http", port: 80, protocol: "TCP" }],
      endpoints: [{ ip: "10.0.0.1", ready: true }],
    };
    assert.ok(sameValue(a, structuredClone(a)));
    assert.ok(!sameValue(a, { ...a, endpoints: [{ ip: "10.0.0.2", ready: true }] }));
    assert.ok(!sameValue(a, { ...a, endpoints: [{ ip: "10.0.0.1", ready: false }] }));
    assert.ok(!sameValue(a, { ...a, endpoints: [] }));
    assert.ok(!sameValue({ x: 1, y: 2 }, { y: 2, x: 1 }), "key order matters, as in the JSON it replaces");
    assert.ok(!sameValue({ x: [1] }, { x: { 0: 1 } }));
    assert.ok(!sameValue({ x: null }, { x: {} }));
    assert.ok(sameValue(null, null));
  });
});
