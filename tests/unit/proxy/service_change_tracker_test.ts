import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { Service, ServicePortSpec } from "../../../lib/k8s/objects.ts";
import { ServiceChangeTracker, ServicePortMap } from "../../../lib/proxy/service_change_tracker.ts";

type Spec = NonNullable<Service["spec"]>;

function makeTestService(ns: string, name: string, fn: (svc: Service & { spec: Spec }) => void): Service {
  const svc: Service & { spec: Spec } = { metadata: { namespace: ns, name }, spec: {}, status: {} };
  fn(svc);
  return svc;
}

/** Upstream addTestPort(array, name, protocol, port, nodeport, targetPort). */
function addTestPort(
  ports: ServicePortSpec[] | undefined,
  name: string,
  protocol: string,
  port: number,
  nodePort: number,
  targetPort: number,
): ServicePortSpec[] {
  return [...(ports ?? []), { name, protocol, port, nodePort, targetPort }];
}

function newTracker(warnings: string[] = []): ServiceChangeTracker {
  return new ServiceChangeTracker({ ipFamily: "IPv4", warn: (m) => warnings.push(m) });
}

function sorted(s: Iterable<string>): string[] {
  return [...s].sort();
}

describe("ServiceChangeTracker (upstream TestBuildServiceMap*)", () => {
  it("TestBuildServiceMapAddRemove", () => {
    const warnings: string[] = [];
    const tracker = newTracker(warnings);
    const svcPortMap = new ServicePortMap();
    const services = [
      makeTestService("somewhere-else", "cluster-ip", (svc) => {
        svc.spec.type = "ClusterIP";
        svc.spec.clusterIP = "172.30.55.4";
        svc.spec.ports = addTestPort(svc.spec.ports, "something", "UDP", 1234, 4321, 0);
        svc.spec.ports = addTestPort(svc.spec.ports, "somethingelse", "UDP", 1235, 5321, 0);
        svc.spec.ports = addTestPort(svc.spec.ports, "sctpport", "SCTP", 1236, 6321, 0);
      }),
      makeTestService("somewhere-else", "node-port", (svc) => {
        svc.spec.type = "NodePort";
        svc.spec.clusterIP = "172.30.55.10";
        svc.spec.ports = addTestPort(svc.spec.ports, "blahblah", "UDP", 345, 678, 0);
        svc.spec.ports = addTestPort(svc.spec.ports, "moreblahblah", "TCP", 344, 677, 0);
        svc.spec.ports = addTestPort(svc.spec.ports, "muchmoreblah", "SCTP", 343, 676, 0);
      }),
      makeTestService("somewhere", "load-balancer", (svc) => {
        svc.spec.type = "LoadBalancer";
        svc.spec.clusterIP = "172.30.55.11";
        svc.spec.loadBalancerIP = "1.2.3.4";
        svc.spec.ports = addTestPort(svc.spec.ports, "foobar", "UDP", 8675, 30061, 7000);
        svc.spec.ports = addTestPort(svc.spec.ports, "baz", "UDP", 8676, 30062, 7001);
        svc.status = { loadBalancer: { ingress: [{ ip: "1.2.3.4" }] } };
      }),
      makeTestService("somewhere", "only-local-load-balancer", (svc) => {
        svc.spec.type = "LoadBalancer";
        svc.spec.clusterIP = "172.30.55.12";
        svc.spec.loadBalancerIP = "5.6.7.8";
        svc.spec.ports = addTestPort(svc.spec.ports, "foobar2", "UDP", 8677, 30063, 7002);
        svc.spec.ports = addTestPort(svc.spec.ports, "baz", "UDP", 8678, 30064, 7003);
        svc.status = { loadBalancer: { ingress: [{ ip: "5.6.7.8" }] } };
        svc.spec.externalTrafficPolicy = "Local";
        svc.spec.healthCheckNodePort = 345;
      }),
    ];
    for (const s of services) tracker.update(null, s);
    assert.equal(tracker.pendingChanges(), 4);
    let result = svcPortMap.apply(tracker);
    assert.equal(tracker.pendingChanges(), 0);
    assert.equal(svcPortMap.size, 10);
    // Services only added, so nothing stale yet.
    assert.equal(result.deletedUDPClusterIPs.size, 0);
    assert.equal(result.updatedServices.size, 10);
    assert.deepEqual(sorted(result.changedServices), [
      "somewhere-else/cluster-ip",
      "somewhere-else/node-port",
      "somewhere/load-balancer",
      "somewhere/only-local-load-balancer",
    ]);
    // The only-local-loadbalancer ones get added.
    assert.deepEqual([...svcPortMap.healthCheckNodePorts()], [["somewhere/only-local-load-balancer", 345]]);

    // Remove some stuff: oneService is services[0] with its first port removed.
    const oneService = makeTestService("somewhere-else", "cluster-ip", (svc) => {
      svc.spec.type = "ClusterIP";
      svc.spec.clusterIP = "172.30.55.4";
      svc.spec.ports = addTestPort(svc.spec.ports, "somethingelse", "UDP", 1235, 5321, 0);
    });
    tracker.update(services[0], oneService);
    tracker.update(services[1], null);
    tracker.update(services[2], null);
    tracker.update(services[3], null);
    result = svcPortMap.apply(tracker);
    assert.deepEqual([...svcPortMap.keys()], ["somewhere-else/cluster-ip:somethingelse/UDP"]);
    // All services but one were deleted; the remaining one lost a UDP port, so its IP is stale too.
    assert.deepEqual(sorted(result.deletedUDPClusterIPs), [
      "172.30.55.10",
      "172.30.55.11",
      "172.30.55.12",
      "172.30.55.4",
    ]);
    assert.equal(svcPortMap.healthCheckNodePorts().size, 0);
    assert.deepEqual(warnings, []);
  });

  it("TestBuildServiceMapServiceHeadless", () => {
    const tracker = newTracker();
    const svcPortMap = new ServicePortMap();
    tracker.update(
      null,
      makeTestService("somewhere-else", "headless", (svc) => {
        svc.spec.type = "ClusterIP";
        svc.spec.clusterIP = "None";
        svc.spec.ports = addTestPort(svc.spec.ports, "rpc", "UDP", 1234, 0, 0);
      }),
    );
    tracker.update(
      null,
      makeTestService("somewhere-else", "headless-without-port", (svc) => {
        svc.spec.type = "ClusterIP";
        svc.spec.clusterIP = "None";
      }),
    );
    // Headless services are ignored: they do not even count as changes.
    assert.equal(tracker.pendingChanges(), 0);
    const result = svcPortMap.apply(tracker);
    assert.equal(svcPortMap.size, 0);
    assert.equal(result.deletedUDPClusterIPs.size, 0);
    assert.equal(svcPortMap.healthCheckNodePorts().size, 0);
  });

  it("TestBuildServiceMapServiceTypeExternalName", () => {
    const tracker = newTracker();
    const svcPortMap = new ServicePortMap();
    const changed = tracker.update(
      null,
      makeTestService("somewhere-else", "external-name", (svc) => {
        svc.spec.type = "ExternalName";
        svc.spec.clusterIP = "172.30.55.4"; // Should be ignored
        svc.spec.externalName = "foo2.bar.com";
        svc.spec.ports = addTestPort(svc.spec.ports, "blah", "UDP", 1235, 5321, 0);
      }),
    );
    assert.equal(changed, false);
    const result = svcPortMap.apply(tracker);
    assert.equal(svcPortMap.size, 0);
    assert.equal(result.deletedUDPClusterIPs.size, 0);
    assert.equal(svcPortMap.healthCheckNodePorts().size, 0);
  });

  it("TestBuildServiceMapServiceUpdate", () => {
    const tracker = newTracker();
    const svcPortMap = new ServicePortMap();
    const servicev1 = makeTestService("somewhere", "some-service", (svc) => {
      svc.spec.type = "ClusterIP";
      svc.spec.clusterIP = "172.30.55.4";
      svc.spec.ports = addTestPort(svc.spec.ports, "something", "UDP", 1234, 4321, 0);
      svc.spec.ports = addTestPort(svc.spec.ports, "somethingelse", "TCP", 1235, 5321, 0);
    });
    const servicev2 = makeTestService("somewhere", "some-service", (svc) => {
      svc.spec.type = "LoadBalancer";
      svc.spec.clusterIP = "172.30.55.4";
      svc.spec.loadBalancerIP = "1.2.3.4";
      svc.spec.ports = addTestPort(svc.spec.ports, "something", "UDP", 1234, 4321, 7002);
      svc.spec.ports = addTestPort(svc.spec.ports, "somethingelse", "TCP", 1235, 5321, 7003);
      svc.status = { loadBalancer: { ingress: [{ ip: "1.2.3.4" }] } };
      svc.spec.externalTrafficPolicy = "Local";
      svc.spec.healthCheckNodePort = 345;
    });

    tracker.update(null, servicev1);
    let result = svcPortMap.apply(tracker);
    assert.equal(svcPortMap.size, 2);
    assert.equal(result.deletedUDPClusterIPs.size, 0);
    assert.equal(svcPortMap.healthCheckNodePorts().size, 0);

    // Change service to load-balancer.
    assert.equal(tracker.update(servicev1, servicev2), true);
    result = svcPortMap.apply(tracker);
    assert.equal(svcPortMap.size, 2);
    assert.equal(result.deletedUDPClusterIPs.size, 0);
    assert.deepEqual(sorted(result.updatedServices), [
      "somewhere/some-service:something/UDP",
      "somewhere/some-service:somethingelse/TCP",
    ]);
    assert.equal(svcPortMap.healthCheckNodePorts().size, 1);
    assert.deepEqual(svcPortMap.get("somewhere/some-service:something/UDP")?.loadBalancerVIPs, ["1.2.3.4"]);

    // No change: the service map stays the same and nothing is reported.
    assert.equal(tracker.update(servicev2, servicev2), false);
    result = svcPortMap.apply(tracker);
    assert.equal(svcPortMap.size, 2);
    assert.equal(result.deletedUDPClusterIPs.size, 0);
    assert.equal(result.updatedServices.size, 0);
    assert.equal(svcPortMap.healthCheckNodePorts().size, 1);

    // And back to ClusterIP.
    tracker.update(servicev2, servicev1);
    result = svcPortMap.apply(tracker);
    assert.equal(svcPortMap.size, 2);
    assert.equal(result.deletedUDPClusterIPs.size, 0);
    assert.equal(svcPortMap.healthCheckNodePorts().size, 0);
  });
});

