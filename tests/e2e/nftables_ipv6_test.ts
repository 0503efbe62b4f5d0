/**
 * End to end, nftables mode over IPv6: dist/edgeproxy --proxy-mode nftables in a dual-stack "node" network
 * namespace (tests/support/e2e_cluster.ts with `ipv6: true`) programs table `ip6 kube-proxy` with the real
 * nft and kernel. Real IPv6 traffic from the external client proves: ClusterIP and NodePort, TCP and UDP,
 * reach the local pods over IPv6; a Service without endpoints is rejected; the ServiceCIDR's IPv6 range gets
 * the ip6 drop rule; IPv4 keeps working beside it.
 * Needs root, `ip netns`, nft and dist/edgeproxy (`bash compile.sh`).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  createE2eCluster,
  E2E_ADDRS as A,
  E2E_ADDRS6 as A6,
  type E2eCluster,
  e2ePodIPv6,
  e2eUnavailableReason,
} from "../support/e2e_cluster.ts";
import { e2eEndpointSlice, e2eService } from "../support/e2e_objects.ts";
import { type EchoResult, startEchoServer } from "../support/echo_server.ts";
import { httpGetIn } from "../support/e2e_http.ts";
import { pollUntil } from "../support/e2e_poll.ts";
import type { EndpointSlice, Service } from "../../lib/k8s/objects.ts";

const skip = e2eUnavailableReason();
if (skip !== "") console.log(`SKIP tests/e2e/nftables_ipv6_test.ts: ${skip}`);

/** The pods' IPv6 echo servers listen on "::" here (their IPv4 ones hold 0.0.0.0 on the cluster's port). */
const ECHO6 = 8086;
const SVC6 = "fd00:10:96::10";
const EMPTY6 = "fd00:10:96::20";
const SVC4 = "10.96.0.10";
const NODE_PORT = 30080;
const NODE_PORT_UDP = 30053;
const EMPTY_NODE_PORT = 30081;
const EMPTY_NODE_PORT_UDP = 30054;

/** A reply's id, or "refused" / "timeout" / "error". */
function outcome(r: EchoResult): string {
  if (r === "refused" || r === "timeout") return r;
  if (typeof r === "object" && r !== null && "id" in r) return String(r.id);
  return "error";
}

/** An IPv6 single-stack Service: TCP 80 and UDP 53, NodePorts `tcp`/`udp` when given. */
function service6(name: string, clusterIP: string, nodePorts?: { tcp: number; udp: number }): Service {
  return {
    metadata: { name, namespace: "default" },
    spec: {
      type: nodePorts !== undefined ? "NodePort" : "ClusterIP",
      clusterIP,
      clusterIPs: [clusterIP],
      ipFamilies: ["IPv6"],
      ipFamilyPolicy: "SingleStack",
      selector: { app: name },
      ports: [
        {
          name: "http",
          protocol: "TCP",
          port: 80,
          targetPort: ECHO6,
          ...(nodePorts ? { nodePort: nodePorts.tcp } : {}),
        },
        {
          name: "dns",
          protocol: "UDP",
          port: 53,
          targetPort: ECHO6,
          ...(nodePorts ? { nodePort: nodePorts.udp } : {}),
        },
      ],
    },
  };
}

