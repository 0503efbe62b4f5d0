import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  payloadChunksOf,
  payloadOf,
  type RestorePlan,
  restorePlanned,
  singleTransactionPlan,
  splitRestorePayload,
} from "../../../../lib/proxy/iptables/restore_plan.ts";
import {
  parseRestorePayload,
  ruleTarget,
  UnplannablePayloadError,
} from "../../../../lib/proxy/iptables/restore_content.ts";
import { type SimulatedTables, simulatePlan } from "../../../support/restore_simulation.ts";

/** Shape of one synthetic Service in a sync. */
interface SynthService {
  /** Service index (names derive from it). */
  i: number;
  /** Endpoint generation: changing it renames the SEP chains (old ones become stale). */
  gen: number;
  endpoints: number;
  /** Has a KUBE-EXT chain (NodePort) and, when `fw`, a KUBE-FW chain (LB source ranges). */
  ext: boolean;
  fw: boolean;
}

const id16 = (prefix: string, n: number) => `${prefix}${n.toString(36).toUpperCase().padStart(16, "0")}`;
const svcChain = (s: SynthService) => id16("KUBE-SVC-", s.i);
const extChain = (s: SynthService) => id16("KUBE-EXT-", s.i);
const fwChain = (s: SynthService) => id16("KUBE-FW-", s.i);
const sepChain = (s: SynthService, e: number) => id16("KUBE-SEP-", s.i * 1000 + s.gen * 100 + e);

/** Chain names a Service owns. */
function chainsOf(s: SynthService): string[] {
  const out = [svcChain(s)];
  for (let e = 0; e < s.endpoints; e++) out.push(sepChain(s, e));
  if (s.ext) out.push(extChain(s));
  if (s.fw) out.push(fwChain(s));
  return out;
}

/**
 * A kube-proxy-shaped payload in upstream's single-transaction layout. `written` are the Services whose
 * chains are (re)written (all of `all` on a full sync); KUBE-SERVICES always lists all of `all`.
 */
function synthPayload(all: SynthService[], written: SynthService[], stale: string[]): string {
  const L: string[] = ["*filter"];
  for (
    const c of [
      "KUBE-SERVICES",
      "KUBE-EXTERNAL-SERVICES",
      "KUBE-FORWARD",
      "KUBE-NODEPORTS",
      "KUBE-PROXY-FIREWALL",
    ]
  ) {
    L.push(`:${c} - [0:0]`);
  }
  L.push("-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP");
  L.push(
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT',
  );
  L.push("COMMIT", "*nat");
  for (const c of ["KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ"]) {
    L.push(`:${c} - [0:0]`);
  }
  for (const s of written) for (const c of chainsOf(s)) L.push(`:${c} - [0:0]`);
  for (const c of stale) L.push(`:${c} - [0:0]`);
  L.push("-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN");
  L.push("-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000");
  L.push(
    '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
  );
  L.push("-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000");
  for (const s of all) {
    const ip = `10.96.${s.i >> 8}.${s.i & 255}`;
    L.push(
      `-A KUBE-SERVICES -m comment --comment "ns/s${s.i}:p cluster IP" -m tcp -p tcp -d ${ip} --dport 80 -j ${
        svcChain(s)
      }`,
    );
    if (s.fw) {
      L.push(
        `-A KUBE-SERVICES -m comment --comment "ns/s${s.i}:p loadbalancer IP" -m tcp -p tcp -d 203.0.113.${
          s.i & 255
        } --dport 80 -j ${fwChain(s)}`,
      );
    }
    if (s.ext) {
      L.push(
        `-A KUBE-NODEPORTS -m comment --comment "ns/s${s.i}:p" -m tcp -p tcp --dport ${30000 + s.i} -j ${
          extChain(s)
        }`,
      );
    }
  }
  L.push(
    '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS',
  );
  for (const s of written) {
    const svc = svcChain(s);
    L.push(`-A ${svc} -m comment --comment "ns/s${s.i}:p cluster IP" ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ`);
    for (let e = 0; e < s.endpoints; e++) {
      const left = s.endpoints - e;
      const prob = left > 1 ? ` -m statistic --mode random --probability ${(1 / left).toFixed(10)}` : "";
      L.push(`-A ${svc} -m comment --comment "ns/s${s.i}:p -> ep${e}"${prob} -j ${sepChain(s, e)}`);
    }
    for (let e = 0; e < s.endpoints; e++) {
      const sep = sepChain(s, e);
      L.push(`-A ${sep} -m comment --comment "ns/s${s.i}:p" -s 10.244.${e}.${s.i & 255} -j KUBE-MARK-MASQ`);
      L.push(
        `-A ${sep} -m comment --comment "ns/s${s.i}:p" -m tcp -p tcp -j DNAT --to-destination 10.244.${e}.${
          s.i & 255
        }:8080`,
      );
    }
    if (s.ext) {
      L.push(
        `-A ${
          extChain(s)
        } -m comment --comment "masquerade traffic for ns/s${s.i}:p external destinations" -j KUBE-MARK-MASQ`,
      );
      L.push(`-A ${extChain(s)} -j ${svc}`);
    }
    if (s.fw) {
      L.push(
        `-A ${fwChain(s)} -m comment --comment "ns/s${s.i}:p loadbalancer IP" -s 198.51.100.0/24 -j ${
          extChain(s)
        }`,
      );
    }
  }
  for (const c of stale) L.push(`-X ${c}`);
  L.push("COMMIT", "");
  return L.join("\n");
}

