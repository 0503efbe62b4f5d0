import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, decodeConfig, loadConfigFile, parseConfig } from "../../../lib/config/load.ts";
import { defaultConfig } from "../../../lib/config/defaults.ts";

const HEAD = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

function errorOf(text: string, file = "kp.yaml"): ConfigError {
  try {
    parseConfig(text, file);
  } catch (e) {
    assert.ok(e instanceof ConfigError, `expected ConfigError, got ${e}`);
    return e;
  }
  assert.fail("expected the configuration to be rejected");
}

/** [what, document, exact one-line message] */
const BAD: Array<[string, string, string]> = [
  ["unknown top-level field", HEAD + "bogus: 1\n", "invalid config kp.yaml: bogus: unknown field (got 1)"],
  [
    "unknown nested field",
    HEAD + "iptables:\n  masqueradeBits: 14\n",
    "invalid config kp.yaml: iptables.masqueradeBits: unknown field (got 14)",
  ],
  [
    "field name with the wrong case",
    HEAD + "IPTables:\n  masqueradeBit: 14\n",
    'invalid config kp.yaml: IPTables: unknown field (got {"masqueradeBit":14})',
  ],
  [
    "string where an integer belongs",
    HEAD + "iptables:\n  masqueradeBit: '14'\n",
    'invalid config kp.yaml: iptables.masqueradeBit: must be a 32-bit integer (got "14")',
  ],
  [
    "non-integer number",
    HEAD + "conntrack:\n  min: 1.5\n",
    "invalid config kp.yaml: conntrack.min: must be a 32-bit integer (got 1.5)",
  ],
  [
    "YAML 1.1 boolean spelling",
    HEAD + "iptables:\n  masqueradeAll: yes\n",
    'invalid config kp.yaml: iptables.masqueradeAll: must be true or false (got "yes")',
  ],
  [
    "number where a string belongs",
    HEAD + "showHiddenMetricsForVersion: 1.30\n",
    "invalid config kp.yaml: showHiddenMetricsForVersion: must be a string (quote the value) (got 1.3)",
  ],
  [
    "duration given as a number",
    HEAD + "iptables:\n  syncPeriod: 30\n",
    'invalid config kp.yaml: iptables.syncPeriod: must be a duration string such as "30s" (got 30)',
  ],
  [
    "duration with an unknown unit",
    HEAD + "configSyncPeriod: 15x\n",
    'invalid config kp.yaml: configSyncPeriod: not a valid duration (use e.g. 500ms, 30s, 1m0s, 24h0m0s) (got "15x")',
  ],
  [
    "duration without a unit",
    HEAD + "conntrack:\n  udpTimeout: '30'\n",
    'invalid config kp.yaml: conntrack.udpTimeout: not a valid duration (use e.g. 500ms, 30s, 1m0s, 24h0m0s) (got "30")',
  ],
  [
    "wrong apiVersion",
    "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\n",
    'invalid config kp.yaml: apiVersion: must be kubeproxy.config.k8s.io/v1alpha1 (got "kubeproxy.config.k8s.io/v1alpha2")',
  ],
  [
    "missing apiVersion",
    "kind: KubeProxyConfiguration\n",
    "invalid config kp.yaml: apiVersion: must be kubeproxy.config.k8s.io/v1alpha1",
  ],
  [
    "wrong kind",
    "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n",
    'invalid config kp.yaml: kind: must be KubeProxyConfiguration (got "KubeletConfiguration")',
  ],
  [
    "masqueradeBit out of range",
    HEAD + "iptables:\n  masqueradeBit: 32\n",
    "invalid config kp.yaml: iptables.masqueradeBit: must be within the range [0, 31] (got 32)",
  ],
  [
    "oomScoreAdj out of range",
    HEAD + "oomScoreAdj: -1001\n",
    "invalid config kp.yaml: oomScoreAdj: must be within the range [-1000, 1000] (got -1001)",
  ],
  [
    "negative burst",
    HEAD + "clientConnection:\n  burst: -1\n",
    "invalid config kp.yaml: clientConnection.burst: must be greater than or equal to 0 (got -1)",
  ],
  [
    "negative qps",
    HEAD + "clientConnection:\n  qps: -0.5\n",
    "invalid config kp.yaml: clientConnection.qps: must be greater than or equal to 0 (got -0.5)",
  ],
  [
    "negative conntrack.maxPerCore",
    HEAD + "conntrack:\n  maxPerCore: -5\n",
    "invalid config kp.yaml: conntrack.maxPerCore: must be greater than or equal to 0 (got -5)",
  ],
  [
    "bad bindAddress",
    HEAD + "bindAddress: 1.2.3\n",
    'invalid config kp.yaml: bindAddress: not a valid textual representation of an IP address (got "1.2.3")',
  ],
  [
    "healthz port out of range",
    HEAD + "healthzBindAddress: 0.0.0.0:99999\n",
    'invalid config kp.yaml: healthzBindAddress: must be a valid port (got "99999")',
  ],
  [
    "metrics address with a host name",
    HEAD + "metricsBindAddress: localhost:10249\n",
    'invalid config kp.yaml: metricsBindAddress: must be a valid IP (got "localhost")',
  ],
  [
    "bad clusterCIDR",
    HEAD + "clusterCIDR: 10.0.0.0/33\n",
    'invalid config kp.yaml: clusterCIDR: must be a valid CIDR block (e.g. 10.100.0.0/16 or fde4:8dba:82e1::/48) (got "10.0.0.0/33")',
  ],
  [
    "clusterCIDR pair of one family",
    HEAD + "clusterCIDR: 10.0.0.0/8,192.168.0.0/16\n",
    "invalid config kp.yaml: clusterCIDR: must be a either a single CIDR or dual-stack pair of CIDRs " +
    '(e.g. 10.100.0.0/16,fde4:8dba:82e1::/48) (got "10.0.0.0/8,192.168.0.0/16")',
  ],
  [
    "bad nodePortAddresses entry",
    HEAD + "nodePortAddresses: [10.0.0.0/8, 300.1.1.0/24]\n",
    'invalid config kp.yaml: nodePortAddresses[1]: must be a valid CIDR (got "300.1.1.0/24")',
  ],
  [
    "primary mixed with CIDRs",
    HEAD + "nodePortAddresses: [10.0.0.0/8, primary]\n",
    "invalid config kp.yaml: nodePortAddresses[1]: can't use both 'primary' and CIDRs (got \"primary\")",
  ],
  [
    "Windows mode",
    HEAD + "mode: kernelspace\n",
    'invalid config kp.yaml: mode: edgeproxy implements only the iptables|nftables|userspace|ipvs modes (got "kernelspace")',
  ],
  [
    "unknown mode",
    HEAD + "mode: ebpf\n",
    'invalid config kp.yaml: mode: edgeproxy implements only the iptables|nftables|userspace|ipvs modes (got "ebpf")',
  ],
  [
    "unknown detectLocalMode",
    HEAD + "detectLocalMode: PodCIDR\n",
    'invalid config kp.yaml: detectLocalMode: Unsupported value; supported values: "ClusterCIDR", ' +
    '"NodeCIDR", "BridgeInterface", "InterfaceNamePrefix", "" (got "PodCIDR")',
  ],
  [
    "BridgeInterface mode without a bridge",
    HEAD + "detectLocalMode: BridgeInterface\n",
    "invalid config kp.yaml: detectLocal.bridgeInterface: must not be empty when detectLocalMode is BridgeInterface",
  ],
  [
    "InterfaceNamePrefix mode without a prefix",
    HEAD + "detectLocalMode: InterfaceNamePrefix\n",
    "invalid config kp.yaml: detectLocal.interfaceNamePrefix: must not be empty when detectLocalMode is " +
    "InterfaceNamePrefix",
  ],
  [
    "unknown log format",
    HEAD + "logging:\n  format: xml\n",
    'invalid config kp.yaml: logging.format: Unsupported log format; must be text or json (got "xml")',
  ],
  [
    "minSyncPeriod above syncPeriod",
    HEAD + "iptables:\n  syncPeriod: 10s\n  minSyncPeriod: 1m\n",
    'invalid config kp.yaml: iptables.syncPeriod: must be greater than or equal to iptables.minSyncPeriod (1m0s) (got "10s")',
  ],
  [
    "negative configSyncPeriod",
    HEAD + "configSyncPeriod: -1m\n",
    'invalid config kp.yaml: configSyncPeriod: must be greater than 0 (got "-1m0s")',
  ],
  [
    "negative conntrack timeout",
    HEAD + "conntrack:\n  tcpCloseWaitTimeout: -1s\n",
    'invalid config kp.yaml: conntrack.tcpCloseWaitTimeout: must be greater than or equal to 0 (got "-1s")',
  ],
  [
    "bad portRange",
    HEAD + "portRange: 2000-100\n",
    'invalid config kp.yaml: portRange: end port cannot be less than start port (got "2000-100")',
  ],
  [
    "feature gate that is not a boolean",
    HEAD + "featureGates:\n  Foo: 'on'\n",
    'invalid config kp.yaml: featureGates.Foo: must be true or false (got "on")',
  ],
  [
    "alpha logging option without its gate",
    HEAD + "logging:\n  options:\n    json:\n      splitStream: true\n",
    "invalid config kp.yaml: logging.options.json.splitStream: feature LoggingAlphaOptions is disabled (got true)",
  ],
  [
    "list where a string belongs",
    HEAD + "clusterCIDR: [10.0.0.0/8]\n",
    'invalid config kp.yaml: clusterCIDR: must be a string (got ["10.0.0.0/8"])',
  ],
  [
    "string where a list belongs",
    HEAD + "nodePortAddresses: 10.0.0.0/8\n",
    'invalid config kp.yaml: nodePortAddresses: must be a list of strings (got "10.0.0.0/8")',
  ],
  [
    "YAML syntax error",
    HEAD + "iptables: [1,\n",
    "invalid config kp.yaml: line 4, column 1: Flow sequence in block collection must be sufficiently " +
    "indented and end with a ]",
  ],
  [
    "duplicate key",
    HEAD + "mode: ''\nmode: iptables\n",
    "invalid config kp.yaml: line 4, column 1: Map keys must be unique",
  ],
  ["empty document", "", "invalid config kp.yaml: document: empty, expected a KubeProxyConfiguration"],
  [
    "YAML alias bomb (billion laughs)",
    HEAD + ["a: &a [x, x, x, x, x, x, x, x, x]"].concat(
      ["b", "c", "d", "e", "f", "g"].map((n, i) => {
        const prev = "abcdefg"[i];
        return `${n}: &${n} [${Array(9).fill(`*${prev}`).join(", ")}]`;
      }),
    ).join("\n") + "\n",
    "invalid config kp.yaml: document: too many YAML alias expansions (more than 100): refusing a resource exhaustion attack",
  ],
  [
    "not a mapping",
    "- a\n- b\n",
    'invalid config kp.yaml: document: must be a KubeProxyConfiguration mapping (got ["a","b"])',
  ],
];

