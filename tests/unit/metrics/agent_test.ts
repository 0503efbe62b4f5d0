import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { ApiStats, ERROR_CODE } from "../../../lib/k8s/stats.ts";
import { createAgentMetrics } from "../../../lib/metrics/agent_metrics.ts";
import { currentBuildInfo, goArch } from "../../../lib/metrics/build_info.ts";
import { VERSION } from "../../../lib/cli/version.ts";
import http from "node:http";
import { staticCredentials } from "../../../lib/k8s/credentials.ts";
import { ApiTransport } from "../../../lib/k8s/transport.ts";

/** The checked-in upstream list: name → type. */
function upstreamFamilies(): Map<string, string> {
  const text = readFileSync(new URL("../../support/upstream_metrics_v1.34.txt", import.meta.url), "utf8");
  const out = new Map<string, string>();
  for (const line of text.split("\n")) {
    if (line.trim() === "" || line.startsWith("#")) continue;
    const [name, type] = line.trim().split(/\s+/);
    out.set(name, type);
  }
  return out;
}

/** `# TYPE name type` of a scrape, in order. */
function scrapeFamilies(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const m of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) out.set(m[1], m[2]);
  return out;
}

/** A fresh agent's metrics, built as runAgent builds them (single-stack IPv4, apiserver mode). */
function freshAgent() {
  const apiStats = new ApiStats(() => 1_700_000_000_000);
  const m = createAgentMetrics({
    apiStats,
    cacheState: { cacheState: () => ({ servingFromCache: false, cacheAgeSeconds: null }) },
  });
  m.initIPFamilies(["IPv4"]);
  return { ...m, apiStats };
}

