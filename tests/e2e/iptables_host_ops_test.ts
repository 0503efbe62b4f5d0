/**
 * Host-side iptables operations against the real kernel, each family of checks in its own namespace:
 * jump rules (idempotent), canary, drift detection, --cleanup (twice; foreign chains and kubelet's
 * KUBE-FIREWALL survive), and the same on iptables-legacy. Needs root and `ip netns`; skipped otherwise.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { type Netns, NetnsScope, netnsUnavailableReason } from "../support/netns.ts";
import { createIptablesRunner, type IptablesRunner } from "../../lib/proxy/iptables/runner.ts";
import { DEFAULT_ENSURED_JUMP_RULES, ensureJumpRules } from "../../lib/proxy/iptables/jump_rules.ts";
import { canaryFlushed, canaryState, deleteCanary, ensureCanary } from "../../lib/proxy/iptables/canary.ts";
import { DriftTracker } from "../support/owned_rules.ts";
import { cleanupAllFamilies, cleanupLeftovers } from "../../lib/proxy/iptables/cleanup.ts";
import { jumpRuleLine } from "../../lib/proxy/iptables/jump_rules_table.ts";
import { payloadOf, restorePlanned, splitRestorePayload } from "../../lib/proxy/iptables/restore_plan.ts";
import { kubeChainNames, parseIptablesSave } from "../../lib/proxy/iptables/save_parse.ts";

const skip = netnsUnavailableReason();
if (skip !== "") console.log(`SKIP tests/e2e/iptables_host_ops_test.ts: ${skip} (needs root and ip netns)`);

/** A small kube-proxy-shaped payload: `n` Services with 2 endpoints, one NodePort, one stale chain. */
function payload(n: number, stale: string[] = []): string {
  const L = [
    "*filter",
    ":KUBE-SERVICES - [0:0]",
    ":KUBE-EXTERNAL-SERVICES - [0:0]",
    ":KUBE-FORWARD - [0:0]",
    ":KUBE-NODEPORTS - [0:0]",
    ":KUBE-PROXY-FIREWALL - [0:0]",
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT',
    "COMMIT",
    "*nat",
    ":KUBE-SERVICES - [0:0]",
    ":KUBE-NODEPORTS - [0:0]",
    ":KUBE-POSTROUTING - [0:0]",
    ":KUBE-MARK-MASQ - [0:0]",
  ];
  const name = (p: string, i: number) => `${p}${String(i).padStart(16, "0")}`;
  for (let i = 0; i < n; i++) {
    L.push(
      `:${name("KUBE-SVC-", i)} - [0:0]`,
      `:${name("KUBE-SEP-", 2 * i)} - [0:0]`,
      `:${name("KUBE-SEP-", 2 * i + 1)} - [0:0]`,
    );
  }
  L.push(`:${name("KUBE-EXT-", 0)} - [0:0]`);
  for (const s of stale) L.push(`:${s} - [0:0]`);
  L.push("-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN");
  L.push("-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000");
  L.push("-A KUBE-POSTROUTING -j MASQUERADE");
  L.push("-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000");
  for (let i = 0; i < n; i++) {
    L.push(
      `-A KUBE-SERVICES -d 10.96.${i >> 8}.${i & 255}/32 -p tcp -m tcp --dport 80 -j ${name("KUBE-SVC-", i)}`,
    );
  }
  L.push(`-A KUBE-NODEPORTS -p tcp -m tcp --dport 30000 -j ${name("KUBE-EXT-", 0)}`);
  L.push("-A KUBE-SERVICES -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS");
  L.push(
    `-A ${name("KUBE-EXT-", 0)} -j KUBE-MARK-MASQ`,
    `-A ${name("KUBE-EXT-", 0)} -j ${name("KUBE-SVC-", 0)}`,
  );
  for (let i = 0; i < n; i++) {
    L.push(
      `-A ${name("KUBE-SVC-", i)} -m statistic --mode random --probability 0.5000000000 -j ${
        name("KUBE-SEP-", 2 * i)
      }`,
    );
    L.push(`-A ${name("KUBE-SVC-", i)} -j ${name("KUBE-SEP-", 2 * i + 1)}`);
    for (const e of [2 * i, 2 * i + 1]) {
      L.push(`-A ${name("KUBE-SEP-", e)} -s 10.244.${e >> 8}.${e & 255}/32 -j KUBE-MARK-MASQ`);
      L.push(
        `-A ${name("KUBE-SEP-", e)} -p tcp -m tcp -j DNAT --to-destination 10.244.${e >> 8}.${e & 255}:8080`,
      );
    }
  }
  for (const s of stale) L.push(`-X ${s}`);
  L.push("COMMIT", "");
  return L.join("\n");
}

