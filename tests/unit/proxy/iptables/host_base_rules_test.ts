import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  builtinChainKeys,
  DEFAULT_ENSURED_JUMP_RULES,
  ensureBaseRulesBatched,
  listedRuleMatches,
  planBaseRules,
  targetsToProbe,
} from "../../../../lib/proxy/iptables/jump_rules.ts";
import { IPTABLES_JUMP_RULES, jumpRuleLine } from "../../../../lib/proxy/iptables/jump_rules_table.ts";
import type { ExecResult, IptablesRunner, RestorePayload } from "../../../../lib/proxy/iptables/runner.ts";

const CANARY_TABLES = ["mangle", "nat", "filter"] as const;

/**
 * In-memory iptables for `-S CHAIN [1]` and `iptables-restore --noflush` of `*t`, `:C`, `-I C …`, `COMMIT`
 * lines. Rules are kept in `-S` form ("-A C …"). A declaration of a chain that holds rules is recorded in
 * `flushedNonEmpty` (the thing the batched setup must never do).
 */
function fakeKernel(initial: Record<string, string[]> = {}) {
  const chains = new Map<string, string[]>();
  for (
    const t of [
      "filter/INPUT",
      "filter/FORWARD",
      "filter/OUTPUT",
      "nat/PREROUTING",
      "nat/OUTPUT",
      "nat/POSTROUTING",
    ]
  ) {
    chains.set(t, []);
  }
  for (const [k, v] of Object.entries(initial)) chains.set(k, [...v]);
  const calls: string[] = [];
  const flushedNonEmpty: string[] = [];
  const runner: IptablesRunner = {
    family: "IPv4",
    version: { parts: [1, 8, 9], text: "1.8.9", backend: "nf_tables" },
    versionNote: "",
    features: { hasCheck: true, hasRandomFully: true, waitFlags: ["-w", "5"], restoreWaitFlags: [] },
    binaries: { iptables: "/x/iptables", save: "/x/iptables-save", restore: "/x/iptables-restore" },
    save: () => Promise.reject(new Error("unused")),
    saveLines: () => Promise.reject(new Error("unused")),
    execLines: () => Promise.reject(new Error("unused")),
    exec(args: readonly string[]): Promise<ExecResult> {
      calls.push(args.join(" "));
      // As iptables parses it: "-S CHAIN [RULENUM]" anywhere, "-t TABLE" anywhere.
      const a = args.slice(2);
      const s = a.indexOf("-S");
      const t = a.indexOf("-t");
      assert.ok(s >= 0 && t >= 0, args.join(" "));
      const chain = a[s + 1];
      const table = a[t + 1];
      const rulenum = s + 2 < a.length && !a[s + 2].startsWith("-") ? a[s + 2] : null;
      const rest = rulenum === null ? [] : [rulenum];
      const rules = chains.get(`${table}/${chain}`);
      if (rules === undefined) {
        return Promise.resolve({ code: 1, stdout: "", stderr: "No chain/target/match" });
      }
      const shown = rest[0] === "1" ? rules.slice(0, 1) : rules;
      const head = rest[0] === "1" ? [] : [`-N ${chain}`];
      return Promise.resolve({ code: 0, stdout: [...head, ...shown, ""].join("\n"), stderr: "" });
    },
    restore(payload: RestorePayload): Promise<void> {
      calls.push("restore");
      const text = typeof payload === "string" ? payload : [...payload].join("");
      let table = "";
      const next = new Map([...chains].map(([k, v]) => [k, [...v]]));
      for (const line of text.split("\n")) {
        if (line === "" || line === "COMMIT") continue;
        if (line.startsWith("*")) table = line.slice(1);
        else if (line.startsWith(":")) {
          const key = `${table}/${line.slice(1).split(" ")[0]}`;
          if ((next.get(key) ?? []).length > 0) flushedNonEmpty.push(key);
          next.set(key, []);
        } else if (line.startsWith("-I ")) {
          const chain = line.split(" ")[1];
          const key = `${table}/${chain}`;
          const target = line.slice(line.lastIndexOf(" -j ") + 4);
          if (!next.has(key)) return Promise.reject(new Error(`line ${line}: no chain ${key}`));
          if (!next.has(`${table}/${target}`)) return Promise.reject(new Error(`jump to missing ${target}`));
          next.get(key)!.unshift(`-A ${line.slice(3)}`);
        } else return Promise.reject(new Error(`unexpected line ${line}`));
      }
      for (const [k, v] of next) chains.set(k, v);
      return Promise.resolve();
    },
  };
  return { runner, chains, calls, flushedNonEmpty };
}

