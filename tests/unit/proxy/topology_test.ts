import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  categorizeEndpoints,
  LABEL_TOPOLOGY_ZONE,
  usesClusterEndpoints,
  usesLocalEndpoints,
} from "../../../lib/proxy/topology.ts";
import type { EndpointInfo } from "../../../lib/proxy/types.ts";
import {
  makeEndpoint,
  makeServicePort,
  type ServicePortFixture,
  TEST_NODE_NAME,
} from "../../support/tracer.ts";

const ZONE_A = { [LABEL_TOPOLOGY_ZONE]: "zone-a" };
const names = (eps: readonly EndpointInfo[]) => eps.map((e) => e.ip);

function svc(f: Partial<ServicePortFixture> = {}) {
  return makeServicePort("ns1", "svc1", { clusterIP: "172.30.0.41", ...f });
}

describe("usesClusterEndpoints / usesLocalEndpoints", () => {
  it("follow iTP, eTP and external accessibility", () => {
    assert.deepEqual([usesClusterEndpoints(svc()), usesLocalEndpoints(svc())], [true, false]);
    assert.deepEqual([
      usesClusterEndpoints(svc({ internalPolicyLocal: true })),
      usesLocalEndpoints(svc({ internalPolicyLocal: true })),
    ], [false, true]);
    // iTP=Local but externally reachable: Cluster endpoints are still needed (external paths).
    assert.equal(usesClusterEndpoints(svc({ internalPolicyLocal: true, nodePort: 30001 })), true);
    // eTP=Local only matters with an external destination.
    assert.equal(usesLocalEndpoints(svc({ externalPolicyLocal: true })), false);
    assert.equal(
      usesLocalEndpoints(svc({ externalPolicyLocal: true, externalIPs: ["192.168.99.11"] })),
      true,
    );
    assert.equal(usesLocalEndpoints(svc({ externalPolicyLocal: true, loadBalancerVIPs: ["1.2.3.4"] })), true);
  });
});

describe("categorizeEndpoints: ready endpoints and the terminating fallback", () => {
  it("uses ready endpoints and ignores non-ready ones", () => {
    const eps = [
      makeEndpoint("10.0.0.1", 80),
      makeEndpoint("10.0.0.2", 80, { ready: false, serving: true, terminating: true }),
      makeEndpoint("10.0.0.3", 80, { ready: false, serving: false, terminating: false }),
    ];
    const r = categorizeEndpoints(eps, svc(), TEST_NODE_NAME, {});
    assert.deepEqual(names(r.clusterEndpoints), ["10.0.0.1"]);
    assert.deepEqual(names(r.localEndpoints), []);
    assert.deepEqual(names(r.allReachableEndpoints), ["10.0.0.1"]);
    assert.equal(r.hasAnyEndpoints, true);
  });

  it("falls back to serving+terminating endpoints when none is ready", () => {
    const eps = [
      makeEndpoint("10.0.0.1", 80, { ready: false, serving: true, terminating: true }),
      makeEndpoint("10.0.0.2", 80, { ready: false, serving: false, terminating: true }),
      makeEndpoint("10.0.0.3", 80, { ready: false, serving: true, terminating: false }),
    ];
    const r = categorizeEndpoints(eps, svc(), TEST_NODE_NAME, {});
    assert.deepEqual(names(r.clusterEndpoints), ["10.0.0.1"]);
    assert.equal(r.hasAnyEndpoints, true);
  });

  it("has no endpoints when nothing is ready or serving+terminating", () => {
    const eps = [makeEndpoint("10.0.0.1", 80, { ready: false, serving: false, terminating: true })];
    const r = categorizeEndpoints(eps, svc(), TEST_NODE_NAME, {});
    assert.deepEqual(names(r.allReachableEndpoints), []);
    assert.equal(r.hasAnyEndpoints, false);
    const local = categorizeEndpoints(eps, svc({ internalPolicyLocal: true }), TEST_NODE_NAME, {});
    assert.equal(local.hasAnyEndpoints, false);
  });
});

