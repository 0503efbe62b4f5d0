/**
 * IPVS mode's leftovers (lib/proxy/ipvs/leftovers.ts) and mode switching (lib/app/mode_leftovers.ts): what
 * another mode's start removes (only IPVS mode's own virtual servers, rules, chains, kube-ipvs0 and sets;
 * never iptables mode's rules in the chains both share), what `--cleanup` removes (all of it), that a host
 * without any of it is left alone silently, and which mode's cleanup a starting mode runs, IPVS first.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  cleanupIpvsLeftovers,
  type IpvsLeftoverHost,
  planIptablesModeLeftovers,
  planIpvsIptablesLeftovers,
  planIpvsVirtualServerLeftovers,
} from "../../../../lib/proxy/ipvs/leftovers.ts";
import { IpvsBackend } from "../../../../lib/proxy/ipvs/backend.ts";
import { newNodePortAddresses } from "../../../../lib/proxy/nodeport_addresses.ts";
import { ServicePortMap } from "../../../../lib/proxy/service_change_tracker.ts";
import { EndpointsMap } from "../../../../lib/proxy/endpoints_change_tracker.ts";
import { detectLocalByCIDR } from "../../../../lib/proxy/local_detect.ts";
import { cleanupOtherModes, leftoverCleanup } from "../../../../lib/app/mode_leftovers.ts";
import type { IptablesRunner } from "../../../../lib/proxy/iptables/runner.ts";

/** nat as iptables-save prints it after IPVS mode ran on a host where iptables mode had run before. */
const NAT = `*nat
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-LOAD-BALANCER - [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-ABC - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-LOAD-BALANCER -j KUBE-MARK-MASQ
-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000
-A KUBE-NODE-PORT -p tcp -m comment --comment "Kubernetes nodeport TCP port for masquerade purpose" -m set --match-set KUBE-NODE-PORT-TCP dst -j KUBE-MARK-MASQ
-A KUBE-POSTROUTING -m comment --comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN
-A KUBE-SERVICES -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT
-A KUBE-SERVICES -d 172.30.0.41/32 -p tcp -m comment --comment "ns1/svc1:p80 cluster IP" -j KUBE-SVC-ABC
COMMIT
`;

/** nat of a host that only ever ran iptables mode. */
const NAT_IPTABLES_ONLY = `*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-SVC-ABC - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -d 172.30.0.41/32 -p tcp -m comment --comment "ns1/svc1:p80 cluster IP" -j KUBE-SVC-ABC
-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS
COMMIT
`;

const FILTER = `*filter
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-IPVS-FILTER - [0:0]
:KUBE-IPVS-OUT-FILTER - [0:0]
:KUBE-NODE-PORT - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
:KUBE-SOURCE-RANGES-FIREWALL - [0:0]
-A INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER
-A INPUT -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
-A INPUT -m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT
-A OUTPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-OUT-FILTER
-A KUBE-IPVS-FILTER -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN
-A KUBE-PROXY-FIREWALL -m comment --comment "Kubernetes service load balancer ip + port for load balancer with sourceRange" -m set --match-set KUBE-LOAD-BALANCER-FW dst,dst -j KUBE-SOURCE-RANGES-FIREWALL
-A KUBE-SOURCE-RANGES-FIREWALL -j DROP
COMMIT
`;

const IPSETS = `create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536
add KUBE-CLUSTER-IP 172.30.0.41,tcp:80
create KUBE-NODE-PORT-TCP bitmap:port range 0-65535
add KUBE-NODE-PORT-TCP 30080
create KUBE-NODE-PORT-SCTP-HASH hash:ip,port family inet hashsize 1024 maxelem 65536
add KUBE-NODE-PORT-SCTP-HASH 192.168.0.2,sctp:30099
create OTHER-SET hash:ip family inet hashsize 1024 maxelem 65536
`;

const IPVSADM = `-A -t 172.30.0.41:80 -s rr
-a -t 172.30.0.41:80 -r 10.180.0.1:80 -m -w 1
-A -t 192.168.0.2:30080 -s rr
-A -u 192.168.0.2:30080 -s rr
-A --sctp-service 192.168.0.2:30099 -s rr
-A -t 192.168.0.2:8080 -s wlc
-A -t 203.0.113.10:443 -s rr
`;

