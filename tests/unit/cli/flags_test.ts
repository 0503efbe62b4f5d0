import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { flagForConfigPath, FLAGS, newFlagState, parseVModule } from "../../../lib/cli/flags.ts";
import {
  FlagError,
  FlagValueError,
  parseArgv,
  parseCSVRecord,
  parseGoBool,
  parseGoFloat32,
  parseGoInt,
  parseGoUint,
  parseMapStringBool,
} from "../../../lib/cli/pflag.ts";

/** Every flag of kube-proxy ≈v1.31 on Linux (cmd/kube-proxy/app/options.go AddFlags, logsapi.AddFlags, cobra). */
const UPSTREAM_FLAGS = [
  "config",
  "write-config-to",
  "cleanup",
  "feature-gates",
  "kubeconfig",
  "master",
  "kube-api-content-type",
  "kube-api-burst",
  "kube-api-qps",
  "hostname-override",
  "bind-address",
  "healthz-bind-address",
  "metrics-bind-address",
  "bind-address-hard-fail",
  "profiling",
  "show-hidden-metrics-for-version",
  "init-only",
  "proxy-mode",
  "iptables-masquerade-bit",
  "masquerade-all",
  "iptables-localhost-nodeports",
  "iptables-sync-period",
  "iptables-min-sync-period",
  "ipvs-sync-period",
  "ipvs-min-sync-period",
  "ipvs-scheduler",
  "ipvs-exclude-cidrs",
  "ipvs-strict-arp",
  "ipvs-tcp-timeout",
  "ipvs-tcpfin-timeout",
  "ipvs-udp-timeout",
  "detect-local-mode",
  "pod-bridge-interface",
  "pod-interface-name-prefix",
  "cluster-cidr",
  "nodeport-addresses",
  "oom-score-adj",
  "conntrack-max-per-core",
  "conntrack-min",
  "conntrack-tcp-timeout-established",
  "conntrack-tcp-timeout-close-wait",
  "conntrack-tcp-be-liberal",
  "conntrack-udp-timeout",
  "conntrack-udp-timeout-stream",
  "config-sync-period",
  "healthz-port",
  "metrics-port",
  "proxy-port-range",
  "logging-format",
  "log-flush-frequency",
  "v",
  "vmodule",
  "log-json-split-stream",
  "log-json-info-buffer-size",
  "log-text-split-stream",
  "log-text-info-buffer-size",
  "version",
  "help",
];

const OWN_FLAGS = [
  "state-dir",
  "api-mode",
  "poll-interval",
  "manifests",
  "dry-run",
  "cache-start-deadline",
  "userspace-portals",
  "udp-timeout",
];

/** Parses argv onto a fresh state. */
function parse(argv: string[]) {
  const state = newFlagState();
  const seen: string[] = [];
  const { positional } = parseArgv(argv, FLAGS, (f, raw) => {
    f.set(state, raw);
    seen.push(f.name);
  });
  return { state, positional, seen };
}

function parseError(argv: string[]): string {
  try {
    parse(argv);
  } catch (e) {
    assert.ok(e instanceof FlagError, `expected FlagError, got ${e}`);
    return e.message;
  }
  assert.fail(`expected ${JSON.stringify(argv)} to be rejected`);
}

describe("the flag table", () => {
  it("has every kube-proxy flag", () => {
    const names = new Set(FLAGS.map((f) => f.name));
    assert.deepEqual(UPSTREAM_FLAGS.filter((n) => !names.has(n)), []);
  });
  it("has edgeproxy's own flags", () => {
    const names = new Set(FLAGS.map((f) => f.name));
    assert.deepEqual(OWN_FLAGS.filter((n) => !names.has(n)), []);
  });
  it("has nothing else, and no duplicates", () => {
    const expected = new Set([...UPSTREAM_FLAGS, ...OWN_FLAGS]);
    assert.deepEqual(FLAGS.map((f) => f.name).filter((n) => !expected.has(n)), []);
    assert.equal(new Set(FLAGS.map((f) => f.name)).size, FLAGS.length);
  });
  it("marks exactly the upstream deprecated flags deprecated", () => {
    assert.deepEqual(
      FLAGS.filter((f) => f.deprecated).map((f) => f.name).sort(),
      ["healthz-port", "metrics-port", "proxy-port-range"],
    );
  });
  it("maps config paths back to flags", () => {
    assert.equal(flagForConfigPath("iptables.masqueradeBit")?.name, "iptables-masquerade-bit");
    assert.equal(flagForConfigPath("nodePortAddresses[1]")?.name, "nodeport-addresses");
    assert.equal(flagForConfigPath("logging.vmodule[0].filePattern")?.name, "vmodule");
    assert.equal(flagForConfigPath("winkernel.networkName"), undefined);
  });
});