describe("categorizeEndpoints: Local policy", () => {
  it("iTP=Local uses only local ready endpoints; remote ones still count as 'any endpoints'", () => {
    const eps = [
      makeEndpoint("10.0.0.1", 80, { nodeName: "other" }),
      makeEndpoint("10.0.0.2", 80, { nodeName: TEST_NODE_NAME }),
    ];
    const r = categorizeEndpoints(eps, svc({ internalPolicyLocal: true }), TEST_NODE_NAME, {});
    assert.deepEqual(names(r.clusterEndpoints), []);
    assert.deepEqual(names(r.localEndpoints), ["10.0.0.2"]);
    assert.deepEqual(names(r.allReachableEndpoints), ["10.0.0.2"]);
    const remoteOnly = categorizeEndpoints([eps[0]], svc({ internalPolicyLocal: true }), TEST_NODE_NAME, {});
    assert.deepEqual(names(remoteOnly.localEndpoints), []);
    assert.equal(remoteOnly.hasAnyEndpoints, true);
  });

  it("falls back to local serving+terminating endpoints independently of the cluster set", () => {
    const eps = [
      makeEndpoint("10.0.0.1", 80, { nodeName: "other" }),
      makeEndpoint("10.0.0.2", 80, {
        nodeName: TEST_NODE_NAME,
        ready: false,
        serving: true,
        terminating: true,
      }),
      makeEndpoint("10.0.0.3", 80, {
        nodeName: TEST_NODE_NAME,
        ready: false,
        serving: false,
        terminating: true,
      }),
    ];
    const r = categorizeEndpoints(
      eps,
      svc({ externalPolicyLocal: true, nodePort: 30001 }),
      TEST_NODE_NAME,
      {},
    );
    assert.deepEqual(names(r.clusterEndpoints), ["10.0.0.1"]);
    assert.deepEqual(names(r.localEndpoints), ["10.0.0.2"]);
    // Neither list contains the other: both are reachable.
    assert.deepEqual(names(r.allReachableEndpoints), ["10.0.0.1", "10.0.0.2"]);
  });

  it("eTP=Local with ready local endpoints: the cluster set is the superset", () => {
    const eps = [
      makeEndpoint("10.0.0.1", 80, { nodeName: TEST_NODE_NAME }),
      makeEndpoint("10.0.0.2", 80, { nodeName: "other" }),
    ];
    const r = categorizeEndpoints(
      eps,
      svc({ externalPolicyLocal: true, nodePort: 30001 }),
      TEST_NODE_NAME,
      {},
    );
    assert.deepEqual(names(r.localEndpoints), ["10.0.0.1"]);
    assert.equal(r.allReachableEndpoints, r.clusterEndpoints);
  });
});

