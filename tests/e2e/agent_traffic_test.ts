/**
 * End to end, whole agent: dist/edgeproxy runs inside a "node" network namespace against the in-process
 * test apiserver and programs the real kernel; real TCP and UDP from pods, an external client and the
 * node itself show which endpoint answered and which source address it saw (masqueraded or not). The
 * expectations are upstream's traffic-policy truth table (research notes §1.9, §1.10, §2.3).
 * Topology: tests/support/e2e_cluster.ts. Needs root, `ip netns` and dist/edgeproxy (`bash compile.sh`).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  createE2eCluster,
  E2E_ADDRS as A,
  type E2eCluster,
  type E2ePod,
  e2eUnavailableReason,
} from "../support/e2e_cluster.ts";
import { e2eEndpointSlice, e2eService, type E2eServicePort } from "../support/e2e_objects.ts";
import { httpGetIn } from "../support/e2e_http.ts";
import { pollUntil } from "../support/e2e_poll.ts";
import { udpRequestSeeingRejects } from "../support/e2e_udp.ts";
import type { EchoReply, EchoResult } from "../support/echo_server.ts";
import type { Netns } from "../support/netns.ts";

const skip = e2eUnavailableReason();
if (skip !== "") console.log(`SKIP tests/e2e/agent_traffic_test.ts: ${skip}`);

const ECHO = 8080;
const HTTP: E2eServicePort = { name: "http", port: 80, targetPort: ECHO };
const DNS: E2eServicePort = { name: "dns", port: 53, targetPort: ECHO, protocol: "UDP" };
const SLICE_HTTP = { name: "http", port: ECHO };
const SLICE_DNS = { name: "dns", port: ECHO, protocol: "UDP" as const };

const IP = {
  web: "10.96.0.10",
  npCluster: "10.96.0.11",
  lbLocal: "10.96.0.12",
  lbRanges: "10.96.0.13",
  itpLocal: "10.96.0.14",
  spread: "10.96.0.15",
  sticky: "10.96.0.16",
  empty: "10.96.0.17",
  lbLocalIngress: "192.0.2.10",
  lbLocalExternal: "192.0.2.20",
  lbRangesIngress: "192.0.2.11",
  lbRangesExternal: "192.0.2.21",
  lbHc: "10.96.0.18",
  lbHcIngress: "192.0.2.12",
};
const NP = {
  cluster: 30080,
  clusterUdp: 30053,
  local: 30081,
  ranges: 30082,
  empty: 30083,
  healthCheck: 32001,
  hc: 30084,
  hcHealth: 32002,
};

function reply(r: EchoResult, what: string): EchoReply {
  assert.ok(
    typeof r === "object" && r !== null && "id" in r,
    `${what}: expected an echo reply, got ${JSON.stringify(r)}`,
  );
  return r as EchoReply;
}

/** "pod1@10.244.1.1" per result: who answered and the source address it saw (or the failure). */
function seen(rs: readonly EchoResult[]): string[] {
  return rs.map((r) =>
    typeof r === "object" && r !== null && "id" in r
      ? `${r.id}@${r.remote.replace(/:\d+$/, "")}`
      : JSON.stringify(r)
  );
}

