import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { gunzipSync } from "node:zlib";
import { createEdgeproxyMetrics } from "../../../lib/metrics/edgeproxy.ts";
import { createKubeProxyMetrics } from "../../../lib/metrics/kubeproxy.ts";
import { registerProcessMetrics } from "../../../lib/metrics/process.ts";
import { Registry } from "../../../lib/metrics/registry.ts";
import { serveApp, type ServedApp } from "../../../lib/runtime/serve.ts";
import { createMetricsApp } from "../../../lib/server/metrics_app.ts";
import { defaultConfig } from "../../../lib/config/defaults.ts";

/** The defaulted configuration, with a clusterCIDR that needs Go's HTML-safe escapes. */
const CONFIG = { ...defaultConfig(), clusterCIDR: "10.244.0.0/16,<odd>&" };

describe("metrics server over HTTP", () => {
  let served: ServedApp;
  let base = "";
  before(async () => {
    const registry = new Registry();
    const m = createKubeProxyMetrics(registry);
    registerProcessMetrics(registry);
    createEdgeproxyMetrics(registry, {
      cacheState: { cacheState: () => ({ servingFromCache: false, cacheAgeSeconds: 5 }) },
    }).driftRepairsTotal.inc({ ip_family: "IPv4" });
    m.syncProxyRulesLatency.observe({ ip_family: "IPv4" }, 0.02);
    m.syncProxyRulesLastTimestamp.set({ ip_family: "IPv4" }, 1735689600);
    m.iptablesRulesTotal.set({ table: "nat", ip_family: "IPv4" }, 42);
    m.networkProgrammingLatency.observe({ ip_family: "IPv4" }, 0.3);
    const app = createMetricsApp({ registry, configz: () => CONFIG });
    served = await serveApp(app, { hostname: "127.0.0.1", port: 0 });
    base = `http://127.0.0.1:${served.port}`;
  });
  after(async () => {
    await served.close();
  });

  it("/metrics: text format 0.0.4 that promtool parses", async (t) => {
    const r = await fetch(`${base}/metrics`);
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("content-type"), "text/plain; version=0.0.4; charset=utf-8");
    const text = await r.text();
    for (
      const name of [
        "kubeproxy_sync_proxy_rules_duration_seconds_bucket",
        "kubeproxy_sync_proxy_rules_endpoint_changes_total",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
        "process_cpu_seconds_total",
        "edgeproxy_serving_from_cache",
        "edgeproxy_drift_repairs_total",
      ]
    ) {
      assert.match(text, new RegExp(`^${name}[{ ]`, "m"), name);
    }
    const p = spawnSync("promtool", ["check", "metrics"], { input: text, encoding: "utf8" });
    if (p.error) {
      t.skip("promtool is not installed");
      return;
    }
    const findings = `${p.stdout}${p.stderr}`.trim().split("\n").filter((l) => l !== "");
    assert.notEqual(p.status, 1, findings.join("\n"));
    assert.deepEqual(findings, [
      'kubeproxy_sync_proxy_rules_iptables_total non-counter metrics should not have "_total" suffix',
    ], "upstream's own gauge name is the only lint finding");
  });

  it("/metrics is gzip-encoded when the scraper asks, as promhttp does", async () => {
    const plain = await (await fetch(`${base}/metrics`, { headers: { "Accept-Encoding": "identity" } }))
      .text();
    // node:http does not decompress, so the encoding is observable.
    const http = await import("node:http");
    const raw = await new Promise<{ headers: Record<string, unknown>; body: Uint8Array }>(
      (resolve, reject) => {
        http.get(`${base}/metrics`, { headers: { "Accept-Encoding": "gzip" } }, (res) => {
          const chunks: Uint8Array[] = [];
          res.on("data", (c: Uint8Array) => chunks.push(c));
          res.on("end", () => {
            const all = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
            let o = 0;
            for (const c of chunks) (all.set(c, o), o += c.length);
            resolve({ headers: res.headers, body: all });
          });
        }).on("error", reject);
      },
    );
    assert.equal(raw.headers["content-encoding"], "gzip");
    const text = new TextDecoder().decode(gunzipSync(raw.body));
    // Process metrics change between scrapes; compare the kubeproxy part.
    const kube = (s: string) => s.split("\n").filter((l) => l.includes("kubeproxy_")).join("\n");
    assert.equal(kube(text), kube(plain));
    assert.ok(kube(text).length > 0);
  });

  it("/healthz: plain ok, verbose lists the ping check; /healthz/ping", async () => {
    const r = await fetch(`${base}/healthz`);
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("content-type"), "text/plain; charset=utf-8");
    assert.equal(r.headers.get("x-content-type-options"), "nosniff");
    assert.equal(await r.text(), "ok");
    assert.equal(await (await fetch(`${base}/healthz?verbose`)).text(), "[+]ping ok\nhealthz check passed\n");
    const ping = await fetch(`${base}/healthz/ping`);
    assert.equal(ping.status, 200);
    assert.equal(await ping.text(), "ok");
  });

  it("/metrics/slis counts the healthz checks", async () => {
    await (await fetch(`${base}/healthz`)).text();
    const text = await (await fetch(`${base}/metrics/slis`)).text();
    assert.match(
      text,
      /^# HELP kubernetes_healthcheck \[STABLE\] This metric records the result of a single healthcheck\.$/m,
    );
    assert.match(text, /^kubernetes_healthcheck\{name="ping",type="healthz"\} 1$/m);
    const n = Number(
      /^kubernetes_healthchecks_total\{name="ping",status="success",type="healthz"\} (\d+)$/m.exec(text)![1],
    );
    assert.ok(n >= 1);
  });

  it("/proxyMode: iptables as text/plain", async () => {
    const r = await fetch(`${base}/proxyMode`);
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("content-type"), "text/plain; charset=utf-8");
    assert.equal(r.headers.get("x-content-type-options"), "nosniff");
    assert.equal(await r.text(), "iptables");
  });

  it("/configz: the internal configuration under kubeproxy.config.k8s.io, Go field names, Go durations", async () => {
    const r = await fetch(`${base}/configz`);
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("content-type"), "application/json");
    assert.equal(r.headers.get("x-content-type-options"), "nosniff");
    const body = await r.text();
    assert.ok(body.startsWith('{"kubeproxy.config.k8s.io":{"Linux":{"Conntrack":{"MaxPerCore":32768,'), body);
    assert.ok(body.includes('"ClusterCIDRs":["10.244.0.0/16","\\u003codd\\u003e\\u0026"]'), body);
    const c = JSON.parse(body)["kubeproxy.config.k8s.io"];
    assert.equal(c.SyncPeriod, "30s");
    assert.equal(c.MinSyncPeriod, "1s");
    assert.equal(c.ConfigSyncPeriod, "15m0s");
    assert.equal(c.Linux.Conntrack.TCPEstablishedTimeout, "24h0m0s");
    assert.equal(c.Linux.Conntrack.TCPCloseWaitTimeout, "1h0m0s");
    assert.equal(c.Logging.flushFrequency, "5s");
    assert.equal(c.Mode, "iptables");
    assert.deepEqual(c.IPTables, { MasqueradeBit: 14, LocalhostNodePorts: true });
    assert.equal(c.apiVersion, undefined);
    assert.equal(c.kind, undefined);
  });

  it("unknown paths: Go's 404", async () => {
    for (const p of ["/", "/livez", "/debug/pprof/", "/metricsx"]) {
      const r = await fetch(`${base}${p}`);
      assert.equal(r.status, 404, p);
      assert.equal(await r.text(), "404 page not found\n");
    }
  });
});

describe("metrics app without configz", () => {
  it("/configz is an empty object", async () => {
    const app = createMetricsApp({ registry: new Registry(), proxyMode: "iptables" });
    const r = await app.request("/configz");
    assert.equal(await r.text(), "{}");
  });
});
