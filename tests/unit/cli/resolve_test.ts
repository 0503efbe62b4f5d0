import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { isUserError, resolveInvocation, type ResolveIO, UsageError } from "../../../lib/cli/resolve.ts";
import { FlagError } from "../../../lib/cli/pflag.ts";
import { ConfigError } from "../../../lib/config/load.ts";
import { defaultConfig, defaultOptions } from "../../../lib/config/defaults.ts";

const HEAD = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

/** Serves --config files from memory. */
function files(map: Record<string, string>): ResolveIO {
  return {
    readConfig: (f) => {
      if (f in map) return Promise.resolve(map[f]);
      return Promise.reject(new ConfigError(f, [{ path: "file", problem: "cannot read: no such file" }]));
    },
  };
}

async function rejection(argv: string[], io?: ResolveIO): Promise<Error> {
  try {
    await resolveInvocation(argv, io);
  } catch (e) {
    assert.ok(isUserError(e), `expected a user error, got ${e}`);
    return e;
  }
  assert.fail(`expected ${JSON.stringify(argv)} to be rejected`);
}

describe("actions", () => {
  it("no flags: run with the defaults", async () => {
    const inv = await resolveInvocation([]);
    assert.equal(inv.action, "run");
    assert.deepEqual(inv.config, defaultConfig());
    assert.deepEqual(inv.options, defaultOptions());
    assert.deepEqual(inv.warnings, []);
  });
  it("--help and -h win over everything but syntax errors", async () => {
    assert.equal((await resolveInvocation(["--config=/missing", "-h"])).action, "help");
    assert.equal((await resolveInvocation(["--help", "--version"])).action, "help");
    assert.ok((await rejection(["--help", "--nope"])) instanceof FlagError);
  });
  it("--version, --version=raw, --version=false", async () => {
    assert.equal((await resolveInvocation(["--version"])).action, "version");
    const raw = await resolveInvocation(["--version=raw"]);
    assert.equal(raw.action, "version");
    assert.equal(raw.versionRaw, true);
    assert.equal((await resolveInvocation(["--version=false"])).action, "run");
  });
  it("--write-config-to", async () => {
    const inv = await resolveInvocation(["--write-config-to", "/tmp/x.yaml", "--masquerade-all"]);
    assert.equal(inv.action, "write-config");
    assert.equal(inv.writeConfigTo, "/tmp/x.yaml");
    assert.equal(inv.config.iptables.masqueradeAll, true);
  });
  it("--cleanup and --init-only reach the options", async () => {
    const inv = await resolveInvocation(["--cleanup", "--init-only"]);
    assert.equal(inv.options.cleanup, true);
    assert.equal(inv.options.initOnly, true);
  });
  it("positional arguments are refused", async () => {
    const e = await rejection(["--masquerade-all", "false"]);
    assert.ok(e instanceof UsageError);
    assert.equal(e.message, '"edgeproxy" does not take any arguments, got ["false"]');
  });
});

