import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse } from "yaml";
import { defaultConfig } from "../../../lib/config/defaults.ts";
import { loadConfigFile, parseConfig } from "../../../lib/config/load.ts";
import type { KubeProxyConfiguration } from "../../../lib/config/types.ts";
import { configToDocument, configToYAML, writeConfigFile } from "../../../lib/config/write.ts";

/**
 * The defaulted v1alpha1 document in upstream's serialization (sigs.k8s.io/yaml: keys sorted, Go
 * durations, omitempty fields left out); compare a kube-proxy --write-config-to of the same version.
 */
const DEFAULT_YAML = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
bindAddress: 0.0.0.0
bindAddressHardFail: false
clientConnection:
  acceptContentTypes: ""
  burst: 10
  contentType: application/vnd.kubernetes.protobuf
  kubeconfig: ""
  qps: 5
clusterCIDR: ""
configSyncPeriod: 15m0s
conntrack:
  maxPerCore: 32768
  min: 131072
  tcpBeLiberal: false
  tcpCloseWaitTimeout: 1h0m0s
  tcpEstablishedTimeout: 24h0m0s
  udpStreamTimeout: 0s
  udpTimeout: 0s
detectLocal:
  bridgeInterface: ""
  interfaceNamePrefix: ""
detectLocalMode: ""
enableProfiling: false
healthzBindAddress: 0.0.0.0:10256
hostnameOverride: ""
iptables:
  localhostNodePorts: true
  masqueradeAll: false
  masqueradeBit: 14
  minSyncPeriod: 1s
  syncPeriod: 30s
ipvs:
  excludeCIDRs: null
  minSyncPeriod: 0s
  scheduler: ""
  strictARP: false
  syncPeriod: 30s
  tcpFinTimeout: 0s
  tcpTimeout: 0s
  udpTimeout: 0s
kind: KubeProxyConfiguration
logging:
  flushFrequency: 5s
  format: text
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
metricsBindAddress: 127.0.0.1:10249
mode: ""
nftables:
  masqueradeAll: false
  masqueradeBit: 14
  minSyncPeriod: 1s
  syncPeriod: 30s
nodePortAddresses: null
oomScoreAdj: -999
portRange: ""
showHiddenMetricsForVersion: ""
winkernel:
  enableDSR: false
  forwardHealthCheckVip: false
  networkName: ""
  rootHnsEndpointName: ""
  sourceVip: ""