describe("edgeproxy agent e2e: --proxy-mode nftables over IPv6 (dual-stack node)", {
  skip: skip || undefined,
}, () => {
  let c: E2eCluster;
  let podIds: Set<string>;

  const ask = async (host: string, port: number, proto: "tcp" | "udp" = "tcp", count = 1) =>
    (await c.request(c.client, { host, port, proto, count, timeoutMs: 1500 })).map(outcome);

  before(async () => {
    c = await createE2eCluster({ prefix: "nft6", agent: false, ipv6: true });
    podIds = new Set(c.localPods.map((p) => p.id));
    for (const p of c.localPods) await startEchoServer(c.scope, p.ns, { id: p.id, port: ECHO6, host: "::" });
    c.apiserver.create("services", service6("web6", SVC6, { tcp: NODE_PORT, udp: NODE_PORT_UDP }));
    const slice6: EndpointSlice = {
      metadata: {
        name: "web6-e2e",
        namespace: "default",
        labels: {
          "kubernetes.io/service-name": "web6",
          "endpointslice.kubernetes.io/managed-by": "e2e-test",
        },
      },
      addressType: "IPv6",
      ports: [{ name: "http", port: ECHO6, protocol: "TCP" }, { name: "dns", port: ECHO6, protocol: "UDP" }],
      endpoints: c.localPods.map((_p, i) => ({
        addresses: [e2ePodIPv6(i)],
        conditions: { ready: true, serving: true, terminating: false },
        nodeName: c.nodeName,
      })),
    };
    c.apiserver.create("endpointslices", slice6);
    c.apiserver.create(
      "services",
      service6("empty6", EMPTY6, { tcp: EMPTY_NODE_PORT, udp: EMPTY_NODE_PORT_UDP }),
    );
    // IPv4 beside it.
    c.apiserver.create(
      "services",
      e2eService({
        name: "web4",
        clusterIP: SVC4,
        ports: [{ name: "http", port: 80, targetPort: c.echoPort }],
      }),
    );
    c.apiserver.create(
      "endpointslices",
      e2eEndpointSlice({
        service: "web4",
        ports: [{ name: "http", port: c.echoPort }],
        endpoints: [{ ip: c.localPods[0].ip, nodeName: c.nodeName }],
      }),
    );
    c.apiserver.create("servicecidrs", {
      metadata: { name: "kubernetes" },
      spec: { cidrs: ["10.96.0.0/16", "fd00:10:96::/112"] },
    });
    await c.startAgent({ syncPeriod: "30s", verbosity: 4, extraArgs: ["--proxy-mode", "nftables"] });
    await pollUntil(
      async () => {
        const m = await httpGetIn(c.node, `http://${A.metrics}/metrics`, { timeoutMs: 1000 });
        return /^kubeproxy_sync_proxy_rules_last_timestamp_seconds\{ip_family="IPv6"\} [1-9]/m.test(m.body);
      },
      (ok) => ok,
      { timeoutMs: 15_000, what: "first IPv6 sync" },
    );
  });

  after(async () => {
    await c?.teardown();
  });

  it("programs table ip6 kube-proxy with the IPv6 Services and the ServiceCIDR's IPv6 drop rule", async () => {
    const table = await c.node.execOk(["nft", "list", "table", "ip6", "kube-proxy"]);
    assert.match(table, /fd00:10:96::10 \. tcp \. 80 : goto service-/);
    assert.match(table, /ip6 daddr fd00:10:96::\/112 drop/);
    assert.doesNotMatch(table, /10\.96\.0\.10/, "no IPv4 address in the ip6 table");
  });

  it("ClusterIP over IPv6, TCP and UDP, reaches the local pods", async () => {
    const tcp = await ask(SVC6, 80, "tcp", 6);
    assert.ok(tcp.every((id) => podIds.has(id)), JSON.stringify(tcp));
    const udp = await ask(SVC6, 53, "udp", 6);
    assert.ok(udp.every((id) => podIds.has(id)), JSON.stringify(udp));
  });

  it("NodePort on the node's IPv6 address, TCP and UDP, reaches the local pods", async () => {
    const tcp = await ask(A6.nodeIP, NODE_PORT, "tcp", 4);
    assert.ok(tcp.every((id) => podIds.has(id)), JSON.stringify(tcp));
    const udp = await ask(A6.nodeIP, NODE_PORT_UDP, "udp", 4);
    assert.ok(udp.every((id) => podIds.has(id)), JSON.stringify(udp));
  });

  it("a Service without endpoints is rejected over IPv6, at its ClusterIP and its NodePort", async () => {
    assert.deepEqual(await ask(EMPTY6, 80), ["refused"]);
    assert.deepEqual(await ask(A6.nodeIP, EMPTY_NODE_PORT), ["refused"]);
    // The echo client does not see the ICMPv6 error of a UDP reject (it reports no answer); the node's
    // ICMPv6 counters show it sent one per request (a drop would send none).
    const sentBefore = await icmp6Unreachables(c);
    const udp = [...await ask(EMPTY6, 53, "udp"), ...await ask(A6.nodeIP, EMPTY_NODE_PORT_UDP, "udp")];
    assert.ok(udp.every((r) => !podIds.has(r)), JSON.stringify(udp));
    assert.ok((await icmp6Unreachables(c)) - sentBefore >= 2, "the node rejected both UDP requests");
    const table = await c.node.execOk(["nft", "list", "table", "ip6", "kube-proxy"]);
    assert.match(table, /fd00:10:96::20 \. udp \. 53 comment "default\/empty6:dns" : goto reject-chain/);
    assert.match(table, /udp \. 30054 comment "default\/empty6:dns" : goto reject-chain/);
    assert.deepEqual(await ask(SVC6, 81), ["refused"], "an unused port of an IPv6 ClusterIP is rejected");
  });

  it("IPv4 works beside it", async () => {
    assert.deepEqual(await ask(SVC4, 80), [c.localPods[0].id]);
  });
});

/** Destination-unreachable ICMPv6 messages the node namespace has sent so far (/proc/net/snmp6). */
async function icmp6Unreachables(c: E2eCluster): Promise<number> {
  const snmp = await c.node.execOk(["cat", "/proc/net/snmp6"]);
  const line = snmp.split("\n").find((l) => l.startsWith("Icmp6OutDestUnreachs"));
  return Number(line?.trim().split(/\s+/)[1] ?? NaN);
}
