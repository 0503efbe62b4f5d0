import { afterEach, describe, it } from "node:test";
import assert from "node:assert/strict";
import { FLAGS } from "../../../lib/cli/flags.ts";
import { flagValues, goFloatText, printFlags } from "../../../lib/cli/print_flags.ts";
import { configureLogging } from "../../../lib/log.ts";

function capture(v: number): string[] {
  const lines: string[] = [];
  configureLogging({ verbosity: v, format: "text", tty: false, sink: { write: (s) => lines.push(s) } });
  return lines;
}

describe("FLAG lines (cliflag.PrintFlags)", () => {
  afterEach(() => configureLogging({ verbosity: 0, format: "text", tty: false }));

  it("every flag once, sorted by name, with pflag's value text", () => {
    const values = flagValues([
      "--hostname-override=edge-node-1",
      "--iptables-sync-period=1h30m",
      "--feature-gates=B=false,A=true",
      "--nodeport-addresses=10.0.0.0/8",
      "--nodeport-addresses=fd00::/64",
      "--dry-run",
      "-v=1",
      "--kube-api-qps=1000000",
      "--vmodule=proxier=4",
    ]);
    const names = values.map(([n]) => n);
    assert.deepEqual(names, FLAGS.map((f) => f.name).sort());
    const m = new Map(values);
    assert.equal(m.get("hostname-override"), "edge-node-1");
    assert.equal(m.get("iptables-sync-period"), "1h30m0s");
    assert.equal(m.get("iptables-min-sync-period"), "1s");
    assert.equal(m.get("conntrack-udp-timeout"), "0s");
    assert.equal(m.get("feature-gates"), "A=true,B=false");
    assert.equal(m.get("nodeport-addresses"), "[10.0.0.0/8,fd00::/64]");
    assert.equal(m.get("ipvs-exclude-cidrs"), "[]");
    assert.equal(m.get("dry-run"), "true");
    assert.equal(m.get("cleanup"), "false");
    assert.equal(m.get("help"), "false");
    assert.equal(m.get("version"), "false");
    assert.equal(m.get("v"), "1");
    assert.equal(m.get("vmodule"), "proxier=4");
    assert.equal(m.get("kube-api-qps"), "1e+06");
    assert.equal(m.get("kube-api-burst"), "10");
    assert.equal(m.get("kube-api-content-type"), "application/vnd.kubernetes.protobuf");
    assert.equal(m.get("state-dir"), "/var/lib/edgeproxy");
    assert.equal(m.get("poll-interval"), "10s");
    assert.equal(m.get("healthz-port"), "10256");
    assert.equal(m.get("metrics-bind-address"), "127.0.0.1:10249");
  });

  it("values are the command line's: a --config file does not change them (as upstream)", () => {
    const m = new Map(flagValues(["--config", "/etc/edgeproxy/config.yaml"]));
    assert.equal(m.get("config"), "/etc/edgeproxy/config.yaml");
    assert.equal(m.get("iptables-sync-period"), "30s");
  });

  it('printed at -v=1 as `FLAG: --name="value"` (Go %q), not at -v=0', () => {
    let out = capture(0);
    printFlags(["--hostname-override", 'a"b']);
    assert.deepEqual(out, []);
    out = capture(1);
    printFlags(["--hostname-override", 'a"b']);
    assert.equal(out.length, FLAGS.length);
    const bodies = out.map((l) => l.replace(/^I\d{4} [\d:.]+ +\d+ print_flags\.ts:\d+\] /, ""));
    assert.ok(bodies.includes('FLAG: --hostname-override="a\\"b"\n'), bodies.join(""));
    assert.ok(bodies.includes('FLAG: --write-config-to=""\n'));
  });

  it("floats as strconv.FormatFloat(v, 'g', -1, 32)", () => {
    assert.deepEqual(
      [5, 0.5, 100000, 1e6, 1234567, 0.0001, 0.00001, -2.5e-7].map(goFloatText),
      ["5", "0.5", "100000", "1e+06", "1.234567e+06", "0.0001", "1e-05", "-2.5e-07"],
    );
  });
});