function services(from: number, to: number, endpoints = 3, gen = 0): SynthService[] {
  const out: SynthService[] = [];
  for (let i = from; i < to; i++) out.push({ i, gen, endpoints, ext: i % 3 === 0, fw: i % 6 === 0 });
  return out;
}

/** Built-in chains only, as in a fresh namespace (plus the jump rules, which reference our chains). */
function freshKernel(): SimulatedTables {
  return new Map([
    ["filter", new Map([["INPUT", []], ["FORWARD", []], ["OUTPUT", []]])],
    [
      "nat",
      new Map<string, string[]>([
        ["PREROUTING", []],
        ["INPUT", []],
        ["OUTPUT", []],
        ["POSTROUTING", []],
      ]),
    ],
  ]);
}

/** Applies a payload as upstream would (one transaction per table) and returns the resulting state. */
function applySingle(payload: string, initial: SimulatedTables): SimulatedTables {
  const r = simulatePlan(singleTransactionPlan(parseRestorePayload(payload)), initial);
  assert.equal(r.failure, null, `single-transaction apply failed: ${JSON.stringify(r.failure)}`);
  return r.state;
}

function assertPlanValid(plan: RestorePlan, initial: SimulatedTables, expected: SimulatedTables): void {
  const r = simulatePlan(plan, initial);
  assert.equal(r.failure, null, `plan failed: ${JSON.stringify(r.failure)}`);
  for (const table of ["filter", "nat"]) {
    const got = Object.fromEntries([...(r.state.get(table) ?? new Map())].sort());
    const want = Object.fromEntries([...(expected.get(table) ?? new Map())].sort());
    assert.deepEqual(got, want, `${table} differs from the single-transaction result`);
  }
}

function steps(plan: RestorePlan): string[] {
  return plan.transactions.map((t) => `${t.table}:${t.step}`);
}

describe("ruleTarget", () => {
  it("takes the last -j/-g word", () => {
    assert.equal(ruleTarget('-A X -m comment --comment "a -j B" -j KUBE-SVC-1'), "KUBE-SVC-1");
    assert.equal(ruleTarget("-A X -p tcp -j DNAT --to-destination 10.0.0.1:80"), "DNAT");
    assert.equal(ruleTarget("-A X -g KUBE-Y"), "KUBE-Y");
    assert.equal(ruleTarget("-A X -p tcp"), null);
  });
});

describe("parseRestorePayload", () => {
  it("reads tables, declared chains with rules, and deleted chains", () => {
    const c = parseRestorePayload("*nat\n:A - [0:0]\n:OLD - [0:0]\n-A A -j RETURN\n-X OLD\nCOMMIT\n");
    assert.deepEqual(c, [{
      table: "nat",
      chains: [{ name: "A", rules: ["-A A -j RETURN"] }],
      deleted: ["OLD"],
    }]);
  });
  it("refuses what it cannot plan", () => {
    assert.throws(() => parseRestorePayload("*nat\n-I PREROUTING -j X\nCOMMIT\n"), UnplannablePayloadError);
    assert.throws(() => parseRestorePayload("*nat\n-A UNDECLARED -j X\nCOMMIT\n"), UnplannablePayloadError);
    assert.throws(() => parseRestorePayload("*nat\n:A - [0:0]\n"), UnplannablePayloadError);
  });
});