describe("categorizeEndpoints: topology hints", () => {
  const zoned = (ip: string, zones: string[] | null, f: Parameters<typeof makeEndpoint>[2] = {}) =>
    makeEndpoint(ip, 80, { zoneHints: zones, ...f });

  it("PreferSameZone when every ready endpoint has a zone hint and one is for this zone", () => {
    const eps = [
      zoned("10.0.0.1", ["zone-a"]),
      zoned("10.0.0.2", ["zone-b"]),
      zoned("10.0.0.3", ["zone-a", "zone-c"]),
    ];
    const r = categorizeEndpoints(eps, svc(), TEST_NODE_NAME, ZONE_A);
    assert.deepEqual(names(r.clusterEndpoints), ["10.0.0.1", "10.0.0.3"]);
  });

  it("ignores hints when one ready endpoint lacks them, none matches the zone, or the node has no zone", () => {
    const incomplete = [zoned("10.0.0.1", ["zone-a"]), zoned("10.0.0.2", null)];
    assert.deepEqual(names(categorizeEndpoints(incomplete, svc(), TEST_NODE_NAME, ZONE_A).clusterEndpoints), [
      "10.0.0.1",
      "10.0.0.2",
    ]);
    const emptyHints = [zoned("10.0.0.1", ["zone-a"]), zoned("10.0.0.2", [])];
    assert.equal(categorizeEndpoints(emptyHints, svc(), TEST_NODE_NAME, ZONE_A).clusterEndpoints.length, 2);
    const otherZones = [zoned("10.0.0.1", ["zone-b"]), zoned("10.0.0.2", ["zone-c"])];
    assert.equal(categorizeEndpoints(otherZones, svc(), TEST_NODE_NAME, ZONE_A).clusterEndpoints.length, 2);
    const complete = [zoned("10.0.0.1", ["zone-a"]), zoned("10.0.0.2", ["zone-b"])];
    assert.equal(categorizeEndpoints(complete, svc(), TEST_NODE_NAME, {}).clusterEndpoints.length, 2);
  });

  it("looks only at ready endpoints when checking that hints are complete", () => {
    const eps = [
      zoned("10.0.0.1", ["zone-a"]),
      zoned("10.0.0.2", ["zone-b"]),
      zoned("10.0.0.3", null, { ready: false, serving: true, terminating: true }),
    ];
    assert.deepEqual(names(categorizeEndpoints(eps, svc(), TEST_NODE_NAME, ZONE_A).clusterEndpoints), [
      "10.0.0.1",
    ]);
  });

  it("the terminating fallback ignores topology", () => {
    const eps = [
      zoned("10.0.0.1", ["zone-b"], { ready: false, serving: true, terminating: true }),
      zoned("10.0.0.2", ["zone-a"], { ready: false, serving: true, terminating: true }),
    ];
    assert.equal(categorizeEndpoints(eps, svc(), TEST_NODE_NAME, ZONE_A).clusterEndpoints.length, 2);
  });

  it("PreferSameNode (hints.forNodes) wins over zone hints; the feature gate can turn it off", () => {
    const eps = [
      makeEndpoint("10.0.0.1", 80, { nodeHints: [TEST_NODE_NAME], zoneHints: ["zone-a"] }),
      makeEndpoint("10.0.0.2", 80, { nodeHints: ["other"], zoneHints: ["zone-a"] }),
      makeEndpoint("10.0.0.3", 80, { nodeHints: ["third"], zoneHints: ["zone-b"] }),
    ];
    assert.deepEqual(names(categorizeEndpoints(eps, svc(), TEST_NODE_NAME, ZONE_A).clusterEndpoints), [
      "10.0.0.1",
    ]);
    const gateOff = categorizeEndpoints(eps, svc(), TEST_NODE_NAME, ZONE_A, {
      preferSameTrafficDistribution: false,
    });
    assert.deepEqual(names(gateOff.clusterEndpoints), ["10.0.0.1", "10.0.0.2"]);
    // Node hints for other nodes only: fall back to zone hints.
    const noneForMe = eps.map((e) => ({ ...e, nodeHints: ["elsewhere"] }));
    assert.deepEqual(names(categorizeEndpoints(noneForMe, svc(), TEST_NODE_NAME, ZONE_A).clusterEndpoints), [
      "10.0.0.1",
      "10.0.0.2",
    ]);
  });

  it("with eTP=Local, topologically excluded local endpoints stay reachable (merged list, input order)", () => {
    const eps = [
      zoned("10.0.0.1", ["zone-b"], { nodeName: TEST_NODE_NAME }),
      zoned("10.0.0.2", ["zone-a"], { nodeName: "other" }),
      zoned("10.0.0.3", ["zone-a"], { nodeName: "third" }),
    ];
    const r = categorizeEndpoints(
      eps,
      svc({ externalPolicyLocal: true, loadBalancerVIPs: ["1.2.3.4"] }),
      TEST_NODE_NAME,
      ZONE_A,
    );
    assert.deepEqual(names(r.clusterEndpoints), ["10.0.0.2", "10.0.0.3"]);
    assert.deepEqual(names(r.localEndpoints), ["10.0.0.1"]);
    assert.deepEqual(names(r.allReachableEndpoints), ["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
  });
});
