import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  DurationError,
  formatDuration,
  formatDurationNs,
  parseDuration,
  parseDurationNs,
} from "../../../lib/config/duration.ts";

const NS = 1n;
const US = 1000n * NS;
const MS = 1000n * US;
const S = 1000n * MS;
const M = 60n * S;
const H = 60n * M;
const MAX = (1n << 63n) - 1n;
const MIN = -(1n << 63n);

// Cases from Go's time.ParseDuration tests (time_test.go parseDurationTests).
const parseCases: Array<[string, bigint]> = [
  ["0", 0n],
  ["5s", 5n * S],
  ["30s", 30n * S],
  ["1478s", 1478n * S],
  ["-5s", -5n * S],
  ["+5s", 5n * S],
  ["-0", 0n],
  ["+0", 0n],
  ["5.0s", 5n * S],
  ["5.6s", 5n * S + 600n * MS],
  ["5.s", 5n * S],
  [".5s", 500n * MS],
  ["1.0s", 1n * S],
  ["1.00s", 1n * S],
  ["1.004s", 1n * S + 4n * MS],
  ["1.0040s", 1n * S + 4n * MS],
  ["100.00100s", 100n * S + 1n * MS],
  ["10ns", 10n * NS],
  ["11us", 11n * US],
  ["12\u00b5s", 12n * US],
  ["12\u03bcs", 12n * US],
  ["13ms", 13n * MS],
  ["14s", 14n * S],
  ["15m", 15n * M],
  ["16h", 16n * H],
  ["3h30m", 3n * H + 30n * M],
  ["1h30m", 90n * M],
  ["1.5h", 90n * M],
  ["10.5s4m", 4n * M + 10n * S + 500n * MS],
  ["-2m3.4s", -(2n * M + 3n * S + 400n * MS)],
  ["1h2m3s4ms5us6ns", 1n * H + 2n * M + 3n * S + 4n * MS + 5n * US + 6n * NS],
  ["39h9m14.425s", 39n * H + 9n * M + 14n * S + 425n * MS],
  ["52763797000ns", 52763797000n * NS],
  ["0.3333333333333333333h", 20n * M],
  ["9007199254740993ns", (1n << 53n) + 1n],
  ["9223372036854775807ns", MAX],
  ["9223372036854775.807us", MAX],
  ["9223372036s854ms775us807ns", MAX],
  ["-9223372036854775808ns", MIN],
  ["-9223372036854775.808us", MIN],
  ["-9223372036s854ms775us808ns", MIN],
  ["-2562047h47m16.854775808s", MIN],
  ["0.100000000000000000000h", 6n * M],
  ["0.830103483285477580700h", 49n * M + 48n * S + 372539827n * NS],
];

const parseErrors: Array<[string, string]> = [
  ["", 'time: invalid duration ""'],
  ["3", 'time: missing unit in duration "3"'],
  ["-", 'time: invalid duration "-"'],
  ["s", 'time: invalid duration "s"'],
  [".", 'time: invalid duration "."'],
  ["-.", 'time: invalid duration "-."'],
  [".s", 'time: invalid duration ".s"'],
  ["+.s", 'time: invalid duration "+.s"'],
  ["1d", 'time: unknown unit "d" in duration "1d"'],
  ["5 s", 'time: unknown unit " s" in duration "5 s"'],
  ["1h30", 'time: missing unit in duration "1h30"'],
  ["9223372036854775808ns", 'time: invalid duration "9223372036854775808ns"'],
  ["9223372036854775.808us", 'time: invalid duration "9223372036854775.808us"'],
  ["-9223372036854775809ns", 'time: invalid duration "-9223372036854775809ns"'],
  ["3000000h", 'time: invalid duration "3000000h"'],
];

// Cases from Go's Duration.String tests (durationTests).
const formatCases: Array<[bigint, string]> = [
  [0n, "0s"],
  [1n * NS, "1ns"],
  [1100n * NS, "1.1\u00b5s"],
  [2200n * US, "2.2ms"],
  [3300n * MS, "3.3s"],
  [4n * M + 5n * S, "4m5s"],
  [4n * M + 5001n * MS, "4m5.001s"],
  [5n * H + 6n * M + 7001n * MS, "5h6m7.001s"],
  [8n * M + 1n * NS, "8m0.000000001s"],
  [MAX, "2562047h47m16.854775807s"],
  [MIN, "-2562047h47m16.854775808s"],
  [-1500n * MS, "-1.5s"],
  [15n * M, "15m0s"],
  [24n * H, "24h0m0s"],
  [1n * H, "1h0m0s"],
  [90n * M, "1h30m0s"],
  [500n * MS, "500ms"],
];

describe("parseDurationNs (Go time.ParseDuration)", () => {
  for (const [input, want] of parseCases) {
    it(`parses ${JSON.stringify(input)}`, () => {
      assert.equal(parseDurationNs(input), want);
    });
  }
  for (const [input, message] of parseErrors) {
    it(`rejects ${JSON.stringify(input)} with Go's message`, () => {
      assert.throws(() => parseDurationNs(input), (e: unknown) => {
        assert.ok(e instanceof DurationError);
        assert.equal(e.message, message);
        assert.equal(e.input, input);
        return true;
      });
    });
  }
});

describe("formatDurationNs (Go Duration.String)", () => {
  for (const [ns, want] of formatCases) {
    it(`formats ${ns}ns as ${want}`, () => {
      assert.equal(formatDurationNs(ns), want);
    });
  }
  it("round-trips every parse case through the formatter", () => {
    for (const [, ns] of parseCases) assert.equal(parseDurationNs(formatDurationNs(ns)), ns);
  });
});

describe("millisecond helpers", () => {
  const table: Array<[string, number, string]> = [
    ["30s", 30_000, "30s"],
    ["1m", 60_000, "1m0s"],
    ["1m0s", 60_000, "1m0s"],
    ["1h", 3_600_000, "1h0m0s"],
    ["500ms", 500, "500ms"],
    ["1.5h", 5_400_000, "1h30m0s"],
    ["1h30m", 5_400_000, "1h30m0s"],
    ["24h", 86_400_000, "24h0m0s"],
    ["15m", 900_000, "15m0s"],
    ["0s", 0, "0s"],
    ["0", 0, "0s"],
    ["-1s", -1000, "-1s"],
    ["250us", 0.25, "250\u00b5s"],
    ["1ns", 0.000001, "1ns"],
  ];
  for (const [text, ms, formatted] of table) {
    it(`${text} is ${ms}ms and prints as ${formatted}`, () => {
      assert.equal(parseDuration(text), ms);
      assert.equal(formatDuration(ms), formatted);
    });
  }
  it("rounds to whole nanoseconds when formatting", () => {
    assert.equal(formatDuration(0.0000004), "0s");
    assert.equal(formatDuration(1.0000006), "1.000001ms");
  });
  it("refuses non-finite values", () => {
    assert.throws(() => formatDuration(Number.NaN), RangeError);
    assert.throws(() => formatDuration(Infinity), RangeError);
  });
});