describe("flags without --config", () => {
  it("set the configuration", async () => {
    const inv = await resolveInvocation([
      "--cluster-cidr=10.244.0.0/16",
      "--nodeport-addresses=primary",
      "--iptables-min-sync-period=0s",
      "-v=3",
    ]);
    assert.equal(inv.config.clusterCIDR, "10.244.0.0/16");
    assert.deepEqual(inv.config.nodePortAddresses, ["primary"]);
    assert.equal(inv.config.iptables.minSyncPeriod, 0, "a flag can set 0s (only a file defaults it to 1s)");
    assert.equal(inv.config.logging.verbosity, 3);
  });
  it("validation errors name the flag", async () => {
    const cases: Array<[string[], string]> = [
      [
        ["--iptables-masquerade-bit=32"],
        'invalid argument "32" for "--iptables-masquerade-bit" flag: must be within the range [0, 31]',
      ],
      [
        ["--oom-score-adj=2000"],
        'invalid argument "2000" for "--oom-score-adj" flag: must be within the range [-1000, 1000]',
      ],
      [
        ["--nodeport-addresses=10.0.0.0/8,nope"],
        'invalid argument "10.0.0.0/8,nope" for "--nodeport-addresses" flag: must be a valid CIDR (got "nope")',
      ],
      [
        ["--cluster-cidr=10.0.0.0/40"],
        'invalid argument "10.0.0.0/40" for "--cluster-cidr" flag: must be a valid CIDR block (e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48)',
      ],
      [
        ["--logging-format=xml"],
        'invalid argument "xml" for "--logging-format" flag: Unsupported log format; must be text or json',
      ],
      [
        ["--detect-local-mode=Magic"],
        'invalid argument "Magic" for "--detect-local-mode" flag: Unsupported value; supported values: "ClusterCIDR", "NodeCIDR", "BridgeInterface", "InterfaceNamePrefix", ""',
      ],
      [
        ["--config-sync-period=0s"],
        'invalid argument "0s" for "--config-sync-period" flag: must be greater than 0',
      ],
      [
        ["--kube-api-qps=-1"],
        'invalid argument "-1" for "--kube-api-qps" flag: must be greater than or equal to 0',
      ],
    ];
    for (const [argv, message] of cases) {
      const e = await rejection(argv);
      assert.equal(e.message, message, argv.join(" "));
    }
  });
  it("a cross-field problem without a single flag to blame says so", async () => {
    const e = await rejection(["--detect-local-mode=BridgeInterface"]);
    assert.equal(
      e.message,
      "invalid configuration: detectLocal.bridgeInterface: must not be empty when detectLocalMode is BridgeInterface",
    );
    const ok = await resolveInvocation([
      "--detect-local-mode=BridgeInterface",
      "--pod-bridge-interface=cbr0",
    ]);
    assert.equal(ok.config.detectLocal.bridgeInterface, "cbr0");
  });
  it("deprecated --healthz-port / --metrics-port warn and adjust the addresses", async () => {
    const inv = await resolveInvocation([
      "--healthz-bind-address=10.0.0.1",
      "--healthz-port=1234",
      "--metrics-port=0",
    ]);
    assert.equal(inv.config.healthzBindAddress, "10.0.0.1:1234");
    assert.equal(inv.config.metricsBindAddress, "", "port 0 disables the server");
    assert.deepEqual(inv.warnings, [
      "Flag --healthz-port has been deprecated, This flag is deprecated and will be removed in a future release. " +
      "Please use --healthz-bind-address instead.",
      "Flag --metrics-port has been deprecated, This flag is deprecated and will be removed in a future release. " +
      "Please use --metrics-bind-address instead.",
    ]);
    const bare = await resolveInvocation(["--healthz-bind-address=10.0.0.1"]);
    assert.equal(bare.config.healthzBindAddress, "10.0.0.1:10256", "a bare IP gets the default port");
  });
  it("--proxy-port-range warns and is otherwise ignored", async () => {
    const inv = await resolveInvocation(["--proxy-port-range=30000-31000"]);
    assert.equal(inv.config.portRange, "30000-31000");
    assert.match(inv.warnings[0], /^Flag --proxy-port-range has been deprecated, This flag has no effect/);
  });
  it("an explicit ClusterCIDR mode without a cluster CIDR is a warning, as upstream accepts it", async () => {
    const inv = await resolveInvocation(["--detect-local-mode=ClusterCIDR"]);
    assert.equal(inv.warnings.length, 1);
    assert.match(inv.warnings[0], /clusterCIDR is empty/);
  });
});

describe("--hostname-override", () => {
  it("is trimmed and lower-cased", async () => {
    assert.equal(
      (await resolveInvocation(["--hostname-override= Edge-01 "])).config.hostnameOverride,
      "edge-01",
    );
  });
  it("blank is an error", async () => {
    assert.equal((await rejection(["--hostname-override=  "])).message, "empty hostname-override is invalid");
  });
  it("wins over the file", async () => {
    const io = files({ "/c.yaml": HEAD + "hostnameOverride: from-file\n" });
    assert.equal(
      (await resolveInvocation(["--config=/c.yaml", "--hostname-override=From-Flag"], io)).config
        .hostnameOverride,
      "from-flag",
    );
    assert.equal((await resolveInvocation(["--config=/c.yaml"], io)).config.hostnameOverride, "from-file");
  });
});

