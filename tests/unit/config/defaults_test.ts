import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  appendPortIfNeeded,
  applyPlatformDefaults,
  defaultConfig,
  defaultOptions,
  defaultServerAddresses,
} from "../../../lib/config/defaults.ts";
import { parseDuration } from "../../../lib/config/duration.ts";
import { parseConfig } from "../../../lib/config/load.ts";

const d = parseDuration;

/** Research §3.1 "Fields and defaults", one row per field: [v1alpha1 path, expected default]. */
const TABLE: Array<[string, unknown]> = [
  ["apiVersion", "kubeproxy.config.k8s.io/v1alpha1"],
  ["kind", "KubeProxyConfiguration"],
  ["featureGates", {}],
  ["clientConnection.kubeconfig", ""],
  ["clientConnection.acceptContentTypes", ""],
  ["clientConnection.contentType", "application/vnd.kubernetes.protobuf"],
  ["clientConnection.qps", 5],
  ["clientConnection.burst", 10],
  ["logging.flushFrequency", d("5s")],
  ["logging.format", "text"],
  ["logging.verbosity", 0],
  ["logging.options.json.infoBufferSize", "0"],
  ["logging.options.text.infoBufferSize", "0"],
  ["hostnameOverride", ""],
  ["bindAddress", "0.0.0.0"],
  ["healthzBindAddress", "0.0.0.0:10256"],
  ["metricsBindAddress", "127.0.0.1:10249"],
  ["bindAddressHardFail", false],
  ["enableProfiling", false],
  ["showHiddenMetricsForVersion", ""],
  ["mode", ""],
  ["iptables.masqueradeBit", 14],
  ["iptables.masqueradeAll", false],
  ["iptables.localhostNodePorts", true],
  ["iptables.syncPeriod", d("30s")],
  ["iptables.minSyncPeriod", d("1s")],
  ["ipvs.syncPeriod", d("30s")],
  ["ipvs.minSyncPeriod", d("0s")],
  ["ipvs.scheduler", ""],
  ["ipvs.excludeCIDRs", null],
  ["ipvs.strictARP", false],
  ["ipvs.tcpTimeout", 0],
  ["ipvs.tcpFinTimeout", 0],
  ["ipvs.udpTimeout", 0],
  ["nftables.masqueradeBit", 14],
  ["nftables.masqueradeAll", false],
  ["nftables.syncPeriod", d("30s")],
  ["nftables.minSyncPeriod", d("1s")],
  ["winkernel.networkName", ""],
  ["winkernel.sourceVip", ""],
  ["winkernel.enableDSR", false],
  ["winkernel.rootHnsEndpointName", ""],
  ["winkernel.forwardHealthCheckVip", false],
  ["detectLocalMode", ""],
  ["detectLocal.bridgeInterface", ""],
  ["detectLocal.interfaceNamePrefix", ""],
  ["clusterCIDR", ""],
  ["nodePortAddresses", null],
  ["oomScoreAdj", -999],
  ["conntrack.maxPerCore", 32768],
  ["conntrack.min", 131072],
  ["conntrack.tcpEstablishedTimeout", d("24h0m0s")],
  ["conntrack.tcpCloseWaitTimeout", d("1h0m0s")],
  ["conntrack.tcpBeLiberal", false],
  ["conntrack.udpTimeout", 0],
  ["conntrack.udpStreamTimeout", 0],
  ["configSyncPeriod", d("15m0s")],
  ["portRange", ""],
  ["windowsRunAsService", false],
];

function get(obj: unknown, path: string): unknown {
  return path.split(".").reduce((o, k) => (o as Record<string, unknown>)[k], obj);
}

function leafPaths(obj: unknown, prefix = ""): string[] {
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) return [prefix];
  const entries = Object.entries(obj as Record<string, unknown>);
  if (entries.length === 0) return [prefix];
  return entries.flatMap(([k, v]) => leafPaths(v, prefix === "" ? k : `${prefix}.${k}`));
}

describe("defaultConfig matches upstream's defaults (research §3.1)", () => {
  const c = defaultConfig();
  for (const [path, want] of TABLE) {
    it(`${path} = ${JSON.stringify(want)}`, () => {
      assert.deepEqual(get(c, path), want);
    });
  }
  it("has no field the table does not list", () => {
    const listed = new Set(TABLE.map(([p]) => p));
    const extra = leafPaths(c).filter((p) => !listed.has(p));
    assert.deepEqual(extra, []);
  });
  it("returns a fresh object each call", () => {
    const a = defaultConfig();
    a.iptables.masqueradeBit = 3;
    a.featureGates.X = true;
    assert.equal(defaultConfig().iptables.masqueradeBit, 14);
    assert.deepEqual(defaultConfig().featureGates, {});
  });
});

