/**
 * Stale conntrack cleanup: the pure filter computation (upstream's reconciler rules) and the reconciler's
 * bookkeeping of removed frontends, against a fake ConntrackRunner.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  buildServingIndex,
  removedFrontends,
  type ServicePortEndpoints,
  servicePortFrontends,
  staleFlowFilters,
  StaleFlowReconciler,
} from "../../../../lib/proxy/conntrack/cleanup.ts";
import {
  type ConntrackDeleteFilter,
  type ConntrackFlow,
  filterMatches,
} from "../../../../lib/proxy/conntrack/flow.ts";
import type { ConntrackRunner } from "../../../../lib/proxy/conntrack/runner.ts";
import { canonicalIP } from "../../../../lib/net/ip.ts";
import type { EndpointInfo, IPFamily, Protocol, ServicePortInfo } from "../../../../lib/proxy/types.ts";

function svc(
  name: string,
  clusterIP: string,
  port: number,
  extra: Partial<ServicePortInfo> = {},
): ServicePortInfo {
  return {
    name: { namespace: "ns", name, port: "p", protocol: extra.protocol ?? "UDP" },
    clusterIP,
    port,
    protocol: "UDP",
    nodePort: 0,
    externalIPs: [],
    loadBalancerVIPs: [],
    loadBalancerSourceRanges: [],
    stickyMaxAgeSeconds: 0,
    externalPolicyLocal: false,
    internalPolicyLocal: false,
    healthCheckNodePort: 0,
    ...extra,
  };
}

function ep(ip: string, port: number, state: Partial<EndpointInfo> = {}): EndpointInfo {
  return {
    ip,
    port,
    endpoint: ip.includes(":") ? `[${ip}]:${port}` : `${ip}:${port}`,
    isLocal: false,
    ready: true,
    serving: true,
    terminating: false,
    zoneHints: null,
    nodeHints: null,
    nodeName: "node-a",
    zone: "",
    ...state,
  };
}

let nextSport = 40000;
function flow(
  origDst: string,
  origDstPort: number,
  replySrc: string,
  replySrcPort: number,
  protocol: Protocol = "UDP",
): ConntrackFlow {
  const family: IPFamily = origDst.includes(":") ? "IPv6" : "IPv4";
  const client = family === "IPv6" ? "fd00::c1" : "10.0.0.1";
  const sport = nextSport++;
  return {
    family,
    protocol,
    origSrc: client,
    origDst,
    origSrcPort: sport,
    origDstPort,
    replySrc,
    replyDst: client,
    replySrcPort,
    replyDstPort: sport,
  };
}

/** Runs the pure pipeline and returns which flows the filters would delete. */
function stale(
  family: IPFamily,
  servicePorts: ServicePortEndpoints[],
  flows: ConntrackFlow[],
  removed: ServicePortInfo[] = [],
): { filters: ConntrackDeleteFilter[]; deleted: ConntrackFlow[] } {
  const removedF = removed.flatMap((s) => servicePortFrontends(s, family));
  const index = buildServingIndex(family, servicePorts, removedF);
  const filters = staleFlowFilters(family, index, flows);
  return { filters, deleted: flows.filter((f) => filters.some((flt) => filterMatches(flt, f))) };
}

const dns = svc("dns", "10.96.0.10", 53, {
  externalIPs: ["192.0.2.10"],
  loadBalancerVIPs: ["198.51.100.10"],
  nodePort: 30053,
});

