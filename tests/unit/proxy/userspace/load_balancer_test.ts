import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { LoadBalancerRR, type TrafficKind } from "../../../../lib/proxy/userspace/load_balancer.ts";
import {
  makeEndpoint,
  makeServicePort,
  type ServicePortFixture,
  TEST_NODE_NAME,
} from "../../../support/tracer.ts";

const KEY = "ns1/svc1:p80/TCP";

function svc(f: Partial<ServicePortFixture> = {}) {
  return makeServicePort("ns1", "svc1", { clusterIP: "172.30.0.41", ...f });
}

function lb(now = { t: 0 }, backoffMs = 5000) {
  return new LoadBalancerRR({ nodeName: TEST_NODE_NAME, now: () => now.t, deadEndpointBackoffMs: backoffMs });
}

function picks(
  b: LoadBalancerRR,
  n: number,
  client = "10.1.0.1",
  kind: TrafficKind = "internal",
) {
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(b.nextEndpoint(KEY, kind, client)?.ip ?? "none");
  return out;
}

const three = [makeEndpoint("10.0.0.1", 80), makeEndpoint("10.0.0.2", 80), makeEndpoint("10.0.0.3", 80)];

describe("LoadBalancerRR: round robin", () => {
  it("cycles over the ready endpoints in order", () => {
    const b = lb();
    b.onEndpointsUpdate(KEY, svc(), three, {});
    assert.deepEqual(picks(b, 4), ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.1"]);
  });

  it("returns null for an unknown service port or one without endpoints", () => {
    const b = lb();
    assert.equal(b.nextEndpoint(KEY, "internal", "10.1.0.1"), null);
    b.onEndpointsUpdate(KEY, svc(), [], {});
    assert.equal(b.nextEndpoint(KEY, "internal", "10.1.0.1"), null);
    assert.equal(b.hasEndpoints(KEY, "internal"), false);
  });

  it("uses the core's endpoint selection: not-ready skipped, terminating fallback", () => {
    const b = lb();
    b.onEndpointsUpdate(KEY, svc(), [
      makeEndpoint("10.0.0.1", 80),
      makeEndpoint("10.0.0.2", 80, { ready: false, serving: true, terminating: true }),
    ], {});
    assert.deepEqual(picks(b, 2), ["10.0.0.1", "10.0.0.1"]);
    b.onEndpointsUpdate(KEY, svc(), [
      makeEndpoint("10.0.0.2", 80, { ready: false, serving: true, terminating: true }),
      makeEndpoint("10.0.0.3", 80, { ready: false, serving: false, terminating: false }),
    ], {});
    assert.deepEqual(picks(b, 2), ["10.0.0.2", "10.0.0.2"]);
  });

  it("internal traffic follows internalTrafficPolicy, external traffic externalTrafficPolicy", () => {
    const b = lb();
    const eps = [makeEndpoint("10.0.0.1", 80), makeEndpoint("10.0.0.2", 80, { nodeName: TEST_NODE_NAME })];
    b.onEndpointsUpdate(KEY, svc({ nodePort: 30080, externalPolicyLocal: true }), eps, {});
    assert.deepEqual(picks(b, 2, "10.1.0.1", "internal"), ["10.0.0.1", "10.0.0.2"]);
    assert.deepEqual(picks(b, 2, "10.1.0.1", "external"), ["10.0.0.2", "10.0.0.2"]);
    b.onEndpointsUpdate(KEY, svc({ internalPolicyLocal: true }), eps, {});
    assert.deepEqual(picks(b, 2, "10.1.0.1", "internal"), ["10.0.0.2", "10.0.0.2"]);
  });

  it("the cluster pool (external destinations from pods and the node) ignores externalTrafficPolicy", () => {
    const b = lb();
    const eps = [makeEndpoint("10.0.0.1", 80), makeEndpoint("10.0.0.2", 80, { nodeName: TEST_NODE_NAME })];
    b.onEndpointsUpdate(KEY, svc({ nodePort: 30080, externalPolicyLocal: true }), eps, {});
    assert.deepEqual(picks(b, 2, "10.1.0.1", "cluster"), ["10.0.0.1", "10.0.0.2"]);
  });

  it("keeps the cursor when the endpoint list is unchanged and clamps it when it shrinks", () => {
    const b = lb();
    b.onEndpointsUpdate(KEY, svc(), three, {});
    assert.deepEqual(picks(b, 2), ["10.0.0.1", "10.0.0.2"]);
    b.onEndpointsUpdate(KEY, svc(), [...three], {});
    assert.deepEqual(picks(b, 1), ["10.0.0.3"]);
    b.onEndpointsUpdate(KEY, svc(), three.slice(0, 2), {});
    assert.deepEqual(picks(b, 3), ["10.0.0.1", "10.0.0.2", "10.0.0.1"]);
  });

  it("forgets deleted service ports", () => {
    const b = lb();
    b.onEndpointsUpdate(KEY, svc(), three, {});
    b.deleteService(KEY);
    assert.deepEqual([...b.services()], []);
    assert.equal(b.nextEndpoint(KEY, "internal", "10.1.0.1"), null);
  });
});

describe("LoadBalancerRR: ClientIP affinity", () => {
  it("keeps a client on its endpoint until the timeout passes without use", () => {
    const now = { t: 0 };
    const b = lb(now);
    b.onEndpointsUpdate(KEY, svc({ stickyMaxAgeSeconds: 10 }), three, {});
    assert.deepEqual(picks(b, 3, "10.1.0.1"), ["10.0.0.1", "10.0.0.1", "10.0.0.1"]);
    assert.deepEqual(picks(b, 2, "10.1.0.2"), ["10.0.0.2", "10.0.0.2"]);
    now.t = 9_999; // used at 0: still within 10 s, and this use refreshes it
    assert.deepEqual(picks(b, 1, "10.1.0.1"), ["10.0.0.1"]);
    now.t = 19_998;
    assert.deepEqual(picks(b, 1, "10.1.0.1"), ["10.0.0.1"]);
    now.t = 29_998; // 10 s after the last use: expired, next in round robin
    assert.deepEqual(picks(b, 1, "10.1.0.1"), ["10.0.0.3"]);
  });

  it("drops an affinity whose endpoint left, and resets it on request", () => {
    const b = lb();
    b.onEndpointsUpdate(KEY, svc({ stickyMaxAgeSeconds: 100 }), three, {});
    assert.deepEqual(picks(b, 1, "10.1.0.1"), ["10.0.0.1"]);
    b.onEndpointsUpdate(KEY, svc({ stickyMaxAgeSeconds: 100 }), three.slice(1), {});
    const next = picks(b, 2, "10.1.0.1");
    assert.notEqual(next[0], "10.0.0.1");
    assert.equal(next[0], next[1]);
    const reset = b.nextEndpoint(KEY, "internal", "10.1.0.1", true)?.ip;
    assert.notEqual(reset, next[0]);
    assert.deepEqual(picks(b, 1, "10.1.0.1"), [reset]);
  });

  it("no affinity without a timeout", () => {
    const b = lb();
    b.onEndpointsUpdate(KEY, svc(), three, {});
    assert.deepEqual(picks(b, 3, "10.1.0.1"), ["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
  });
});

describe("LoadBalancerRR: dead-endpoint backoff", () => {
  it("skips an endpoint whose dial failed until the backoff expires or a dial succeeds", () => {
    const now = { t: 0 };
    const b = lb(now, 5000);
    b.onEndpointsUpdate(KEY, svc(), three, {});
    b.markDialFailed("10.0.0.2:80");
    assert.deepEqual(picks(b, 4), ["10.0.0.1", "10.0.0.3", "10.0.0.1", "10.0.0.3"]);
    now.t = 5000;
    assert.deepEqual(picks(b, 3), ["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    b.markDialFailed("10.0.0.3:80");
    b.markDialSucceeded("10.0.0.3:80");
    assert.deepEqual(picks(b, 3), ["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
  });

  it("falls back to plain round robin when every endpoint is backed off", () => {
    const b = lb();
    b.onEndpointsUpdate(KEY, svc(), three.slice(0, 2), {});
    b.markDialFailed("10.0.0.1:80");
    b.markDialFailed("10.0.0.2:80");
    assert.deepEqual(picks(b, 3), ["10.0.0.1", "10.0.0.2", "10.0.0.1"]);
  });

  it("moves an affine client off a backed-off endpoint", () => {
    const b = lb();
    b.onEndpointsUpdate(KEY, svc({ stickyMaxAgeSeconds: 100 }), three, {});
    assert.deepEqual(picks(b, 1, "10.1.0.1"), ["10.0.0.1"]);
    b.markDialFailed("10.0.0.1:80");
    assert.deepEqual(picks(b, 2, "10.1.0.1"), ["10.0.0.2", "10.0.0.2"]);
  });

  it("cleanupStale drops expired affinity and backoff entries", () => {
    const now = { t: 0 };
    const b = lb(now, 1000);
    b.onEndpointsUpdate(KEY, svc({ stickyMaxAgeSeconds: 1 }), three, {});
    assert.deepEqual(picks(b, 1, "10.1.0.1"), ["10.0.0.1"]);
    b.markDialFailed("10.0.0.2:80");
    now.t = 1000;
    b.cleanupStale();
    assert.deepEqual(picks(b, 2, "10.1.0.1"), ["10.0.0.2", "10.0.0.2"]);
  });
});