describe("the agent's registry against upstream's families (v1.34, iptables mode)", () => {
  it("registers exactly upstream's listed families, with the same types, plus edgeproxy_*", () => {
    const { registry } = freshAgent();
    const ours = new Map<string, string>();
    for (const name of registry.names()) {
      if (!name.startsWith("edgeproxy_")) ours.set(name, registry.get(name)!.type);
    }
    const upstream = upstreamFamilies();
    assert.deepEqual([...ours.keys()].sort(), [...upstream.keys()].sort());
    for (const [name, type] of upstream) assert.equal(ours.get(name), type, `${name} type`);
  });

  it("first scrape: every kubeproxy_* family is there, counters 0 and histograms with zero counts", () => {
    const { registry } = freshAgent();
    const text = registry.metrics();
    const scraped = scrapeFamilies(text);
    const missing = [...upstreamFamilies().keys()].filter((n) => !scraped.has(n));
    // The nfacct collectors export only when the kernel counters exist (upstream: the same); edgeproxy
    // does not create them. client-go's vectors show series only after the first apiserver request.
    assert.deepEqual(missing, [
      "kubeproxy_iptables_ct_state_invalid_dropped_packets_total",
      "kubeproxy_iptables_localhost_nodeports_accepted_packets_total",
      "rest_client_request_duration_seconds",
      "rest_client_requests_total",
    ]);
    assert.match(text, /^kubeproxy_sync_proxy_rules_duration_seconds_count\{ip_family="IPv4"\} 0$/m);
    assert.match(
      text,
      /^kubeproxy_sync_proxy_rules_duration_seconds_bucket\{ip_family="IPv4",le="\+Inf"\} 0$/m,
    );
    assert.match(
      text,
      /^kubeproxy_network_programming_duration_seconds_bucket\{ip_family="IPv4",le="0"\} 0$/m,
    );
    assert.match(text, /^kubeproxy_conntrack_reconciler_sync_duration_seconds_sum\{ip_family="IPv4"\} 0$/m);
    assert.match(text, /^kubeproxy_sync_proxy_rules_iptables_restore_failures_total\{ip_family="IPv4"\} 0$/m);
    assert.match(text, /^kubeproxy_sync_proxy_rules_iptables_total\{ip_family="IPv4",table="nat"\} 0$/m);
    assert.match(text, /^kubeproxy_sync_proxy_rules_iptables_last\{ip_family="IPv4",table="filter"\} 0$/m);
    assert.match(
      text,
      /^kubeproxy_sync_proxy_rules_no_local_endpoints_total\{ip_family="IPv4",traffic_policy="external"\} 0$/m,
    );
    assert.match(text, /^kubeproxy_proxy_healthz_total\{code="503"\} 0$/m);
    assert.match(text, /^kubeproxy_proxy_livez_total\{code="200"\} 0$/m);
    assert.match(text, /^kubeproxy_sync_proxy_rules_last_timestamp_seconds\{ip_family="IPv4"\} 0$/m);
    assert.doesNotMatch(text, /IPv6/, "only the families the agent runs");
  });

  it("initialising again keeps recorded values", () => {
    const m = freshAgent();
    m.kubeproxy.syncProxyRulesLatency.observe({ ip_family: "IPv4" }, 0.02);
    m.kubeproxy.iptablesRulesTotal.set({ ip_family: "IPv4", table: "nat" }, 7);
    m.initIPFamilies(["IPv4"]);
    assert.equal(m.kubeproxy.syncProxyRulesLatency.get({ ip_family: "IPv4" }).count, 1);
    assert.equal(m.kubeproxy.iptablesRulesTotal.get({ ip_family: "IPv4", table: "nat" }), 7);
  });

  it("kubernetes_build_info: one series at 1 with our version", () => {
    const { registry } = freshAgent();
    const line = registry.metrics().split("\n").find((l) => l.startsWith("kubernetes_build_info{"));
    const info = currentBuildInfo();
    assert.equal(info.git_version, `v${VERSION}`);
    assert.deepEqual([info.major, info.minor], VERSION.split(".").slice(0, 2));
    assert.equal(info.platform, `${process.platform}/${goArch(process.arch)}`);
    assert.equal(
      line,
      `kubernetes_build_info{build_date="1970-01-01T00:00:00Z",compiler="${info.compiler}",git_commit="",` +
        `git_tree_state="",git_version="v${VERSION}",go_version="${info.go_version}",major="${info.major}",` +
        `minor="${info.minor}",platform="${info.platform}"} 1`,
    );
    assert.match(
      registry.metrics(),
      /^# HELP kubernetes_build_info \[BETA\] A metric with a constant '1' value/m,
    );
    assert.equal(goArch("x64"), "amd64");
    assert.equal(goArch("arm64"), "arm64");
  });

  it("rest_client_* are fed by the apiserver calls ApiStats records", () => {
    const { registry, apiStats } = freshAgent();
    apiStats.recordRequest("services", "list", 200, 30, "https://10.0.0.1:6443/api/v1/services?limit=500");
    apiStats.recordRequest("services", "watch", 200, 2, "https://10.0.0.1:6443/api/v1/services?watch=1");
    apiStats.recordRequest("events", "create", 201, 120, "https://10.0.0.1:6443/apis/events.k8s.io/v1");
    apiStats.recordRequest("services", "list", ERROR_CODE, undefined, "https://10.0.0.1:6443");
    const text = registry.metrics();
    const lines = text.split("\n").filter((l) => l.startsWith("rest_client_"));
    assert.deepEqual(lines.filter((l) => l.startsWith("rest_client_requests_total")), [
      'rest_client_requests_total{code="200",host="10.0.0.1:6443",method="GET"} 2',
      'rest_client_requests_total{code="201",host="10.0.0.1:6443",method="POST"} 1',
      'rest_client_requests_total{code="<error>",host="10.0.0.1:6443",method="GET"} 1',
    ]);
    assert.ok(
      lines.includes(
        'rest_client_request_duration_seconds_bucket{host="10.0.0.1:6443",verb="GET",le="0.005"} 1',
      ),
    );
    assert.ok(
      lines.includes(
        'rest_client_request_duration_seconds_bucket{host="10.0.0.1:6443",verb="GET",le="0.025"} 1',
      ),
    );
    assert.ok(
      lines.includes(
        'rest_client_request_duration_seconds_bucket{host="10.0.0.1:6443",verb="GET",le="0.1"} 2',
      ),
    );
    assert.ok(
      lines.includes('rest_client_request_duration_seconds_count{host="10.0.0.1:6443",verb="GET"} 2'),
    );
    assert.ok(
      lines.includes(
        'rest_client_request_duration_seconds_bucket{host="10.0.0.1:6443",verb="POST",le="0.25"} 1',
      ),
    );
    assert.ok(
      lines.includes(
        'rest_client_request_duration_seconds_bucket{host="10.0.0.1:6443",verb="POST",le="60"} 1',
      ),
    );
    assert.match(
      text,
      /^# HELP rest_client_requests_total \[ALPHA\] Number of HTTP requests, partitioned by status code, method, and host\.$/m,
    );
    assert.match(
      text,
      /^# HELP rest_client_request_duration_seconds \[ALPHA\] Request latency in seconds\. Broken down by verb, and host\.$/m,
    );
  });

  it(
    "the apiserver transport reports each request's status, latency and host",
    { timeout: 30_000 },
    async () => {
      const srv = http.createServer((req, res) => {
        setTimeout(() => {
          res.writeHead(req.url?.startsWith("/api/v1/nodes") ? 404 : 200, {
            "Content-Type": "application/json",
          });
          res.end('{"kind":"ServiceList","items":[],"metadata":{"resourceVersion":"1"}}');
        }, 30);
      });
      await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
      const port = (srv.address() as { port: number }).port;
      const { registry, apiStats } = freshAgent();
      const t = new ApiTransport({
        config: {
          server: `http://127.0.0.1:${port}`,
          insecureSkipTlsVerify: false,
          credentials: staticCredentials({}, "test"),
          source: "test",
        },
        qps: -1,
        stats: apiStats,
      });
      try {
        await t.request({ path: "/api/v1/services", verb: "list", resource: "services" });
        await assert.rejects(t.request({ path: "/api/v1/nodes/x", verb: "get", resource: "nodes" }), /404/);
      } finally {
        t.close();
        srv.closeAllConnections?.();
        await new Promise<void>((r) => srv.close(() => r()));
      }
      const text = registry.metrics();
      const host = `127.0.0.1:${port}`;
      assert.match(
        text,
        new RegExp(`^rest_client_requests_total\\{code="200",host="${host}",method="GET"\\} 1$`, "m"),
      );
      assert.match(
        text,
        new RegExp(`^rest_client_requests_total\\{code="404",host="${host}",method="GET"\\} 1$`, "m"),
      );
      assert.match(
        text,
        new RegExp(
          `^rest_client_request_duration_seconds_bucket\\{host="${host}",verb="GET",le="0.025"\\} 0$`,
          "m",
        ),
        "each took at least the server's 30 ms",
      );
      assert.match(
        text,
        new RegExp(`^rest_client_request_duration_seconds_count\\{host="${host}",verb="GET"\\} 2$`, "m"),
      );
    },
  );

  it("manifests mode (no apiserver stats): the rest_client_* families are registered but empty", () => {
    const m = createAgentMetrics({});
    m.initIPFamilies(["IPv4", "IPv6"]);
    const text = m.registry.metrics();
    assert.doesNotMatch(text, /rest_client_/);
    assert.match(text, /^kubeproxy_sync_proxy_rules_duration_seconds_count\{ip_family="IPv6"\} 0$/m);
  });

  it("promtool check metrics accepts the first scrape (only upstream's own _total gauges are flagged)", (t) => {
    const { registry, apiStats } = freshAgent();
    apiStats.recordRequest("services", "list", 200, 30, "https://10.0.0.1:6443");
    const r = spawnSync("promtool", ["check", "metrics"], { input: registry.metrics(), encoding: "utf8" });
    if (r.error) {
      t.skip("promtool is not installed");
      return;
    }
    const output = `${r.stdout}${r.stderr}`.trim();
    assert.notEqual(r.status, 1, output);
    assert.deepEqual(output.split("\n").filter((l) => l.trim() !== "").sort(), [
      'kubeproxy_sync_proxy_rules_iptables_total non-counter metrics should not have "_total" suffix',
      'kubeproxy_sync_proxy_rules_no_local_endpoints_total non-counter metrics should not have "_total" suffix',
    ]);
  });
});
