/**
 * The IPVS mode's start-up (lib/proxy/ipvs/mode.ts) with a fake host and a /proc/sys tree in a temporary
 * directory: the deprecation warning pointing to nftables, upstream's sysctls, the IPVS timeouts only
 * when one is set, the mode's own sync periods (--dry-run: dry_run_test.ts).
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createIpvsBackend, IPVS_DEPRECATION_WARNING } from "../../../../lib/proxy/ipvs/mode.ts";
import type { IpvsHost } from "../../../../lib/proxy/ipvs/host.ts";
import type { BackendContext } from "../../../../lib/proxy/provider.ts";
import { ProcSysctl } from "../../../../lib/host/sysctl.ts";
import { defaultConfig } from "../../../../lib/config/defaults.ts";
import { createKubeProxyMetrics } from "../../../../lib/metrics/kubeproxy.ts";
import { Registry } from "../../../../lib/metrics/registry.ts";

const SYSCTLS = [
  "net/ipv4/vs/conntrack",
  "net/ipv4/vs/conn_reuse_mode",
  "net/ipv4/vs/expire_nodest_conn",
  "net/ipv4/vs/expire_quiescent_template",
  "net/ipv4/ip_forward",
  "net/ipv4/conf/all/arp_ignore",
  "net/ipv4/conf/all/arp_announce",
];

function procTree(): string {
  const root = mkdtempSync(join(tmpdir(), "ipvs-sysctl-"));
  for (const s of SYSCTLS) {
    mkdirSync(dirname(join(root, s)), { recursive: true });
    writeFileSync(join(root, s), s.endsWith("conn_reuse_mode") ? "1\n" : "0\n"); // the kernel's defaults
  }
  return root;
}

function fakeHost(timeouts: number[][]): IpvsHost {
  const none = () => Promise.resolve("");
  return {
    ipvsSave: none,
    ipvsList: none,
    ipvsRestore: () => Promise.resolve(),
    ipvsSetTimeouts: (a, b, c) => Promise.resolve(void timeouts.push([a, b, c])),
    ipsetSave: none,
    ipsetRestore: () => Promise.resolve(),
    ensureDummy: () => Promise.resolve(),
    dummyAddresses: () => Promise.resolve([]),
    changeDummyAddresses: () => Promise.resolve(),
    nodeAddresses: () => Promise.resolve([]),
  };
}

function ctx(config = defaultConfig(), dryRun = false) {
  const warnings: string[] = [];
  const c: BackendContext = {
    config,
    dryRun,
    nodeName: "n1",
    log: { info: () => {}, warn: (m) => warnings.push(m), error: (m) => warnings.push(m), debug: () => {} },
    metrics: createKubeProxyMetrics(new Registry()),
    out: () => {},
    nodeIPs: () => [],
    primaryNodeIP: () => null,
  };
  return { c, warnings };
}

describe("IPVS mode start-up", () => {
  it("warns once that the mode is deprecated, sets upstream's sysctls, leaves timeouts alone by default", async () => {
    const root = procTree();
    try {
      const timeouts: number[][] = [];
      const mode = createIpvsBackend({
        host: () => fakeHost(timeouts),
        sysctl: new ProcSysctl(root),
        kernelRelease: () => Promise.resolve("6.1.0"),
      });
      const { c, warnings } = ctx();
      await mode.provider("IPv4", c);
      await mode.provider("IPv6", c);
      assert.deepEqual(warnings, [IPVS_DEPRECATION_WARNING]);
      assert.match(IPVS_DEPRECATION_WARNING, /deprecated.*'nftables'/);
      const read = (s: string) => readFileSync(join(root, s), "utf8").trim();
      // conn_reuse_mode is left as-is on kernels >= 5.9 (upstream #93297); no strict ARP by default.
      assert.deepEqual(SYSCTLS.map(read), ["1", "1", "1", "1", "1", "0", "0"]);
      assert.deepEqual(timeouts, []);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it("--ipvs-strict-arp sets arp_ignore/arp_announce; --ipvs-tcp-timeout etc. go to ipvsadm --set in seconds", async () => {
    const root = procTree();
    try {
      const timeouts: number[][] = [];
      const config = defaultConfig();
      config.ipvs.strictARP = true;
      config.ipvs.tcpTimeout = 900_000;
      config.ipvs.udpTimeout = 30_000;
      const mode = createIpvsBackend({
        host: () => fakeHost(timeouts),
        sysctl: new ProcSysctl(root),
        kernelRelease: () => Promise.resolve("5.4.0"),
      });
      await mode.provider("IPv4", ctx(config).c);
      const read = (s: string) => readFileSync(join(root, s), "utf8").trim();
      assert.equal(read("net/ipv4/conf/all/arp_ignore"), "1");
      assert.equal(read("net/ipv4/conf/all/arp_announce"), "2");
      assert.equal(read("net/ipv4/vs/conn_reuse_mode"), "0"); // kernel < 5.9: set to 0
      assert.deepEqual(timeouts, [[900, 0, 30]]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  it("sync periods come from the ipvs section", () => {
    const config = defaultConfig();
    config.ipvs.syncPeriod = 12_000;
    config.ipvs.minSyncPeriod = 3_000;
    const mode = createIpvsBackend({ host: () => fakeHost([]) });
    assert.deepEqual(mode.syncPeriods(config), { minSyncPeriodMs: 3_000, syncPeriodMs: 12_000 });
  });
});