describe("pflag syntax", () => {
  it("--flag=value and --flag value", () => {
    const a = parse(["--kubeconfig=/a", "--cluster-cidr", "10.0.0.0/8"]).state;
    assert.equal(a.config.clientConnection.kubeconfig, "/a");
    assert.equal(a.config.clusterCIDR, "10.0.0.0/8");
  });
  it("an empty value with =", () => {
    assert.equal(parse(["--metrics-bind-address="]).state.config.metricsBindAddress, "");
  });
  it("booleans: --bool, --bool=false, --bool=0, and --bool false leaves a positional", () => {
    assert.equal(parse(["--masquerade-all"]).state.config.iptables.masqueradeAll, true);
    assert.equal(
      parse(["--iptables-localhost-nodeports=false"]).state.config.iptables.localhostNodePorts,
      false,
    );
    assert.equal(parse(["--masquerade-all=0"]).state.config.iptables.masqueradeAll, false);
    assert.equal(parse(["--masquerade-all=T"]).state.config.iptables.masqueradeAll, true);
    const r = parse(["--masquerade-all", "false"]);
    assert.equal(r.state.config.iptables.masqueradeAll, true);
    assert.deepEqual(r.positional, ["false"]);
  });
  it("verbosity: -v=4, -v 4, -v4, --v=4, --v 4", () => {
    for (const argv of [["-v=4"], ["-v", "4"], ["-v4"], ["--v=4"], ["--v", "4"]]) {
      assert.equal(parse(argv).state.config.logging.verbosity, 4, argv.join(" "));
    }
  });
  it("-h, combined with nothing else", () => {
    assert.equal(parse(["-h"]).state.cli.help, true);
  });
  it("-- ends the flags; '-' alone is positional; flags and positionals interleave", () => {
    const r = parse(["--masquerade-all", "x", "-", "--", "--bogus", "-v"]);
    assert.deepEqual(r.positional, ["x", "-", "--bogus", "-v"]);
    assert.equal(r.state.config.iptables.masqueradeAll, true);
  });
  it("underscores in names are read as dashes", () => {
    assert.equal(parse(["--iptables_sync_period=1m"]).state.config.iptables.syncPeriod, 60_000);
  });
  it("the last value of a scalar flag wins", () => {
    assert.equal(parse(["--oom-score-adj=1", "--oom-score-adj=-5"]).state.config.oomScoreAdj, -5);
  });
  it("list flags: comma-separated, repeating appends", () => {
    const s =
      parse(["--nodeport-addresses=10.0.0.0/8,192.168.0.0/16", "--nodeport-addresses", "fd00::/64"]).state;
    assert.deepEqual(s.config.nodePortAddresses, ["10.0.0.0/8", "192.168.0.0/16", "fd00::/64"]);
    assert.deepEqual(parse(["--ipvs-exclude-cidrs="]).state.config.ipvs.excludeCIDRs, []);
  });
  it("--feature-gates A=true,B=false, repeated flags merge", () => {
    const s = parse(["--feature-gates", "A=true, B=false", "--feature-gates=C=1,A=false"]).state;
    assert.deepEqual(s.config.featureGates, { A: false, B: false, C: true });
  });
  it("durations use Go syntax", () => {
    const s =
      parse(["--iptables-sync-period=1h30m", "--iptables-min-sync-period=500ms", "--config-sync-period=1.5h"])
        .state;
    assert.equal(s.config.iptables.syncPeriod, 5_400_000);
    assert.equal(s.config.iptables.minSyncPeriod, 500);
    assert.equal(s.config.configSyncPeriod, 5_400_000);
  });
  it("integers use Go's base prefixes", () => {
    assert.equal(parse(["--iptables-masquerade-bit=0x0e"]).state.config.iptables.masqueradeBit, 14);
    assert.equal(parse(["--conntrack-min=1_000"]).state.config.conntrack.min, 1000);
    assert.equal(parse(["--oom-score-adj=-999"]).state.config.oomScoreAdj, -999);
  });
  it("edgeproxy flags set options", () => {
    const s = parse([
      "--state-dir=",
      "--api-mode=poll",
      "--poll-interval=2s",
      "--manifests=/etc/edgeproxy/site",
      "--dry-run",
      "--cache-start-deadline=0s",
      "--master=https://10.0.0.1:6443",
      "--cleanup",
      "--init-only=true",
      "--userspace-portals=none",
      "--udp-timeout=2s",
    ]).state;
    assert.deepEqual(s.options, {
      stateDir: "",
      apiMode: "poll",
      pollInterval: 2000,
      manifests: "/etc/edgeproxy/site",
      dryRun: true,
      master: "https://10.0.0.1:6443",
      cleanup: true,
      initOnly: true,
      cacheStartDeadline: 0,
      userspacePortals: "none",
      udpIdleTimeout: 2000,
    });
  });
  it("--version without a value means true, --version=raw is kept", () => {
    assert.equal(parse(["--version"]).state.cli.version, "true");
    assert.equal(parse(["--version=raw"]).state.cli.version, "raw");
  });
  it("--vmodule appends pattern=N items", () => {
    const s = parse(["--vmodule=proxier*=4,sync=2", "--vmodule", "x=1"]).state;
    assert.deepEqual(s.config.logging.vmodule, [
      { filePattern: "proxier*", verbosity: 4 },
      { filePattern: "sync", verbosity: 2 },
      { filePattern: "x", verbosity: 1 },
    ]);
  });
  it("--healthz-bind-address accepts an IP or IP:port", () => {
    assert.equal(parse(["--healthz-bind-address=10.0.0.1"]).state.config.healthzBindAddress, "10.0.0.1");
    assert.equal(parse(["--healthz-bind-address=[::1]:99"]).state.config.healthzBindAddress, "[::1]:99");
  });
});

