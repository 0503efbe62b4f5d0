/**
 * A full render's sections (RenderResult.sections) and the plan built from them (planSections): the same
 * payload, planned without reading the per-service chains back line by line, must reach the same kernel
 * state as upstream's single transaction with every intermediate transaction valid, and stream the
 * render's own text.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { type RenderInput, renderIptablesRules } from "../../../../lib/proxy/iptables/render/render.ts";
import {
  payloadChunksOf,
  payloadOf,
  planSections,
  type RestorePlan,
  restorePlanned,
  singleTransactionPlan,
  splitRestorePayload,
} from "../../../../lib/proxy/iptables/restore_plan.ts";
import { parseRestorePayload } from "../../../../lib/proxy/iptables/restore_content.ts";
import { iptablesHost } from "../../../../lib/proxy/iptables/host.ts";
import type { IptablesRunner } from "../../../../lib/proxy/iptables/runner.ts";
import { fakeProxierDefaults } from "../../../support/tracer.ts";
import { type SimulatedTables, simulatePlan } from "../../../support/restore_simulation.ts";
import { ownChainCluster } from "../../../support/own_chain_cluster.ts";

/** Service ports of every shape the own chains have: NodePort (EXT), LB ranges (FW), Local policy (SVL), affinity. */
const cluster = (n: number, gen: number) => ownChainCluster(n, gen);

function render(n: number, gen: number, existing: Set<string> | null) {
  const input: RenderInput = {
    ...fakeProxierDefaults(),
    ...cluster(n, gen),
    full: true,
    changedServices: new Set(),
    existingNatChains: existing,
  };
  return renderIptablesRules(input);
}

function freshKernel(): SimulatedTables {
  return new Map([
    ["filter", new Map([["INPUT", []], ["FORWARD", []], ["OUTPUT", []]])],
    [
      "nat",
      new Map<string, string[]>([["PREROUTING", []], ["INPUT", []], ["OUTPUT", []], ["POSTROUTING", []]]),
    ],
  ]);
}

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

const lines = (chunks: Iterable<string>) => [...chunks].join("").split("\n").filter((l) => l.length > 0);

describe("RenderResult.sections", () => {
  it("a full render's sections hold exactly its payload's lines, whole service ports per segment", () => {
    const r = render(60, 1, null);
    const s = r.sections!;
    const fromSections = [
      ...lines(s.shared),
      ...s.segments.flatMap((g) => lines([g.text().decls, g.text().rules])),
    ].sort();
    assert.deepEqual(fromSections, lines(r.payloadChunks).sort());
    assert.ok(s.segments.length > 1, `${s.segments.length} segments`);
    for (const g of s.segments) {
      const { decls, rules } = g.text();
      assert.equal(lines([decls]).length, g.chains);
      assert.equal(lines([rules]).length, g.ruleLines);
      assert.ok(lines([decls]).every((l) => /^:KUBE-(SVC|SVL|EXT|FW|SEP)-/.test(l)));
      // Every jump between per-service chains stays inside the segment.
      const declared = new Set(lines([decls]).map((l) => l.slice(1, l.indexOf(" "))));
      for (const l of lines([rules])) {
        const target = / -j (KUBE-(?:SVC|SVL|EXT|FW|SEP)-\S+)/.exec(l)?.[1];
        if (target !== undefined) assert.ok(declared.has(target), `${l} leaves its segment`);
      }
    }
    // The shared part declares no per-service chain (stale ones aside) and is a payload of its own.
    assert.ok(lines(s.shared).every((l) => !/^:KUBE-(SVC|SVL|EXT|FW|SEP)-/.test(l)));
    parseRestorePayload(s.shared);
  });

  it("incremental renders have none", () => {
    const first = render(10, 1, null);
    const input: RenderInput = {
      ...fakeProxierDefaults(),
      ...cluster(10, 1),
      full: false,
      changedServices: new Set(["ns1/svc1"]),
      existingNatChains: first.activeNatChains,
    };
    const next = renderIptablesRules(input, first.state);
    assert.equal(next.mode, "incremental");
    assert.equal(next.sections, null);
  });
});

