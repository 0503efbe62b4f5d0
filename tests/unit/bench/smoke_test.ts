/**
 * Smoke test of the benchmark suite's reduced code path: the render stage on a 50-Service synthetic
 * cluster through the same CLI parsing, figures, targets and tables as `npm run bench`. No timing is
 * asserted; only that the figures are well-formed and consistent with each other.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { parseBenchArgs, runBench } from "../../../bench/main.ts";
import { evaluateTargets, type Figures } from "../../../bench/results.ts";
import { resultsMarkdown, resultTables, tableText } from "../../../bench/report.ts";
import { scalingExponent, summarize } from "../../../bench/stats.ts";
import type { AgentFigures } from "../../../bench/agent_bench.ts";

const positive = (x: number, what: string) => assert.ok(Number.isFinite(x) && x >= 0, `${what}: ${x}`);

test("the reduced bench run on 50 Services produces well-formed render figures and targets", async () => {
  const opts = parseBenchArgs([
    "--sizes=50",
    "--trap-sizes=",
    "--only=render",
    "--repeats=2",
    "--out=/dev/null",
  ]);
  assert.deepEqual(opts.sizes, [50]);
  assert.deepEqual([...opts.stages], ["render"]);
  const res = await runBench(opts);

  const r = res.render["50"];
  assert.ok(r, "render figures for 50 Services");
  assert.equal(r.counts.services, 50);
  assert.ok(r.counts.servicePorts >= 50 && r.counts.servicePorts <= 100, `ports ${r.counts.servicePorts}`);
  assert.equal(r.counts.endpoints, r.counts.servicePorts * 5, "5 endpoints per service port");
  for (
    const [k, s] of Object.entries({ model: r.modelMs, full: r.fullRenderMs, partial: r.partialRenderMs })
  ) {
    assert.equal(s.n, 2, k);
    positive(s.min, k);
    assert.ok(s.min <= s.median && s.median <= s.max, `${k} min ≤ median ≤ max`);
  }
  assert.ok(
    r.full.bytes > r.partial.bytes && r.partial.bytes > 0,
    "a partial payload is smaller than a full one",
  );
  assert.ok(r.full.lines > r.partial.lines && r.partial.lines > 0);
  assert.ok(r.partialBytesPercent > 0 && r.partialBytesPercent < 100, `partial % ${r.partialBytesPercent}`);
  assert.ok(["partial", "incremental"].includes(r.partialMode), r.partialMode);
  assert.ok(r.kubeServicesRules > 50, `nat KUBE-SERVICES rules ${r.kubeServicesRules}`);
  if (r.plan.available) assert.ok((r.plan.transactions ?? 0) >= 2, "split into several transactions");

  assert.deepEqual(res.restore, [], "restore not selected");
  assert.deepEqual(res.agent, {}, "agent not selected");
  assert.equal(res.targets.length, 7);
  for (const t of res.targets) {
    assert.equal(t.status, "NOT MEASURED", `${t.id} at 50 Services`);
    assert.equal(t.measured, null);
    assert.ok(t.detail.length > 0, `${t.id} says why`);
  }
  assert.deepEqual(JSON.parse(JSON.stringify(res)), res, "results.json round-trips");
  const text = resultTables(res).map(tableText).join("\n");
  assert.match(text, /^50 +\d+ +\d+ /m, "the compute table has the 50-Service row");
  assert.match(resultsMarkdown(res), /\| 50 \| \d+ \| \d+ \|/);
});

test("targets compare measured figures with their limits (PASS, MISS, NOT MEASURED)", async () => {
  const res = await runBench(parseBenchArgs(["--sizes=50", "--trap-sizes=", "--only=render", "--repeats=1"]));
  const r50 = res.render["50"];
  const agent: AgentFigures = {
    services: 10000,
    ok: true,
    note: "",
    settledRss: { vmRssMiB: 140, vmHwmMiB: 150 },
    endpointChange: {
      ...summarize([40, 50, 60]),
      pollMs: 10,
      agentReportedSyncMs: null,
      agentModes: ["incremental"],
      agentPayloadBytes: 1000,
    },
  };
  const figures: Figures = {
    ...res,
    sizes: [10000],
    render: { "10000": { ...r50, partialBytesPercent: 1.5 } },
    restore: [],
    agent: { "10000": agent },
    idleRss: { rss: { vmRssMiB: 70, vmHwmMiB: 75 }, note: "" },
  };
  const byId = new Map(evaluateTargets(figures).map((t) => [t.id, t]));
  assert.equal(byId.get("partial-bytes-10k")?.status, "PASS");
  assert.equal(byId.get("change-latency-10k")?.status, "PASS");
  assert.equal(byId.get("change-latency-10k")?.measured, 50);
  assert.equal(byId.get("rss-10k")?.status, "MISS");
  assert.equal(byId.get("rss-idle")?.status, "MISS");
  assert.equal(byId.get("compute-10k")?.status, "NOT MEASURED", "no restore figure");
  assert.equal(byId.get("start-5k")?.status, "NOT MEASURED");
  assert.match(byId.get("change-latency-10k")!.detail, /poll 10 ms/);

  // Observed by xtables-monitor, with the kernel's commit floor and the anon/file split of RSS.
  const monitored: Figures = {
    ...figures,
    agent: {
      "10000": {
        ...agent,
        settledRss: { vmRssMiB: 140, vmHwmMiB: 150, rssAnonMiB: 100, rssFileMiB: 40 },
        endpointChange: {
          ...agent.endpointChange!,
          pollMs: 0,
          observedBy: "xtables-monitor",
          commitFloorMs: 33,
        },
      },
    },
  };
  const m = new Map(evaluateTargets(monitored).map((t) => [t.id, t]));
  assert.match(
    m.get("change-latency-10k")!.detail,
    /commit seen by xtables-monitor.*floor of a rule-adding commit 33 ms/,
  );
  assert.match(m.get("rss-10k")!.detail, /anon 100, file-backed 40/);
  const table = resultTables({ ...res, ...monitored, targets: evaluateTargets(monitored) }).map(tableText)
    .join("\n");
  assert.match(table, /140 = 100 \+ 40 \(150\)/);
  assert.match(table, /\(monitor\)/);
});

test("statistics helpers: median and the fitted scaling exponent", () => {
  assert.deepEqual(summarize([3, 1, 2, 10]), { median: 2.5, min: 1, max: 10, n: 4 });
  assert.equal(scalingExponent([[1000, 4], [2000, 16], [4000, 64]]), 2);
  assert.equal(scalingExponent([[1000, 1], [2000, 2]]), 1);
  assert.equal(scalingExponent([[1000, 1]]), null);
});
