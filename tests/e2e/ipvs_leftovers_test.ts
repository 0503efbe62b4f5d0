/**
 * Mode switching in the host kernel (no IPVS here, but ipsets, iptables and dummy interfaces are real), in
 * a fresh network namespace: IPVS mode's state is laid down as its sync writes it (ipset restore, jump
 * rules, the nat + filter payload, kube-ipvs0 with the service addresses), then an iptables-mode rule is
 * added to the chain both modes share. Another mode's start (lib/proxy/ipvs/leftovers.ts, `all: false`)
 * must remove IPVS mode's sets, rules, chains and kube-ipvs0 and keep the iptables-mode rule and jump; a
 * second run finds nothing and says nothing; `--cleanup` (`all: true`) then removes the shared chains too.
 * The other way round: on a namespace holding iptables mode's chains, IPVS mode's first sync (its ipsets and
 * iptables for real, IPVS and kube-ipvs0 simulated) leaves only IPVS mode's chains.
 * Skipped when not root or without ipset.
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { accessSync, constants } from "node:fs";
import { NetnsScope, netnsUnavailableReason } from "../support/netns.ts";
import { makeEndpoint, makeServicePort, TEST_NODE_NAME } from "../support/tracer.ts";
import { computeIpvsState } from "../../lib/proxy/ipvs/state.ts";
import { planIpsetRestore } from "../../lib/proxy/ipvs/ipset_restore.ts";
import { IPVS_JUMP_RULES } from "../../lib/proxy/ipvs/backend.ts";
import { cleanupIpvsLeftovers } from "../../lib/proxy/ipvs/leftovers.ts";
import { createIpvsLeftoverHost } from "../../lib/proxy/ipvs/host.ts";
import { newNodePortAddresses } from "../../lib/proxy/nodeport_addresses.ts";
import { newDetectLocalByCIDR } from "../../lib/proxy/iptables/local_detector.ts";
import { servicePortKey } from "../../lib/proxy/types.ts";
import { IpvsBackend } from "../../lib/proxy/ipvs/backend.ts";
import { createIptablesRunner } from "../../lib/proxy/iptables/runner.ts";
import { ServicePortMap } from "../../lib/proxy/service_change_tracker.ts";
import { EndpointsMap } from "../../lib/proxy/endpoints_change_tracker.ts";
import { detectLocalByCIDR } from "../../lib/proxy/local_detect.ts";
import { SimulatedIpvsKernel } from "../support/ipvs_sim_kernel.ts";

function reason(): string {
  try {
    accessSync("/usr/sbin/ipset", constants.X_OK);
  } catch {
    return "/usr/sbin/ipset not found";
  }
  return netnsUnavailableReason();
}
const skip = reason();
if (skip) console.log(`ipvs_leftovers_test: skipped: ${skip}`);
const env = new NetnsScope("ipvslo");
after(() => env.cleanup());

function ipvsState() {
  const svcs = [
    makeServicePort("ns1", "web", { clusterIP: "172.30.0.41", nodePort: 3001 }),
    makeServicePort("ns2", "lb", {
      clusterIP: "172.30.0.42",
      loadBalancerVIPs: ["1.2.3.4"],
      loadBalancerSourceRanges: ["192.168.0.0/16"],
      externalIPs: ["192.168.99.22"],
    }),
  ];
  return computeIpvsState({
    family: "IPv4",
    services: svcs,
    endpoints: new Map(svcs.map((s) => [servicePortKey(s.name), [makeEndpoint("10.180.0.1", 80)]])),
    nodeName: TEST_NODE_NAME,
    nodeLabels: {},
    nodeIP: "192.168.0.2",
    nodeAddresses: ["192.168.0.2"],
    nodePortAddresses: newNodePortAddresses("IPv4", []),
    scheduler: "rr",
    masqueradeAll: false,
    masqueradeBit: 14,
    localDetector: newDetectLocalByCIDR("10.0.0.0/8"),
    randomFully: true,
  });
}

describe("IPVS mode leftovers in the host kernel", { skip: skip || false }, () => {
  it("another mode's start removes IPVS mode's part only; again: nothing; --cleanup: the rest", async () => {
    const ns = await env.create("sw");
    const m = ipvsState();
    await ns.execOk(["ipset", "-exist", "restore"], { input: planIpsetRestore(m.ipsets, new Map(), "IPv4") });
    for (const rule of IPVS_JUMP_RULES) {
      await ns.exec(["iptables", "-w", "-t", rule.table, "-N", rule.toChain]);
      await ns.execOk([
        "iptables",
        "-w",
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
      ]);
    }
    await ns.execOk(["iptables-restore", "-w", "--noflush"], { input: m.iptables });
    // A dummy device as IPVS mode makes it; kernels without the dummy module get a bridge of that name
    // (the cleanup goes by name).
    if ((await ns.exec(["ip", "link", "add", "kube-ipvs0", "type", "dummy"])).code !== 0) {
      await ns.execOk(["ip", "link", "add", "kube-ipvs0", "type", "bridge"]);
    }
    const batch = m.bindAddresses.map((a) => `addr add ${a}/32 dev kube-ipvs0`).join("\n") + "\n";
    await ns.execOk(["ip", "-batch", "-"], { input: batch });
    // iptables mode's part in the shared KUBE-SERVICES.
    await ns.execOk(["iptables", "-w", "-t", "nat", "-N", "KUBE-SVC-ABC"]);
    await ns.execOk([
      "iptables",
      "-w",
      "-t",
      "nat",
      "-A",
      "KUBE-SERVICES",
      "-d",
      "172.30.0.41/32",
      "-p",
      "tcp",
      "-j",
      "KUBE-SVC-ABC",
    ]);
    const before = await ns.execOk(["iptables-save"]);
    assert.match(before, /-A KUBE-IPVS-FILTER /);
    assert.match(before, /--match-set KUBE-CLUSTER-IP dst,dst/);

    const logs: string[] = [];
    const log = { info: (s: string) => logs.push(s), warn: (s: string) => logs.push(`W ${s}`) };
    const host = createIpvsLeftoverHost({ commandPrefix: ns.prefix });
    assert.equal(await cleanupIpvsLeftovers(log, host, { all: false }), 0, logs.join("\n"));
    assert.ok(!logs.some((l) => l.startsWith("W ")), logs.join("\n"));

    const after1 = await ns.execOk(["iptables-save"]);
    assert.doesNotMatch(after1, /--match-set/);
    for (const c of ["KUBE-IPVS-FILTER", "KUBE-IPVS-OUT-FILTER", "KUBE-NODE-PORT", "KUBE-LOAD-BALANCER"]) {
      assert.doesNotMatch(after1, new RegExp(`^:${c} `, "m"), c);
    }
    assert.match(after1, /^-A KUBE-SERVICES -d 172\.30\.0\.41\/32 -p tcp -j KUBE-SVC-ABC$/m);
    assert.match(
      after1,
      /^-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES$/m,
    );
    assert.doesNotMatch(await ns.execOk(["ipset", "save"]), /KUBE-/);
    assert.notEqual((await ns.exec(["ip", "link", "show", "kube-ipvs0"])).code, 0);

    logs.length = 0;
    assert.equal(await cleanupIpvsLeftovers(log, host, { all: false }), 0);
    assert.deepEqual(logs, []);

    assert.equal(await cleanupIpvsLeftovers(log, host, { all: true }), 0, logs.join("\n"));
    const after2 = await ns.execOk(["iptables-save", "-t", "nat"]);
    assert.doesNotMatch(after2, /^:KUBE-SERVICES /m);
    assert.doesNotMatch(after2, /-j KUBE-SERVICES/);
  });

  it("IPVS mode's first sync on a node that ran iptables mode removes iptables mode's own chains", async () => {
    const ns = await env.create("toipvs");
    // iptables mode's shape: shared chains, its own chains and the jumps into them.
    await ns.execOk(["iptables-restore", "-w", "--noflush"], {
      input: [
        "*nat",
        ":KUBE-SERVICES - [0:0]",
        ":KUBE-NODEPORTS - [0:0]",
        ":KUBE-POSTROUTING - [0:0]",
        ":KUBE-MARK-MASQ - [0:0]",
        ":KUBE-SVC-ABC - [0:0]",
        ":KUBE-SEP-XYZ - [0:0]",
        '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
        "-A KUBE-SERVICES -d 172.30.0.41/32 -p tcp --dport 80 -j KUBE-SVC-ABC",
        "-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS",
        "-A KUBE-SVC-ABC -j KUBE-SEP-XYZ",
        "-A KUBE-SEP-XYZ -s 10.180.0.1/32 -j KUBE-MARK-MASQ",
        "-A KUBE-SEP-XYZ -p tcp -j DNAT --to-destination 10.180.0.1:80",
        "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000",
        "COMMIT",
        "*filter",
        ":KUBE-SERVICES - [0:0]",
        ":KUBE-EXTERNAL-SERVICES - [0:0]",
        ":KUBE-NODEPORTS - [0:0]",
        ":KUBE-FORWARD - [0:0]",
        ":KUBE-PROXY-FIREWALL - [0:0]",
        '-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES',
        '-A INPUT -m comment --comment "kubernetes health check service ports" -j KUBE-NODEPORTS',
        '-A FORWARD -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
        '-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD',
        "COMMIT",
        "",
      ].join("\n"),
    });
    const kernel = new SimulatedIpvsKernel("IPv4", ["192.168.0.2"]);
    const sim = kernel.host();
    const host = {
      ...sim,
      ipsetSave: () => ns.execOk(["ipset", "save"]),
      ipsetRestore: async (text: string) => {
        if (text !== "") await ns.execOk(["ipset", "-exist", "restore"], { input: text });
      },
    };
    const logs: string[] = [];
    const backend = new IpvsBackend({
      family: "IPv4",
      nodeName: TEST_NODE_NAME,
      host,
      iptables: await createIptablesRunner({ family: "IPv4", commandPrefix: ns.prefix }),
      scheduler: "",
      excludeCIDRs: [],
      masqueradeAll: false,
      masqueradeBit: 14,
      nodePortAddresses: newNodePortAddresses("IPv4", []),
      primaryNodeIP: () => "192.168.0.2",
      preferSameTrafficDistribution: true,
      log: { info: (m) => logs.push(m), warn: (m) => logs.push(`W ${m}`), debug: () => {} },
    });
    const svc = makeServicePort("ns1", "web", { clusterIP: "172.30.0.41", nodePort: 3001 });
    const services = new ServicePortMap();
    const endpoints = new EndpointsMap();
    services.set(servicePortKey(svc.name), svc);
    endpoints.set(servicePortKey(svc.name), [makeEndpoint("10.180.0.1", 80)]);
    await backend.sync({
      family: "IPv4",
      services,
      endpoints,
      changedServices: new Set(),
      nodeLabels: {},
      localDetection: detectLocalByCIDR("10.0.0.0/8"),
    }, { full: true });
    assert.ok(!logs.some((l) => l.startsWith("W ")), logs.join("\n"));
    const saved = await ns.execOk(["iptables-save"]);
    for (const gone of ["KUBE-SVC-ABC", "KUBE-SEP-XYZ", "KUBE-NODEPORTS", "KUBE-EXTERNAL-SERVICES"]) {
      assert.doesNotMatch(saved, new RegExp(`${gone}`), `${gone}:\n${saved}`);
    }
    const filter = saved.split("*filter")[1].split("COMMIT")[0];
    assert.doesNotMatch(filter, /^:KUBE-SERVICES /m, `filter KUBE-SERVICES:\n${filter}`);
    assert.match(saved, /^-A KUBE-SERVICES .*--match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT$/m);
    assert.match(saved, /^:KUBE-IPVS-FILTER /m);
    assert.match(
      saved,
      /^-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES$/m,
    );
    assert.match(saved, /^-A FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD$/m);
  });
});
