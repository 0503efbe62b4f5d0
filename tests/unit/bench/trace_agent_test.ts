/**
 * The pure parts of bench/trace_agent.ts: strace's execve lines (also split by another process), klog
 * times, `nft monitor` generation lines, and the first-sync timeline built from them.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  firstSyncTimeline,
  formatTimeline,
  klogEpochSeconds,
  parseGenerationLine,
  parseStraceExecs,
} from "../../../bench/trace_agent.ts";

test("parseStraceExecs reads whole and interrupted (unfinished … resumed) execve calls", () => {
  const text = [
    `100 1000.000000 execve("/bin/edgeproxy", ["edgeproxy", "--v=4"], 0x1 /* 3 vars */) = 0`,
    `101 1001.000000 execve("/usr/sbin/iptables-save", ["iptables-save", "-t", "nat"], 0x2 /* 3 vars */) = 0`,
    `102 1001.100000 execve("/usr/sbin/iptables-restore", ["iptables-restore", "--noflush"], 0x3 /* 3 vars */ <unfinished ...>`,
    `101 1001.200000 +++ exited with 0 +++`,
    `102 1001.300000 <... execve resumed>) = 0`,
    `103 1001.400000 execve("/bin/missing", ["missing"], 0x4 /* 3 vars */ <unfinished ...>`,
    `103 1001.500000 <... execve resumed>) = -1 ENOENT (No such file or directory)`,
    `102 1004.000000 +++ exited with 0 +++`,
  ].join("\n");
  const cmds = parseStraceExecs(text, 100);
  assert.deepEqual(cmds.map((c) => [c.pid, c.argv, c.start, c.end]), [
    [101, "iptables-save -t nat", 1001, 1001.2],
    [102, "iptables-restore --noflush", 1001.1, 1004],
  ]);
});

test("klogEpochSeconds reads a klog header on the day of the reference time", () => {
  const near = new Date(2026, 10, 25, 11, 47, 0).getTime() / 1000;
  const at = klogEpochSeconds(`I1125 11:47:06.646874    6391 reflector.ts:241] "list services"`, near);
  assert.equal(at, new Date(2026, 10, 25, 11, 47, 6, 646.874).getTime() / 1000);
  assert.equal(klogEpochSeconds("not a klog line", near), null);
  // A line from just before midnight read right after it belongs to the day before.
  const after = new Date(2026, 10, 26, 0, 0, 1).getTime() / 1000;
  const before = klogEpochSeconds(`W1125 23:59:59.000000 1 x.ts:1] "w"`, after)!;
  assert.equal(before, new Date(2026, 10, 25, 23, 59, 59).getTime() / 1000);
});

test("parseGenerationLine keeps only nft monitor's new-generation lines", () => {
  assert.deepEqual(parseGenerationLine("# new generation 12 by process 4177 (iptables-restor)", 5), {
    generation: 12,
    pid: 4177,
    comm: "iptables-restor",
    at: 5,
  });
  assert.equal(parseGenerationLine("add rule ip nat KUBE-SERVICES …", 5), null);
});

test("firstSyncTimeline orders lists, the full sync's commands, commits and the logged sync", () => {
  const t0 = new Date(2026, 10, 25, 12, 0, 0).getTime() / 1000;
  const klog = (s: number, msg: string) => {
    const d = new Date((t0 + s) * 1000);
    const p = (n: number, w = 2) => String(n).padStart(w, "0");
    return `I1125 ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${
      p(d.getMilliseconds() * 1000, 6)
    }    1 reflector.ts:241] "${msg}"`;
  };
  const rows = firstSyncTimeline({
    t0,
    log: [
      klog(0.1, "list nodes: 1 objects in 1 page(s), 1 changes, resourceVersion 5"),
      klog(2, "list services: 10 objects in 1 page(s), 10 changes, resourceVersion 5"),
      klog(2.5, "list endpointslices: 10 objects in 1 page(s), 10 changes, resourceVersion 5"),
      klog(2.6, "list services: 10 objects in 1 page(s), 0 changes, resourceVersion 6"),
      klog(9, "full sync of IPv4 rules took 6000ms (100 bytes)"),
    ],
    commands: [
      // Before the lists: leftovers cleanup, not part of the sync.
      { pid: 10, argv: "iptables-restore --noflush", start: t0 + 0.05, end: t0 + 0.06 },
      { pid: 11, argv: "iptables-save -t nat", start: t0 + 3, end: t0 + 3.1 },
      { pid: 12, argv: "iptables-restore -w 5 --noflush", start: t0 + 3.5, end: t0 + 8 },
      { pid: 13, argv: "iptables-restore -w 5 --noflush", start: t0 + 8.5, end: t0 + 8.6 },
    ],
    generations: [
      { generation: 7, pid: 12, comm: "iptables-restor", at: t0 + 4 },
      { generation: 9, pid: 99, comm: "other", at: t0 + 5 },
      { generation: 8, pid: 12, comm: "iptables-restor", at: t0 + 7.9 },
    ],
    firstRuleAt: t0 + 4.1,
    allRulesAt: t0 + 8.1,
  });
  assert.deepEqual(rows.map((r) => [r.ms, r.event]), [
    [0, "agent exec"],
    [100, "list nodes stored (1 objects, 1 pages)"],
    [2000, "list services stored (10 objects, 1 pages)"],
    [2500, "list endpointslices stored (10 objects, 1 pages)"],
    [3000, "full sync starts (iptables-save -t nat: stale chains)"],
    [3500, "model + render + split done: iptables-restore spawned"],
    [4000, "transaction 1/2 committed (generation 7; arrival at nft monitor)"],
    [4100, "first nat transaction seen (poll: KUBE-MARK-MASQ has its rule)"],
    [7900, "transaction 2/2 committed (generation 8; arrival at nft monitor)"],
    [8000, "the full sync's iptables-restore exited (its last transaction committed)"],
    [8100, "every KUBE-SERVICES rule seen (poll)"],
    [8600, "iptables-restore exited (its last transaction committed)"],
    [9000, 'agent logs "full sync of IPv4 rules took 6000ms"'],
  ]);
  assert.match(formatTimeline(rows), /\n +3500 +500 {2}model \+ render \+ split done/);
});