describe("planBaseRules", () => {
  const emptyListings = new Map(builtinChainKeys(DEFAULT_ENSURED_JUMP_RULES).map((k) => [k, ""]));

  it("first start: creates every target chain once, prepends every rule, canary in three tables", () => {
    const plan = planBaseRules({
      rules: DEFAULT_ENSURED_JUMP_RULES,
      listings: emptyListings,
      existingChains: new Set(),
      canary: "KUBE-PROXY-CANARY",
      canaryTables: CANARY_TABLES,
    });
    const lines = plan.payload.split("\n");
    assert.deepEqual(lines.filter((l) => l.startsWith("*")), ["*filter", "*nat", "*mangle"]);
    assert.equal(lines.filter((l) => l === "COMMIT").length, 3);
    assert.deepEqual(plan.chainsCreated, [
      "filter/KUBE-EXTERNAL-SERVICES",
      "filter/KUBE-NODEPORTS",
      "filter/KUBE-SERVICES",
      "filter/KUBE-FORWARD",
      "filter/KUBE-PROXY-FIREWALL",
      "nat/KUBE-SERVICES",
      "nat/KUBE-POSTROUTING",
      "filter/KUBE-FIREWALL",
    ]);
    assert.equal(plan.rulesInserted.length, DEFAULT_ENSURED_JUMP_RULES.length);
    assert.equal(lines.filter((l) => l.startsWith("-I ")).length, DEFAULT_ENSURED_JUMP_RULES.length);
    assert.equal(lines.filter((l) => l === ":KUBE-PROXY-CANARY - [0:0]").length, 3);
    // Declarations come before the rules that jump to them, within each table.
    const filter = lines.slice(0, lines.indexOf("COMMIT"));
    const lastDecl = filter.findLastIndex((l) => l.startsWith(":KUBE-") && !l.includes("CANARY"));
    assert.ok(lastDecl < filter.findIndex((l) => l.startsWith("-I ")));
  });

  it("steady state: nothing but the (empty) canary chains", () => {
    const listings = new Map<string, string>();
    for (const k of builtinChainKeys(DEFAULT_ENSURED_JUMP_RULES)) {
      const [table, chain] = k.split("/");
      const own = DEFAULT_ENSURED_JUMP_RULES.filter((r) => r.table === table && r.fromChain === chain);
      listings.set(k, [`-P ${chain} ACCEPT`, ...own.map(jumpRuleLine), `-A ${chain} -j ACCEPT`].join("\n"));
    }
    assert.deepEqual(targetsToProbe(DEFAULT_ENSURED_JUMP_RULES, listings), []);
    const plan = planBaseRules({
      rules: DEFAULT_ENSURED_JUMP_RULES,
      listings,
      existingChains: new Set(),
      canary: "KUBE-PROXY-CANARY",
      canaryTables: CANARY_TABLES,
    });
    assert.deepEqual(plan.chainsCreated, []);
    assert.deepEqual(plan.rulesInserted, []);
    assert.doesNotMatch(plan.payload, /^:KUBE-(?!PROXY-CANARY)/m);
    assert.equal(planBaseRules({ ...inputOf(listings), canary: null }).payload, "");
  });

  it("a chain that exists but is not jumped to is probed and never declared", () => {
    const listings = new Map(emptyListings);
    assert.ok(targetsToProbe(DEFAULT_ENSURED_JUMP_RULES, listings).includes("nat/KUBE-SERVICES"));
    const plan = planBaseRules({ ...inputOf(listings), existingChains: new Set(["nat/KUBE-SERVICES"]) });
    assert.doesNotMatch(plan.payload, /^\*nat\n(?:.*\n)*?:KUBE-SERVICES /m);
    assert.ok(!plan.chainsCreated.includes("nat/KUBE-SERVICES"));
    assert.ok(plan.chainsCreated.includes("filter/KUBE-SERVICES"));
  });

  it("matches listed rules tolerantly but not a different target, chain or comment", () => {
    const rule = IPTABLES_JUMP_RULES[0];
    assert.ok(listedRuleMatches(jumpRuleLine(rule), rule));
    assert.ok(!listedRuleMatches(jumpRuleLine(rule).replace("KUBE-EXTERNAL-SERVICES", "KUBE-X"), rule));
    assert.ok(!listedRuleMatches(jumpRuleLine(rule).replace("-A INPUT", "-A OUTPUT"), rule));
    assert.ok(!listedRuleMatches(jumpRuleLine({ ...rule, comment: "other" }), rule));
    assert.ok(!listedRuleMatches(jumpRuleLine({ ...rule, extraArgs: [] }), rule));
    const kubelet = {
      table: "filter" as const,
      fromChain: "INPUT",
      toChain: "KUBE-FIREWALL",
      extraArgs: [],
      comment: "",
    };
    assert.ok(listedRuleMatches("-A INPUT -j KUBE-FIREWALL", kubelet));
    assert.ok(!listedRuleMatches('-A INPUT -m comment --comment "x" -j KUBE-FIREWALL', kubelet));
  });

  it("throws when a built-in chain was not listed", () => {
    assert.throws(() => planBaseRules({ ...inputOf(new Map()) }), /no listing of filter\/INPUT/);
  });

  function inputOf(listings: Map<string, string>) {
    return {
      rules: DEFAULT_ENSURED_JUMP_RULES,
      listings,
      existingChains: new Set<string>(),
      canary: "KUBE-PROXY-CANARY",
      canaryTables: CANARY_TABLES,
    };
  }
});

