/**
 * End to end, nftables mode with ServiceCIDRs: dist/edgeproxy --proxy-mode nftables in a "node" network
 * namespace watches networking.k8s.io/v1 ServiceCIDRs on the test apiserver and writes upstream's
 * `cluster-ips-check` rules from them. Real traffic from the external client proves: an allocated ClusterIP
 * answers; an allocated ClusterIP on a port no Service uses is rejected; an unallocated address inside the
 * ServiceCIDR is dropped (no answer at all); an address outside it is not touched by the rule. Changing the
 * ServiceCIDR moves the drop to the new range (a partial sync), and deleting it removes the rule. The state
 * cache carries ServiceCIDRs: an offline restart programs the drop rule before the apiserver is back.
 *
 * To tell "dropped by the rule" from "routed on and lost", the lan namespace (the node's default route)
 * takes both ranges as local addresses and runs echo servers there: a packet the node lets through is
 * answered by "lan" (a real cluster would black-hole it).
 * Needs root, `ip netns`, nft and dist/edgeproxy (`bash compile.sh`).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  createE2eCluster,
  E2E_ADDRS as A,
  type E2eCluster,
  e2eUnavailableReason,
} from "../support/e2e_cluster.ts";
import { e2eEndpointSlice, e2eService } from "../support/e2e_objects.ts";
import { pollUntil } from "../support/e2e_poll.ts";
import { type EchoResult, startEchoServer } from "../support/echo_server.ts";

const skip = e2eUnavailableReason();
if (skip !== "") console.log(`SKIP tests/e2e/nftables_service_cidrs_test.ts: ${skip}`);

const SVC_IP = "10.96.0.10";
const UNALLOCATED_A = "10.96.0.99";
const UNALLOCATED_B = "10.97.0.99";

/** What one request got, reduced to a word: a reply's id, "refused", "timeout" or "error". */
function outcome(r: EchoResult): string {
  if (r === "refused" || r === "timeout") return r;
  if (typeof r === "object" && r !== null && "id" in r) return `reply:${r.id}`;
  return "error";
}