describe("ServiceChangeTracker: accumulation", () => {
  const v1 = makeTestService("ns1", "svc1", (svc) => {
    svc.spec.clusterIP = "172.30.0.1";
    svc.spec.ports = [{ name: "p", port: 80, protocol: "UDP" }];
  });
  const v2 = makeTestService("ns1", "svc1", (svc) => {
    svc.spec.clusterIP = "172.30.0.1";
    svc.spec.ports = [{ name: "p", port: 81, protocol: "UDP" }];
  });

  it("collapses add+delete before a sync into no change", () => {
    const tracker = newTracker();
    assert.equal(tracker.update(null, v1), true);
    assert.equal(tracker.update(v1, null), false);
    assert.equal(tracker.pendingChanges(), 0);
    assert.equal(tracker.changesTotal(), 2);
  });

  it("collapses an update and its revert into no change", () => {
    const tracker = newTracker();
    const m = new ServicePortMap();
    tracker.update(null, v1);
    m.apply(tracker);
    tracker.update(v1, v2);
    assert.deepEqual(tracker.pendingServices(), new Set(["ns1/svc1"]));
    tracker.update(v2, v1);
    assert.equal(tracker.pendingChanges(), 0);
    assert.equal(m.apply(tracker).changedServices.size, 0);
    assert.equal(m.get("ns1/svc1:p/UDP")?.port, 80);
  });

  it("keeps the state before the first pending event as previous", () => {
    const tracker = newTracker();
    const m = new ServicePortMap();
    tracker.update(null, v1);
    m.apply(tracker);
    tracker.update(v1, v2);
    tracker.update(v2, null);
    const result = m.apply(tracker);
    assert.equal(m.size, 0);
    assert.deepEqual([...result.deletedUDPClusterIPs], ["172.30.0.1"]);
    assert.deepEqual([...result.updatedServices], ["ns1/svc1:p/UDP"]);
  });

  it("drops a Service's ports when an update makes it invalid, warning once per event", () => {
    const warnings: string[] = [];
    const tracker = newTracker(warnings);
    const m = new ServicePortMap();
    tracker.update(null, v1);
    m.apply(tracker);
    const broken = makeTestService("ns1", "svc1", (svc) => {
      svc.spec.clusterIP = "172.30.0.1";
      svc.spec.ports = [{ name: "p", port: 0, protocol: "UDP" }];
    });
    tracker.update(v1, broken);
    tracker.update(broken, v2); // `broken` as previous is not warned about again
    tracker.update(v2, broken);
    m.apply(tracker);
    assert.equal(m.size, 0);
    assert.deepEqual(warnings, [
      "skipping spec.ports[0] of Service ns1/svc1: spec.ports[0].port: must be 1-65535 (got 0)",
      "skipping spec.ports[0] of Service ns1/svc1: spec.ports[0].port: must be 1-65535 (got 0)",
    ]);
  });

  it("applies one change among many without touching the others", () => {
    const tracker = newTracker();
    const m = new ServicePortMap();
    const make = (i: number, port: number) =>
      makeTestService("ns", `svc${i}`, (svc) => {
        svc.spec.clusterIP = `172.30.${i >> 8}.${i & 255}`;
        svc.spec.ports = [{ name: "p", port, protocol: "TCP" }];
      });
    for (let i = 0; i < 10000; i++) tracker.update(null, make(i, 80));
    assert.equal(m.apply(tracker).changedServices.size, 10000);
    tracker.update(make(4242, 80), make(4242, 8080));
    const result = m.apply(tracker);
    assert.deepEqual([...result.changedServices], ["ns/svc4242"]);
    assert.deepEqual([...result.updatedServices], ["ns/svc4242:p/TCP"]);
    assert.equal(m.size, 10000);
    assert.equal(m.get("ns/svc4242:p/TCP")?.port, 8080);
  });
});
