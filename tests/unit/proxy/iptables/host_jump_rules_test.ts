import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  DEFAULT_ENSURED_JUMP_RULES,
  deleteJumpRule,
  ensureJumpRules,
} from "../../../../lib/proxy/iptables/jump_rules.ts";
import { IPTABLES_JUMP_RULES, jumpRuleArgs } from "../../../../lib/proxy/iptables/jump_rules_table.ts";
import { splitRuleWords } from "../../../../lib/proxy/iptables/cleanup.ts";
import type { ExecResult, IptablesRunner } from "../../../../lib/proxy/iptables/runner.ts";

/**
 * A tiny in-memory `iptables` for -N, -C, -I, -D with upstream's argv layout
 * (`<wait flags> <op> <chain> -t <table> <rule…>`); exit codes as iptables: 1 = exists / no such rule.
 */
function fakeIptables(): IptablesRunner & {
  calls: string[];
  rules: Map<string, string[]>;
  chains: Set<string>;
} {
  const chains = new Set([
    "nat/PREROUTING",
    "nat/OUTPUT",
    "nat/POSTROUTING",
    "filter/INPUT",
    "filter/FORWARD",
    "filter/OUTPUT",
  ]);
  const rules = new Map<string, string[]>();
  const calls: string[] = [];
  const ok = (stdout = ""): Promise<ExecResult> => Promise.resolve({ code: 0, stdout, stderr: "" });
  const fail = (code: number, stderr: string): Promise<ExecResult> =>
    Promise.resolve({ code, stdout: "", stderr });
  return {
    family: "IPv4",
    version: { parts: [1, 8, 9], text: "1.8.9", backend: "nf_tables" },
    versionNote: "",
    features: {
      hasCheck: true,
      hasRandomFully: true,
      waitFlags: ["-w", "5", "-W", "100000"],
      restoreWaitFlags: [],
    },
    binaries: { iptables: "/x/iptables", save: "/x/iptables-save", restore: "/x/iptables-restore" },
    calls,
    rules,
    chains,
    restore: () => Promise.reject(new Error("unused")),
    save: () => Promise.reject(new Error("unused")),
    saveLines: () => Promise.reject(new Error("unused")),
    execLines: () => Promise.reject(new Error("unused")),
    exec(args: readonly string[]): Promise<ExecResult> {
      calls.push(args.join(" "));
      assert.deepEqual(args.slice(0, 4), ["-w", "5", "-W", "100000"]);
      const [op, chain, t, table, ...rest] = args.slice(4);
      assert.equal(t, "-t");
      const key = `${table}/${chain}`;
      const spec = rest.join("\u0000");
      const list = rules.get(key) ?? [];
      const target = rest[rest.indexOf("-j") + 1];
      switch (op) {
        case "-N":
          if (chains.has(key)) return fail(1, "iptables: Chain already exists.");
          chains.add(key);
          return ok();
        case "-C":
          if (rest.includes("-j") && !chains.has(`${table}/${target}`)) {
            return fail(2, `Chain '${target}' does not exist`);
          }
          return list.includes(spec)
            ? ok()
            : fail(1, "iptables: Bad rule (does a matching rule exist in that chain?).");
        case "-I":
          rules.set(key, [spec, ...list]);
          return ok();
        case "-D": {
          const i = list.indexOf(spec);
          if (i === -1) return fail(1, "iptables: Bad rule (does a matching rule exist in that chain?).");
          rules.set(key, list.filter((_, k) => k !== i));
          return ok();
        }
      }
      return fail(2, `unsupported ${op}`);
    },
  };
}

