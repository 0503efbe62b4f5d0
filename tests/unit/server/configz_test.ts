import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { defaultConfig } from "../../../lib/config/defaults.ts";
import { configzDocument } from "../../../lib/server/configz.ts";

/** Loose view of the document for reading nested fields. */
type Doc = Record<string, Record<string, Record<string, unknown>>>;

describe("configzDocument", () => {
  it("has the internal KubeProxyConfiguration's fields, in Go declaration order", () => {
    const doc = configzDocument(defaultConfig());
    assert.deepEqual(Object.keys(doc), [
      "Linux",
      "Windows",
      "FeatureGates",
      "ClientConnection",
      "Logging",
      "HostnameOverride",
      "BindAddress",
      "HealthzBindAddress",
      "MetricsBindAddress",
      "BindAddressHardFail",
      "EnableProfiling",
      "ShowHiddenMetricsForVersion",
      "Mode",
      "IPTables",
      "IPVS",
      "Winkernel",
      "NFTables",
      "DetectLocalMode",
      "DetectLocal",
      "NodePortAddresses",
      "SyncPeriod",
      "MinSyncPeriod",
      "ConfigSyncPeriod",
    ]);
    assert.deepEqual(Object.keys(doc.Linux as object), ["Conntrack", "MasqueradeAll", "OOMScoreAdj"]);
    assert.deepEqual(Object.keys(doc.Logging as object), [
      "format",
      "flushFrequency",
      "verbosity",
      "options",
    ]);
  });

  it("writes every duration as a Go duration string, never milliseconds", () => {
    const c = defaultConfig();
    c.iptables.syncPeriod = 90_000;
    c.iptables.minSyncPeriod = 500;
    c.conntrack.udpTimeout = 0;
    const doc = configzDocument(c) as Doc;
    assert.equal(doc.SyncPeriod, "1m30s");
    assert.equal(doc.MinSyncPeriod, "500ms");
    assert.equal(doc.Linux.Conntrack.UDPTimeout, "0s");
    assert.equal(doc.IPVS.TCPTimeout, "0s");
    const numbers: string[] = [];
    const walk = (v: unknown, path: string) => {
      if (typeof v === "number") numbers.push(path);
      else if (v !== null && typeof v === "object") {
        for (const [k, x] of Object.entries(v)) walk(x, `${path}.${k}`);
      }
    };
    walk(doc, "");
    // Only counts, bits, scores, rates and the verbosity are numbers.
    assert.deepEqual(numbers.sort(), [
      ".ClientConnection.Burst",
      ".ClientConnection.QPS",
      ".IPTables.MasqueradeBit",
      ".Linux.Conntrack.MaxPerCore",
      ".Linux.Conntrack.Min",
      ".Linux.OOMScoreAdj",
      ".Logging.verbosity",
      ".NFTables.MasqueradeBit",
    ]);
  });

  it("converts like upstream's v1alpha1→internal conversion for iptables mode", () => {
    const c = defaultConfig();
    c.mode = "";
    c.iptables.masqueradeAll = true;
    c.clusterCIDR = "10.0.0.0/8,fd00::/48";
    c.nodePortAddresses = [];
    c.featureGates = { B: true, A: false };
    const doc = configzDocument(c) as Doc;
    assert.equal(doc.Mode, "iptables");
    assert.equal(doc.Linux.MasqueradeAll, true);
    assert.deepEqual(doc.DetectLocal.ClusterCIDRs, ["10.0.0.0/8", "fd00::/48"]);
    assert.deepEqual(doc.NodePortAddresses, []);
    assert.deepEqual(Object.keys(doc.FeatureGates), ["A", "B"]);
    const d = configzDocument(defaultConfig()) as Doc;
    assert.equal(d.NodePortAddresses, null);
    assert.equal(d.FeatureGates, null);
    assert.equal(d.DetectLocal.ClusterCIDRs, null);
  });
});
