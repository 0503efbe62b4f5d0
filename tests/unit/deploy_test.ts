/**
 * deploy/: the Prometheus rules pass `promtool check rules` and their own `promtool test rules` cases, and
 * every metric the rules and the Grafana dashboard query exists in a fresh agent's registry.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parse } from "yaml";
import { createAgentMetrics } from "../../lib/metrics/agent_metrics.ts";

const RULES = fileURLToPath(new URL("../../deploy/prometheus-rules.yaml", import.meta.url));
const DASHBOARD = fileURLToPath(new URL("../../deploy/grafana-dashboard.json", import.meta.url));
const RULES_TEST = fileURLToPath(new URL("../support/prometheus-rules.test.yaml", import.meta.url));

/** PromQL words that look like identifiers but are not metric names. */
const KEYWORDS = new Set([
  "and",
  "or",
  "unless",
  "by",
  "without",
  "on",
  "ignoring",
  "group_left",
  "group_right",
  "bool",
  "offset",
  "inf",
  "nan",
]);

/**
 * The metric names a PromQL expression selects: identifiers outside strings, label matchers, range
 * selectors and grouping clauses, not followed by "(" (functions and aggregations), with Grafana's
 * $variables removed.
 */
export function metricNames(expr: string): string[] {
  const stripped = expr
    .replace(/\$\{[^}]*\}|\$\w+/g, "1")
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'/g, '""')
    .replace(/\{[^}]*\}/g, " ")
    .replace(/\[[^\]]*\]/g, " ")
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " ")
    .replace(/(?<![a-zA-Z0-9_:])\d[0-9.]*(?:[eE][+-]?\d+)?[a-z]*/g, " ");
  const out = new Set<string>();
  for (const m of stripped.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)) {
    const after = stripped.slice(m.index! + m[0].length);
    if (/^\s*\(/.test(after) || KEYWORDS.has(m[0].toLowerCase())) continue;
    if (/^\d/.test(m[0])) continue;
    out.add(m[0]);
  }
  return [...out];
}

/** Every family a fresh agent registers, with histogram series names resolved to their family. */
function knownFamily(name: string): boolean {
  const { registry } = createAgentMetrics({});
  if (registry.get(name)) return true;
  const base = name.replace(/_(bucket|sum|count)$/, "");
  return base !== name && registry.get(base)?.type === "histogram";
}

/** Every PromQL string (`expr`, Grafana variable `query`) anywhere in a parsed document, with its path. */
function exprs(v: unknown, path = ""): Array<[string, string]> {
  if (Array.isArray(v)) return v.flatMap((x, i) => exprs(x, `${path}[${i}]`));
  if (v !== null && typeof v === "object") {
    // A datasource variable's query is a plugin type ("prometheus"), not PromQL.
    if ((v as { type?: unknown }).type === "datasource") return [];
    return Object.entries(v).flatMap(([k, x]) => {
      if (k === "expr" && typeof x === "string") return [[`${path}.${k}`, x] as [string, string]];
      if (k === "query" && typeof x === "string") {
        // Grafana's label_values(selector, label): the label is not a metric.
        const lv = /^\s*label_values\((.*),\s*\w+\s*\)\s*$/.exec(x);
        return [[`${path}.${k}`, lv ? lv[1] : x] as [string, string]];
      }
      return exprs(x, `${path}.${k}`);
    });
  }
  return [];
}

function promtool(args: string[]): { status: number; output: string } | null {
  const r = spawnSync("promtool", args, { encoding: "utf8" });
  if (r.error) return null;
  return { status: r.status ?? -1, output: `${r.stdout}${r.stderr}` };
}

describe("deploy/prometheus-rules.yaml", () => {
  it("passes promtool check rules", (t) => {
    const r = promtool(["check", "rules", RULES]);
    if (r === null) return t.skip("promtool is not installed");
    assert.equal(r.status, 0, r.output);
    assert.match(r.output, /SUCCESS: 5 rules found/);
  });

  it("fires as intended on synthetic series (promtool test rules)", (t) => {
    const dir = mkdtempSync(join(tmpdir(), "edgeproxy-rules-"));
    try {
      const file = join(dir, "rules.test.yaml");
      writeFileSync(file, readFileSync(RULES_TEST, "utf8").replaceAll("RULES_FILE", RULES));
      const r = promtool(["test", "rules", file]);
      if (r === null) return t.skip("promtool is not installed");
      assert.equal(r.status, 0, r.output);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("covers sync failures, no sync for 2x syncPeriod, serving from cache > 10 min and cache age", () => {
    const doc = parse(readFileSync(RULES, "utf8")) as {
      groups: Array<{ rules: Array<Record<string, string>> }>;
    };
    const rules = doc.groups.flatMap((g) => g.rules);
    const byName = new Map(rules.map((r) => [r.alert, r]));
    assert.match(
      byName.get("EdgeproxySyncFailures")!.expr,
      /kubeproxy_sync_proxy_rules_iptables_restore_failures_total/,
    );
    assert.match(byName.get("EdgeproxyNoSync")!.expr, /kubeproxy_sync_proxy_rules_last_timestamp_seconds/);
    assert.match(byName.get("EdgeproxyNoSync")!.expr, /> 2 \* 30/);
    assert.match(byName.get("EdgeproxyServingFromCache")!.expr, /edgeproxy_serving_from_cache == 1/);
    assert.equal(byName.get("EdgeproxyServingFromCache")!.for, "10m");
    assert.match(byName.get("EdgeproxyStateCacheOld")!.expr, /edgeproxy_state_cache_age_seconds/);
  });

  it("only names metrics a fresh agent registers", () => {
    const doc = parse(readFileSync(RULES, "utf8"));
    const found = exprs(doc);
    assert.ok(found.length >= 5);
    const unknown = found.flatMap(([path, e]) =>
      metricNames(e).filter((n) => !knownFamily(n)).map((n) => `${path}: ${n}`)
    );
    assert.deepEqual(unknown, []);
  });
});

describe("deploy/grafana-dashboard.json", () => {
  it("is a dashboard whose queries only name metrics a fresh agent registers", () => {
    const dash = JSON.parse(readFileSync(DASHBOARD, "utf8"));
    assert.equal(dash.uid, "edgeproxy");
    const found = exprs(dash);
    assert.ok(found.length >= 25, `${found.length} expressions`);
    const names = new Set(found.flatMap(([, e]) => metricNames(e)));
    for (
      const must of [
        "kubeproxy_sync_proxy_rules_duration_seconds_bucket",
        "edgeproxy_serving_from_cache",
        "rest_client_requests_total",
        "kubernetes_build_info",
      ]
    ) {
      assert.ok(names.has(must), must);
    }
    const unknown = found.flatMap(([path, e]) =>
      metricNames(e).filter((n) => !knownFamily(n)).map((n) => `${path}: ${n}`)
    );
    assert.deepEqual(unknown, []);
  });

  it("metricNames finds selectors and skips functions, labels, grouping and variables", () => {
    assert.deepEqual(
      metricNames(
        'histogram_quantile(0.99, sum by (le, ip_family) (rate(a_bucket{instance=~"$instance",x="y z"}[$__rate_interval]))) / on (i) b_total and c offset 5m',
      ),
      ["a_bucket", "b_total", "c"],
    );
    assert.deepEqual(metricNames("time() - max(x_seconds > 0)"), ["x_seconds"]);
    assert.ok(!knownFamily("kubeproxy_sync_proxy_rules_duration_seconds_total"));
    assert.ok(!knownFamily("process_cpu_seconds_total_count"));
    assert.ok(knownFamily("rest_client_request_duration_seconds_count"));
  });
});
