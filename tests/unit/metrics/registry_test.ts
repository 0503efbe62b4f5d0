import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  escapeHelp,
  escapeLabelValue,
  formatGoFloat,
  Histogram,
  Registry,
} from "../../../lib/metrics/registry.ts";

describe("formatGoFloat matches Go's strconv.FormatFloat(v, 'g', -1, 64)", () => {
  const cases: Array<[number, string]> = [
    [0, "0"],
    [-0, "0"],
    [1, "1"],
    [-1, "-1"],
    [0.5, "0.5"],
    [0.001, "0.001"],
    [0.0001, "0.0001"],
    [0.00001, "1e-05"],
    [1.5e-7, "1.5e-07"],
    [100000, "100000"],
    [123456, "123456"],
    [999999, "999999"],
    [1000000, "1e+06"],
    [1234567, "1.234567e+06"],
    [1735689600.123456, "1.735689600123456e+09"],
    [16.384, "16.384"],
    [0.1 + 0.2, "0.30000000000000004"],
    [1e21, "1e+21"],
    [1e100, "1e+100"],
    [-2.5e-10, "-2.5e-10"],
    [18446744073709551615, "1.8446744073709552e+19"],
    [Infinity, "+Inf"],
    [-Infinity, "-Inf"],
    [NaN, "NaN"],
  ];
  for (const [v, want] of cases) {
    it(`${v} → ${want}`, () => assert.equal(formatGoFloat(v), want));
  }
});

describe("escaping", () => {
  it("HELP escapes backslash and newline, not quotes", () => {
    assert.equal(escapeHelp('a\\b\nc "d"'), 'a\\\\b\\nc "d"');
  });
  it("label values escape backslash, quote and newline", () => {
    assert.equal(escapeLabelValue('a\\b\nc "d"'), 'a\\\\b\\nc \\"d\\"');
  });
});