describe("--config precedence", () => {
  const io = files({
    "/c.yaml": HEAD +
      "clusterCIDR: 10.244.0.0/16\nlogging:\n  verbosity: 1\n  vmodule:\n  - filePattern: file\n    verbosity: 3\n",
    "/bad.yaml": HEAD + "iptables:\n  masqueradeBit: 99\n",
    "/xml.yaml": HEAD + "logging:\n  format: xml\n",
  });
  it("the file replaces the configuration; kube-proxy config flags are ignored with a warning", async () => {
    const inv = await resolveInvocation(
      ["--config=/c.yaml", "--cluster-cidr=192.168.0.0/16", "--masquerade-all", "--proxy-mode=iptables"],
      io,
    );
    assert.equal(inv.config.clusterCIDR, "10.244.0.0/16");
    assert.equal(inv.config.iptables.masqueradeAll, false);
    assert.deepEqual(inv.warnings, [
      "flags ignored because --config is set (as kube-proxy does): --cluster-cidr, --masquerade-all, --proxy-mode",
    ]);
  });
  it("logging flags are laid over the file; vmodule from flags comes first", async () => {
    const inv = await resolveInvocation(["--config", "/c.yaml", "-v=5", "--vmodule=flag=2"], io);
    assert.equal(inv.config.logging.verbosity, 5);
    assert.deepEqual(inv.config.logging.vmodule, [
      { filePattern: "flag", verbosity: 2 },
      { filePattern: "file", verbosity: 3 },
    ]);
    assert.equal((await resolveInvocation(["--config", "/c.yaml"], io)).config.logging.verbosity, 1);
  });
  it("a logging flag can repair the file's logging section, as upstream validates after merging", async () => {
    const inv = await resolveInvocation(["--config=/xml.yaml", "--logging-format=json"], io);
    assert.equal(inv.config.logging.format, "json");
  });
  it("edgeproxy's own flags, --master and the actions always apply", async () => {
    const inv = await resolveInvocation(
      ["--config=/c.yaml", "--api-mode=poll", "--master=https://api:6443", "--cleanup", "--state-dir="],
      io,
    );
    assert.equal(inv.options.apiMode, "poll");
    assert.equal(inv.options.master, "https://api:6443");
    assert.equal(inv.options.cleanup, true);
    assert.equal(inv.options.stateDir, "");
    assert.deepEqual(inv.warnings, []);
  });
  it("deprecated port flags do not touch a file's addresses", async () => {
    const inv = await resolveInvocation(["--config=/c.yaml", "--healthz-port=0"], io);
    assert.equal(inv.config.healthzBindAddress, "0.0.0.0:10256");
  });
  it("a bad file is one line naming the file and the field", async () => {
    const e = await rejection(["--config=/bad.yaml"], io);
    assert.ok(e instanceof ConfigError);
    assert.equal(
      e.message,
      "invalid config /bad.yaml: iptables.masqueradeBit: must be within the range [0, 31] (got 99)",
    );
  });
  it("a missing file", async () => {
    assert.equal(
      (await rejection(["--config=/nope.yaml"], io)).message,
      "invalid config /nope.yaml: file: cannot read: no such file",
    );
  });
  it("--proxy-mode=kernelspace is refused even next to --config", async () => {
    assert.equal(
      (await rejection(["--config=/c.yaml", "--proxy-mode=kernelspace"], io)).message,
      'edgeproxy implements only --proxy-mode=iptables|nftables|userspace|ipvs (got "kernelspace")',
    );
  });
  it("--write-config-to with --config writes the file's configuration", async () => {
    const inv = await resolveInvocation(["--config=/c.yaml", "--write-config-to=/out.yaml"], io);
    assert.equal(inv.action, "write-config");
    assert.equal(inv.config.clusterCIDR, "10.244.0.0/16");
  });
});