describe("defaulting of a decoded file (upstream SetDefaults_KubeProxyConfiguration)", () => {
  const head = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";
  it("an empty document is the default configuration", () => {
    assert.deepEqual(parseConfig(head, "f"), defaultConfig());
  });
  it("zero values of plain fields take the default, including the minSyncPeriod: 0s quirk", () => {
    const c = parseConfig(
      head + "iptables:\n  syncPeriod: 0s\n  minSyncPeriod: 0s\nconfigSyncPeriod: 0s\nclientConnection:\n" +
        "  qps: 0\n  burst: 0\n  contentType: ''\nbindAddress: ''\nlogging:\n  format: ''\n  flushFrequency: 0\n",
      "f",
    );
    assert.equal(c.iptables.syncPeriod, 30_000);
    assert.equal(c.iptables.minSyncPeriod, 1_000);
    assert.equal(c.configSyncPeriod, 900_000);
    assert.equal(c.clientConnection.qps, 5);
    assert.equal(c.clientConnection.burst, 10);
    assert.equal(c.clientConnection.contentType, "application/vnd.kubernetes.protobuf");
    assert.equal(c.bindAddress, "0.0.0.0");
    assert.equal(c.logging.format, "text");
    assert.equal(c.logging.flushFrequency, 5_000);
  });
  it("pointer fields keep an explicit 0 / false and default only when absent or null", () => {
    const c = parseConfig(
      head + "iptables:\n  masqueradeBit: 0\n  localhostNodePorts: false\noomScoreAdj: 0\nconntrack:\n" +
        "  maxPerCore: 0\n  min: 0\n  tcpEstablishedTimeout: 0s\n  tcpCloseWaitTimeout: 0s\n",
      "f",
    );
    assert.equal(c.iptables.masqueradeBit, 0);
    assert.equal(c.iptables.localhostNodePorts, false);
    assert.equal(c.oomScoreAdj, 0);
    assert.equal(c.conntrack.maxPerCore, 0);
    assert.equal(c.conntrack.min, 0);
    assert.equal(c.conntrack.tcpEstablishedTimeout, 0);
    assert.equal(c.conntrack.tcpCloseWaitTimeout, 0);
    const n = parseConfig(
      head + "iptables:\n  masqueradeBit: null\noomScoreAdj: null\nconntrack: null\n",
      "f",
    );
    assert.equal(n.iptables.masqueradeBit, 14);
    assert.equal(n.oomScoreAdj, -999);
    assert.equal(n.conntrack.maxPerCore, 32768);
  });
  it("an IPv6 bindAddress selects IPv6 server addresses; a bare IP gets the default port", () => {
    const c = parseConfig(head + "bindAddress: '::'\n", "f");
    assert.equal(c.healthzBindAddress, "[::]:10256");
    assert.equal(c.metricsBindAddress, "[::1]:10249");
    const p = parseConfig(head + "healthzBindAddress: 10.0.0.1\nmetricsBindAddress: '::1'\n", "f");
    assert.equal(p.healthzBindAddress, "10.0.0.1:10256");
    assert.equal(p.metricsBindAddress, "[::1]:10249");
  });
});

describe("helpers", () => {
  it("appendPortIfNeeded", () => {
    assert.equal(appendPortIfNeeded("1.2.3.4", 80), "1.2.3.4:80");
    assert.equal(appendPortIfNeeded("fd00::1", 80), "[fd00::1]:80");
    assert.equal(appendPortIfNeeded("1.2.3.4:99", 80), "1.2.3.4:99");
    assert.equal(appendPortIfNeeded("[::]:99", 80), "[::]:99");
    assert.equal(appendPortIfNeeded("", 80), "");
    assert.equal(appendPortIfNeeded("not-an-ip", 80), "not-an-ip");
  });
  it("defaultServerAddresses follows the bind address family", () => {
    assert.deepEqual(defaultServerAddresses("10.1.1.1"), {
      healthz: "0.0.0.0:10256",
      metrics: "127.0.0.1:10249",
    });
    assert.deepEqual(defaultServerAddresses("fd00::5"), { healthz: "[::]:10256", metrics: "[::1]:10249" });
  });
  it("applyPlatformDefaults fills mode and detectLocalMode on a copy", () => {
    const c = defaultConfig();
    const p = applyPlatformDefaults(c);
    assert.equal(p.mode, "iptables");
    assert.equal(p.detectLocalMode, "ClusterCIDR");
    assert.equal(c.mode, "");
    const n = defaultConfig();
    n.detectLocalMode = "NodeCIDR";
    assert.equal(applyPlatformDefaults(n).detectLocalMode, "NodeCIDR");
  });
  it("applyPlatformDefaults: nftables mode accepts NodePorts on the primary IPs unless nodePortAddresses is set", () => {
    const n = defaultConfig();
    n.mode = "nftables";
    assert.deepEqual(applyPlatformDefaults(n).nodePortAddresses, ["primary"]);
    n.nodePortAddresses = ["10.0.0.0/8"];
    assert.deepEqual(applyPlatformDefaults(n).nodePortAddresses, ["10.0.0.0/8"]);
    assert.deepEqual(applyPlatformDefaults(defaultConfig()).nodePortAddresses ?? [], []);
  });
  it("defaultOptions", () => {
    assert.deepEqual(defaultOptions(), {
      stateDir: "/var/lib/edgeproxy",
      apiMode: "watch",
      pollInterval: 10_000,
      manifests: "",
      dryRun: false,
      master: "",
      cleanup: false,
      initOnly: false,
      cacheStartDeadline: 3_000,
      userspacePortals: "none",
      udpIdleTimeout: 250,
    });
  });
});
