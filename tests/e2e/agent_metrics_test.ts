/**
 * The compiled agent's metrics server, as an operator's Prometheus sees it: the first scrape after start
 * carries every upstream family the agent can export (checked against tests/support/upstream_metrics_v1.34.txt),
 * passes promtool, and /configz shows the running configuration with Go duration strings. Runs the agent in
 * its own network namespace on the example site (--manifests, no apiserver).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { agentBinaryMissingReason, type E2eAgent, startAgentProcess } from "../support/e2e_agent.ts";
import { httpGetIn } from "../support/e2e_http.ts";
import { type Netns, NetnsScope, netnsUnavailableReason } from "../support/netns.ts";

const SITE = fileURLToPath(new URL("../../examples/edge-site", import.meta.url));
const CONFIG = fileURLToPath(new URL("../../examples/kube-proxy-config.yaml", import.meta.url));
const UPSTREAM = new URL("../support/upstream_metrics_v1.34.txt", import.meta.url);
const METRICS = "127.0.0.1:10249";

const skip = netnsUnavailableReason() || agentBinaryMissingReason();

describe("agent metrics server (compiled binary)", { skip: skip || false }, () => {
  let scope: NetnsScope;
  let ns: Netns;
  let agent: E2eAgent;
  let stateDir = "";
  let firstScrape = "";

  before(async () => {
    scope = new NetnsScope("agmt");
    ns = await scope.create("node");
    stateDir = await mkdtemp(join(tmpdir(), "edgeproxy-metrics-"));
    agent = startAgentProcess(scope, ns, [
      "--manifests",
      SITE,
      "--hostname-override",
      "edge-node-1",
      "--config",
      CONFIG,
      "--metrics-bind-address",
      METRICS,
      "--state-dir",
      stateDir,
    ]);
    // The first answer the metrics server gives is the scrape under test.
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline && agent.exit() === null) {
      const r = await httpGetIn(ns, `http://${METRICS}/metrics`, { timeoutMs: 1000 });
      if (r.status === 200) {
        firstScrape = r.body;
        break;
      }
      await new Promise((res) => setTimeout(res, 50));
    }
    assert.ok(firstScrape !== "", `no scrape within 20 s:\n${agent.tail()}`);
  });

  after(async () => {
    await agent?.stop();
    await scope?.cleanup();
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it("first scrape: upstream's families (less nfacct and client-go's, which need their source)", async () => {
    const upstream = (await readFile(UPSTREAM, "utf8")).split("\n")
      .filter((l) => l.trim() !== "" && !l.startsWith("#"))
      .map((l) => l.trim().split(/\s+/) as [string, string]);
    const types = new Map([...firstScrape.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1], m[2]]));
    const missing = upstream.filter(([n]) => !types.has(n)).map(([n]) => n);
    assert.deepEqual(missing, [
      "kubeproxy_iptables_ct_state_invalid_dropped_packets_total",
      "kubeproxy_iptables_localhost_nodeports_accepted_packets_total",
      "rest_client_request_duration_seconds",
      "rest_client_requests_total",
    ], agent.tail());
    for (const [name, type] of upstream) if (types.has(name)) assert.equal(types.get(name), type, name);
    assert.match(
      firstScrape,
      /^kubeproxy_sync_proxy_rules_iptables_restore_failures_total\{ip_family="IPv4"\} 0$/m,
    );
    assert.match(firstScrape, /^kubernetes_build_info\{.*git_version="v\d+\.\d+\.\d+".*\} 1$/m);
  });

  it("promtool check metrics accepts the scrape", (t) => {
    const r = spawnSync("promtool", ["check", "metrics"], { input: firstScrape, encoding: "utf8" });
    if (r.error) return t.skip("promtool is not installed");
    const output = `${r.stdout}${r.stderr}`.trim();
    assert.notEqual(r.status, 1, output);
    assert.deepEqual(output.split("\n").filter((l) => l.trim() !== "").sort(), [
      'kubeproxy_sync_proxy_rules_iptables_total non-counter metrics should not have "_total" suffix',
      'kubeproxy_sync_proxy_rules_no_local_endpoints_total non-counter metrics should not have "_total" suffix',
    ]);
  });

  it("/configz: the running configuration, durations as Go duration strings", async () => {
    const r = await httpGetIn(ns, `http://${METRICS}/configz`);
    assert.equal(r.status, 200, r.curlError);
    const c = JSON.parse(r.body)["kubeproxy.config.k8s.io"];
    assert.equal(c.SyncPeriod, "30s");
    assert.equal(c.MinSyncPeriod, "1s");
    assert.equal(c.ConfigSyncPeriod, "15m0s");
    assert.equal(c.Linux.Conntrack.TCPEstablishedTimeout, "24h0m0s");
    assert.deepEqual(c.DetectLocal.ClusterCIDRs, ["10.244.0.0/16"]);
    assert.equal(c.MetricsBindAddress, METRICS);
  });
});