describe("staleFlowFilters (upstream reconciler rules)", () => {
  it("deletes flows DNATed to a removed endpoint, on every frontend, and keeps the serving ones", () => {
    const flows = [
      flow("10.96.0.10", 53, "10.244.1.5", 5353), // old endpoint via ClusterIP
      flow("192.0.2.10", 53, "10.244.1.5", 5353), // via external IP
      flow("198.51.100.10", 53, "10.244.1.5", 5353), // via LB IP
      flow("203.0.113.7", 30053, "10.244.1.5", 5353), // via NodePort on a node address
      flow("10.96.0.10", 53, "10.244.1.6", 5353), // current endpoint
      flow("203.0.113.7", 30053, "10.244.1.6", 5353),
    ];
    const { filters, deleted } = stale(
      "IPv4",
      [{ servicePort: dns, endpoints: [ep("10.244.1.6", 5353)] }],
      flows,
    );
    assert.deepEqual(deleted, flows.slice(0, 4));
    assert.deepEqual(filters, [
      {
        family: "IPv4",
        protocol: "UDP",
        origDst: "10.96.0.10",
        origDstPort: 53,
        replySrc: "10.244.1.5",
        replySrcPort: 5353,
      },
      {
        family: "IPv4",
        protocol: "UDP",
        origDst: "192.0.2.10",
        origDstPort: 53,
        replySrc: "10.244.1.5",
        replySrcPort: 5353,
      },
      {
        family: "IPv4",
        protocol: "UDP",
        origDst: "198.51.100.10",
        origDstPort: 53,
        replySrc: "10.244.1.5",
        replySrcPort: 5353,
      },
      { family: "IPv4", protocol: "UDP", origDstPort: 30053, replySrc: "10.244.1.5", replySrcPort: 5353 },
    ]);
  });

  it("one filter per stale backend, however many clients", () => {
    const flows = Array.from({ length: 50 }, () => flow("10.96.0.10", 53, "10.244.1.5", 5353));
    const { filters, deleted } = stale(
      "IPv4",
      [{ servicePort: dns, endpoints: [ep("10.244.1.6", 5353)] }],
      flows,
    );
    assert.equal(filters.length, 1);
    assert.equal(deleted.length, 50);
  });

  it("compares endpoint ports too: same pod IP, new targetPort is stale", () => {
    const flows = [flow("10.96.0.10", 53, "10.244.1.5", 5353)];
    const { deleted } = stale("IPv4", [{ servicePort: dns, endpoints: [ep("10.244.1.5", 5354)] }], flows);
    assert.equal(deleted.length, 1);
  });

  it("deletes entries made before the rules existed (reply from the service IP itself)", () => {
    const flows = [flow("10.96.0.10", 53, "10.96.0.10", 53)];
    const { deleted } = stale("IPv4", [{ servicePort: dns, endpoints: [ep("10.244.1.6", 5353)] }], flows);
    assert.equal(deleted.length, 1);
  });

  it("a service with no serving endpoints loses all of its flows (upstream #139629)", () => {
    const flows = [flow("10.96.0.10", 53, "10.244.1.5", 5353), flow("10.96.0.10", 53, "10.244.1.6", 5353)];
    const none = stale("IPv4", [{ servicePort: dns, endpoints: [] }], flows);
    assert.equal(none.deleted.length, 2);
    const notServing = stale(
      "IPv4",
      [{ servicePort: dns, endpoints: [ep("10.244.1.5", 5353, { ready: false, serving: false })] }],
      flows,
    );
    assert.equal(notServing.deleted.length, 2, "a non-serving endpoint does not keep its flows");
  });

  it("keeps flows to a terminating endpoint that still serves, whatever the traffic policy", () => {
    const local = svc("dns", "10.96.0.10", 53, { internalPolicyLocal: true });
    const flows = [flow("10.96.0.10", 53, "10.244.1.5", 5353)];
    const { deleted } = stale(
      "IPv4",
      [{
        servicePort: local,
        endpoints: [ep("10.244.1.5", 5353, { ready: false, serving: true, terminating: true })],
      }],
      flows,
    );
    assert.deepEqual(deleted, []);
  });

  it("deleted services: their frontends count as having no endpoints; a reused IP:port follows the current one", () => {
    const gone = svc("gone", "10.96.0.20", 5000, { nodePort: 30500 });
    const reused = svc("reused", "10.96.0.30", 6000);
    const now = svc("now", "10.96.0.30", 6000);
    const flows = [
      flow("10.96.0.20", 5000, "10.244.3.1", 5000),
      flow("203.0.113.7", 30500, "10.244.3.1", 5000),
      flow("10.96.0.30", 6000, "10.244.4.1", 6000), // served by the current owner of the IP:port
      flow("10.96.0.30", 6000, "10.244.9.9", 6000), // left from the deleted previous owner
    ];
    const { deleted } = stale(
      "IPv4",
      [{ servicePort: now, endpoints: [ep("10.244.4.1", 6000)] }],
      flows,
      [gone, reused],
    );
    assert.deepEqual(deleted, [flows[0], flows[1], flows[3]]);
  });

  it("leaves TCP services, other ports, other IPs and the other family alone", () => {
    const tcp = svc("web", "10.96.0.40", 80, { protocol: "TCP" });
    const flows = [
      flow("10.96.0.40", 80, "10.244.1.1", 8080, "TCP"),
      flow("10.96.0.10", 54, "10.244.1.1", 5353), // same IP, another port
      flow("10.96.0.11", 53, "10.244.1.1", 5353), // another IP
      flow("fd00::10", 53, "fd00::99", 53),
    ];
    const { deleted } = stale(
      "IPv4",
      [{ servicePort: dns, endpoints: [ep("10.244.1.6", 5353)] }, { servicePort: tcp, endpoints: [] }],
      flows,
    );
    assert.deepEqual(deleted, []);
  });

  it("IPv6: compares canonical addresses", () => {
    const v6 = svc("dns6", "fd00:96:0:0::10", 53);
    const flows = [flow("fd00:96::10", 53, "fd00:244::5", 53), flow("fd00:96::10", 53, "fd00:244::6", 53)];
    const { filters, deleted } = stale(
      "IPv6",
      [{ servicePort: v6, endpoints: [ep("FD00:244:0::6", 53)] }],
      flows,
    );
    assert.deepEqual(deleted, [flows[0]]);
    assert.equal(filters[0].origDst, "fd00:96::10");
    assert.equal(canonicalIP("FD00:0:0::1"), "fd00::1");
    assert.equal(canonicalIP("10.0.0.1"), "10.0.0.1");
  });

  it("SCTP is cleaned only when asked for", () => {
    const sctp = svc("sig", "10.96.0.50", 9999, { protocol: "SCTP" });
    const flows = [flow("10.96.0.50", 9999, "10.244.1.9", 9999, "SCTP")];
    const sp = [{ servicePort: sctp, endpoints: [] }];
    assert.equal(staleFlowFilters("IPv4", buildServingIndex("IPv4", sp, []), flows).length, 0);
    const both = buildServingIndex("IPv4", sp, [], ["UDP", "SCTP"]);
    assert.equal(staleFlowFilters("IPv4", both, flows).length, 1);
  });

  it("is deterministic: same flows in any order, same filters", () => {
    const flows = [
      flow("10.96.0.10", 53, "10.244.1.7", 5353),
      flow("10.96.0.10", 53, "10.244.1.5", 5353),
      flow("192.0.2.10", 53, "10.244.1.5", 5353),
    ];
    const sp = [{ servicePort: dns, endpoints: [ep("10.244.1.6", 5353)] }];
    const a = stale("IPv4", sp, flows).filters;
    const b = stale("IPv4", sp, [...flows].reverse()).filters;
    assert.deepEqual(a, b);
  });

  it("removedFrontends compares whole frontends", () => {
    const before = servicePortFrontends(dns, "IPv4");
    const after = servicePortFrontends({ ...dns, externalIPs: [], nodePort: 30054 }, "IPv4");
    assert.deepEqual(
      removedFrontends(before, after).map((f) => `${f.kind}:${f.ip}:${f.port}`),
      ["ip:192.0.2.10:53", "nodePort::30053"],
    );
  });
});