describe("edgeproxy agent e2e: nftables mode drops traffic to unallocated ClusterIPs (ServiceCIDRs)", {
  skip: skip || undefined,
}, () => {
  let c: E2eCluster;
  let stateDir: string;
  const start = (extra: string[] = [], waitReady = true) =>
    c.startAgent({
      stateDir,
      syncPeriod: "30s",
      verbosity: 4,
      extraArgs: ["--proxy-mode", "nftables", ...extra],
      waitReady,
    });

  const ask = async (host: string, port: number, proto: "tcp" | "udp" = "tcp") =>
    outcome((await c.request(c.client, { host, port, proto, count: 1, timeoutMs: 1200 }))[0]);
  const checkRules = async () =>
    (await c.node.execOk(["nft", "list", "chain", "ip", "kube-proxy", "cluster-ips-check"])).split("\n")
      .filter((l) => l.includes("daddr")).map((l) => l.trim().replace(/ comment .*/, ""));

  before(async () => {
    stateDir = await mkdtemp(join(tmpdir(), "edgeproxy-nftc-state-"));
    c = await createE2eCluster({ prefix: "nftc", agent: false });
    c.apiserver.create(
      "services",
      e2eService({
        name: "web",
        clusterIP: SVC_IP,
        ports: [{ name: "http", port: 80, targetPort: c.echoPort }, {
          name: "dns",
          port: 53,
          targetPort: c.echoPort,
          protocol: "UDP",
        }],
      }),
    );
    c.apiserver.create(
      "endpointslices",
      e2eEndpointSlice({
        service: "web",
        ports: [{ name: "http", port: c.echoPort }, { name: "dns", port: c.echoPort, protocol: "UDP" }],
        endpoints: [{ ip: c.localPods[0].ip, nodeName: c.nodeName }],
      }),
    );
    c.apiserver.create("servicecidrs", {
      metadata: { name: "kubernetes" },
      spec: { cidrs: ["10.96.0.0/16"] },
    });
    // What the node lets through reaches "lan", which answers for both ranges (see the module header).
    await c.lan.execOk(["ip", "route", "add", "local", "10.96.0.0/16", "dev", "lo"]);
    await c.lan.execOk(["ip", "route", "add", "local", "10.97.0.0/16", "dev", "lo"]);
    await c.lan.execOk(["ip", "route", "add", "default", "via", A.nodeIP]);
    await c.lan.execOk(["sysctl", "-qw", "net.ipv4.conf.all.rp_filter=0"]);
    for (const port of [80, 81, 53, 54]) await startEchoServer(c.scope, c.lan, { id: "lan", port });
    await start();
  });

  after(async () => {
    await c?.teardown();
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it("writes the drop rule from the ServiceCIDR; allocated answers, unused port rejected, unallocated dropped", async () => {
    await pollUntil(checkRules, (r) => r.length === 2, { timeoutMs: 10_000, what: "drop rule written" });
    assert.deepEqual(await checkRules(), [
      "ip daddr @cluster-ips reject",
      "ip daddr 10.96.0.0/16 drop",
    ]);
    assert.equal(await ask(SVC_IP, 80), "reply:pod1");
    assert.equal(await ask(SVC_IP, 53, "udp"), "reply:pod1");
    assert.equal(await ask(SVC_IP, 81), "refused", "allocated ClusterIP, unused port: rejected");
    // The echo client does not see the ICMP error of a UDP reject (it reports no answer); the node's ICMP
    // counters show it sent one (a drop sends none), and the packet did not reach "lan".
    const sentBefore = await icmpUnreachables(c);
    assert.notEqual(
      await ask(SVC_IP, 54, "udp"),
      "reply:lan",
      "allocated ClusterIP, unused UDP port: stopped",
    );
    assert.equal(
      (await icmpUnreachables(c)) - sentBefore,
      1,
      "allocated ClusterIP, unused UDP port: rejected",
    );
    const sentBeforeDrop = await icmpUnreachables(c);
    assert.equal(await ask(UNALLOCATED_A, 80), "timeout", "unallocated address in the CIDR: dropped");
    assert.equal(await ask(UNALLOCATED_A, 53, "udp"), "timeout");
    assert.equal((await icmpUnreachables(c)) - sentBeforeDrop, 0, "unallocated: dropped, not rejected");
    // Outside the ServiceCIDR the rule does nothing: the packet is routed on.
    assert.equal(await ask(UNALLOCATED_B, 80), "reply:lan", "outside the CIDR: not dropped by the rule");
  });

  it("a changed ServiceCIDR moves the drop to the new range at once (a partial sync); deleting it removes the rule", async () => {
    const partialBefore = await partialSyncs(c);
    c.apiserver.update("servicecidrs", {
      metadata: { name: "kubernetes" },
      spec: { cidrs: ["10.97.0.0/16"] },
    });
    await pollUntil(checkRules, (r) => r.includes("ip daddr 10.97.0.0/16 drop"), {
      timeoutMs: 5_000,
      what: "drop rule moved",
    });
    assert.ok((await partialSyncs(c)) > partialBefore, "the change was a partial sync");
    assert.equal(await ask(UNALLOCATED_B, 80), "timeout", "now inside the CIDR: dropped");
    assert.equal(await ask(UNALLOCATED_A, 80), "reply:lan", "now outside: not dropped by the rule");
    assert.equal(await ask(SVC_IP, 80), "reply:pod1", "the Service still answers");

    c.apiserver.remove("servicecidrs", "", "kubernetes");
    await pollUntil(checkRules, (r) => r.length === 1, { timeoutMs: 5_000, what: "drop rule removed" });
    assert.equal(await ask(UNALLOCATED_B, 80), "reply:lan", "no ServiceCIDR: nothing dropped");
    assert.equal(await ask(SVC_IP, 81), "refused", "unused ports of ClusterIPs are still rejected");
  });

  it("an offline restart programs the drop rule from the state cache", async () => {
    c.apiserver.create("servicecidrs", {
      metadata: { name: "kubernetes" },
      spec: { cidrs: ["10.96.0.0/16"] },
    });
    await pollUntil(checkRules, (r) => r.length === 2, { timeoutMs: 5_000, what: "drop rule back" });
    // The cache writer coalesces writes (at most one per 10 s): wait for the one holding the ServiceCIDR.
    await pollUntil(
      () => readFile(join(stateDir, "state.json"), "utf8").catch(() => ""),
      (text) => text.includes('"10.96.0.0/16"'),
      { timeoutMs: 20_000, what: "the state cache holding the ServiceCIDR" },
    );
    await c.agent!.stop("SIGKILL");
    await c.node.execOk(["nft", "flush", "ruleset"]);
    await c.apiserverLink.cut();
    try {
      await start(["--cache-start-deadline", "1s"], false);
      await pollUntil(checkRules, (r) => r.includes("ip daddr 10.96.0.0/16 drop"), {
        timeoutMs: 10_000,
        what: "drop rule from the state cache",
      });
      assert.match(c.agent!.logs(), /from the state cache written/);
      assert.equal(await ask(UNALLOCATED_A, 80), "timeout", "dropped while the apiserver is away");
      assert.equal(await ask(SVC_IP, 80), "reply:pod1");
    } finally {
      await c.apiserverLink.restore();
    }
  });
});

/** The agent's count of partial IPv4 syncs so far (from /metrics). */
async function partialSyncs(c: E2eCluster): Promise<number> {
  const m = await c.node.execOk(["curl", "-s", "http://127.0.0.1:10249/metrics"]);
  const line = m.split("\n").find((l) =>
    l.startsWith('kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family="IPv4"}')
  );
  return line === undefined ? 0 : Number(line.split(" ").at(-1));
}

/** Destination-unreachable ICMP messages the node namespace has sent so far (/proc/net/snmp). */
async function icmpUnreachables(c: E2eCluster): Promise<number> {
  const lines = (await c.node.execOk(["cat", "/proc/net/snmp"])).split("\n").filter((l) =>
    l.startsWith("Icmp:")
  );
  const [names, values] = lines.map((l) => l.trim().split(/\s+/));
  return Number(values[names.indexOf("OutDestUnreachs")]);
}