describe("planSections", () => {
  const first = render(60, 1, null);
  const kernel1 = applySingle(first.payload, freshKernel());
  // Second full sync: 20 Services gone, every endpoint renamed (all SEP chains stale), 10 new Services.
  const second = render(70, 2, new Set(kernel1.get("nat")!.keys()));
  const secondDropped = (() => {
    const r = render(40, 2, new Set(kernel1.get("nat")!.keys()));
    return r;
  })();

  it("first sync into an empty namespace: every transaction valid, same final state, bounds kept", () => {
    const plan = planSections(first.sections!, first.payloadChunks, {
      maxChainsPerTransaction: 7,
      maxLinesPerTransaction: 40,
    });
    assertPlanValid(plan, freshKernel(), kernel1);
    const services = plan.transactions.filter((t) => t.step === "nat-services");
    assert.ok(services.length > 10);
    for (const t of services) {
      assert.ok(t.chainCount <= 7, `${t.chainCount} chains`);
      assert.ok(t.lines.length <= 40 || t.chainCount === 1, `${t.lines.length} lines`);
    }
  });

  it("full resyncs with stale chains (Services gone, endpoints renamed, new Services)", () => {
    for (const r of [second, secondDropped]) {
      assert.ok(r.staleChains.length > 0);
      const plan = planSections(r.sections!, r.payloadChunks, { maxChainsPerTransaction: 9 });
      assertPlanValid(plan, kernel1, applySingle(r.payload, kernel1));
      const steps = plan.transactions.map((t) => t.step);
      assert.ok(steps.lastIndexOf("nat-services") < steps.indexOf("nat-top"));
      assert.ok(steps.indexOf("nat-top") < steps.indexOf("stale-flush"));
    }
  });

  it("upstream's partial sync (no previous state): only the changed Services' chains, the rest left in place", () => {
    // Service 2 gets new endpoints: its old SEP chains become stale.
    const { services, endpoints } = cluster(60, 1);
    endpoints.set("ns2/svc2:p80/TCP", cluster(60, 3).endpoints.get("ns2/svc2:p80/TCP")!);
    const input: RenderInput = {
      ...fakeProxierDefaults(),
      services,
      endpoints,
      full: false,
      changedServices: new Set(["ns1/svc1", "ns2/svc2", "ns3/svc8"]),
      existingNatChains: new Set(kernel1.get("nat")!.keys()),
    };
    const r = renderIptablesRules(input);
    assert.equal(r.mode, "partial");
    assert.ok(r.sections!.segments.length > 0 && r.staleChains.length > 0);
    const plan = planSections(r.sections!, r.payloadChunks, { maxChainsPerTransaction: 5 });
    assertPlanValid(plan, kernel1, applySingle(r.payload, kernel1));
  });

  it("orders and bounds like splitRestorePayload of the joined text (same steps, same chains per step)", () => {
    const opts = { maxChainsPerTransaction: 1000 };
    const a = planSections(second.sections!, second.payloadChunks, opts);
    const b = splitRestorePayload(second.payloadChunks, opts);
    const chainsByStep = (p: RestorePlan) => {
      const m = new Map<string, string[]>();
      for (const t of p.transactions) {
        const list = m.get(t.step) ?? [];
        list.push(...t.lines.filter((l) => l.startsWith(":")));
        m.set(t.step, list);
      }
      for (const l of m.values()) l.sort();
      return m;
    };
    assert.deepEqual(chainsByStep(a), chainsByStep(b));
    assert.equal(lines(payloadChunksOf(a)).length, lines(payloadChunksOf(b)).length);
  });

  it("streams the render's segment text itself, not copies of its lines", () => {
    const plan = planSections(first.sections!, first.payloadChunks);
    const streamed = new Set(payloadChunksOf(plan));
    for (const g of first.sections!.segments) {
      const { decls, rules } = g.text();
      assert.ok(streamed.has(decls) && streamed.has(rules));
    }
  });

  it("legacy: one transaction per table, as splitRestorePayload", () => {
    const plan = planSections(first.sections!, first.payloadChunks, { backend: "legacy" });
    assert.deepEqual(plan.transactions.map((t) => t.step), ["single", "single"]);
  });

  it("the host plans from the sections it is given", async () => {
    const written: string[][] = [];
    const runner = {
      version: { backend: "nf_tables" },
      restore(payload: Iterable<string> | string): Promise<void> {
        written.push(typeof payload === "string" ? [payload] : [...payload]);
        return Promise.resolve();
      },
    } as unknown as IptablesRunner;
    await iptablesHost(runner).restore(first.payloadChunks, first.sections);
    const plan = await restorePlanned(runner, first.payloadChunks, {}, first.sections);
    assert.equal(written[0].join(""), payloadOf(plan!));
    assert.ok(written[0].includes(first.sections!.segments[0].text().decls));
  });
});