describe("splitRestorePayload: make-before-break", () => {
  // Sync 1: services 0..39 from scratch. Sync 2 (full): 0..9 deleted, 10..19 get new endpoints
  // (new SEP chains, old ones stale), 20..39 unchanged, 40..59 new.
  const sync1 = services(0, 40);
  const payload1 = synthPayload(sync1, sync1, []);
  const kernel1 = applySingle(payload1, freshKernel());
  const sync2 = [...services(10, 20, 4, 1), ...services(20, 40), ...services(40, 60)];
  const stale2 = [
    ...services(0, 10).flatMap(chainsOf),
    ...services(10, 20).flatMap(chainsOf).filter((c) => c.startsWith("KUBE-SEP-")),
  ];
  const payload2 = synthPayload(sync2, sync2, stale2);
  const kernel2 = applySingle(payload2, kernel1);

  it("first sync into an empty namespace: every transaction valid, same final state", () => {
    const plan = splitRestorePayload(payload1, { maxChainsPerTransaction: 7 });
    assertPlanValid(plan, freshKernel(), kernel1);
    assert.ok(plan.transactions.length > 10);
  });

  it("full resync with deleted Services, changed endpoints and new Services", () => {
    const plan = splitRestorePayload(payload2, { maxChainsPerTransaction: 9, maxLinesPerTransaction: 40 });
    assertPlanValid(plan, kernel1, kernel2);
    const s = steps(plan);
    const last = (step: string) => s.lastIndexOf(step);
    const first = (step: string) => s.indexOf(step);
    assert.equal(s[0], "filter:table");
    assert.ok(first("nat:nat-base") < first("nat:nat-services"));
    assert.ok(
      last("nat:nat-services") < first("nat:nat-top"),
      "KUBE-SERVICES is rewritten after all targets exist",
    );
    assert.equal(s.filter((x) => x === "nat:nat-top").length, 1);
    assert.ok(
      first("nat:nat-top") < first("nat:stale-flush"),
      "stale chains flushed only after the jumps are gone",
    );
    assert.ok(
      last("nat:stale-flush") < first("nat:stale-delete"),
      "stale chains deleted only once all are empty",
    );
  });

  it("respects the chain bound except for units that cannot be smaller", () => {
    const plan = splitRestorePayload(payload2, { maxChainsPerTransaction: 9 });
    for (const t of plan.transactions) {
      if (t.step === "nat-services" || t.step === "stale-flush") {
        assert.ok(t.chainCount <= 9, `${t.step} has ${t.chainCount}`);
      }
    }
    const top = plan.transactions.find((t) => t.step === "nat-top")!;
    assert.deepEqual(top.lines.filter((l) => l.startsWith(":")), [
      ":KUBE-SERVICES - [0:0]",
      ":KUBE-NODEPORTS - [0:0]",
    ]);
    const base = plan.transactions.find((t) => t.step === "nat-base")!;
    assert.deepEqual(base.lines.filter((l) => l.startsWith(":")), [
      ":KUBE-POSTROUTING - [0:0]",
      ":KUBE-MARK-MASQ - [0:0]",
    ]);
  });

  it("keeps one Service's chains in one transaction when they fit", () => {
    const plan = splitRestorePayload(payload2, { maxChainsPerTransaction: 9 });
    const txOf = new Map<string, number>();
    plan.transactions.forEach((t, i) => {
      if (t.step !== "nat-services") return;
      for (const l of t.lines) if (l.startsWith(":")) txOf.set(l.slice(1, l.indexOf(" ")), i);
    });
    for (const s of sync2) {
      const where = new Set(chainsOf(s).map((c) => txOf.get(c)));
      assert.equal(where.size, 1, `service ${s.i} spread over ${[...where]}`);
    }
  });

  it("splits a Service bigger than the bound leaves first (SEPs before SVC, SVC before EXT before FW)", () => {
    const big: SynthService = { i: 0, gen: 0, endpoints: 20, ext: true, fw: true };
    const payload = synthPayload([big], [big], []);
    const plan = splitRestorePayload(payload, { maxChainsPerTransaction: 5 });
    assertPlanValid(plan, freshKernel(), applySingle(payload, freshKernel()));
    const order = plan.transactions.flatMap((
      t,
    ) => (t.step === "nat-services" ? t.lines.filter((l) => l.startsWith(":")) : []));
    const pos = (c: string) => order.indexOf(`:${c} - [0:0]`);
    assert.ok(pos(sepChain(big, 19)) < pos(svcChain(big)));
    assert.ok(pos(svcChain(big)) < pos(extChain(big)));
    assert.ok(pos(extChain(big)) < pos(fwChain(big)));
    assert.ok(plan.transactions.filter((t) => t.step === "nat-services").length >= 5);
  });

  it("partial sync: unchanged Services' chains are not declared and are left alone", () => {
    const changed = services(20, 25, 2, 2);
    const all = [...changed, ...services(25, 40), ...services(10, 20, 4, 1), ...services(40, 60)];
    const stale = services(20, 25).flatMap(chainsOf).filter((c) => c.startsWith("KUBE-SEP-"));
    const payload = synthPayload(all, changed, stale);
    const plan = splitRestorePayload(payload, { maxChainsPerTransaction: 4 });
    assertPlanValid(plan, kernel2, applySingle(payload, kernel2));
  });

  it("the simulator catches a break-before-make order (the check can fail)", () => {
    const plan = splitRestorePayload(payload2, { maxChainsPerTransaction: 9 });
    const top = plan.transactions.findIndex((t) => t.step === "nat-top");
    const firstServices = plan.transactions.findIndex((t) => t.step === "nat-services");
    const reordered = [...plan.transactions];
    const [t] = reordered.splice(top, 1);
    reordered.splice(firstServices, 0, t);
    const r = simulatePlan({ transactions: reordered }, kernel1);
    assert.notEqual(r.failure, null);
    assert.match(r.failure!.reason, /jump to missing chain KUBE-(SVC|FW)-/);
    const flushFirst = [...plan.transactions];
    const del = flushFirst.findIndex((x) => x.step === "stale-delete");
    const [d] = flushFirst.splice(del, 1);
    flushFirst.splice(top, 0, d);
    assert.match(
      simulatePlan({ transactions: flushFirst }, kernel1).failure!.reason,
      /-X of non-empty chain|jump to missing chain/,
    );
  });

  it("legacy keeps upstream's single transaction per table", () => {
    const plan = splitRestorePayload(payload2, { backend: "legacy", maxChainsPerTransaction: 3 });
    assert.deepEqual(steps(plan), ["filter:single", "nat:single"]);
    assert.deepEqual(plan, singleTransactionPlan(parseRestorePayload(payload2)));
    assertPlanValid(plan, kernel1, kernel2);
  });

  it("payloadOf joins transactions into one iptables-restore input", () => {
    const plan = splitRestorePayload(payload1, { maxChainsPerTransaction: 50 });
    const text = payloadOf(plan);
    assert.equal(text.split("\n").filter((l) => l === "COMMIT").length, plan.transactions.length);
    assert.ok(text.startsWith("*filter\n"));
    assert.ok(text.endsWith("COMMIT\n"));
    // Re-planning the single-transaction rendering of a plan gives the same transactions' content.
    const reparsed = parseRestorePayload(payloadOf(singleTransactionPlan(parseRestorePayload(payload1))));
    assert.deepEqual(reparsed, parseRestorePayload(payload1));
  });

  it("reads a chunked payload like the joined text, without the chunks being joined", () => {
    const lines = payload1.split("\n").slice(0, -1);
    for (const size of [1, 7, 100]) {
      const chunks: string[] = [];
      for (let i = 0; i < lines.length; i += size) {
        chunks.push(lines.slice(i, i + size).map((l) => `${l}\n`).join(""));
      }
      assert.deepEqual(parseRestorePayload(chunks), parseRestorePayload(payload1), `chunks of ${size} lines`);
      assert.deepEqual(
        splitRestorePayload(chunks, { maxChainsPerTransaction: 9 }),
        splitRestorePayload(payload1, { maxChainsPerTransaction: 9 }),
      );
    }
    assert.throws(
      () => parseRestorePayload(["*nat\n", "-I KUBE-SERVICES 1 -j RETURN\n", "COMMIT\n"]),
      /line 2: unsupported/,
    );
  });

  it("payloadChunksOf yields whole lines lazily, the same on every iteration, joining to payloadOf", () => {
    const plan = splitRestorePayload(payload2, { maxChainsPerTransaction: 9 });
    const lazy = payloadChunksOf(plan);
    assert.ok(!Array.isArray(lazy));
    const chunks = [...lazy];
    assert.deepEqual([...lazy], chunks);
    assert.equal(chunks.join(""), payloadOf(plan));
    for (const c of chunks) assert.ok(c.endsWith("\n"));
    const lines = payloadOf(plan).split("\n").length - 1;
    assert.equal(chunks.length, Math.ceil(lines / 512));
    assert.deepEqual([...payloadChunksOf({ transactions: [] })], []);
  });

  it("restorePlanned hands the runner chunks, and an unplannable payload unchanged", async () => {
    const got: unknown[] = [];
    const runner = {
      version: { parts: [1, 8, 9], text: "1.8.9", backend: "nf_tables" as const },
      restore: (p: string | readonly string[]) => {
        got.push(p);
        return Promise.resolve();
      },
    };
    const chunks = payload1.split(/(?<=COMMIT\n)/);
    const plan = await restorePlanned(runner, chunks, { maxChainsPerTransaction: 50 });
    assert.equal(typeof got[0], "object", "chunks, not one joined string");
    assert.equal([...(got[0] as Iterable<string>)].join(""), payloadOf(plan!));
    const partial = ["*nat\n-D KUBE-SVC-A -j KUBE-SEP-B\n", "COMMIT\n"];
    assert.equal(await restorePlanned(runner, partial), null);
    assert.equal(got[1], partial);
  });
});