class FakeRunner implements ConntrackRunner {
  flows: ConntrackFlow[] = [];
  lists: string[] = [];
  deletes: ConntrackDeleteFilter[][] = [];
  failList = false;

  listFlows(
    family: IPFamily,
    protocol: Protocol,
    keep?: (f: ConntrackFlow) => boolean,
  ): Promise<ConntrackFlow[]> {
    this.lists.push(`${family}/${protocol}`);
    if (this.failList) return Promise.reject(new Error("conntrack -L: exit status 1: simulated"));
    return Promise.resolve(
      this.flows.filter((f) => f.family === family && f.protocol === protocol && (keep?.(f) ?? true)),
    );
  }

  deleteFlows(filters: readonly ConntrackDeleteFilter[]): Promise<number> {
    this.deletes.push([...filters]);
    const before = this.flows.length;
    this.flows = this.flows.filter((f) => !filters.some((flt) => filterMatches(flt, f)));
    return Promise.resolve(before - this.flows.length);
  }
}

describe("StaleFlowReconciler", () => {
  it("does not list at all when there is no UDP frontend", async () => {
    const runner = new FakeRunner();
    const r = new StaleFlowReconciler(runner);
    const res = await r.reconcile("IPv4", [{
      servicePort: svc("web", "10.96.0.40", 80, { protocol: "TCP" }),
      endpoints: [],
    }]);
    assert.equal(res.listed, false);
    assert.deepEqual(runner.lists, []);
  });

  it("lists once per family, deletes stale flows, keeps unrelated ones and reports counts", async () => {
    const runner = new FakeRunner();
    const unrelated = flow("10.96.0.99", 53, "10.244.9.9", 53);
    runner.flows = [
      flow("10.96.0.10", 53, "10.244.1.5", 5353),
      flow("10.96.0.10", 53, "10.244.1.5", 5353),
      flow("10.96.0.10", 53, "10.244.1.6", 5353),
      unrelated,
    ];
    const r = new StaleFlowReconciler(runner);
    const res = await r.reconcile("IPv4", [{ servicePort: dns, endpoints: [ep("10.244.1.6", 5353)] }]);
    assert.deepEqual(runner.lists, ["IPv4/UDP"]);
    assert.equal(res.serviceFlows, 3, "the unrelated flow is filtered out while listing");
    assert.equal(res.filters.length, 1);
    assert.equal(res.entriesDeleted, 2);
    assert.deepEqual(runner.flows.map((f) => f.replySrc), ["10.244.1.6", "10.244.9.9"]);
    assert.ok(runner.flows.includes(unrelated));
  });

  it("flushes a deleted service's flows at the next cleanup, and retries after a failed one", async () => {
    const runner = new FakeRunner();
    const r = new StaleFlowReconciler(runner);
    const gone = svc("gone", "10.96.0.20", 5000);
    await r.reconcile("IPv4", [{ servicePort: gone, endpoints: [ep("10.244.3.1", 5000)] }]);
    runner.flows = [flow("10.96.0.20", 5000, "10.244.3.1", 5000)];

    runner.failList = true;
    await assert.rejects(r.reconcile("IPv4", []), /simulated/);
    assert.equal(runner.flows.length, 1);

    runner.failList = false;
    const res = await r.reconcile("IPv4", []);
    assert.equal(res.listed, true, "the removed frontend is remembered across the failure");
    assert.equal(res.entriesDeleted, 1);

    const after = await r.reconcile("IPv4", []);
    assert.equal(after.listed, false, "and forgotten once cleaned");
  });

  it("prime() seeds the previous frontends once, e.g. from the state cache", async () => {
    const runner = new FakeRunner();
    const r = new StaleFlowReconciler(runner);
    const gone = svc("gone", "10.96.0.20", 5000);
    runner.flows = [flow("10.96.0.20", 5000, "10.244.3.1", 5000)];
    r.prime("IPv4", [{ servicePort: gone, endpoints: [] }]);
    const res = await r.reconcile("IPv4", []);
    assert.equal(res.entriesDeleted, 1, "deleted while we were down: flushed by the first cleanup");
    r.prime("IPv4", [{ servicePort: gone, endpoints: [] }]);
    runner.flows = [flow("10.96.0.20", 5000, "10.244.3.1", 5000)];
    assert.equal((await r.reconcile("IPv4", [])).listed, false, "prime after a reconcile is ignored");
  });

  it("keeps separate memories per family", async () => {
    const runner = new FakeRunner();
    const r = new StaleFlowReconciler(runner);
    await r.reconcile("IPv4", [{ servicePort: dns, endpoints: [] }]);
    const v6 = await r.reconcile("IPv6", []);
    assert.equal(v6.listed, false, "IPv4 frontends are not IPv6 removals");
  });
});