describe("bad configuration files give one line naming the field", () => {
  for (const [what, doc, message] of BAD) {
    it(what, () => {
      const e = errorOf(doc);
      assert.equal(e.message, message);
      assert.ok(!e.message.includes("\n"), "the message must be a single line");
      assert.equal(e.file, "kp.yaml");
      assert.ok(e.errors.length >= 1);
    });
  }
  it("covers at least 12 kinds of problems", () => {
    assert.ok(BAD.length >= 12);
  });
  it("vmodule needs the text format", () => {
    const e = errorOf(HEAD + "logging:\n  format: json\n  vmodule:\n  - filePattern: a\n    verbosity: 2\n");
    assert.equal(e.message, "invalid config kp.yaml: logging.vmodule: only supported for text log format");
  });
  it("reports every problem it found, the first one in the message", () => {
    const e = errorOf(HEAD + "oomScoreAdj: 5000\niptables:\n  masqueradeBit: 99\n");
    assert.deepEqual(e.errors.map((x) => x.path), ["iptables.masqueradeBit", "oomScoreAdj"]);
  });
});

describe("good configuration files", () => {
  it("a full YAML document overrides the defaults field by field", () => {
    const c = parseConfig(
      HEAD + `
featureGates:
  LoggingAlphaOptions: true
  InOrderInformers: false
clientConnection:
  kubeconfig: /etc/edgeproxy/kubeconfig
  qps: 20.5
  burst: 40
logging:
  format: text
  verbosity: 4
  flushFrequency: 2s
  vmodule:
  - filePattern: proxier*
    verbosity: 6
  options:
    json:
      infoBufferSize: 64Ki
      splitStream: true
hostnameOverride: Node-1
bindAddress: 10.0.0.5
healthzBindAddress: 10.0.0.5:10256
metricsBindAddress: ""
mode: iptables
iptables:
  masqueradeBit: 13
  masqueradeAll: true
  localhostNodePorts: false
  syncPeriod: 1m
  minSyncPeriod: 500ms
detectLocalMode: ClusterCIDR
clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
nodePortAddresses:
- 10.0.0.0/8
- fd00::/64
oomScoreAdj: -500
conntrack:
  maxPerCore: 0
  tcpBeLiberal: true
  udpTimeout: 30s
configSyncPeriod: 1h
`,
      "kp.yaml",
    );
    assert.deepEqual(c.featureGates, { InOrderInformers: false, LoggingAlphaOptions: true });
    assert.equal(c.clientConnection.kubeconfig, "/etc/edgeproxy/kubeconfig");
    assert.equal(c.clientConnection.qps, 20.5);
    assert.equal(c.logging.format, "text");
    assert.equal(c.logging.verbosity, 4);
    assert.equal(c.logging.flushFrequency, 2000);
    assert.deepEqual(c.logging.vmodule, [{ filePattern: "proxier*", verbosity: 6 }]);
    assert.deepEqual(c.logging.options.json, { infoBufferSize: "64Ki", splitStream: true });
    assert.equal(c.hostnameOverride, "Node-1");
    assert.equal(c.metricsBindAddress, "127.0.0.1:10249", "an empty address in a file means the default");
    assert.equal(c.iptables.masqueradeBit, 13);
    assert.equal(c.iptables.masqueradeAll, true);
    assert.equal(c.iptables.localhostNodePorts, false);
    assert.equal(c.iptables.syncPeriod, 60_000);
    assert.equal(c.iptables.minSyncPeriod, 500);
    assert.equal(c.clusterCIDR, "10.244.0.0/16,fd00:10:244::/56");
    assert.deepEqual(c.nodePortAddresses, ["10.0.0.0/8", "fd00::/64"]);
    assert.equal(c.oomScoreAdj, -500);
    assert.equal(c.conntrack.maxPerCore, 0);
    assert.equal(c.conntrack.min, 131072);
    assert.equal(c.conntrack.tcpBeLiberal, true);
    assert.equal(c.conntrack.udpTimeout, 30_000);
    assert.equal(c.configSyncPeriod, 3_600_000);
  });
  it("JSON is accepted", () => {
    const c = parseConfig(
      JSON.stringify({
        apiVersion: "kubeproxy.config.k8s.io/v1alpha1",
        kind: "KubeProxyConfiguration",
        iptables: { masqueradeBit: 10, syncPeriod: "45s" },
        nodePortAddresses: ["primary"],
        logging: { flushFrequency: 1000000000 },
      }),
      "kp.json",
    );
    assert.equal(c.iptables.masqueradeBit, 10);
    assert.equal(c.iptables.syncPeriod, 45_000);
    assert.deepEqual(c.nodePortAddresses, ["primary"]);
    assert.equal(c.logging.flushFrequency, 1000, "flushFrequency also takes nanoseconds");
  });
  it("false and empty omitempty fields leave the object shaped like the defaults", () => {
    const c = parseConfig(
      HEAD +
        "logging:\n  vmodule: []\n  options:\n    text:\n      splitStream: false\nwindowsRunAsService: false\n",
      "f",
    );
    assert.deepEqual(c, defaultConfig());
  });
  it("decodeConfig does not validate (flags may still be laid over it)", () => {
    const c = decodeConfig(HEAD + "logging:\n  format: xml\n", "f");
    assert.equal(c.logging.format, "xml");
  });
});

describe("loadConfigFile", () => {
  const dir = mkdtempSync(join(tmpdir(), "edgeproxy-config-"));
  after(() => rmSync(dir, { recursive: true, force: true }));
  it("reads and validates a file", async () => {
    const f = join(dir, "ok.yaml");
    writeFileSync(f, HEAD + "clusterCIDR: 10.244.0.0/16\n");
    const c = await loadConfigFile(f);
    assert.equal(c.clusterCIDR, "10.244.0.0/16");
  });
  it("a missing file is a one-line ConfigError", async () => {
    const f = join(dir, "missing.yaml");
    await assert.rejects(loadConfigFile(f), (e: unknown) => {
      assert.ok(e instanceof ConfigError);
      assert.equal(e.message, `invalid config ${f}: file: cannot read: no such file`);
      return true;
    });
  });
  it("names the file in the message", async () => {
    const f = join(dir, "bad.yaml");
    writeFileSync(f, HEAD + "iptables:\n  masqueradeBit: 40\n");
    await assert.rejects(loadConfigFile(f), {
      message: `invalid config ${f}: iptables.masqueradeBit: must be within the range [0, 31] (got 40)`,
    });
  });
});
