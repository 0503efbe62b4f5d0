import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  compareVersions,
  iptablesFeatures,
  iptablesRestoreWaitFlags,
  iptablesWaitFlags,
  parseIptablesVersion,
} from "../../../../lib/proxy/iptables/version.ts";

describe("parseIptablesVersion", () => {
  it("reads version and nf_tables backend", () => {
    const v = parseIptablesVersion("iptables v1.8.9 (nf_tables)\n");
    assert.deepEqual(v, { parts: [1, 8, 9], text: "1.8.9", backend: "nf_tables" });
  });
  it("reads the legacy backend and ip6tables-restore output", () => {
    assert.equal(parseIptablesVersion("iptables v1.8.7 (legacy)")?.backend, "legacy");
    assert.deepEqual(parseIptablesVersion("ip6tables-restore v1.8.4 (legacy)")?.parts, [1, 8, 4]);
  });
  it("has an unknown backend for old builds without a suffix", () => {
    assert.deepEqual(parseIptablesVersion("iptables v1.4.21"), {
      parts: [1, 4, 21],
      text: "1.4.21",
      backend: "unknown",
    });
  });
  it("returns null without a version", () => {
    assert.equal(parseIptablesVersion("iptables: command not found"), null);
    assert.equal(parseIptablesVersion(""), null);
  });
});

describe("version-derived flags (upstream getIPTablesWaitFlag / getIPTablesRestoreWaitFlag)", () => {
  it("compares component-wise", () => {
    assert.equal(compareVersions([1, 6, 2], [1, 6, 2]), 0);
    assert.equal(compareVersions([1, 10], [1, 9, 9]), 1);
    assert.equal(compareVersions([1, 6], [1, 6, 1]), -1);
  });
  it("iptables wait flags by version", () => {
    assert.deepEqual(iptablesWaitFlags([1, 8, 9]), ["-w", "5", "-W", "100000"]);
    assert.deepEqual(iptablesWaitFlags([1, 6, 1]), ["-w", "5", "-W", "100000"]);
    assert.deepEqual(iptablesWaitFlags([1, 6, 0]), ["-w", "5"]);
    assert.deepEqual(iptablesWaitFlags([1, 4, 22]), ["-w", "5"]);
    assert.deepEqual(iptablesWaitFlags([1, 4, 21]), ["-w"]);
    assert.deepEqual(iptablesWaitFlags([1, 4, 20]), ["-w"]);
    assert.deepEqual(iptablesWaitFlags([1, 4, 19]), []);
  });
  it("iptables-restore wait flags: >= 1.6.2, else -w only when --version answers", () => {
    assert.deepEqual(iptablesRestoreWaitFlags([1, 6, 2], false), ["-w", "5", "-W", "100000"]);
    assert.deepEqual(iptablesRestoreWaitFlags([1, 6, 1], true), ["-w"]);
    assert.deepEqual(iptablesRestoreWaitFlags([1, 6, 1], false), []);
  });
  it("feature set of Debian 12's iptables", () => {
    const f = iptablesFeatures(parseIptablesVersion("iptables v1.8.9 (nf_tables)")!, true);
    assert.equal(f.hasCheck, true);
    assert.equal(f.hasRandomFully, true);
    assert.deepEqual(f.restoreWaitFlags, ["-w", "5", "-W", "100000"]);
  });
  it("no --random-fully before 1.6.2, no -C before 1.4.11", () => {
    const old = iptablesFeatures({ parts: [1, 6, 1], text: "1.6.1", backend: "unknown" }, false);
    assert.equal(old.hasRandomFully, false);
    assert.equal(old.hasCheck, true);
    assert.equal(
      iptablesFeatures({ parts: [1, 4, 10], text: "1.4.10", backend: "unknown" }, false).hasCheck,
      false,
    );
  });
});