describe("ensureBaseRulesBatched", () => {
  it("first start: 6 reads, 8 probes, one restore; then idempotent with 6 reads and one restore", async () => {
    const k = fakeKernel();
    const r1 = await ensureBaseRulesBatched(k.runner);
    assert.equal(r1.rulesInserted.length, DEFAULT_ENSURED_JUMP_RULES.length);
    assert.equal(k.calls.filter((c) => c === "restore").length, 1);
    assert.equal(k.calls.filter((c) => / -S \S+ 1 -t /.test(c)).length, 8);
    assert.equal(k.calls.length, 6 + 8 + 1);
    // Upstream order: the last prepended rule is first (as sequential -I would leave it).
    assert.deepEqual(k.chains.get("nat/PREROUTING"), [
      '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    ]);
    assert.deepEqual(k.chains.get("filter/INPUT")!.map((l) => l.split(" -j ")[1]), [
      "KUBE-FIREWALL",
      "KUBE-PROXY-FIREWALL",
      "KUBE-NODEPORTS",
      "KUBE-EXTERNAL-SERVICES",
    ]);
    for (const t of CANARY_TABLES) assert.deepEqual(k.chains.get(`${t}/KUBE-PROXY-CANARY`), []);

    k.calls.length = 0;
    const before = JSON.stringify([...k.chains]);
    const r2 = await ensureBaseRulesBatched(k.runner);
    assert.deepEqual(r2, { chainsCreated: [], rulesInserted: [] });
    assert.equal(JSON.stringify([...k.chains]), before);
    assert.equal(k.calls.length, 6 + 1);
    assert.deepEqual(k.flushedNonEmpty, []);
  });

  it("existing populated chains (ours and kubelet's) are not flushed; only missing jumps are added", async () => {
    const k = fakeKernel({
      "nat/KUBE-SERVICES": ["-A KUBE-SERVICES -d 10.0.0.1/32 -j KUBE-SVC-X"],
      "nat/KUBE-SVC-X": [],
      "filter/KUBE-FIREWALL": ["-A KUBE-FIREWALL -d 127.0.0.0/8 -j DROP"],
      "filter/INPUT": ["-A INPUT -j KUBE-FIREWALL", "-A INPUT -j ACCEPT"],
    });
    const r = await ensureBaseRulesBatched(k.runner);
    assert.deepEqual(k.flushedNonEmpty, []);
    assert.ok(!r.chainsCreated.includes("nat/KUBE-SERVICES"));
    assert.ok(!r.chainsCreated.includes("filter/KUBE-FIREWALL"));
    assert.deepEqual(k.chains.get("nat/KUBE-SERVICES"), ["-A KUBE-SERVICES -d 10.0.0.1/32 -j KUBE-SVC-X"]);
    // The kubelet jump that was there is kept once, the foreign ACCEPT stays last.
    const input = k.chains.get("filter/INPUT")!;
    assert.equal(input.filter((l) => l === "-A INPUT -j KUBE-FIREWALL").length, 1);
    assert.equal(input.at(-1), "-A INPUT -j ACCEPT");
  });

  it("a failed read is an error naming the chain; nothing is written", async () => {
    const k = fakeKernel();
    const exec = k.runner.exec.bind(k.runner);
    k.runner.exec = (args) =>
      args.includes("POSTROUTING")
        ? Promise.resolve({ code: 4, stdout: "", stderr: "resource busy" })
        : exec(args);
    await assert.rejects(ensureBaseRulesBatched(k.runner), /nat\/POSTROUTING.*exit 4: resource busy/);
    assert.ok(!k.calls.includes("restore"));
  });
});
