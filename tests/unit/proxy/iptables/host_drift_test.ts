import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  checkDrift,
  checkDriftCheap,
  compareSavedToExpectation,
  type DriftExpectation,
  expectationFromState,
  isJumpRuleLine,
  SavedRuleCounts,
} from "../../../../lib/proxy/iptables/drift.ts";
import { DriftTracker } from "../../../support/owned_rules.ts";
import { expectationMismatches } from "../../../support/drift_expectation.ts";
import { FakeProxier, makeEndpoint, makeServicePort, TEST_NODE_NAME } from "../../../support/tracer.ts";
import { IPTABLES_JUMP_RULES, jumpRuleLine } from "../../../../lib/proxy/iptables/jump_rules_table.ts";
import { parseIptablesSave } from "../../../../lib/proxy/iptables/save_parse.ts";
import type { ExecResult, IptablesRunner } from "../../../../lib/proxy/iptables/runner.ts";
import { execLinesVia, saveLinesVia, streamLines } from "../../../support/iptables_lines.ts";

const PAYLOAD_FULL = [
  "*filter",
  ":KUBE-SERVICES - [0:0]",
  ":KUBE-FORWARD - [0:0]",
  "-A KUBE-FORWARD -j ACCEPT",
  "COMMIT",
  "*nat",
  ":KUBE-SERVICES - [0:0]",
  ":KUBE-MARK-MASQ - [0:0]",
  ":KUBE-SVC-A - [0:0]",
  ":KUBE-SEP-A1 - [0:0]",
  ":KUBE-SEP-OLD - [0:0]",
  "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000",
  "-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp --dport 80 -j KUBE-SVC-A",
  "-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS",
  "-A KUBE-SVC-A -j KUBE-SEP-A1",
  "-A KUBE-SEP-A1 -s 10.244.0.2/32 -j KUBE-MARK-MASQ",
  "-A KUBE-SEP-A1 -p tcp -j DNAT --to-destination 10.244.0.2:80",
  "-X KUBE-SEP-OLD",
  "COMMIT",
  "",
].join("\n");

const NAT_JUMPS = IPTABLES_JUMP_RULES.filter((r) => r.table === "nat");

/** What iptables-save would print for PAYLOAD_FULL plus the nat jump rules. */
function savedOK(): string {
  return [
    "*nat",
    ":PREROUTING ACCEPT [0:0]",
    ":OUTPUT ACCEPT [0:0]",
    ":POSTROUTING ACCEPT [0:0]",
    ":KUBE-SERVICES - [0:0]",
    ":KUBE-MARK-MASQ - [0:0]",
    ":KUBE-SVC-A - [0:0]",
    ":KUBE-SEP-A1 - [0:0]",
    ...NAT_JUMPS.map(jumpRuleLine),
    "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000",
    "-A KUBE-SERVICES -d 10.96.0.1/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-A",
    "-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS",
    "-A KUBE-SVC-A -j KUBE-SEP-A1",
    "-A KUBE-SEP-A1 -s 10.244.0.2/32 -j KUBE-MARK-MASQ",
    "-A KUBE-SEP-A1 -p tcp -m tcp -j DNAT --to-destination 10.244.0.2:80",
    "COMMIT",
    "*filter",
    ":KUBE-SERVICES - [0:0]",
    ":KUBE-FORWARD - [0:0]",
    "-A KUBE-FORWARD -j ACCEPT",
    "COMMIT",
  ].join("\n");
}