async function saved(runner: IptablesRunner, table: "nat" | "filter" | "mangle") {
  return parseIptablesSave(await runner.save(table)).get(table)!;
}

/** Every jump rule present exactly once, in the right chain. */
async function assertJumpRulesOnce(runner: IptablesRunner): Promise<void> {
  for (const table of ["nat", "filter"] as const) {
    const t = await saved(runner, table);
    for (const rule of DEFAULT_ENSURED_JUMP_RULES.filter((r) => r.table === table)) {
      const copies = t.chains.get(rule.fromChain)!.rules.filter((l) => l === jumpRuleLine(rule));
      assert.equal(copies.length, 1, `${table} ${jumpRuleLine(rule)}`);
    }
  }
}

describe(
  "iptables e2e: host operations (nf_tables or the system default)",
  { skip: skip || undefined },
  () => {
    const env = new NetnsScope("ipo");
    let ns: Netns;
    let runner: IptablesRunner;
    before(async () => {
      ns = await env.create("node");
      runner = await createIptablesRunner({ family: "IPv4", commandPrefix: ns.prefix });
    });
    after(() => env.cleanup());

    it("ensureJumpRules creates target chains and rules once; a second call changes nothing", async () => {
      const first = await ensureJumpRules(runner);
      assert.equal(first.rulesInserted.length, DEFAULT_ENSURED_JUMP_RULES.length);
      assert.ok(first.chainsCreated.includes("nat/KUBE-SERVICES"));
      assert.ok(first.chainsCreated.includes("filter/KUBE-FIREWALL"));
      const second = await ensureJumpRules(runner);
      assert.deepEqual(second, { chainsCreated: [], rulesInserted: [] });
      await assertJumpRulesOnce(runner);
    });

    it("ensureJumpRules puts a deleted rule back (prepended) after a chain was flushed by someone", async () => {
      await ns.execOk(["iptables", "-t", "nat", "-A", "PREROUTING", "-j", "RETURN"]);
      await ns.execOk([
        "iptables",
        "-t",
        "nat",
        "-D",
        "PREROUTING",
        "-m",
        "comment",
        "--comment",
        "kubernetes service portals",
        "-j",
        "KUBE-SERVICES",
      ]);
      const r = await ensureJumpRules(runner);
      assert.deepEqual(r.rulesInserted.map((x) => `${x.table} ${x.fromChain} ${x.toChain}`), [
        "nat PREROUTING KUBE-SERVICES",
      ]);
      const pre = (await saved(runner, "nat")).chains.get("PREROUTING")!.rules;
      assert.match(pre[0], /-j KUBE-SERVICES$/, "inserted before the foreign RETURN");
      await ns.execOk(["iptables", "-t", "nat", "-D", "PREROUTING", "-j", "RETURN"]);
    });

    it("canary: created in mangle, nat and filter; a deleted canary is noticed", async () => {
      await ensureCanary(runner);
      assert.deepEqual(await canaryState(runner), { present: ["mangle", "nat", "filter"], missing: [] });
      assert.equal(await canaryFlushed(runner), false);
      await ns.execOk(["iptables", "-t", "mangle", "-X", "KUBE-PROXY-CANARY"]);
      assert.equal(await canaryFlushed(runner), true);
      assert.deepEqual((await canaryState(runner)).missing, ["mangle"]);
      await ensureCanary(runner);
      assert.equal(await canaryFlushed(runner), false);
    });

    it("drift: clean after a sync; detects a flushed KUBE-SERVICES and a deleted jump rule (cheap and full)", async () => {
      const text = payload(20);
      const plan = await restorePlanned(runner, text);
      assert.ok(plan !== null && plan.transactions.length > 2);
      const tracker = new DriftTracker();
      tracker.recordRestore(text, true);
      for (const mode of ["cheap", "full"] as const) {
        const ok = await tracker.check(runner, { mode, sampleSize: 100 });
        assert.deepEqual(ok?.reasons, [], mode);
      }
      await ns.execOk(["iptables", "-t", "nat", "-F", "KUBE-SERVICES"]);
      for (const mode of ["cheap", "full"] as const) {
        const r = await tracker.check(runner, { mode });
        assert.equal(r?.drifted, true);
        assert.deepEqual(r?.reasons, ["nat KUBE-SERVICES has 0 rules, expected 21"], mode);
      }
      await runner.restore(text);
      await ns.execOk([
        "iptables",
        "-t",
        "filter",
        "-D",
        "FORWARD",
        "-m",
        "comment",
        "--comment",
        "kubernetes forwarding rules",
        "-j",
        "KUBE-FORWARD",
      ]);
      for (const mode of ["cheap", "full"] as const) {
        const r = await tracker.check(runner, { mode });
        assert.deepEqual(r?.reasons, ["filter FORWARD lacks the jump to KUBE-FORWARD"], mode);
      }
      await ensureJumpRules(runner);
      await ns.execOk(["iptables", "-t", "nat", "-F", "KUBE-SEP-0000000000000007"]);
      const full = await tracker.check(runner, { mode: "full" });
      assert.deepEqual(full?.reasons, ["nat KUBE-SEP-0000000000000007 has 0 rules, expected 2"]);
      await runner.restore(text);
      assert.equal((await tracker.check(runner, { mode: "cheap", sampleSize: 100 }))?.drifted, false);
    });

    it("cleanup removes everything we own, twice in a row; foreign chains and KUBE-FIREWALL survive", async () => {
      await runner.restore(payload(30, ["KUBE-SVC-STALE00000000000"]));
      await ensureJumpRules(runner);
      await ensureCanary(runner);
      // kubelet's chains and a foreign chain with a rule.
      await ns.execOk([
        "iptables",
        "-t",
        "filter",
        "-A",
        "KUBE-FIREWALL",
        "-d",
        "127.0.0.0/8",
        "!",
        "-s",
        "127.0.0.0/8",
        "-j",
        "DROP",
      ]);
      await ns.execOk(["iptables", "-t", "mangle", "-N", "KUBE-KUBELET-CANARY"]);
      await ns.execOk(["iptables", "-t", "nat", "-N", "FOREIGN-CHAIN"]);
      await ns.execOk(["iptables", "-t", "nat", "-A", "FOREIGN-CHAIN", "-p", "udp", "-j", "RETURN"]);
      await ns.execOk(["iptables", "-t", "nat", "-A", "PREROUTING", "-j", "FOREIGN-CHAIN"]);
      // An older kube-proxy's variant of a jump rule (no comment): must go too, or the chain could not.
      await ns.execOk(["iptables", "-t", "nat", "-A", "OUTPUT", "-j", "KUBE-SERVICES"]);

      const r1 = await cleanupLeftovers(runner);
      assert.deepEqual(r1.errors, []);
      assert.deepEqual(r1.kept, []);
      assert.ok(r1.chainsRemoved.includes("nat/KUBE-MARK-MASQ"));
      assert.ok(r1.chainsRemoved.includes("filter/KUBE-PROXY-FIREWALL"));
      assert.ok(r1.chainsRemoved.includes("mangle/KUBE-PROXY-CANARY"));
      assert.equal(r1.jumpRulesRemoved, 12 + 1);
      assert.equal(r1.chainsRemoved.filter((c) => c.startsWith("nat/KUBE-SEP-")).length, 60);

      const r2 = await cleanupLeftovers(runner);
      assert.deepEqual({ ...r2, family: "" }, {
        family: "",
        skipped: "",
        jumpRulesRemoved: 0,
        chainsRemoved: [],
        kept: [],
        errors: [],
      });

      const nat = await saved(runner, "nat");
      const filter = await saved(runner, "filter");
      const mangle = await saved(runner, "mangle");
      assert.deepEqual(kubeChainNames(nat), []);
      assert.deepEqual(kubeChainNames(filter), ["KUBE-FIREWALL"]);
      assert.deepEqual(kubeChainNames(mangle), ["KUBE-KUBELET-CANARY"]);
      assert.deepEqual(nat.chains.get("FOREIGN-CHAIN")!.rules, ["-A FOREIGN-CHAIN -p udp -j RETURN"]);
      assert.deepEqual(nat.chains.get("PREROUTING")!.rules, ["-A PREROUTING -j FOREIGN-CHAIN"]);
      assert.deepEqual(nat.chains.get("OUTPUT")!.rules, []);
      assert.deepEqual(filter.chains.get("INPUT")!.rules, ["-A INPUT -j KUBE-FIREWALL"]);
      assert.deepEqual(filter.chains.get("OUTPUT")!.rules, ["-A OUTPUT -j KUBE-FIREWALL"]);
      assert.equal(filter.chains.get("KUBE-FIREWALL")!.rules.length, 1);
    });

    it("cleanup keeps (and reports) a chain of ours that a foreign chain still jumps to", async () => {
      await runner.restore(payload(2));
      await ns.execOk([
        "iptables",
        "-t",
        "nat",
        "-A",
        "FOREIGN-CHAIN",
        "-s",
        "192.0.2.0/24",
        "-j",
        "KUBE-MARK-MASQ",
      ]);
      const r = await cleanupLeftovers(runner);
      assert.deepEqual(r.errors, []);
      assert.deepEqual(r.kept, ["nat/KUBE-MARK-MASQ: still referenced by nat/FOREIGN-CHAIN"]);
      assert.deepEqual(kubeChainNames(await saved(runner, "nat")), ["KUBE-MARK-MASQ"]);
      await ns.execOk(["iptables", "-t", "nat", "-F", "FOREIGN-CHAIN"]);
      const again = await cleanupLeftovers(runner);
      assert.deepEqual(again.chainsRemoved, ["nat/KUBE-MARK-MASQ"]);
    });

    it("cleanupAllFamilies cleans IPv6 too when ip6tables works, and is idempotent", async () => {
      const make = (family: "IPv4" | "IPv6") => createIptablesRunner({ family, commandPrefix: ns.prefix });
      const v6 = await make("IPv6");
      await ensureJumpRules(v6);
      await ensureCanary(v6);
      const reports = await cleanupAllFamilies(make);
      assert.deepEqual(reports.map((r) => [r.family, r.skipped, r.errors]), [["IPv4", "", []], [
        "IPv6",
        "",
        [],
      ]]);
      assert.ok(reports[1].chainsRemoved.includes("nat/KUBE-SERVICES"));
      assert.deepEqual(kubeChainNames(await saved(v6, "filter")), ["KUBE-FIREWALL"]);
      assert.deepEqual(kubeChainNames(await saved(v6, "nat")), []);
      const again = await cleanupAllFamilies(make);
      assert.deepEqual(again.map((r) => [r.chainsRemoved.length, r.errors.length]), [[0, 0], [0, 0]]);
      await deleteCanary(v6);
    });
  },
);

