/**
 * The IPVS writers, pure parts: `ipvsadm -Sn` / `-Ln` and `ipset save` parsing (formats as Debian's
 * ipvsadm 1.31 and ipset 7.17 print them), the `ipvsadm -R` delta with graceful termination
 * (upstream graceful_termination.go), the `ipset restore` delta, the IPVS sysctls and `ip -o addr` parsing.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  drainedDeletes,
  parseIpvsadmConnections,
  parseIpvsadmSave,
  planIpvsadm,
} from "../../../../lib/proxy/ipvs/ipvsadm.ts";
import { parseIpsetSave, planIpsetRestore } from "../../../../lib/proxy/ipvs/ipset_restore.ts";
import { excludeCIDRsOf, ipvsSysctls, parseKernelVersion } from "../../../../lib/proxy/ipvs/mode.ts";
import { parseIpAddrLines } from "../../../../lib/proxy/ipvs/host.ts";
import type { VirtualServer } from "../../../../lib/proxy/ipvs/state.ts";
import type { Protocol } from "../../../../lib/proxy/types.ts";

const SAVE = `-A -t 10.0.0.1:80 -s rr -p 10800
-a -t 10.0.0.1:80 -r 10.1.0.1:8080 -m -w 1
-a -t 10.0.0.1:80 -r 10.1.0.2:8080 -m -w 1
-A --sctp-service 10.0.0.3:99 -s rr
-A -u 10.0.0.4:53 -s rr
-a -u 10.0.0.4:53 -r 10.1.0.9:53 -m -w 1
-A -t [fd00::1]:80 -s wrr
-a -t [fd00::1]:80 -r [fd00:10::1]:80 -m -w 0
-A -t 192.168.9.9:80 -s rr
`;

function vs(
  address: string,
  port: number,
  protocol: Protocol,
  rs: [string, number][],
  o: Partial<VirtualServer> = {},
): VirtualServer {
  return {
    address,
    port,
    protocol,
    scheduler: "rr",
    persistentTimeout: 0,
    sourceHash: false,
    realServers: rs.map(([a, p]) => ({ address: a, port: p, weight: 1 })),
    servicePort: "ns/x:p/TCP",
    ...o,
  };
}

describe("ipvsadm", () => {
  it("parses -Sn: protocols, persistence, IPv6 brackets, weights", () => {
    const m = parseIpvsadmSave(SAVE);
    assert.deepEqual([...m.keys()], [
      "10.0.0.1:80/TCP",
      "10.0.0.3:99/SCTP",
      "10.0.0.4:53/UDP",
      "[fd00::1]:80/TCP",
      "192.168.9.9:80/TCP",
    ]);
    const a = m.get("10.0.0.1:80/TCP")!;
    assert.equal(a.persistentTimeout, 10800);
    assert.deepEqual([...a.realServers], [["10.1.0.1:8080", 1], ["10.1.0.2:8080", 1]]);
    assert.deepEqual([...m.get("[fd00::1]:80/TCP")!.realServers], [["[fd00:10::1]:80", 0]]);
  });

  it("parses -Ln connection counts per real server", () => {
    const text = `IP Virtual Server version 1.2.1 (size=256)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.0.0.1:80 rr persistent 10800
  -> 10.1.0.1:8080                Masq    1      2          3
TCP  [fd00::1]:80 wrr
  -> [fd00:10::1]:80              Masq    0      0          0
`;
    assert.deepEqual([...parseIpvsadmConnections(text)], [
      ["10.0.0.1:80/TCP/10.1.0.1:8080", 5],
      ["[fd00::1]:80/TCP/[fd00:10::1]:80", 0],
    ]);
  });

  it("plans nothing when the kernel already matches", () => {
    const cur = parseIpvsadmSave("-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.0.1:8080 -m -w 1\n");
    const want = new Map([["10.0.0.1:80/TCP", vs("10.0.0.1", 80, "TCP", [["10.1.0.1", 8080]])]]);
    const p = planIpvsadm(want, cur, { family: "IPv4", excludeCIDRs: [] });
    assert.deepEqual(p.lines, []);
    assert.deepEqual(p.terminating, []);
  });

  it("adds, edits, deletes; removed TCP real servers get weight 0 (graceful), UDP ones are deleted", () => {
    const cur = parseIpvsadmSave(SAVE);
    const want = new Map([
      // persistence dropped → edit; 10.1.0.2 gone → weight 0; 10.1.0.3 new → add
      ["10.0.0.1:80/TCP", vs("10.0.0.1", 80, "TCP", [["10.1.0.1", 8080], ["10.1.0.3", 8080]])],
      // UDP real server removed → deleted at once
      ["10.0.0.4:53/UDP", vs("10.0.0.4", 53, "UDP", [])],
      ["10.0.0.5:80/TCP", vs("10.0.0.5", 80, "TCP", [["10.1.0.5", 80]], { persistentTimeout: 60 })],
    ]);
    const p = planIpvsadm(want, cur, { family: "IPv4", excludeCIDRs: ["192.168.0.0/16"] });
    assert.deepEqual(p.lines, [
      "-D --sctp-service 10.0.0.3:99", // not wanted; [fd00::1] is another family; 192.168.9.9 is excluded
      "-E -t 10.0.0.1:80 -s rr",
      "-a -t 10.0.0.1:80 -r 10.1.0.3:8080 -m -w 1",
      "-e -t 10.0.0.1:80 -r 10.1.0.2:8080 -m -w 0",
      "-d -u 10.0.0.4:53 -r 10.1.0.9:53",
      "-A -t 10.0.0.5:80 -s rr -p 60",
      "-a -t 10.0.0.5:80 -r 10.1.0.5:80 -m -w 1",
    ]);
    assert.deepEqual(p.terminating.map((t) => `${t.virtualServer}/${t.realServer}`), [
      "10.0.0.1:80/TCP/10.1.0.2:8080",
    ]);
    assert.deepEqual(p.counts, { vsAdded: 1, vsEdited: 1, vsDeleted: 1, rsChanged: 4 });
  });

  it("a terminating real server that comes back gets weight 1 again; one already at 0 is not rewritten", () => {
    const cur = parseIpvsadmSave(
      "-A -t 10.0.0.1:80 -s rr\n-a -t 10.0.0.1:80 -r 10.1.0.1:80 -m -w 0\n-a -t 10.0.0.1:80 -r 10.1.0.2:80 -m -w 0\n",
    );
    const p = planIpvsadm(
      new Map([["10.0.0.1:80/TCP", vs("10.0.0.1", 80, "TCP", [["10.1.0.1", 80]])]]),
      cur,
      {
        family: "IPv4",
        excludeCIDRs: [],
      },
    );
    assert.deepEqual(p.lines, ["-e -t 10.0.0.1:80 -r 10.1.0.1:80 -m -w 1"]);
    assert.equal(p.terminating.length, 1);
  });

  it("deletes drained terminating real servers only", () => {
    const t = (rs: string) => ({
      virtualServer: "10.0.0.1:80/TCP",
      protocol: "TCP" as const,
      vsArgs: "-t 10.0.0.1:80",
      realServer: rs,
    });
    const r = drainedDeletes(
      [t("10.1.0.1:80"), t("10.1.0.2:80"), t("10.1.0.3:80")],
      new Map([
        ["10.0.0.1:80/TCP/10.1.0.1:80", 0],
        ["10.0.0.1:80/TCP/10.1.0.2:80", 4],
      ]),
    );
    assert.deepEqual(r.lines, ["-d -t 10.0.0.1:80 -r 10.1.0.1:80"]);
    assert.deepEqual(r.remaining.map((x) => x.realServer), ["10.1.0.2:80"]);
  });

  it("mh sets the source-hash flag (-b flag-2)", () => {
    const p = planIpvsadm(
      new Map([["10.0.0.1:80/TCP", vs("10.0.0.1", 80, "TCP", [], { scheduler: "mh", sourceHash: true })]]),
      new Map(),
      {
        family: "IPv4",
        excludeCIDRs: [],
      },
    );
    assert.deepEqual(p.lines, ["-A -t 10.0.0.1:80 -s mh -b flag-2"]);
  });
});

describe("ipset", () => {
  const SAVE_SETS =
    `create KUBE-CLUSTER-IP hash:ip,port family inet hashsize 1024 maxelem 65536 bucketsize 12 initval 0xdc820dd3
add KUBE-CLUSTER-IP 10.0.0.1,tcp:80
add KUBE-CLUSTER-IP 10.0.0.2,tcp:80
create KUBE-NODE-PORT-TCP bitmap:port range 0-65535
add KUBE-NODE-PORT-TCP 3001
create OTHER hash:ip family inet
add OTHER 1.1.1.1 comment "x"
`;
  it("parses ipset save", () => {
    const m = parseIpsetSave(SAVE_SETS);
    assert.deepEqual([...m.get("KUBE-CLUSTER-IP")!.entries], ["10.0.0.1,tcp:80", "10.0.0.2,tcp:80"]);
    assert.equal(m.get("KUBE-NODE-PORT-TCP")!.type, "bitmap:port");
    assert.deepEqual([...m.get("OTHER")!.entries], ["1.1.1.1"]);
  });

  it("creates missing sets, adds before deletes, leaves other sets alone", () => {
    const desired = new Map([["KUBE-CLUSTER-IP", ["10.0.0.1,tcp:80", "10.0.0.3,udp:53"]], [
      "KUBE-NODE-PORT-TCP",
      [],
    ]]);
    const text = planIpsetRestore(desired, parseIpsetSave(SAVE_SETS), "IPv4");
    const lines = text.trim().split("\n");
    assert.ok(
      lines.includes("create KUBE-LOOP-BACK hash:ip,port,ip family inet hashsize 1024 maxelem 65536"),
    );
    assert.ok(lines.includes("create KUBE-HEALTH-CHECK-NODE-PORT bitmap:port range 0-65535"));
    assert.ok(!lines.some((l) => l.startsWith("create KUBE-CLUSTER-IP") || l.includes("OTHER")));
    assert.deepEqual(lines.filter((l) => !l.startsWith("create")), [
      "add KUBE-CLUSTER-IP 10.0.0.3,udp:53",
      "del KUBE-CLUSTER-IP 10.0.0.2,tcp:80",
      "del KUBE-NODE-PORT-TCP 3001",
    ]);
  });

  it("IPv6 uses the KUBE-6- names and inet6", () => {
    const text = planIpsetRestore(new Map([["KUBE-CLUSTER-IP", ["fd00::1,tcp:80"]]]), new Map(), "IPv6");
    assert.match(text, /^create KUBE-6-CLUSTER-IP hash:ip,port family inet6 hashsize 1024 maxelem 65536$/m);
    assert.match(text, /^add KUBE-6-CLUSTER-IP fd00::1,tcp:80$/m);
  });
});

describe("host setup", () => {
  it("sysctls as upstream's NewProxier: conntrack, expire_*, ip_forward; conn_reuse_mode before 5.9; strict ARP", () => {
    const cfg = (strictARP: boolean) => ({ ipvs: { strictARP } }) as Parameters<typeof ipvsSysctls>[0];
    assert.deepEqual(ipvsSysctls(cfg(false), parseKernelVersion("6.1.0-13-amd64")), [
      ["net/ipv4/vs/conntrack", 1],
      ["net/ipv4/vs/expire_nodest_conn", 1],
      ["net/ipv4/vs/expire_quiescent_template", 1],
      ["net/ipv4/ip_forward", 1],
    ]);
    assert.deepEqual(ipvsSysctls(cfg(true), parseKernelVersion("5.4.0")).map(([n]) => n), [
      "net/ipv4/vs/conntrack",
      "net/ipv4/vs/conn_reuse_mode",
      "net/ipv4/vs/expire_nodest_conn",
      "net/ipv4/vs/expire_quiescent_template",
      "net/ipv4/ip_forward",
      "net/ipv4/conf/all/arp_ignore",
      "net/ipv4/conf/all/arp_announce",
    ]);
  });

  it("--ipvs-exclude-cidrs split by family (upstream filterCIDRs)", () => {
    assert.deepEqual(excludeCIDRsOf("IPv4", ["10.0.0.0/8", "fd00::/64"]), ["10.0.0.0/8"]);
    assert.deepEqual(excludeCIDRsOf("IPv6", ["10.0.0.0/8", "fd00::/64"]), ["fd00::/64"]);
  });

  it("parses ip -o addr show", () => {
    const text = `1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: kube-ipvs0    inet 10.0.0.1/32 scope global kube-ipvs0\\       valid_lft forever preferred_lft forever
3: eth0@if9    inet6 fd00::2/64 scope global \\       valid_lft forever preferred_lft forever
`;
    assert.deepEqual(parseIpAddrLines(text), [["lo", "127.0.0.1"], ["kube-ipvs0", "10.0.0.1"], [
      "eth0",
      "fd00::2",
    ]]);
  });
});