describe("Registry exposition", () => {
  it("renders a golden document: sorted families, sorted series, le last, stability prefix", () => {
    const r = new Registry();
    const c = r.counter({ name: "zz_requests_total", help: "Requests.", labelNames: ["path", "code"] });
    const g = r.gauge({ name: "aa_temperature", help: "Temp \\ in\nC.", stabilityLevel: "ALPHA" });
    const h = r.histogram({
      name: "mm_latency_seconds",
      help: "Latency.",
      labelNames: ["op"],
      buckets: [0.1, 1],
    });
    r.counter({ name: "empty_total", help: "Never touched.", labelNames: ["x"] });
    c.inc({ path: "/b", code: "200" });
    c.inc({ code: "200", path: "/a" }, 2);
    c.inc({ path: "/a", code: "503" });
    c.inc({ path: 'q"\n', code: "200" });
    g.set({}, -3.5);
    h.observe({ op: "write" }, 0.1); // le is inclusive
    h.observe({ op: "write" }, 0.5);
    h.observe({ op: "write" }, 7);
    h.observe({ op: "read" }, 0.05);
    assert.equal(
      r.metrics(),
      [
        "# HELP aa_temperature [ALPHA] Temp \\\\ in\\nC.",
        "# TYPE aa_temperature gauge",
        "aa_temperature -3.5",
        "# HELP mm_latency_seconds Latency.",
        "# TYPE mm_latency_seconds histogram",
        'mm_latency_seconds_bucket{op="read",le="0.1"} 1',
        'mm_latency_seconds_bucket{op="read",le="1"} 1',
        'mm_latency_seconds_bucket{op="read",le="+Inf"} 1',
        'mm_latency_seconds_sum{op="read"} 0.05',
        'mm_latency_seconds_count{op="read"} 1',
        'mm_latency_seconds_bucket{op="write",le="0.1"} 1',
        'mm_latency_seconds_bucket{op="write",le="1"} 2',
        'mm_latency_seconds_bucket{op="write",le="+Inf"} 3',
        'mm_latency_seconds_sum{op="write"} 7.6',
        'mm_latency_seconds_count{op="write"} 3',
        "# HELP zz_requests_total Requests.",
        "# TYPE zz_requests_total counter",
        'zz_requests_total{code="200",path="/a"} 2',
        'zz_requests_total{code="200",path="/b"} 1',
        'zz_requests_total{code="200",path="q\\"\\n"} 1',
        'zz_requests_total{code="503",path="/a"} 1',
        "",
      ].join("\n"),
    );
  });

  it("unlabelled metrics start at 0; labelled ones appear when touched; reset and remove", () => {
    const r = new Registry();
    const plain = r.counter({ name: "a_total", help: "A." });
    const lab = r.gauge({ name: "b", help: "B.", labelNames: ["k"] });
    const hist = r.histogram({ name: "c", help: "C.", buckets: [1] });
    assert.equal(
      r.metrics(),
      '# HELP a_total A.\n# TYPE a_total counter\na_total 0\n# HELP c C.\n# TYPE c histogram\nc_bucket{le="1"} 0\n' +
        'c_bucket{le="+Inf"} 0\nc_sum 0\nc_count 0\n',
    );
    lab.set({ k: "x" }, 1);
    lab.set({ k: "y" }, 2);
    assert.equal(lab.remove({ k: "x" }), true);
    assert.match(r.metrics(), /^b\{k="y"\} 2$/m);
    assert.doesNotMatch(r.metrics(), /k="x"/);
    lab.reset();
    assert.doesNotMatch(r.metrics(), /^# HELP b /m);
    plain.inc({}, 5);
    hist.observe({}, 2);
    plain.reset();
    hist.reset();
    assert.match(r.metrics(), /^a_total 0$/m);
    assert.match(r.metrics(), /^c_count 0$/m);
  });

  it("bound children and getters", () => {
    const r = new Registry();
    const c = r.counter({ name: "x_total", help: "X.", labelNames: ["f"] });
    const child = c.labels({ f: "IPv4" });
    child.inc();
    child.inc(2);
    assert.equal(c.get({ f: "IPv4" }), 3);
    assert.equal(c.get({ f: "IPv6" }), 0);
    const h = r.histogram({ name: "h", help: "H.", labelNames: ["f"], buckets: [1, 2] });
    h.labels({ f: "IPv6" }).observe(1.5);
    assert.deepEqual(h.get({ f: "IPv6" }), { count: 1, sum: 1.5 });
  });

  it("label mistakes are errors naming the metric and the labels", () => {
    const r = new Registry();
    const c = r.counter({ name: "x_total", help: "X.", labelNames: ["ip_family"] });
    assert.throws(
      () => c.inc({}),
      /metric x_total: labels \(none\) do not match the declared labels "ip_family"/,
    );
    assert.throws(() => c.inc({ ip_family: "IPv4", extra: "1" }), /labels "extra", "ip_family" do not match/);
    assert.throws(() => c.inc({ ip_family: "IPv4" }, -1), /a counter cannot change by -1/);
    assert.throws(() => r.counter({ name: "x_total", help: "again" }), /already registered/);
    assert.throws(() => r.counter({ name: "bad-name", help: "" }), /not a valid Prometheus name/);
    assert.throws(
      () => r.gauge({ name: "g", help: "", labelNames: ["__x"] }),
      /not a valid Prometheus label name/,
    );
    assert.throws(() => r.gauge({ name: "g2", help: "", labelNames: ["a", "a"] }), /declared twice/);
    assert.throws(
      () => new Histogram({ name: "h", help: "", labelNames: ["le"], buckets: [1] }),
      /"le" is reserved/,
    );
    assert.throws(() => new Histogram({ name: "h", help: "", buckets: [2, 1] }), /strictly increasing/);
    // +Inf given explicitly is accepted and not duplicated.
    const h = new Histogram({ name: "h", help: "", buckets: [1, Infinity] });
    assert.deepEqual(h.buckets, [1]);
  });

  it("collectors run at scrape time; a failing one is left out and reported, the rest still render", () => {
    const errors: string[] = [];
    const r = new Registry((msg) => errors.push(msg));
    let n = 0;
    r.collector({
      name: "live_value",
      help: "Live.",
      type: "gauge",
      labelNames: ["k"],
      collect: () => [{ labels: { k: "b" }, value: ++n }, { labels: { k: "a" }, value: 10 }],
    });
    r.collector({
      name: "broken",
      help: "Broken.",
      type: "counter",
      collect: () => {
        throw new Error("nope");
      },
    });
    r.collector({
      name: "wrong_labels",
      help: "W.",
      type: "gauge",
      collect: () => [{ labels: { z: "1" }, value: 1 }],
    });
    r.collector({ name: "nothing", help: "N.", type: "gauge", collect: () => [] });
    const first = r.metrics();
    assert.equal(
      first,
      '# HELP live_value Live.\n# TYPE live_value gauge\nlive_value{k="a"} 10\nlive_value{k="b"} 1\n',
    );
    assert.match(r.metrics(), /live_value\{k="b"\} 2/, "recomputed on every scrape");
    assert.equal(errors.filter((e) => e.includes("broken")).length, 2);
    assert.equal(errors.filter((e) => e.includes("wrong_labels")).length, 2);
  });

  it("an empty registry renders nothing", () => {
    assert.equal(new Registry().metrics(), "");
  });
});