describe("DriftTracker.recordRestore", () => {
  it("is empty before the first full sync", () => {
    const t = new DriftTracker(NAT_JUMPS);
    t.recordRestore(PAYLOAD_FULL, false);
    assert.equal(t.expectation(), null);
  });
  it("learns rule counts of fixed and per-service chains; deleted chains are not expected", () => {
    const t = new DriftTracker(NAT_JUMPS);
    t.recordRestore(PAYLOAD_FULL, true);
    const e = t.expectation()!;
    assert.deepEqual(Object.fromEntries(e.fixedChains.get("nat")!), {
      "KUBE-SERVICES": 2,
      "KUBE-MARK-MASQ": 1,
    });
    assert.deepEqual(Object.fromEntries(e.fixedChains.get("filter")!), {
      "KUBE-SERVICES": 0,
      "KUBE-FORWARD": 1,
    });
    assert.deepEqual(Object.fromEntries(e.serviceChains), { "KUBE-SVC-A": 1, "KUBE-SEP-A1": 2 });
  });
  it("partial syncs merge; full syncs replace; reset forgets", () => {
    const t = new DriftTracker(NAT_JUMPS);
    t.recordRestore(PAYLOAD_FULL, true);
    t.recordRestore(
      "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-B - [0:0]\n-A KUBE-SVC-B -j RETURN\n-X KUBE-SEP-A1\nCOMMIT\n",
      false,
    );
    const e = t.expectation()!;
    assert.deepEqual(Object.fromEntries(e.serviceChains), { "KUBE-SVC-A": 1, "KUBE-SVC-B": 1 });
    assert.equal(e.fixedChains.get("nat")!.get("KUBE-SERVICES"), 0);
    t.recordRestore("*nat\n:KUBE-SERVICES - [0:0]\nCOMMIT\n", true);
    assert.equal(t.expectation()!.serviceChains.size, 0);
    t.reset();
    assert.equal(t.expectation(), null);
  });
});

describe("compareSavedToExpectation", () => {
  const tracker = new DriftTracker(NAT_JUMPS);
  tracker.recordRestore(PAYLOAD_FULL, true);
  const exp = tracker.expectation()!;
  /** iptables-save text as the full check streams it in. */
  const counted = (text: string) => {
    const saved = new SavedRuleCounts(exp.jumpRules);
    streamLines(text, (l) => saved.line(l));
    return saved;
  };

  it("no drift when the kernel matches (rule text normalised by iptables does not matter)", () => {
    const r = compareSavedToExpectation(counted(savedOK()), exp);
    assert.deepEqual(r.reasons, []);
    assert.equal(r.chainsChecked, 6);
  });
  it("a flushed KUBE-SERVICES", () => {
    const text = savedOK().split("\n").filter((l) => !l.startsWith("-A KUBE-SERVICES")).join("\n");
    assert.deepEqual(compareSavedToExpectation(counted(text), exp).reasons, [
      "nat KUBE-SERVICES has 0 rules, expected 2",
    ]);
  });
  it("a deleted jump rule and a deleted per-service chain", () => {
    const text = savedOK().split("\n").filter((l) =>
      !l.startsWith("-A PREROUTING") && !l.includes("KUBE-SEP-A1 ") && l !== ":KUBE-SEP-A1 - [0:0]"
    ).join("\n");
    assert.deepEqual(compareSavedToExpectation(counted(text), exp).reasons, [
      "nat PREROUTING lacks the jump to KUBE-SERVICES",
      "nat KUBE-SEP-A1 is missing",
    ]);
  });
  it("everything wiped; reasons capped", () => {
    const r = compareSavedToExpectation(
      counted("*nat\n:PREROUTING ACCEPT [0:0]\nCOMMIT\n"),
      exp,
      3,
    );
    assert.equal(r.reasons.length, 3);
  });
});

describe("SavedRuleCounts", () => {
  it("counts rules per chain as lines stream in, a chain whose name extends the previous one's included", () => {
    const saved = new SavedRuleCounts([]);
    for (
      const l of [
        "*nat",
        ":A - [0:0]",
        ":AB - [0:0]",
        ":E - [0:0]",
        "-A A -j X",
        "-A AB -j Y",
        "-A AB",
        "-A A",
        "COMMIT",
      ]
    ) saved.line(l);
    assert.deepEqual([saved.count("nat", "A"), saved.count("nat", "AB"), saved.count("nat", "E")], [2, 2, 0]);
    assert.equal(saved.count("nat", "MISSING"), -1);
    assert.equal(saved.count("filter", "A"), -1);
  });
});

describe("isJumpRuleLine", () => {
  it("matches iptables -S / iptables-save rendering of each jump rule, not other rules", () => {
    for (const rule of IPTABLES_JUMP_RULES) {
      assert.ok(isJumpRuleLine(jumpRuleLine(rule), rule), jumpRuleLine(rule));
      assert.ok(!isJumpRuleLine(`-A ${rule.fromChain} -j ${rule.toChain}-X`, rule));
    }
    const withNew = IPTABLES_JUMP_RULES.find((r) => r.extraArgs.length > 0)!;
    assert.ok(
      !isJumpRuleLine(
        `-A ${withNew.fromChain} -m comment --comment "${withNew.comment}" -j ${withNew.toChain}`,
        withNew,
      ),
    );
  });
});

