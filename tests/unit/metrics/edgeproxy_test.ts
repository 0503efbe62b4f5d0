import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { ApiStats } from "../../../lib/k8s/stats.ts";
import {
  type ApiserverStatsSource,
  type CacheState,
  createEdgeproxyMetrics,
} from "../../../lib/metrics/edgeproxy.ts";
import { Registry } from "../../../lib/metrics/registry.ts";

describe("edgeproxy_* metrics", () => {
  it("reads the apiserver client's stats object at scrape time", () => {
    let now = 1735689600000;
    const stats = new ApiStats(() => now);
    // The real ApiStats must fit the interface the metrics read.
    const source: ApiserverStatsSource = stats;
    const r = new Registry();
    createEdgeproxyMetrics(r, { apiserverStats: source });
    assert.match(r.metrics(), /^edgeproxy_apiserver_last_contact_timestamp_seconds 0$/m, "never contacted");
    assert.doesNotMatch(r.metrics(), /edgeproxy_apiserver_requests_total/, "no requests yet: no series");

    stats.recordRequest("services", "list", 200);
    stats.recordRequest("services", "watch", 200);
    stats.recordRequest("services", "watch", 200);
    now += 1500;
    stats.recordRequest("endpointslices", "list", "<error>");
    stats.recordRequest("nodes", "get", 200);
    stats.recordWatchRestart("services");
    stats.recordRelist("endpointslices");
    stats.recordRelist("endpointslices");
    const text = r.metrics();
    const lines = text.split("\n").filter((l) => l.startsWith("edgeproxy_apiserver"));
    assert.deepEqual(lines, [
      "edgeproxy_apiserver_last_contact_timestamp_seconds 1.7356896015e+09",
      'edgeproxy_apiserver_relists_total{resource="endpointslices"} 2',
      'edgeproxy_apiserver_relists_total{resource="nodes"} 0',
      'edgeproxy_apiserver_relists_total{resource="services"} 0',
      'edgeproxy_apiserver_requests_total{code="200",resource="nodes",verb="get"} 1',
      'edgeproxy_apiserver_requests_total{code="200",resource="services",verb="list"} 1',
      'edgeproxy_apiserver_requests_total{code="200",resource="services",verb="watch"} 2',
      'edgeproxy_apiserver_requests_total{code="<error>",resource="endpointslices",verb="list"} 1',
      'edgeproxy_apiserver_watch_restarts_total{resource="endpointslices"} 0',
      'edgeproxy_apiserver_watch_restarts_total{resource="nodes"} 0',
      'edgeproxy_apiserver_watch_restarts_total{resource="services"} 1',
    ]);
    assert.match(text, /^# TYPE edgeproxy_apiserver_requests_total counter$/m);
    assert.match(text, /^# TYPE edgeproxy_apiserver_last_contact_timestamp_seconds gauge$/m);
  });

  it("leaves client-go's rest_client_* to lib/metrics/restclient.ts", () => {
    const stats = new ApiStats(() => 0);
    stats.recordRequest("services", "list", 200);
    const r = new Registry();
    createEdgeproxyMetrics(r, { apiserverStats: stats });
    assert.doesNotMatch(r.metrics(), /rest_client/);
  });

  it("cache state: serving flag and age, left out when unknown", () => {
    let state: CacheState = { servingFromCache: false, cacheAgeSeconds: null };
    const r = new Registry();
    createEdgeproxyMetrics(r, { cacheState: { cacheState: () => state } });
    assert.match(r.metrics(), /^edgeproxy_serving_from_cache 0$/m);
    assert.doesNotMatch(r.metrics(), /edgeproxy_state_cache_age_seconds/);
    state = { servingFromCache: true, cacheAgeSeconds: 3600.25 };
    assert.match(r.metrics(), /^edgeproxy_serving_from_cache 1$/m);
    assert.match(r.metrics(), /^edgeproxy_state_cache_age_seconds 3600.25$/m);
  });

  it("drift repairs are counted per family; without sources only that family exists", () => {
    const r = new Registry();
    const m = createEdgeproxyMetrics(r);
    assert.equal(r.metrics(), "");
    m.driftRepairsTotal.inc({ ip_family: "IPv6" });
    assert.equal(
      r.metrics(),
      "# HELP edgeproxy_drift_repairs_total Syncs forced because the rules in the kernel no longer matched what " +
        'edgeproxy last wrote.\n# TYPE edgeproxy_drift_repairs_total counter\nedgeproxy_drift_repairs_total{ip_family="IPv6"} 1\n',
    );
  });
});