describe("IPVS mode leftovers: plans", () => {
  it("iptables: deletes the rules matching our sets or jumping to IPVS-only chains, then those chains", () => {
    assert.equal(
      planIpvsIptablesLeftovers("nat", NAT),
      [
        "*nat",
        '-D KUBE-POSTROUTING -m comment --comment "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose" -m set --match-set KUBE-LOOP-BACK dst,dst,src -j MASQUERADE',
        '-D KUBE-SERVICES -m comment --comment "Kubernetes service cluster ip + port for masquerade purpose" -m set --match-set KUBE-CLUSTER-IP dst,dst ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ',
        "-D KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODE-PORT",
        ":KUBE-LOAD-BALANCER - [0:0]",
        ":KUBE-NODE-PORT - [0:0]",
        "COMMIT",
        "*nat",
        "-X KUBE-LOAD-BALANCER",
        "-X KUBE-NODE-PORT",
        "COMMIT",
        "",
      ].join("\n"),
    );
    const filter = planIpvsIptablesLeftovers("filter", FILTER);
    assert.match(
      filter,
      /^-D INPUT -m comment --comment "kubernetes ipvs access filter" -j KUBE-IPVS-FILTER$/m,
    );
    assert.match(
      filter,
      /^-D INPUT -m comment --comment "kubernetes health check rules" -j KUBE-NODE-PORT$/m,
    );
    assert.match(
      filter,
      /^-D KUBE-PROXY-FIREWALL .*KUBE-LOAD-BALANCER-FW dst,dst -j KUBE-SOURCE-RANGES-FIREWALL$/m,
    );
    // The jump into the shared KUBE-PROXY-FIREWALL stays (iptables mode has the same one).
    assert.doesNotMatch(filter, /-j KUBE-PROXY-FIREWALL$/m);
    for (
      const c of ["KUBE-IPVS-FILTER", "KUBE-IPVS-OUT-FILTER", "KUBE-NODE-PORT", "KUBE-SOURCE-RANGES-FIREWALL"]
    ) {
      assert.match(filter, new RegExp(`^-X ${c}$`, "m"));
    }
    assert.doesNotMatch(filter, /-X KUBE-PROXY-FIREWALL/);
  });

  it("iptables: a host where only iptables mode ran has nothing to remove", () => {
    assert.equal(planIpvsIptablesLeftovers("nat", NAT_IPTABLES_ONLY), "");
    assert.equal(planIpvsIptablesLeftovers("filter", NAT_IPTABLES_ONLY), "");
  });

  it("IPVS: the virtual servers on kube-ipvs0 and the NodePorts of our sets; others' stay", () => {
    assert.deepEqual(planIpvsVirtualServerLeftovers(IPVSADM, ["172.30.0.41"], IPSETS), [
      "-D -t 172.30.0.41:80",
      "-D -t 192.168.0.2:30080",
      "-D --sctp-service 192.168.0.2:30099",
    ]);
  });
});

/** A fake host recording what is done; `present` false: nothing of IPVS mode is there. */
function fakeHost(present: boolean) {
  const done: string[] = [];
  const deleted = new Set<string>();
  const runner = {
    family: "IPv4",
    version: { parts: [1, 8, 9], text: "1.8.9", backend: "nf_tables" },
    features: { hasCheck: true, hasRandomFully: true, waitFlags: [], restoreWaitFlags: [] },
    save: (
      table: string,
    ) => (done.push(`save ${table}`),
      Promise.resolve(present ? (table === "nat" ? NAT : FILTER) : NAT_IPTABLES_ONLY)),
    restore: (p: string) =>
      Promise.resolve(void done.push(`restore ${p.split("\n")[0]} ${p.split("\n").length}`)),
    exec: (args: string[]) => {
      // A jump rule exists until it is deleted (when IPVS mode's state is there).
      const key = args.join(" ").replace(" -C ", " -D ");
      if (args.includes("-C")) {
        return Promise.resolve({ code: present && !deleted.has(key) ? 0 : 1, stdout: "", stderr: "" });
      }
      deleted.add(key);
      done.push(`iptables ${args.join(" ")}`);
      return Promise.resolve({ code: 0, stdout: "", stderr: "" });
    },
  } as unknown as IptablesRunner;
  const host: IpvsLeftoverHost = {
    ipvsSave: () => Promise.resolve(present ? IPVSADM : null),
    ipvsRestore: (lines) => Promise.resolve(void done.push(`ipvsadm -R ${lines.join("; ")}`)),
    ipvsFlush: () => Promise.resolve(void done.push("ipvsadm -C")),
    ipsetSave: () => Promise.resolve(present ? IPSETS : "create OTHER-SET hash:ip family inet\n"),
    ipsetDestroy: (name) => Promise.resolve(void done.push(`ipset destroy ${name}`)),
    dummyAddresses: () => Promise.resolve(present ? ["172.30.0.41"] : null),
    deleteDummy: () => Promise.resolve(void done.push("ip link del kube-ipvs0")),
    iptables: (family) => Promise.resolve(family === "IPv4" ? runner : null),
  };
  return { host, done };
}

