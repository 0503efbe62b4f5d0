/**
 * End to end, nftables mode: dist/edgeproxy --proxy-mode nftables inside a "node" network namespace
 * against the in-process test apiserver, programming table `kube-proxy` with the real nft and kernel.
 * Proves: switching from iptables mode removes its KUBE-* chains; ClusterIP and NodePort TCP and UDP;
 * an endpoint change applied as a partial sync; drift repair (table deleted, `services` chain flushed,
 * `nft flush ruleset`) within 2 × syncPeriod; an agent restart with zero failed requests; an offline
 * restart from the state cache; `--cleanup` removing both modes' leftovers; /proxyMode and the metrics.
 * Needs root, `ip netns`, nft and dist/edgeproxy (`bash compile.sh`).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  createE2eCluster,
  E2E_ADDRS as A,
  type E2eCluster,
  e2eUnavailableReason,
} from "../support/e2e_cluster.ts";
import { e2eEndpointSlice, e2eService } from "../support/e2e_objects.ts";
import { httpGetIn } from "../support/e2e_http.ts";
import { pollUntil } from "../support/e2e_poll.ts";
import { agentBinaryMissingReason, EDGEPROXY_BINARY, runAgentOnce } from "../support/e2e_agent.ts";
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import type { EchoResult } from "../support/echo_server.ts";
import type { Netns } from "../support/netns.ts";

const skip = e2eUnavailableReason();
if (skip !== "") console.log(`SKIP tests/e2e/nftables_agent_test.ts: ${skip}`);

const ECHO = 8080;
const SVC_IP = "10.96.0.10";
const NODE_PORT = 30080;
const NODE_PORT_UDP = 30053;
const SYNC_PERIOD_S = 2;
const NFT = ["--proxy-mode", "nftables"];

function ids(rs: readonly EchoResult[]): string[] {
  return rs.map((r) => (typeof r === "object" && r !== null && "id" in r ? r.id : JSON.stringify(r)));
}

describe("edgeproxy agent e2e: --proxy-mode nftables", { skip: skip || undefined }, () => {
  let c: E2eCluster;
  let stateDir: string;

  const ask = async (from: Netns, host: string, port: number, count = 1, proto: "tcp" | "udp" = "tcp") =>
    ids(await c.request(from, { host, port, proto, count, timeoutMs: 1500 }));
  const nft = (args: string[]) => c.node.exec(["nft", ...args]);
  const slice = (pods: readonly { ip: string }[]) =>
    e2eEndpointSlice({
      service: "web",
      ports: [{ name: "http", port: ECHO }, { name: "dns", port: ECHO, protocol: "UDP" }],
      endpoints: pods.map((p) => ({ ip: p.ip, nodeName: c.nodeName })),
    });
  const start = (extra: string[] = [], o: { waitReady?: boolean } = {}) =>
    c.startAgent({
      stateDir,
      syncPeriod: `${SYNC_PERIOD_S}s`,
      verbosity: 4,
      extraArgs: [...NFT, ...extra],
      waitReady: o.waitReady,
    });
  /** Polls until the NodePort answers from pod1 again; returns the time it took. */
  const repaired = async (what: string) =>
    (await pollUntil(() => ask(c.client, A.nodeIP, NODE_PORT), (r) => r[0] === c.localPods[0].id, {
      timeoutMs: 2 * SYNC_PERIOD_S * 1000 + 1500,
      intervalMs: 100,
      what: `${what} repaired within 2 × syncPeriod`,
    })).elapsedMs;

  before(async () => {
    stateDir = await mkdtemp(join(tmpdir(), "edgeproxy-nft-state-"));
    c = await createE2eCluster({ prefix: "nfta", agent: false });
    c.apiserver.create(
      "services",
      e2eService({
        name: "web",
        type: "NodePort",
        clusterIP: SVC_IP,
        ports: [
          { name: "http", port: 80, targetPort: ECHO, nodePort: NODE_PORT },
          { name: "dns", port: 53, targetPort: ECHO, protocol: "UDP", nodePort: NODE_PORT_UDP },
        ],
      }),
    );
    c.apiserver.create("endpointslices", slice([c.localPods[0]]));
  }, { timeout: 60_000 });

  after(async () => {
    await c?.teardown();
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  }, { timeout: 30_000 });

  it("switching from iptables mode removes its chains; /proxyMode and the metrics are nftables mode's", async () => {
    await c.startAgent({ syncPeriod: `${SYNC_PERIOD_S}s` }); // iptables mode
    assert.match(await c.iptablesSave("nat"), /KUBE-SERVICES/);
    await start();
    const nat = await c.iptablesSave("nat");
    assert.doesNotMatch(nat, /KUBE-/, `iptables mode's chains must be gone:\n${nat}`);
    // KUBE-FIREWALL (the localnet guard) stays, as upstream's CleanupLeftovers leaves it (kubelet's too).
    assert.doesNotMatch(await c.iptablesSave("filter"), /KUBE-(?!FIREWALL)/);
    const writer = /nftables transactions go through (netlink batches|a libnftables session|nft -f -)/.exec(
      c.agent!.logs(),
    );
    assert.ok(writer, c.agent!.tail());
    console.log(`writer: ${writer[1]}`);
    const mode = await httpGetIn(c.node, `http://${A.metrics}/proxyMode`);
    assert.equal(mode.body, "nftables");
    const m = (await httpGetIn(c.node, `http://${A.metrics}/metrics`)).body;
    assert.match(m, /^kubeproxy_sync_proxy_rules_nftables_sync_failures_total\{ip_family="IPv4"\} 0$/m);
    assert.doesNotMatch(m, /kubeproxy_sync_proxy_rules_iptables_total/);
  });

  it("ClusterIP and NodePort, TCP and UDP", async () => {
    const pod1 = c.localPods[0].id;
    assert.deepEqual(await ask(c.localPods[2].ns, SVC_IP, 80, 2), [pod1, pod1]);
    assert.deepEqual(await ask(c.localPods[2].ns, SVC_IP, 53, 2, "udp"), [pod1, pod1]);
    assert.deepEqual(await ask(c.client, A.nodeIP, NODE_PORT, 2), [pod1, pod1]);
    assert.deepEqual(await ask(c.client, A.nodeIP, NODE_PORT_UDP, 2, "udp"), [pod1, pod1]);
  });

  it("an endpoint change is applied as a partial sync", async () => {
    const [pod1, pod2] = c.localPods;
    const before = c.agent!.logs().length;
    const t0 = Date.now();
    c.apiserver.update("endpointslices", slice([pod1, pod2]));
    const both = await pollUntil(
      () => ask(c.localPods[2].ns, SVC_IP, 80, 12),
      (r) => r.includes(pod1.id) && r.includes(pod2.id),
      { timeoutMs: 10_000, intervalMs: 100, what: "both endpoints answering" },
    );
    const log = c.agent!.logs().slice(before);
    assert.match(log, /partial sync of IPv4 rules took \d+ms/, log);
    console.log(
      `endpoint change → traffic on both endpoints: ${Date.now() - t0} ms (poll ${both.elapsedMs} ms)`,
    );
    c.apiserver.update("endpointslices", slice([pod1]));
    await pollUntil(() => ask(c.client, A.nodeIP, NODE_PORT, 6), (r) => r.every((x) => x === pod1.id), {
      timeoutMs: 10_000,
      what: "back to pod1 only",
    });
  });

  it("drift checks of an untouched table find nothing (no resync in 2.5 × syncPeriod)", async () => {
    const from = c.agent!.logs().length;
    await new Promise((r) => setTimeout(r, 2.5 * SYNC_PERIOD_S * 1000));
    const log = c.agent!.logs().slice(from);
    assert.doesNotMatch(log, /full resync|drift check .* failed/, log);
  });

  it("a foreign commit that leaves our table alone is no drift (no repair, no full sync)", async () => {
    const from = c.agent!.logs().length;
    await nft(["add", "table", "inet", "edgeproxy-test-firewall"]);
    await nft(["add", "chain", "inet", "edgeproxy-test-firewall", "input"]);
    await new Promise((r) => setTimeout(r, 2.5 * SYNC_PERIOD_S * 1000));
    await nft(["delete", "table", "inet", "edgeproxy-test-firewall"]);
    const log = c.agent!.logs().slice(from);
    assert.doesNotMatch(log, /full resync|full sync of IPv4|drift check .* failed/, log);
  });

  it("drift: a deleted table, a flushed services chain and `nft flush ruleset` are repaired", async () => {
    await nft(["delete", "table", "ip", "kube-proxy"]);
    const t1 = await repaired("deleted table");
    await nft(["flush", "chain", "ip", "kube-proxy", "services"]);
    assert.notEqual((await ask(c.client, A.nodeIP, NODE_PORT))[0], c.localPods[0].id, "flush must break it");
    const t2 = await repaired("flushed services chain");
    await nft(["flush", "map", "ip", "kube-proxy", "service-nodeports"]);
    const t3 = await repaired("flushed service-nodeports map");
    await nft(["flush", "ruleset"]);
    const t4 = await repaired("nft flush ruleset");
    console.log(`drift repaired after ${t1} / ${t2} / ${t3} / ${t4} ms (syncPeriod ${SYNC_PERIOD_S} s)`);
    assert.match(
      c.agent!.logs(),
      /full resync of IPv4 rules: rules changed outside edgeproxy: table ip kube-proxy is gone/,
    );
    assert.match(c.agent!.logs(), /rules changed outside edgeproxy: chain services has 0 rules, expected 2/);
    assert.doesNotMatch(c.agent!.logs(), /sync failed/);
  });

  it("an agent restart fails no request", async () => {
    let stop = false;
    let sent = 0;
    const failed: string[] = [];
    const loop = (async () => {
      while (!stop) {
        const [r] = await ask(c.client, A.nodeIP, NODE_PORT);
        sent++;
        if (r !== c.localPods[0].id) failed.push(r);
      }
    })();
    await new Promise((r) => setTimeout(r, 300));
    await start();
    await new Promise((r) => setTimeout(r, 1000));
    stop = true;
    await loop;
    assert.deepEqual(failed, [], `${failed.length} of ${sent} requests failed`);
    assert.ok(sent >= 5, `only ${sent} requests`);
  });

  it("comes back from the state cache after a reboot while offline", async () => {
    await new Promise((r) => setTimeout(r, 500)); // the cache writer catches up
    await c.agent!.stop("SIGKILL");
    await nft(["flush", "ruleset"]);
    await c.apiserverLink.cut();
    try {
      await start(["--cache-start-deadline", "1s"], { waitReady: false });
      await pollUntil(() => ask(c.client, A.nodeIP, NODE_PORT), (r) => r[0] === c.localPods[0].id, {
        timeoutMs: 10_000,
        intervalMs: 100,
        what: "NodePort from the state cache",
      });
      assert.match(c.agent!.logs(), /from the state cache written/);
    } finally {
      await c.apiserverLink.restore();
    }
  });

  it("--cleanup removes the nftables table and iptables mode's chains", async () => {
    await c.stopAgent();
    await c.startAgent({ syncPeriod: `${SYNC_PERIOD_S}s` }); // iptables mode: deletes the nft table
    assert.notEqual((await nft(["list", "table", "ip", "kube-proxy"])).code, 0);
    await start(); // nftables again: iptables chains go
    await c.stopAgent();
    // Leave both behind, then clean up.
    await c.node.execOk(["iptables", "-t", "nat", "-N", "KUBE-SERVICES"]);
    const r = await runAgentOnce(c.node, ["--cleanup", ...NFT]);
    assert.equal(r.code, 0, r.stderr + r.stdout);
    assert.notEqual((await nft(["list", "table", "ip", "kube-proxy"])).code, 0, "nft table must be gone");
    assert.doesNotMatch(await c.iptablesSave("nat"), /KUBE-/);
  });
});

describe(
  "edgeproxy --dry-run --proxy-mode nftables",
  { skip: agentBinaryMissingReason() || undefined },
  () => {
    it("prints the nft transaction and touches nothing", () => {
      const site = fileURLToPath(new URL("../../examples/edge-site", import.meta.url));
      const r = spawnSync(
        EDGEPROXY_BINARY,
        ["--dry-run", "--proxy-mode", "nftables", "--manifests", site, "--hostname-override", "edge-1"],
        { encoding: "utf8", timeout: 30_000 },
      );
      assert.equal(r.status, 0, r.stderr);
      assert.match(
        r.stdout,
        /^# nft -f - <<EOF \(IPv4\)\nadd table ip kube-proxy \{ comment "rules for kube-proxy" ; \}\n/,
      );
      assert.match(r.stdout, /^add element ip kube-proxy service-ips \{ \S+ \. tcp \. \d+ : goto service-/m);
      assert.match(r.stdout, /# EOF\n$/);
      assert.doesNotMatch(r.stdout, /iptables-restore/);
    });
  },
);