describe("edgeproxy agent e2e: Service traffic through a real node", { skip: skip || undefined }, () => {
  let c: E2eCluster;
  let pod1: E2ePod;
  let pod2: E2ePod;
  let pod3: E2ePod;
  let remote: E2ePod;

  /** Requests from `from`; every one must be answered. Returns "id@source" per request. */
  async function ask(
    from: Netns,
    host: string,
    port: number,
    o: { count?: number; proto?: "tcp" | "udp" } = {},
  ): Promise<string[]> {
    const rs = await c.request(from, { host, port, proto: o.proto, count: o.count ?? 1, timeoutMs: 2000 });
    rs.forEach((r) => reply(r, `${o.proto ?? "tcp"} ${host}:${port} from ${from.name}`));
    return seen(rs);
  }

  before(async () => {
    c = await createE2eCluster({ prefix: "agtr", agent: false });
    [pod1, pod2, pod3] = c.localPods;
    remote = c.remotePod;
    const local = (p: { ip: string }) => ({ ip: p.ip, nodeName: c.nodeName });
    const onRemote = { ip: remote.ip, nodeName: remote.nodeName } as const;
    const add = (svc: Parameters<typeof e2eService>[0], endpoints: ReturnType<typeof local>[] | null) => {
      c.apiserver.create("services", e2eService(svc));
      if (endpoints) {
        const udp = svc.ports.some((p) => p.protocol === "UDP");
        c.apiserver.create(
          "endpointslices",
          e2eEndpointSlice({
            service: svc.name,
            ports: udp ? [SLICE_HTTP, SLICE_DNS] : [SLICE_HTTP],
            endpoints,
          }),
        );
      }
    };
    add({ name: "web", clusterIP: IP.web, ports: [HTTP, DNS] }, [local(pod1)]);
    add({
      name: "np-cluster",
      type: "NodePort",
      clusterIP: IP.npCluster,
      ports: [{ ...HTTP, nodePort: NP.cluster }, { ...DNS, nodePort: NP.clusterUdp }],
    }, [local(pod2), onRemote]);
    add({
      name: "lb-local",
      type: "LoadBalancer",
      clusterIP: IP.lbLocal,
      ports: [{ ...HTTP, nodePort: NP.local }],
      externalTrafficPolicy: "Local",
      healthCheckNodePort: NP.healthCheck,
      loadBalancerIngress: [IP.lbLocalIngress],
      externalIPs: [IP.lbLocalExternal],
    }, [local(pod3), onRemote]);
    add({
      name: "lb-ranges",
      type: "LoadBalancer",
      clusterIP: IP.lbRanges,
      ports: [{ ...HTTP, nodePort: NP.ranges }],
      loadBalancerIngress: [IP.lbRangesIngress],
      externalIPs: [IP.lbRangesExternal],
      loadBalancerSourceRanges: [`${A.client.replace(/\.\d+$/, ".0")}/24`],
    }, [local(pod1)]);
    add({ name: "itp-local", clusterIP: IP.itpLocal, ports: [HTTP], internalTrafficPolicy: "Local" }, [
      local(pod2),
      onRemote,
    ]);
    const all = [local(pod1), local(pod2), local(pod3), onRemote];
    add({ name: "spread", clusterIP: IP.spread, ports: [HTTP] }, all);
    add({ name: "sticky", clusterIP: IP.sticky, ports: [HTTP], sessionAffinityTimeoutSeconds: 600 }, all);
    add({
      name: "empty",
      type: "NodePort",
      clusterIP: IP.empty,
      ports: [{ ...HTTP, nodePort: NP.empty }, DNS],
    }, null);

    await c.startAgent();
    // The first sync has everything; wait until the last-defined Service answers.
    await pollUntil(
      () => c.request(c.client, { host: IP.sticky, port: 80, timeoutMs: 1000 }),
      (rs) => typeof rs[0] === "object",
      { timeoutMs: 15000, what: "the initial rules to be programmed" },
    ).catch((e) => {
      throw new Error(`${(e as Error).message}\nagent log:\n${c.agent?.tail()}`);
    });
  }, { timeout: 60_000 });

  after(async () => {
    await c?.teardown();
  }, { timeout: 30_000 });

  it("ClusterIP from a pod (TCP and UDP): the endpoint sees the pod's own address", async () => {
    assert.deepEqual(await ask(pod2.ns, IP.web, 80, { count: 2 }), [`pod1@${pod2.ip}`, `pod1@${pod2.ip}`]);
    assert.deepEqual(await ask(pod2.ns, IP.web, 53, { proto: "udp" }), [`pod1@${pod2.ip}`]);
  });

  it("ClusterIP from the external client (TCP and UDP): masqueraded to the node's address", async () => {
    assert.deepEqual(await ask(c.client, IP.web, 80, { count: 2 }), [
      `pod1@${A.podGateway}`,
      `pod1@${A.podGateway}`,
    ]);
    assert.deepEqual(await ask(c.client, IP.web, 53, { proto: "udp" }), [`pod1@${A.podGateway}`]);
  });

  it("ClusterIP from the node itself: masqueraded", async () => {
    assert.deepEqual(await ask(c.node, IP.web, 80), [`pod1@${A.podGateway}`]);
  });

  it("a pod reaching its own Service through the ClusterIP (hairpin) is masqueraded", async () => {
    assert.deepEqual(await ask(pod1.ns, IP.web, 80), [`pod1@${A.podGateway}`]);
  });

  it("NodePort, externalTrafficPolicy=Cluster: local and remote endpoints answer, masqueraded", async () => {
    const got = await ask(c.client, A.nodeIP, NP.cluster, { count: 16 });
    const expected = new Set([`pod2@${A.podGateway}`, `remote@${A.remotePodGateway}`]);
    for (const g of got) assert.ok(expected.has(g), `unexpected ${g} in ${got}`);
    assert.deepEqual(new Set(got), expected, `16 connections should reach both endpoints: ${got}`);
    const udp = await ask(c.client, A.nodeIP, NP.clusterUdp, { proto: "udp", count: 4 });
    for (const g of udp) assert.ok(expected.has(g), `UDP NodePort: unexpected ${g} in ${udp}`);
  });

  it("NodePort, externalTrafficPolicy=Local: only the local endpoint, client address preserved", async () => {
    const got = await ask(c.client, A.nodeIP, NP.local, { count: 12 });
    assert.deepEqual(new Set(got), new Set([`pod3@${A.client}`]), String(got));
  });

  it("LoadBalancer IP and externalIP, externalTrafficPolicy=Local: local endpoint, client address preserved", async () => {
    assert.deepEqual(
      new Set(await ask(c.client, IP.lbLocalIngress, 80, { count: 8 })),
      new Set([`pod3@${A.client}`]),
    );
    assert.deepEqual(
      new Set(await ask(c.client, IP.lbLocalExternal, 80, { count: 8 })),
      new Set([`pod3@${A.client}`]),
    );
  });

  it("externalTrafficPolicy=Local from a pod to the LoadBalancer IP: all endpoints (short-circuit), not masqueraded", async () => {
    const got = await ask(pod1.ns, IP.lbLocalIngress, 80, { count: 16 });
    assert.deepEqual(new Set(got), new Set([`pod3@${pod1.ip}`, `remote@${pod1.ip}`]), String(got));
  });

  it("ClusterIP of the externalTrafficPolicy=Local Service still uses all endpoints", async () => {
    const got = await ask(pod1.ns, IP.lbLocal, 80, { count: 16 });
    assert.deepEqual(new Set(got), new Set([`pod3@${pod1.ip}`, `remote@${pod1.ip}`]), String(got));
  });

  it("health-check node port of the externalTrafficPolicy=Local LoadBalancer: open, names its Service", async () => {
    // The listener opens asynchronously after the sync that found the Service: allow it a moment.
    const { value: h } = await pollUntil(
      () => httpGetIn(c.client, `http://${A.nodeIP}:${NP.healthCheck}/`),
      (a) => a.status === 200 || a.status === 503,
      { timeoutMs: 3000, what: "the health-check node port to answer" },
    );
    const body = JSON.parse(h.body);
    assert.deepEqual(body.service, { namespace: "e2e", name: "lb-local" });
    assert.equal(body.serviceProxyHealthy, true);
    assert.equal(h.status, body.localEndpoints > 0 ? 200 : 503);
    assert.equal(h.headers["x-load-balancing-endpoint-weight"], String(body.localEndpoints));
    assert.equal(h.headers["content-type"], "application/json");
    assert.equal(h.headers["x-content-type-options"], "nosniff");
  });

  it("health-check node port counts the local endpoint (200) of a LoadBalancer added while running", async () => {
    // The EndpointSlice first, so that one sync sees the Service together with its endpoint.
    c.apiserver.create(
      "endpointslices",
      e2eEndpointSlice({
        service: "lb-hc",
        ports: [SLICE_HTTP],
        endpoints: [{ ip: pod2.ip, nodeName: c.nodeName }],
      }),
    );
    c.apiserver.create(
      "services",
      e2eService({
        name: "lb-hc",
        type: "LoadBalancer",
        clusterIP: IP.lbHc,
        ports: [{ ...HTTP, nodePort: NP.hc }],
        externalTrafficPolicy: "Local",
        healthCheckNodePort: NP.hcHealth,
        loadBalancerIngress: [IP.lbHcIngress],
      }),
    );
    await pollUntil(() => c.request(c.client, { host: A.nodeIP, port: NP.hc, timeoutMs: 500 }), (r) => {
      const x = r[0];
      return typeof x === "object" && "id" in x && x.id === "pod2";
    }, { timeoutMs: 5000, what: "the new LoadBalancer to carry traffic" });
    for (const [port, name] of [[NP.hcHealth, "lb-hc"], [NP.healthCheck, "lb-local"]] as const) {
      const { value: h } = await pollUntil(
        () => httpGetIn(c.client, `http://${A.nodeIP}:${port}/`),
        (a) => a.status === 200,
        { timeoutMs: 3000, what: `the health check of ${name} to answer 200` },
      );
      assert.equal(JSON.parse(h.body).localEndpoints, 1);
      assert.equal(h.headers["x-load-balancing-endpoint-weight"], "1");
    }
  });

  it("LoadBalancer IP and externalIP, externalTrafficPolicy=Cluster, allowed source: masqueraded", async () => {
    assert.deepEqual(await ask(c.client, IP.lbRangesIngress, 80, { count: 2 }), [
      `pod1@${A.podGateway}`,
      `pod1@${A.podGateway}`,
    ]);
    assert.deepEqual(await ask(c.client, IP.lbRangesExternal, 80), [`pod1@${A.podGateway}`]);
  });

  it("loadBalancerSourceRanges: another source is dropped at the LB IP; its NodePort and externalIP stay open", async () => {
    const denied = await c.request(c.deniedClient, { host: IP.lbRangesIngress, port: 80, timeoutMs: 1000 });
    assert.deepEqual(denied, ["timeout"], "dropped (no answer, no reject)");
    assert.deepEqual(await ask(c.deniedClient, A.nodeIP, NP.ranges), [`pod1@${A.podGateway}`]);
    assert.deepEqual(await ask(c.deniedClient, IP.lbRangesExternal, 80), [`pod1@${A.podGateway}`]);
    // ...and a pod's address is not in the ranges either.
    const fromPod = await c.request(pod2.ns, { host: IP.lbRangesIngress, port: 80, timeoutMs: 1000 });
    assert.deepEqual(fromPod, ["timeout"]);
  });

  it("internalTrafficPolicy=Local: only the local endpoint; from a pod not masqueraded, from outside masqueraded", async () => {
    assert.deepEqual(
      new Set(await ask(pod1.ns, IP.itpLocal, 80, { count: 12 })),
      new Set([`pod2@${pod1.ip}`]),
    );
    assert.deepEqual(
      new Set(await ask(c.client, IP.itpLocal, 80, { count: 6 })),
      new Set([`pod2@${A.podGateway}`]),
    );
  });

  it("session affinity ClientIP: the same endpoint every time (and several without it)", async () => {
    const spread = await ask(c.client, IP.spread, 80, { count: 16 });
    assert.ok(
      new Set(spread).size >= 2,
      `without affinity 16 connections over 4 endpoints hit one only: ${spread}`,
    );
    const sticky = await ask(c.client, IP.sticky, 80, { count: 12 });
    assert.equal(new Set(sticky).size, 1, `with ClientIP affinity: ${sticky}`);
    const fromPod = await ask(pod3.ns, IP.sticky, 80, { count: 8 });
    assert.equal(new Set(fromPod).size, 1, `with ClientIP affinity, from a pod: ${fromPod}`);
  });

  it("a Service without endpoints: TCP refused (REJECT) at the ClusterIP and NodePort; UDP port unreachable", async () => {
    assert.deepEqual(await c.request(c.client, { host: IP.empty, port: 80 }), ["refused"]);
    assert.deepEqual(await c.request(pod1.ns, { host: IP.empty, port: 80 }), ["refused"]);
    assert.deepEqual(await c.request(c.client, { host: A.nodeIP, port: NP.empty }), ["refused"]);
    assert.deepEqual(await udpRequestSeeingRejects(c.client, { host: IP.empty, port: 53 }), ["refused"]);
  });

  it("a port no Service uses on a Service IP is not answered (no rule, not rejected)", async () => {
    assert.deepEqual(await c.request(c.client, { host: IP.web, port: 81, timeoutMs: 800 }), ["timeout"]);
  });

  it("the agent is still running and logged no sync failure", () => {
    assert.equal(c.agent?.exit(), null, `agent exited: ${c.agent?.tail()}`);
    assert.doesNotMatch(c.agent!.logs(), /iptables-restore failed|internal error/, c.agent!.tail());
  });
});
