/**
 * The batched base-rule setup (`ensureBaseRulesBatched`: one `-S` per built-in chain, one
 * iptables-restore) and chunked restores against the real kernel: same end state as the sequential
 * ensureJumpRules + ensureCanary, idempotent, never flushes populated chains (ours or kubelet's), puts a
 * deleted jump back in front; nf_tables, legacy and IPv6. Needs root and `ip netns`; skipped otherwise.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { type Netns, NetnsScope, netnsUnavailableReason } from "../support/netns.ts";
import {
  createIptablesRunner,
  type ExecResult,
  type IptablesRunner,
  RestoreError,
  type RestorePayload,
} from "../../lib/proxy/iptables/runner.ts";
import {
  DEFAULT_ENSURED_JUMP_RULES,
  ensureBaseRulesBatched,
  ensureJumpRules,
} from "../../lib/proxy/iptables/jump_rules.ts";
import { canaryState, ensureCanary } from "../../lib/proxy/iptables/canary.ts";
import { jumpRuleLine } from "../../lib/proxy/iptables/jump_rules_table.ts";
import { parseIptablesSave } from "../../lib/proxy/iptables/save_parse.ts";

const skip = netnsUnavailableReason();
if (skip !== "") console.log(`SKIP tests/e2e/iptables_base_rules_test.ts: ${skip} (needs root and ip netns)`);

/** Counts the processes a runner starts. */
function counting(runner: IptablesRunner): IptablesRunner & { execs: string[]; restores: number } {
  const c = {
    execs: [] as string[],
    restores: 0,
    family: runner.family,
    version: runner.version,
    versionNote: runner.versionNote,
    features: runner.features,
    binaries: runner.binaries,
    save: (t: "nat" | "filter" | "mangle") => runner.save(t),
    saveLines: (t: "nat" | "filter" | "mangle", onLine: (l: string) => void) => runner.saveLines(t, onLine),
    exec(args: readonly string[]): Promise<ExecResult> {
      c.execs.push(args.join(" "));
      return runner.exec(args);
    },
    execLines(args: readonly string[], onLine: (l: string) => void): Promise<ExecResult> {
      c.execs.push(args.join(" "));
      return runner.execLines(args, onLine);
    },
    restore(p: RestorePayload): Promise<void> {
      c.restores++;
      return runner.restore(p);
    },
  };
  return c;
}

async function builtinAndOurChains(runner: IptablesRunner): Promise<string> {
  const out: string[] = [];
  for (const table of ["filter", "nat", "mangle"] as const) {
    const t = parseIptablesSave(await runner.save(table)).get(table)!;
    for (const [name, c] of [...t.chains].sort(([a], [b]) => (a < b ? -1 : 1))) {
      out.push(`${table} ${name}: ${c.rules.join(" | ")}`);
    }
  }
  return out.join("\n");
}

async function assertJumpRulesOnce(runner: IptablesRunner): Promise<void> {
  for (const table of ["nat", "filter"] as const) {
    const t = parseIptablesSave(await runner.save(table)).get(table)!;
    for (const rule of DEFAULT_ENSURED_JUMP_RULES.filter((r) => r.table === table)) {
      const copies = t.chains.get(rule.fromChain)!.rules.filter((l) => l === jumpRuleLine(rule));
      assert.equal(copies.length, 1, `${runner.family} ${table} ${jumpRuleLine(rule)}`);
    }
  }
}