`;

function custom(): KubeProxyConfiguration {
  const c = defaultConfig();
  c.featureGates = { LoggingAlphaOptions: true, WatchListClient: false, APIResponseCompression: true };
  c.clientConnection.kubeconfig = "/etc/edgeproxy/kubeconfig";
  c.clientConnection.qps = 12.5;
  c.logging.verbosity = 5;
  c.logging.vmodule = [{ filePattern: "sync*", verbosity: 7 }];
  c.logging.options.text = { infoBufferSize: "1Mi", splitStream: true };
  c.hostnameOverride = "edge-01";
  c.bindAddress = "fd00::5";
  c.healthzBindAddress = "[fd00::5]:10256";
  c.metricsBindAddress = "[::]:9999";
  c.iptables.masqueradeBit = 0;
  c.iptables.localhostNodePorts = false;
  c.iptables.syncPeriod = 90 * 60_000;
  c.iptables.minSyncPeriod = 250;
  c.ipvs.excludeCIDRs = ["10.0.0.0/8"];
  c.detectLocalMode = "InterfaceNamePrefix";
  c.detectLocal.interfaceNamePrefix = "cali";
  c.clusterCIDR = "10.244.0.0/16,fd00:10:244::/56";
  c.nodePortAddresses = ["primary"];
  c.oomScoreAdj = 0;
  c.conntrack.maxPerCore = 0;
  c.conntrack.tcpEstablishedTimeout = 0;
  c.conntrack.udpStreamTimeout = 1.5 * 60_000;
  c.configSyncPeriod = 1;
  c.portRange = "30000-32767";
  c.windowsRunAsService = true;
  return c;
}

function keysSortedEverywhere(v: unknown, path = "$"): string[] {
  if (v === null || typeof v !== "object") return [];
  if (Array.isArray(v)) return v.flatMap((x, i) => keysSortedEverywhere(x, `${path}[${i}]`));
  const keys = Object.keys(v);
  const bad = keys.join() === [...keys].sort().join() ? [] : [path];
  return [
    ...bad,
    ...keys.flatMap((k) => keysSortedEverywhere((v as Record<string, unknown>)[k], `${path}.${k}`)),
  ];
}

describe("configToYAML", () => {
  it("writes the defaulted configuration exactly in upstream's shape", () => {
    assert.equal(configToYAML(defaultConfig()), DEFAULT_YAML);
  });
  it("sorts keys at every level, also for feature gates", () => {
    const text = configToYAML(custom());
    assert.deepEqual(keysSortedEverywhere(parse(text)), []);
    assert.ok(text.indexOf("APIResponseCompression") < text.indexOf("LoggingAlphaOptions"));
    assert.ok(text.indexOf("LoggingAlphaOptions") < text.indexOf("WatchListClient"));
  });
  it("prints durations the way Go does", () => {
    const doc = configToDocument(custom());
    const ipt = doc.iptables as Record<string, unknown>;
    assert.equal(ipt.syncPeriod, "1h30m0s");
    assert.equal(ipt.minSyncPeriod, "250ms");
    assert.equal((doc.conntrack as Record<string, unknown>).udpStreamTimeout, "1m30s");
    assert.equal((doc.conntrack as Record<string, unknown>).tcpEstablishedTimeout, "0s");
    assert.equal(doc.configSyncPeriod, "1ms");
  });
  it("omits the omitempty fields when empty and writes them when set", () => {
    const def = configToDocument(defaultConfig());
    assert.ok(!("featureGates" in def));
    assert.ok(!("windowsRunAsService" in def));
    assert.ok(!("vmodule" in (def.logging as Record<string, unknown>)));
    const c = configToDocument(custom());
    assert.deepEqual(c.featureGates, {
      APIResponseCompression: true,
      LoggingAlphaOptions: true,
      WatchListClient: false,
    });
    assert.equal(c.windowsRunAsService, true);
    assert.deepEqual((c.logging as Record<string, unknown>).vmodule, [{
      filePattern: "sync*",
      verbosity: 7,
    }]);
  });
  it("lists are not indented under their key, as sigs.k8s.io/yaml prints them", () => {
    assert.match(configToYAML(custom()), /\nnodePortAddresses:\n- primary\n/);
  });
  it("is deterministic", () => {
    assert.equal(configToYAML(custom()), configToYAML(custom()));
  });
});

describe("write → load round trip", () => {
  const dir = mkdtempSync(join(tmpdir(), "edgeproxy-write-"));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("the defaulted configuration loads back deep-equal", () => {
    assert.deepEqual(parseConfig(configToYAML(defaultConfig()), "f"), defaultConfig());
  });
  it("a configuration with every kind of non-default value loads back deep-equal", () => {
    const c = custom();
    assert.deepEqual(parseConfig(configToYAML(c), "f"), c);
  });
  it("through a file, and writing the loaded configuration again gives the same bytes", async () => {
    const f1 = join(dir, "a.yaml");
    const f2 = join(dir, "b.yaml");
    await writeConfigFile(f1, custom());
    const loaded = await loadConfigFile(f1);
    assert.deepEqual(loaded, custom());
    await writeConfigFile(f2, loaded);
    assert.equal(readFileSync(f2, "utf8"), readFileSync(f1, "utf8"));
  });
  it("as upstream, a server disabled by flag (empty address) cannot be expressed in a file", () => {
    const c = defaultConfig();
    c.metricsBindAddress = "";
    assert.match(configToYAML(c), /\nmetricsBindAddress: ""\n/);
    assert.equal(parseConfig(configToYAML(c), "f").metricsBindAddress, "127.0.0.1:10249");
  });
  it("keeps upstream's quirk: a written minSyncPeriod of 0s loads back as the 1s default", () => {
    const c = defaultConfig();
    c.iptables.minSyncPeriod = 0;
    assert.equal(parseConfig(configToYAML(c), "f").iptables.minSyncPeriod, 1000);
  });
});