function logger() {
  const lines: string[] = [];
  return { lines, log: { info: (m: string) => lines.push(m), warn: (m: string) => lines.push(`W ${m}`) } };
}

describe("IPVS mode leftovers: cleanup", () => {
  it("another mode starting: our virtual servers, rules and chains, kube-ipvs0, then our sets", async () => {
    const { host, done } = fakeHost(true);
    const { log } = logger();
    assert.equal(await cleanupIpvsLeftovers(log, host, { all: false }), 0);
    assert.deepEqual(done, [
      "ipvsadm -R -D -t 172.30.0.41:80; -D -t 192.168.0.2:30080; -D --sctp-service 192.168.0.2:30099",
      "save nat",
      "restore *nat 12",
      "save filter",
      "restore *filter 17",
      "ip link del kube-ipvs0",
      "ipset destroy KUBE-CLUSTER-IP",
      "ipset destroy KUBE-NODE-PORT-TCP",
      "ipset destroy KUBE-NODE-PORT-SCTP-HASH",
    ]);
  });

  it("--cleanup: every virtual server, the jump rules and the shared chains too", async () => {
    const { host, done } = fakeHost(true);
    const { log, lines } = logger();
    assert.equal(await cleanupIpvsLeftovers(log, host, { all: true }), 0, lines.join("\n"));
    assert.equal(done[0], "ipvsadm -C");
    assert.ok(done.some((d) => /^iptables .*-D OUTPUT .*-j KUBE-SERVICES$/.test(d)), done.join("\n"));
    assert.ok(
      done.some((d) => /^iptables .*-t nat -X KUBE-SERVICES$|^iptables .*-X KUBE-SERVICES -t nat$/.test(d)),
      done.join("\n"),
    );
    assert.ok(done.includes("ip link del kube-ipvs0"));
  });

  it("a host without IPVS mode's state (no kube-ipvs0, none of its sets) is left alone, silently", async () => {
    const { host, done } = fakeHost(false);
    const { log, lines } = logger();
    assert.equal(await cleanupIpvsLeftovers(log, host, { all: false }), 0);
    assert.deepEqual(done, []); // not even an iptables-save
    assert.deepEqual(lines, []);
  });
});

describe("mode switching", () => {
  it("iptables and nftables starting run IPVS mode's own cleanup, first; ipvs starting skips iptables'", async () => {
    const ran: string[] = [];
    const fake = (starting: string, other: string) => {
      const real = leftoverCleanup(starting, other);
      if (real === null) return null;
      return () => {
        ran.push(other);
        return Promise.resolve(0);
      };
    };
    const { log } = logger();
    await cleanupOtherModes("", log, fake);
    assert.deepEqual(ran.filter((m) => m !== "nftables"), ["ipvs", "userspace"]);
    assert.equal(ran.length, 3);
    ran.length = 0;
    await cleanupOtherModes("nftables", log, fake);
    assert.deepEqual(ran, ["ipvs", "iptables", "userspace"]);
    ran.length = 0;
    await cleanupOtherModes("ipvs", log, fake);
    assert.deepEqual(ran.sort(), ["nftables", "userspace"]);
  });

  it("the iptables-based modes' cleanups run one at a time, nftables mode's beside them", async () => {
    const events: string[] = [];
    const release: Record<string, () => void> = {};
    const fake = (_starting: string, other: string) => () => {
      events.push(`start ${other}`);
      return new Promise<number>((resolve) => {
        release[other] = () => {
          events.push(`end ${other}`);
          resolve(0);
        };
      });
    };
    const { log } = logger();
    const done = cleanupOtherModes("", log, fake);
    await new Promise((r) => setTimeout(r, 0));
    // Both lanes started; userspace waits for IPVS mode's cleanup (same tables).
    assert.deepEqual(events.sort(), ["start ipvs", "start nftables"]);
    release.nftables();
    await new Promise((r) => setTimeout(r, 0));
    assert.equal(events.includes("start userspace"), false);
    release.ipvs();
    await new Promise((r) => setTimeout(r, 0));
    assert.equal(events.at(-1), "start userspace");
    release.userspace();
    await done;
  });

  it("a failing cleanup is logged and the others still run", async () => {
    const ran: string[] = [];
    const fake = (_starting: string, other: string) => () => {
      ran.push(other);
      return other === "ipvs"
        ? Promise.reject(new Error("ipset: boom"))
        : Promise.resolve(other === "userspace" ? 1 : 0);
    };
    const { log, lines } = logger();
    await cleanupOtherModes("", log, fake);
    assert.deepEqual(ran.sort(), ["ipvs", "nftables", "userspace"]);
    assert.ok(lines.some((l) => l.includes("leftovers of ipvs mode: ipset: boom")), lines.join("\n"));
    assert.ok(
      lines.some((l) => l.includes("leftovers of userspace mode: cleanup exited 1")),
      lines.join("\n"),
    );
  });
});