/** Answers `iptables -S <chain> -t <table>` and iptables-save from a saved ruleset; records argv. */
function fakeRunner(saveText: string): IptablesRunner & { calls: string[][] } {
  const saved = parseIptablesSave(saveText);
  const calls: string[][] = [];
  return {
    family: "IPv4",
    version: { parts: [1, 8, 9], text: "1.8.9", backend: "nf_tables" },
    versionNote: "",
    features: { hasCheck: true, hasRandomFully: true, waitFlags: ["-w", "5"], restoreWaitFlags: [] },
    binaries: { iptables: "/x/iptables", save: "/x/iptables-save", restore: "/x/iptables-restore" },
    calls,
    restore: () => Promise.reject(new Error("unused")),
    save,
    saveLines: saveLinesVia(save),
    execLines: execLinesVia(exec),
    exec,
  };
  /** `iptables-save -t <table>`: that table's section only. */
  function save(table: string): Promise<string> {
    calls.push(["save", table]);
    const lines = saveText.split("\n");
    const start = lines.indexOf(`*${table}`);
    if (start < 0) return Promise.resolve("");
    return Promise.resolve(lines.slice(start, lines.indexOf("COMMIT", start) + 1).join("\n") + "\n");
  }
  function exec(args: readonly string[]): Promise<ExecResult> {
    calls.push([...args]);
    assert.deepEqual(args.slice(0, 3), ["-w", "5", "-S"]);
    const chain = args[3];
    const table = args[5];
    const c = saved.get(table)?.chains.get(chain);
    if (c === undefined) {
      return Promise.resolve({
        code: 1,
        stdout: "",
        stderr: "iptables: No chain/target/match by that name.\n",
      });
    }
    return Promise.resolve({ code: 0, stdout: [`-N ${chain}`, ...c.rules, ""].join("\n"), stderr: "" });
  }
}

describe("checkDriftCheap (fake iptables -S)", () => {
  const tracker = new DriftTracker(NAT_JUMPS);
  tracker.recordRestore(PAYLOAD_FULL, true);
  const exp: DriftExpectation = tracker.expectation()!;

  it("lists built-in chains, fixed chains and the sample, one -S each", async () => {
    const runner = fakeRunner(savedOK());
    const r = await checkDriftCheap(runner, exp, [["KUBE-SEP-A1", 2]]);
    assert.deepEqual(r.reasons, []);
    assert.equal(r.drifted, false);
    // 3 nat built-ins (PREROUTING, OUTPUT, POSTROUTING) + 4 fixed chains + 1 sampled.
    assert.equal(r.commands, 8);
    assert.deepEqual(runner.calls.map((c) => `${c[5]} ${c[3]}`).slice(0, 3), [
      "nat OUTPUT",
      "nat PREROUTING",
      "nat POSTROUTING",
    ]);
  });
  it("reports a flushed chain precisely", async () => {
    const text = savedOK().split("\n").filter((l) => !l.startsWith("-A KUBE-SERVICES")).join("\n");
    const r = await checkDriftCheap(fakeRunner(text), exp, []);
    assert.deepEqual(r.reasons, ["nat KUBE-SERVICES has 0 rules, expected 2"]);
    assert.equal(r.drifted, true);
  });
  it("the tracker rotates the sample over per-service chains", async () => {
    const runner = fakeRunner(savedOK());
    const sampled: string[] = [];
    for (let i = 0; i < 3; i++) {
      const before = runner.calls.length;
      await tracker.check(runner, { sampleSize: 1 });
      sampled.push(runner.calls[runner.calls.length - 1][3]);
      assert.equal(runner.calls.length - before, 3 + 4 + 1);
    }
    assert.deepEqual(sampled, ["KUBE-SEP-A1", "KUBE-SVC-A", "KUBE-SEP-A1"]);
  });
});

/** A FakeProxier with Services that give every kind of own chain (SVC, SVL, EXT, FW, SEP). */
function proxierWithServices(): FakeProxier {
  const p = new FakeProxier();
  const plain = makeServicePort("ns1", "plain", { clusterIP: "172.30.0.1", portNumber: 80 });
  p.setService(plain).setEndpoints(plain, [makeEndpoint("10.180.0.1", 80), makeEndpoint("10.180.0.2", 80)]);
  const local = makeServicePort("ns1", "local", {
    clusterIP: "172.30.0.2",
    portNumber: 80,
    nodePort: 30001,
    loadBalancerVIPs: ["1.2.3.4"],
    loadBalancerSourceRanges: ["203.0.113.0/25"],
    externalPolicyLocal: true,
    internalPolicyLocal: true,
    stickyMaxAgeSeconds: 10800,
  });
  p.setService(local).setEndpoints(local, [
    makeEndpoint("10.180.0.3", 80, { nodeName: TEST_NODE_NAME }),
    makeEndpoint("10.180.0.4", 80, { nodeName: "other-node" }),
  ]);
  const none = makeServicePort("ns2", "no-endpoints", { clusterIP: "172.30.0.3", portNumber: 53 });
  p.setService(none);
  return p;
}

