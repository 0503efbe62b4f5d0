import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { renderHelp } from "../../../lib/cli/help.ts";
import { FLAG_GROUPS, FLAGS } from "../../../lib/cli/flags.ts";
import { UPSTREAM_KUBE_PROXY_VERSION, VERSION, versionLine } from "../../../lib/cli/version.ts";
import pkg from "../../../package.json" with { type: "json" };

describe("--help", () => {
  const help = renderHelp();
  const lines = help.split("\n");

  it("starts with the version line and a usage", () => {
    assert.equal(lines[0], versionLine());
    assert.match(help, /\nUsage:\n {2}edgeproxy \[flags\]\n/);
  });
  it("lists every flag that is not deprecated, once, under its group heading", () => {
    for (const f of FLAGS.filter((x) => !x.deprecated)) {
      const re = new RegExp(`^ {2}(-${f.shorthand}, | {4})--${f.name}( |$)`, "m");
      const matches = help.split("\n").filter((l) => re.test(l));
      assert.equal(matches.length, 1, `--${f.name}`);
      const at = lines.findIndex((l) => re.test(l));
      const heading = lines.slice(0, at).reverse().find((l) => /^\S.*:$/.test(l));
      assert.equal(heading, `${f.group}:`, `--${f.name} is under ${f.group}`);
    }
  });
  it("hides deprecated flags but names them", () => {
    assert.doesNotMatch(help, /^ +--healthz-port/m);
    assert.match(
      help.replace(/\s+/g, " "),
      /Deprecated kube-proxy flags, accepted with a warning: --healthz-port, --metrics-port, --proxy-port-range\./,
    );
  });
  it("shows groups in order", () => {
    const headings = lines.filter((l) => /^\S.*:$/.test(l) && l !== "Usage:").map((l) => l.slice(0, -1));
    assert.deepEqual(headings, FLAG_GROUPS.filter((g) => FLAGS.some((f) => f.group === g && !f.deprecated)));
  });
  it("shows defaults in Go's notation", () => {
    assert.match(help, /--iptables-sync-period duration +.*\n(.*\n)*?.*\(default 30s\)/);
    assert.match(help, /\(default 15m0s\)/);
    assert.match(help, /\(default 24h0m0s\)/);
    assert.match(help, /\(default "application\/vnd\.kubernetes\.protobuf"\)/);
    assert.match(help, /\(default 0\.0\.0\.0:10256\)/);
    assert.match(help, /\(default "\/var\/lib\/edgeproxy"\)/);
    assert.match(help, /\(default -999\)/);
  });
  it("fits in 100 columns", () => {
    const long = lines.filter((l) => l.length > 100);
    assert.deepEqual(long, []);
  });
});

describe("version", () => {
  it("comes from package.json", () => {
    assert.equal(VERSION, pkg.version);
    assert.equal(
      versionLine(),
      `edgeproxy ${pkg.version} (matches kube-proxy v1.34; iptables, nftables, userspace and ipvs modes)`,
    );
  });
  it("--version and --help name the upstream kube-proxy release whose behaviour is matched", () => {
    assert.equal(UPSTREAM_KUBE_PROXY_VERSION, "v1.34");
    assert.ok(versionLine().includes(`kube-proxy ${UPSTREAM_KUBE_PROXY_VERSION}`));
    assert.match(renderHelp(), /what kube-proxy v1\.34 would write/);
    assert.match(renderHelp(), /logs follow kube-proxy v1\.34\./);
  });
});