describe("pflag errors (one line, pflag's wording)", () => {
  const cases: Array<[string[], string]> = [
    [["--x"], "unknown flag: --x"],
    [["--bogus=1"], "unknown flag: --bogus"],
    [["-x"], "unknown shorthand flag: 'x' in -x"],
    [
      ["-vx", "-q"],
      'invalid argument "x" for "-v, --v" flag: strconv.ParseUint: parsing "x": invalid syntax',
    ],
    [["--config"], "flag needs an argument: --config"],
    [["-v"], "flag needs an argument: 'v' in -v"],
    [["---config=x"], "bad flag syntax: ---config=x"],
    [["--=x"], "bad flag syntax: --=x"],
    [
      ["--masquerade-all=maybe"],
      'invalid argument "maybe" for "--masquerade-all" flag: strconv.ParseBool: parsing "maybe": invalid syntax',
    ],
    [
      ["--kube-api-qps=abc"],
      'invalid argument "abc" for "--kube-api-qps" flag: strconv.ParseFloat: parsing "abc": invalid syntax',
    ],
    [
      ["--kube-api-burst=1e3"],
      'invalid argument "1e3" for "--kube-api-burst" flag: strconv.ParseInt: parsing "1e3": invalid syntax',
    ],
    [
      ["--oom-score-adj=99999999999"],
      'invalid argument "99999999999" for "--oom-score-adj" flag: strconv.ParseInt: parsing "99999999999": value out of range',
    ],
    [
      ["--iptables-sync-period=30"],
      'invalid argument "30" for "--iptables-sync-period" flag: time: missing unit in duration "30"',
    ],
    [
      ["--config-sync-period=1d"],
      'invalid argument "1d" for "--config-sync-period" flag: time: unknown unit "d" in duration "1d"',
    ],
    [
      ["--bind-address=1.2.3"],
      'invalid argument "1.2.3" for "--bind-address" flag: "1.2.3" is not a valid IP address',
    ],
    [
      ["--metrics-bind-address=localhost:10249"],
      'invalid argument "localhost:10249" for "--metrics-bind-address" flag: "localhost" is not a valid IP address',
    ],
    [
      ["--feature-gates=A"],
      'invalid argument "A" for "--feature-gates" flag: missing bool value for A',
    ],
    [
      ["--feature-gates=A=yes"],
      'invalid argument "A=yes" for "--feature-gates" flag: invalid value of A=yes, err: strconv.ParseBool: parsing "yes": invalid syntax',
    ],
    [
      ["--vmodule=abc"],
      'invalid argument "abc" for "--vmodule" flag: "abc" does not have the pattern=N format',
    ],
    [["--api-mode=stream"], 'invalid argument "stream" for "--api-mode" flag: must be "watch" or "poll"'],
    [["--poll-interval=0s"], 'invalid argument "0s" for "--poll-interval" flag: must be greater than 0'],
    [
      ["--cache-start-deadline=-1s"],
      'invalid argument "-1s" for "--cache-start-deadline" flag: must be greater than or equal to 0',
    ],
    [
      ["--proxy-mode=kernelspace"],
      'edgeproxy implements only --proxy-mode=iptables|nftables|userspace|ipvs (got "kernelspace")',
    ],
    [
      ["--proxy-mode=ebpf"],
      'edgeproxy implements only --proxy-mode=iptables|nftables|userspace|ipvs (got "ebpf")',
    ],
    [
      ["--userspace-portals=nat"],
      'invalid argument "nat" for "--userspace-portals" flag: must be "iptables" or "none"',
    ],
    [["--udp-timeout=0s"], 'invalid argument "0s" for "--udp-timeout" flag: must be greater than 0'],
    [
      ["--proxy-port-range=100-50"],
      'invalid argument "100-50" for "--proxy-port-range" flag: "100-50" is not a valid port range: end port cannot be less than start port',
    ],
    [
      ["--log-json-info-buffer-size=lots"],
      'invalid argument "lots" for "--log-json-info-buffer-size" flag: quantities must match the regular expression \'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$\'',
    ],
  ];
  for (const [argv, message] of cases) {
    it(argv.join(" "), () => {
      const m = parseError(argv);
      assert.equal(m, message);
      assert.ok(!m.includes("\n"));
    });
  }
  it("the empty proxy mode, iptables and ipvs are accepted", () => {
    assert.equal(parse(["--proxy-mode="]).state.config.mode, "");
    assert.equal(parse(["--proxy-mode=iptables"]).state.config.mode, "iptables");
    assert.equal(parse(["--proxy-mode=ipvs"]).state.config.mode, "ipvs");
  });
});