/** nat and filter of a node that ran iptables mode, after IPVS mode's first payload redeclared the shared chains. */
const IPTABLES_MODE_NAT = `*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-NODEPORTS - [0:0]
:KUBE-SVC-ABC - [0:0]
:KUBE-SEP-XYZ - [0:0]
:KUBE-MARK-MASQ - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A KUBE-SERVICES -s 127.0.0.0/8 -j RETURN
-A KUBE-SVC-ABC -j KUBE-SEP-XYZ
-A KUBE-SEP-XYZ -s 10.180.0.1/32 -j KUBE-MARK-MASQ
COMMIT
`;
const IPTABLES_MODE_FILTER = `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:KUBE-EXTERNAL-SERVICES - [0:0]
:KUBE-PROXY-FIREWALL - [0:0]
-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes externally-visible service portals" -j KUBE-EXTERNAL-SERVICES
-A INPUT -m comment --comment "kube-proxy firewall rules" -j KUBE-PROXY-FIREWALL
COMMIT
`;

describe("switching to IPVS mode", () => {
  it("plans the removal of iptables mode's own chains and jumps, never the shared ones", () => {
    assert.equal(
      planIptablesModeLeftovers("nat", IPTABLES_MODE_NAT),
      [
        "*nat",
        ":KUBE-NODEPORTS - [0:0]",
        ":KUBE-SVC-ABC - [0:0]",
        ":KUBE-SEP-XYZ - [0:0]",
        "COMMIT",
        "*nat",
        "-X KUBE-NODEPORTS",
        "-X KUBE-SVC-ABC",
        "-X KUBE-SEP-XYZ",
        "COMMIT",
        "",
      ].join("\n"),
    );
    const filter = planIptablesModeLeftovers("filter", IPTABLES_MODE_FILTER);
    assert.match(filter, /^-D INPUT .*-j KUBE-EXTERNAL-SERVICES$/m);
    assert.match(filter, /^-X KUBE-EXTERNAL-SERVICES$/m);
    assert.doesNotMatch(filter, /KUBE-PROXY-FIREWALL/);
    assert.equal(planIptablesModeLeftovers("nat", NAT.replace(/^.*KUBE-SVC-ABC.*\n/gm, "")), "");
  });

  it("IPVS mode's first sync removes them after its payload, once", async () => {
    const calls: string[] = [];
    const iptables = {
      family: "IPv4",
      features: { hasRandomFully: true, waitFlags: [] },
      save: (
        t: string,
      ) => (calls.push(`save ${t}`),
        Promise.resolve(t === "nat" ? IPTABLES_MODE_NAT : t === "filter" ? IPTABLES_MODE_FILTER : "")),
      restore: (p: string) => Promise.resolve(void calls.push(`restore ${p.split("\n").length} lines`)),
      exec: () => Promise.resolve({ code: 0, stdout: "", stderr: "" }),
    } as unknown as IptablesRunner;
    const none = () => Promise.resolve("");
    const ok = () => Promise.resolve();
    const backend = new IpvsBackend({
      family: "IPv4",
      nodeName: "n1",
      host: {
        ipvsSave: none,
        ipvsList: none,
        ipvsRestore: ok,
        ipvsSetTimeouts: ok,
        ipsetSave: none,
        ipsetRestore: ok,
        ensureDummy: ok,
        dummyAddresses: () => Promise.resolve([]),
        changeDummyAddresses: ok,
        nodeAddresses: () => Promise.resolve([]),
      },
      iptables,
      scheduler: "",
      excludeCIDRs: [],
      masqueradeAll: false,
      masqueradeBit: 14,
      nodePortAddresses: newNodePortAddresses("IPv4", []),
      primaryNodeIP: () => null,
      preferSameTrafficDistribution: true,
      log: { info: () => {}, warn: () => {}, debug: () => {} },
    });
    const state = {
      family: "IPv4" as const,
      services: new ServicePortMap(),
      endpoints: new EndpointsMap(),
      changedServices: new Set<string>(),
      nodeLabels: {},
      localDetection: detectLocalByCIDR("10.0.0.0/8"),
    };
    await backend.sync(state, { full: true });
    assert.equal(calls[0].startsWith("restore "), true, "IPVS mode's payload first");
    assert.deepEqual(calls.slice(1), [
      "save nat",
      "restore 11 lines",
      "save filter",
      "restore 8 lines",
      "save mangle",
    ]);
    calls.length = 0;
    await backend.sync(state, { full: true });
    assert.equal(calls.filter((c) => c.startsWith("save")).length, 0);
  });
});