function checks(label: string, binaries?: { iptables: string; save: string; restore: string }) {
  const env = new NetnsScope(label);
  let ns: Netns;
  let other: Netns;
  let runner: IptablesRunner;
  before(async () => {
    ns = await env.create("a");
    other = await env.create("b");
    runner = await createIptablesRunner({ family: "IPv4", commandPrefix: ns.prefix, binaries });
  });
  after(() => env.cleanup());

  it("first start: same end state as the sequential -N/-C/-I, in 6 + 8 reads and one restore", async () => {
    const c = counting(runner);
    const r = await ensureBaseRulesBatched(c);
    assert.equal(r.rulesInserted.length, DEFAULT_ENSURED_JUMP_RULES.length);
    assert.ok(r.chainsCreated.includes("filter/KUBE-FIREWALL"));
    assert.equal(c.execs.length, 6 + 8);
    assert.equal(c.restores, 1);
    const seq = await createIptablesRunner({ family: "IPv4", commandPrefix: other.prefix, binaries });
    await ensureJumpRules(seq);
    await ensureCanary(seq);
    assert.equal(await builtinAndOurChains(runner), await builtinAndOurChains(seq));
    assert.deepEqual((await canaryState(runner)).missing, []);
  });

  it("idempotent: a second call changes nothing and costs 6 reads and one restore", async () => {
    const before = await builtinAndOurChains(runner);
    const c = counting(runner);
    assert.deepEqual(await ensureBaseRulesBatched(c), { chainsCreated: [], rulesInserted: [] });
    assert.equal(c.execs.length, 6);
    assert.equal(c.restores, 1);
    assert.equal(await builtinAndOurChains(runner), before);
    await assertJumpRulesOnce(runner);
  });

  it("populated chains are not flushed; a deleted jump comes back in front of a foreign rule", async () => {
    await runner.restore([
      "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-0000000000000000 - [0:0]\n",
      "-A KUBE-SVC-0000000000000000 -j RETURN\n-A KUBE-SERVICES -d 10.96.0.1/32 -j KUBE-SVC-0000000000000000\n",
      "COMMIT\n",
    ]);
    await runner.exec(["-w", "5", "-t", "filter", "-A", "KUBE-FIREWALL", "-d", "127.0.0.0/8", "-j", "DROP"]);
    await ns.execOk(
      [
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
      ].map((a, i) => i === 0 && binaries ? binaries.iptables : a),
    );
    await ns.execOk([binaries?.iptables ?? "iptables", "-t", "nat", "-A", "PREROUTING", "-j", "RETURN"]);
    const r = await ensureBaseRulesBatched(runner);
    assert.deepEqual(r.chainsCreated, []);
    assert.deepEqual(r.rulesInserted.map((x) => `${x.table} ${x.fromChain} ${x.toChain}`), [
      "nat PREROUTING KUBE-SERVICES",
    ]);
    const nat = parseIptablesSave(await runner.save("nat")).get("nat")!;
    assert.deepEqual(nat.chains.get("KUBE-SERVICES")!.rules, [
      "-A KUBE-SERVICES -d 10.96.0.1/32 -j KUBE-SVC-0000000000000000",
    ]);
    assert.match(nat.chains.get("PREROUTING")!.rules[0], /-j KUBE-SERVICES$/);
    assert.equal(nat.chains.get("PREROUTING")!.rules.at(-1), "-A PREROUTING -j RETURN");
    const filter = parseIptablesSave(await runner.save("filter")).get("filter")!;
    assert.deepEqual(filter.chains.get("KUBE-FIREWALL")!.rules, ["-A KUBE-FIREWALL -d 127.0.0.0/8 -j DROP"]);
    await assertJumpRulesOnce(runner);
  });

  it("a chunked restore is streamed; a failure names the line across chunks", async () => {
    const chunks: string[] = ["*nat\n"];
    for (let i = 0; i < 300; i++) chunks.push(`:KUBE-SEP-${String(i).padStart(16, "0")} - [0:0]\n`);
    chunks.push("COMMIT\n");
    await runner.restore(chunks);
    const nat = parseIptablesSave(await runner.save("nat")).get("nat")!;
    assert.ok(nat.chains.has(`KUBE-SEP-${"299".padStart(16, "0")}`));
    const bad = ["*nat\n:KUBE-X - [0:0]\n", "-A KUBE-X -p tcp --dport 99999 -j RETURN\n", "COMMIT\n"];
    const e = await runner.restore(bad).then(() => null, (err) => err);
    assert.ok(e instanceof RestoreError, String(e));
    assert.equal(e.line, 3);
    assert.equal(e.lineText, "-A KUBE-X -p tcp --dport 99999 -j RETURN");
  });
}

describe(
  "iptables e2e: batched base rules (nf_tables or the system default)",
  { skip: skip || undefined },
  () => {
    checks("ibr");
  },
);

describe("iptables e2e: batched base rules (legacy)", { skip: skip || undefined }, () => {
  checks("ibl", {
    iptables: "iptables-legacy",
    save: "iptables-legacy-save",
    restore: "iptables-legacy-restore",
  });
});

describe("iptables e2e: batched base rules (IPv6)", { skip: skip || undefined }, () => {
  const env = new NetnsScope("ib6");
  let runner: IptablesRunner;
  before(async () => {
    const ns = await env.create("a");
    runner = await createIptablesRunner({ family: "IPv6", commandPrefix: ns.prefix });
  });
  after(() => env.cleanup());

  it("ip6tables: created once, idempotent", async () => {
    await ensureBaseRulesBatched(runner);
    assert.deepEqual(await ensureBaseRulesBatched(runner), { chainsCreated: [], rulesInserted: [] });
    await assertJumpRulesOnce(runner);
    assert.deepEqual((await canaryState(runner)).missing, []);
  });
});