describe("ensureJumpRules (fake iptables)", () => {
  it("creates target chains, then -C and -I each rule, with wait flags and upstream's argv order", async () => {
    const ipt = fakeIptables();
    const r = await ensureJumpRules(ipt);
    assert.equal(r.rulesInserted.length, DEFAULT_ENSURED_JUMP_RULES.length);
    assert.deepEqual(r.chainsCreated, [
      "filter/KUBE-EXTERNAL-SERVICES",
      "filter/KUBE-NODEPORTS",
      "filter/KUBE-SERVICES",
      "filter/KUBE-FORWARD",
      "filter/KUBE-PROXY-FIREWALL",
      "nat/KUBE-SERVICES",
      "nat/KUBE-POSTROUTING",
      "filter/KUBE-FIREWALL",
    ]);
    assert.deepEqual(ipt.calls.slice(0, 3), [
      "-w 5 -W 100000 -N KUBE-EXTERNAL-SERVICES -t filter",
      "-w 5 -W 100000 -C INPUT -t filter -m conntrack --ctstate NEW -m comment --comment kubernetes externally-visible service portals -j KUBE-EXTERNAL-SERVICES",
      "-w 5 -W 100000 -I INPUT -t filter -m conntrack --ctstate NEW -m comment --comment kubernetes externally-visible service portals -j KUBE-EXTERNAL-SERVICES",
    ]);
    // Prepend: the last rule ensured for a chain ends up first, as with upstream's EnsureRule(Prepend).
    assert.deepEqual(ipt.rules.get("filter/INPUT")!.map((s) => s.split("\u0000").pop()), [
      "KUBE-FIREWALL",
      "KUBE-PROXY-FIREWALL",
      "KUBE-NODEPORTS",
      "KUBE-EXTERNAL-SERVICES",
    ]);
  });

  it("is idempotent: the second call only checks", async () => {
    const ipt = fakeIptables();
    await ensureJumpRules(ipt);
    const before = ipt.calls.length;
    assert.deepEqual(await ensureJumpRules(ipt), { chainsCreated: [], rulesInserted: [] });
    const second = ipt.calls.slice(before);
    assert.ok(second.every((c) => / -[NC] /.test(c)), second.join("\n"));
  });

  it("fails loudly when iptables fails for another reason than 'exists'", async () => {
    const ipt = fakeIptables();
    ipt.exec = () =>
      Promise.resolve({ code: 4, stdout: "", stderr: "iptables: Resource temporarily unavailable.\n" });
    await assert.rejects(
      ensureJumpRules(ipt),
      /creating chain filter\/KUBE-EXTERNAL-SERVICES .*exit 4: iptables: Resource temporarily unavailable\./,
    );
  });
});

describe("deleteJumpRule (fake iptables)", () => {
  it("removes every copy, and nothing is fine (also when the target chain is gone)", async () => {
    const ipt = fakeIptables();
    const rule = IPTABLES_JUMP_RULES.find((r) => r.table === "nat" && r.fromChain === "PREROUTING")!;
    ipt.chains.add("nat/KUBE-SERVICES");
    const spec = jumpRuleArgs(rule).join("\u0000");
    ipt.rules.set("nat/PREROUTING", [spec, "-j\u0000RETURN", spec]);
    assert.equal(await deleteJumpRule(ipt, rule), 2);
    assert.deepEqual(ipt.rules.get("nat/PREROUTING"), ["-j\u0000RETURN"]);
    assert.equal(await deleteJumpRule(ipt, rule), 0);
    ipt.chains.delete("nat/KUBE-SERVICES");
    assert.equal(await deleteJumpRule(ipt, rule), 0);
  });
});

describe("splitRuleWords", () => {
  it("turns an iptables-save rule line into argv words", () => {
    assert.deepEqual(
      splitRuleWords(
        '-A INPUT -m conntrack --ctstate NEW -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
      ),
      [
        "-A",
        "INPUT",
        "-m",
        "conntrack",
        "--ctstate",
        "NEW",
        "-m",
        "comment",
        "--comment",
        "kubernetes service portals",
        "-j",
        "KUBE-SERVICES",
      ],
    );
    assert.deepEqual(splitRuleWords('-A X -m comment --comment "say \\"hi\\"" -j Y'), [
      "-A",
      "X",
      "-m",
      "comment",
      "--comment",
      'say "hi"',
      "-j",
      "Y",
    ]);
    assert.deepEqual(splitRuleWords('-A X --comment ""  -j Y'), ["-A", "X", "--comment", "", "-j", "Y"]);
  });
});
