/**
 * `--dry-run --proxy-mode ipvs` (lib/proxy/ipvs/dry_run.ts through lib/proxy/ipvs/mode.ts): the families
 * come from the configuration, no sysctl is written, and a sync prints the ipset transaction, the
 * iptables payload with the jump rules, the ipvsadm batch and the kube-ipvs0 addresses.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createIpvsBackend, IPVS_DEPRECATION_WARNING } from "../../../../lib/proxy/ipvs/mode.ts";
import { createDryRunIpvsHost } from "../../../../lib/proxy/ipvs/dry_run.ts";
import type { BackendContext, ProxyState } from "../../../../lib/proxy/provider.ts";
import { ProcSysctl } from "../../../../lib/host/sysctl.ts";
import { defaultConfig } from "../../../../lib/config/defaults.ts";
import { createKubeProxyMetrics } from "../../../../lib/metrics/kubeproxy.ts";
import { Registry } from "../../../../lib/metrics/registry.ts";
import { ServicePortMap } from "../../../../lib/proxy/service_change_tracker.ts";
import { EndpointsMap } from "../../../../lib/proxy/endpoints_change_tracker.ts";
import { detectLocalByCIDR } from "../../../../lib/proxy/local_detect.ts";
import { servicePortKey } from "../../../../lib/proxy/types.ts";
import { makeEndpoint, makeServicePort } from "../../../support/tracer.ts";

function ctx(out: string[], warnings: string[], config = defaultConfig()): BackendContext {
  return {
    config,
    dryRun: true,
    nodeName: "n1",
    log: { info: () => {}, warn: (m) => warnings.push(m), error: (m) => warnings.push(m), debug: () => {} },
    metrics: createKubeProxyMetrics(new Registry()),
    out: (t) => out.push(t),
    nodeIPs: () => [],
    primaryNodeIP: () => "192.168.0.2",
  };
}

function oneService(): ProxyState {
  const svc = makeServicePort("ns1", "svc1", { clusterIP: "172.30.0.41", nodePort: 3001 });
  const services = new ServicePortMap();
  const endpoints = new EndpointsMap();
  services.set(servicePortKey(svc.name), svc);
  endpoints.set(servicePortKey(svc.name), [makeEndpoint("10.180.0.1", 80)]);
  return {
    family: "IPv4",
    services,
    endpoints,
    changedServices: new Set(),
    nodeLabels: {},
    localDetection: detectLocalByCIDR("10.0.0.0/8"),
  };
}

describe("IPVS mode --dry-run", () => {
  it("families from the configuration: IPv4, and IPv6 with an IPv6 cluster CIDR", async () => {
    const mode = createIpvsBackend();
    assert.deepEqual(await mode.families(ctx([], [])), ["IPv4"]);
    const config = defaultConfig();
    config.clusterCIDR = "10.0.0.0/8,fd00:10::/64";
    assert.deepEqual(await mode.families(ctx([], [], config)), ["IPv4", "IPv6"]);
  });

  it("prints the ipset, iptables, ipvsadm and ip batches of a sync; writes no sysctl", async () => {
    const root = mkdtempSync(join(tmpdir(), "ipvs-dry-"));
    try {
      const sysctl = join(root, "net/ipv4/vs/conntrack");
      mkdirSync(dirname(sysctl), { recursive: true });
      writeFileSync(sysctl, "0\n");
      const out: string[] = [];
      const warnings: string[] = [];
      const c = ctx(out, warnings);
      const mode = createIpvsBackend({
        sysctl: new ProcSysctl(root),
        host: () => createDryRunIpvsHost("IPv4", c.out, () => ["127.0.0.1", "192.168.0.2"]),
      });
      const provider = await mode.provider("IPv4", c);
      await provider.sync(oneService(), { full: true });
      const text = out.join("");
      assert.equal(readFileSync(sysctl, "utf8"), "0\n");
      assert.deepEqual(warnings, [IPVS_DEPRECATION_WARNING]);
      const section = (head: string) => {
        const i = text.indexOf(`# ${head}`);
        assert.ok(i >= 0, `no "${head}" in:\n${text}`);
        return text.slice(i, text.indexOf("# EOF\n", i));
      };
      const ipset = section("ipset -exist restore (IPv4) <<EOF");
      assert.match(ipset, /^create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536$/m);
      assert.match(ipset, /^add KUBE-CLUSTER-IP 172\.30\.0\.41,tcp:80$/m);
      assert.match(ipset, /^add KUBE-NODE-PORT-TCP 3001$/m);
      const ipvs = section("ipvsadm -R (IPv4) <<EOF");
      assert.match(ipvs, /^-A -t 172\.30\.0\.41:80 -s rr$/m);
      assert.match(ipvs, /^-a -t 172\.30\.0\.41:80 -r 10\.180\.0\.1:80 -m -w 1$/m);
      assert.match(ipvs, /^-A -t 192\.168\.0\.2:3001 -s rr$/m); // NodePort on the node address, not loopback
      assert.doesNotMatch(ipvs, /127\.0\.0\.1/);
      assert.match(section("ip -batch - (IPv4) <<EOF"), /^addr add 172\.30\.0\.41\/32 dev kube-ipvs0$/m);
      const payload = section("iptables-restore -w 5 -W 100000 --noflush --counters <<EOF");
      assert.match(payload, /^-A KUBE-SERVICES .*--match-set KUBE-CLUSTER-IP dst,dst .*-j KUBE-MARK-MASQ$/m);
      assert.match(text, /^# iptables -w 5 -W 100000 -I PREROUTING -t nat .*-j KUBE-SERVICES$/m);
      assert.match(text, /^# ip link add kube-ipvs0 type dummy/m);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
