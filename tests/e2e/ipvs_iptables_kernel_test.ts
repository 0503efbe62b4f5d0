/**
 * The IPVS mode's iptables side in a real kernel. The UML kernels that boot on these machines have no
 * IPv4 iptables (tests/support/uml.ts), so the host kernel checks it instead, in a fresh network
 * namespace: the model's sets go in through `ipset restore`, upstream's jump rules through the iptables
 * runner, and the whole nat + filter payload through `iptables-restore --noflush` — for both families, a
 * second time unchanged, and after the services are gone. The KUBE-IPVS-OUT-FILTER `-m ipvs` rule needs
 * IPVS in the kernel and is checked only where xt_ipvs loads (it is left out of the cluster otherwise).
 * Skipped when not root or without ipset.
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { accessSync, constants } from "node:fs";
import { NetnsScope, netnsUnavailableReason } from "../support/netns.ts";
import { makeEndpoint, makeServicePort, TEST_NODE_NAME } from "../support/tracer.ts";
import { computeIpvsState, type IpvsModelInput } from "../../lib/proxy/ipvs/state.ts";
import { planIpsetRestore } from "../../lib/proxy/ipvs/ipset_restore.ts";
import { IPVS_JUMP_RULES } from "../../lib/proxy/ipvs/backend.ts";
import { newNodePortAddresses } from "../../lib/proxy/nodeport_addresses.ts";
import { newDetectLocalByCIDR } from "../../lib/proxy/iptables/local_detector.ts";
import { servicePortKey } from "../../lib/proxy/types.ts";
import type { IPFamily } from "../../lib/proxy/types.ts";

function reason(): string {
  try {
    accessSync("/usr/sbin/ipset", constants.X_OK);
  } catch {
    return "/usr/sbin/ipset not found";
  }
  return netnsUnavailableReason();
}
const skip = reason();
if (skip) console.log(`ipvs_iptables_kernel_test: skipped: ${skip}`);
const env = new NetnsScope("ipvsipt");
after(() => env.cleanup());

function model(family: IPFamily, withServices: boolean) {
  const v6 = family === "IPv6";
  const ip = (a: string, b: string) => (v6 ? b : a);
  const svcs = withServices
    ? [
      makeServicePort("ns1", "web", {
        clusterIP: ip("172.30.0.41", "fd00:10:96::41"),
        stickyMaxAgeSeconds: 60,
      }),
      makeServicePort("ns2", "lb", {
        clusterIP: ip("172.30.0.42", "fd00:10:96::42"),
        nodePort: 3001,
        loadBalancerVIPs: [ip("1.2.3.4", "2001:db8:5::4")],
        // contains the node IP: no -m ipvs rule (the host kernel has no IPVS)
        loadBalancerSourceRanges: [ip("192.168.0.0/16", "2001:db8::/32")],
        externalIPs: [ip("192.168.99.22", "2001:db8:99::22")],
        externalPolicyLocal: true,
        healthCheckNodePort: 30000,
      }),
      makeServicePort("ns3", "dns", {
        clusterIP: ip("172.30.0.10", "fd00:10:96::10"),
        protocol: "UDP",
        nodePort: 3053,
        portNumber: 53,
      }),
      makeServicePort("ns4", "sctp", {
        clusterIP: ip("172.30.0.11", "fd00:10:96::11"),
        protocol: "SCTP",
        nodePort: 3099,
      }),
    ]
    : [];
  const ep = ip("10.180.0.1", "fd00:10:180::1");
  const input: IpvsModelInput = {
    family,
    services: svcs,
    endpoints: new Map(
      svcs.map((s) => [servicePortKey(s.name), [makeEndpoint(ep, 80, { nodeName: TEST_NODE_NAME })]]),
    ),
    nodeName: TEST_NODE_NAME,
    nodeLabels: {},
    nodeIP: ip("192.168.0.2", "2001:db8::1"),
    nodeAddresses: [ip("192.168.0.2", "2001:db8::1")],
    nodePortAddresses: newNodePortAddresses(family, []),
    scheduler: "rr",
    masqueradeAll: false,
    masqueradeBit: 14,
    localDetector: newDetectLocalByCIDR(ip("10.0.0.0/8", "fd00:10::/64")),
    randomFully: true,
  };
  return computeIpvsState(input);
}

describe("IPVS iptables payload in the host kernel", { skip: skip || false }, () => {
  for (const family of ["IPv4", "IPv6"] as const) {
    it(`${family}: sets, jump rules and payload are accepted; again unchanged; and with no services`, async () => {
      const ns = await env.create(family === "IPv4" ? "v4" : "v6");
      const bin = family === "IPv4" ? "iptables" : "ip6tables";
      let sets = new Map<string, { type: string; entries: Set<string> }>();
      for (const withServices of [true, true, false]) {
        const m = model(family, withServices);
        const ipset = planIpsetRestore(m.ipsets, sets, family);
        const r1 = await ns.exec(["ipset", "-exist", "restore"], { input: ipset });
        assert.equal(r1.code, 0, `ipset restore: ${r1.stderr}\n${ipset}`);
        for (const rule of IPVS_JUMP_RULES) {
          await ns.exec([bin, "-w", "-t", rule.table, "-N", rule.toChain]);
          const args = [
            "-t",
            rule.table,
            "-I",
            rule.fromChain,
            "-m",
            "comment",
            "--comment",
            rule.comment,
            "-j",
            rule.toChain,
          ];
          const r = await ns.exec([bin, "-w", ...args]);
          assert.equal(r.code, 0, `${bin} ${args.join(" ")}: ${r.stderr}`);
        }
        const r2 = await ns.exec([`${bin}-restore`, "-w", "--noflush"], { input: m.iptables });
        assert.equal(r2.code, 0, `${bin}-restore: ${r2.stderr}\n${m.iptables}`);
        const saved = await ns.exec([`${bin}-save`]);
        if (withServices) {
          const name = family === "IPv4" ? "KUBE-CLUSTER-IP" : "KUBE-6-CLUSTER-IP";
          assert.match(saved.stdout, new RegExp(`-A KUBE-SERVICES .*--match-set ${name} dst,dst -j ACCEPT`));
          assert.match(
            saved.stdout,
            /-A KUBE-IPVS-FILTER -m conntrack --ctstate NEW -m set --match-set KUBE-(6-)?IPVS-IPS dst -j REJECT/,
          );
        } else {
          assert.doesNotMatch(saved.stdout, /--match-set KUBE-(6-)?CLUSTER-IP dst,dst -j ACCEPT/);
        }
        const list = await ns.exec(["ipset", "save"]);
        const { parseIpsetSave } = await import("../../lib/proxy/ipvs/ipset_restore.ts");
        sets = parseIpsetSave(list.stdout);
        for (const [base, entries] of m.ipsets) {
          const kernelName = family === "IPv4" ? base : base.replace(/^KUBE-/, "KUBE-6-").slice(0, 31);
          assert.deepEqual([...(sets.get(kernelName)?.entries ?? [])].sort(), [...entries], `${kernelName}`);
        }
      }
    });
  }
});