describe("expectationFromState (derived from the render state, nothing copied)", () => {
  it("is what a full sync and then an upstream partial sync left in the kernel", () => {
    const p = proxierWithServices();
    const first = p.sync();
    assert.equal(first.error, null);
    const exp = expectationFromState(first.result.state, NAT_JUMPS);
    assert.deepEqual(expectationMismatches(exp, p.ipt), []);
    assert.deepEqual([...exp.fixedChains.keys()], ["filter", "nat"]);
    assert.deepEqual([...exp.fixedChains.get("nat")!.keys()], [
      "KUBE-SERVICES",
      "KUBE-NODEPORTS",
      "KUBE-POSTROUTING",
      "KUBE-MARK-MASQ",
    ]);
    const kinds = new Set([...exp.serviceChains].map(([c]) => c.slice(0, 8)));
    assert.deepEqual([...kinds].sort(), ["KUBE-EXT", "KUBE-FW-", "KUBE-SEP", "KUBE-SVC", "KUBE-SVL"]);
    // An upstream partial sync (no state handed in) that removes an endpoint and deletes a Service.
    const plain = [...p.services.values()].find((svc) => svc.name.name === "plain")!;
    p.setEndpoints(plain, [makeEndpoint("10.180.0.1", 80)]);
    p.deleteService("ns1", "local");
    const second = p.sync();
    assert.equal(second.error, null);
    assert.equal(second.result.mode, "partial");
    assert.deepEqual(expectationMismatches(expectationFromState(second.result.state, NAT_JUMPS), p.ipt), []);
  });

  it("samples every per-service chain once per rotation, wrapping around", () => {
    const p = proxierWithServices();
    const exp = expectationFromState(p.sync().result.state, NAT_JUMPS);
    const all = [...exp.serviceChains];
    assert.ok(all.length >= 8, `${all.length} chains`);
    assert.equal(exp.serviceChains.size, all.length);
    let cursor = 0;
    const seen: (readonly [string, number])[] = [];
    for (let i = 0; i < all.length; i++) {
      const s = exp.serviceChains.sample(cursor, 3);
      assert.equal(s.chains.length, 3);
      seen.push(...s.chains);
      cursor = s.cursor;
    }
    // 3 × size chains: the whole order three times over, whatever the starting points were.
    assert.deepEqual(seen, [...all, ...all, ...all]);
    assert.deepEqual(exp.serviceChains.sample(all.length + 1, 2).chains, all.slice(1, 3));
    assert.deepEqual(exp.serviceChains.sample(5, all.length + 10).chains, [
      ...all.slice(5),
      ...all.slice(0, 5),
    ]);
    assert.deepEqual(exp.serviceChains.sample(2, 0), { chains: [], cursor: 0 });
  });

  it("drives the cheap and full checks: clean, then a KUBE-SEP chain short of a rule", async () => {
    const p = proxierWithServices();
    const exp = expectationFromState(p.sync().result.state, NAT_JUMPS);
    const sep = [...exp.serviceChains].find(([c]) => c.startsWith("KUBE-SEP-"))![0];
    for (const mode of ["cheap", "full"] as const) {
      const ok = await checkDrift(fakeRunner(p.ipt.save()), exp, 0, { mode, sampleSize: 1000 });
      assert.deepEqual(ok.report.reasons, [], mode);
    }
    const edited = p.ipt.save().split("\n");
    edited.splice(edited.findIndex((l) => l.startsWith(`-A ${sep} `)), 1);
    for (const mode of ["cheap", "full"] as const) {
      const r = await checkDrift(fakeRunner(edited.join("\n")), exp, 0, { mode, sampleSize: 1000 });
      assert.deepEqual(r.report.reasons, [`nat ${sep} has 1 rules, expected 2`], mode);
    }
  });
});