describe("iptables e2e: iptables-legacy", { skip: skip || undefined }, () => {
  const env = new NetnsScope("ipl");
  let runner: IptablesRunner;
  before(async () => {
    const ns = await env.create("node");
    runner = await createIptablesRunner({
      family: "IPv4",
      commandPrefix: ns.prefix,
      binaries: {
        iptables: "iptables-legacy",
        save: "iptables-legacy-save",
        restore: "iptables-legacy-restore",
      },
    });
  });
  after(() => env.cleanup());

  it("detects the legacy backend; plan, jump rules, drift and cleanup work there too", async () => {
    assert.equal(runner.version.backend, "legacy");
    const text = payload(10, []);
    const plan = splitRestorePayload(text, { backend: runner.version.backend });
    assert.deepEqual(plan.transactions.map((t) => t.step), ["single", "single"]);
    await runner.restore(payloadOf(plan));
    await ensureJumpRules(runner);
    await ensureJumpRules(runner);
    await assertJumpRulesOnce(runner);
    const tracker = new DriftTracker();
    tracker.recordRestore(text, true);
    assert.deepEqual((await tracker.check(runner))?.reasons, []);
    const r1 = await cleanupLeftovers(runner);
    assert.deepEqual(r1.errors, []);
    const r2 = await cleanupLeftovers(runner);
    assert.deepEqual([r2.chainsRemoved, r2.errors, r2.jumpRulesRemoved], [[], [], 0]);
    assert.deepEqual(kubeChainNames(await saved(runner, "nat")), []);
  });
});