describe("Go value parsers", () => {
  it("parseGoBool", () => {
    for (const t of ["1", "t", "T", "TRUE", "true", "True"]) assert.equal(parseGoBool(t), true);
    for (const f of ["0", "f", "F", "FALSE", "false", "False"]) assert.equal(parseGoBool(f), false);
    for (const x of ["yes", "tRuE", "", "2"]) assert.throws(() => parseGoBool(x), FlagValueError);
  });
  it("parseGoInt (base 0)", () => {
    assert.equal(parseGoInt("42"), 42);
    assert.equal(parseGoInt("-42"), -42);
    assert.equal(parseGoInt("+7"), 7);
    assert.equal(parseGoInt("010"), 8);
    assert.equal(parseGoInt("0o17"), 15);
    assert.equal(parseGoInt("0b101"), 5);
    assert.equal(parseGoInt("0X1f"), 31);
    assert.equal(parseGoInt("2147483647"), 2147483647);
    assert.equal(parseGoInt("-2147483648"), -2147483648);
    for (const x of ["", "08", "1_", "_1", "1__0", "0x", "1.0", "abc", " 1"]) {
      assert.throws(() => parseGoInt(x), /invalid syntax/, x);
    }
    assert.throws(() => parseGoInt("2147483648"), /value out of range/);
  });
  it("parseGoUint (base 10)", () => {
    assert.equal(parseGoUint("7"), 7);
    assert.throws(() => parseGoUint("-1"), /invalid syntax/);
    assert.throws(() => parseGoUint("4294967296"), /value out of range/);
    assert.throws(() => parseGoUint("2147483648", 31), /value out of range/);
  });
  it("parseGoFloat32", () => {
    assert.equal(parseGoFloat32("5"), 5);
    assert.equal(parseGoFloat32("0.5"), 0.5);
    assert.equal(parseGoFloat32(".5"), 0.5);
    assert.equal(parseGoFloat32("1e2"), 100);
    assert.equal(parseGoFloat32("-Inf"), -Infinity);
    assert.ok(Number.isNaN(parseGoFloat32("NaN")));
    assert.throws(() => parseGoFloat32("1e39"), /value out of range/);
    for (const x of ["", "abc", "1.2.3", "5q"]) assert.throws(() => parseGoFloat32(x), /invalid syntax/, x);
  });
  it("parseCSVRecord", () => {
    assert.deepEqual(parseCSVRecord(""), []);
    assert.deepEqual(parseCSVRecord("a"), ["a"]);
    assert.deepEqual(parseCSVRecord("a,b"), ["a", "b"]);
    assert.deepEqual(parseCSVRecord("a,"), ["a", ""]);
    assert.deepEqual(parseCSVRecord('"a,b",c'), ["a,b", "c"]);
    assert.deepEqual(parseCSVRecord('"say ""hi"""'), ['say "hi"']);
    assert.throws(() => parseCSVRecord('a"b'), /bare "/);
    assert.throws(() => parseCSVRecord('"ab'), /quoted-field/);
  });
  it("parseMapStringBool", () => {
    assert.deepEqual(parseMapStringBool(" A = true ,, B=0 "), { A: true, B: false });
    assert.throws(() => parseMapStringBool("A"), /missing bool value for A/);
  });
  it("parseVModule", () => {
    assert.deepEqual(parseVModule("a=1,,b*=2"), [{ filePattern: "a", verbosity: 1 }, {
      filePattern: "b*",
      verbosity: 2,
    }]);
    assert.throws(() => parseVModule("a=b=c"), /pattern=N/);
    assert.throws(() => parseVModule("a="), /pattern=N/);
    assert.throws(() => parseVModule("a=x"), /parsing verbosity in "a=x"/);
  });
});
