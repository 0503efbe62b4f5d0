/**
 * Incremental partial syncs (renderIptablesRules with the previous RenderState): shared chains are patched
 * with -D/-I instead of re-declared, and the result must equal a fresh full sync of the same state.
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import {
  type RenderInput,
  renderIptablesRules,
  type RenderResult,
} from "../../../../../lib/proxy/iptables/render/render.ts";
import {
  deleteLine,
  diffBlock,
  insertLine,
  type TableEdits,
} from "../../../../../lib/proxy/iptables/render/shared_chain_diff.ts";
import { renderStateSize } from "../../../../../lib/proxy/iptables/render/state.ts";
import { expectationFromState } from "../../../../../lib/proxy/iptables/drift.ts";
import { expectationMismatches } from "../../../../support/drift_expectation.ts";
import { splitWords } from "../../../../support/iptables_canonical.ts";
import type { EndpointInfo, Protocol, ServicePortInfo } from "../../../../../lib/proxy/types.ts";
import { servicePortKey } from "../../../../../lib/proxy/types.ts";
import {
  FakeIptables,
  FakeProxier,
  fakeProxierDefaults,
  type FakeProxierOptions,
  makeEndpoint,
  makeServicePort,
  TEST_NODE_NAME,
} from "../../../../support/tracer.ts";
import { type Netns, NetnsScope, netnsUnavailableReason } from "../../../../support/netns.ts";
import { mulberry32 as prng } from "../../../../support/random.ts";

/** Chains that a partial sync must never re-declare unless their fixed rules changed. */
const SHARED_AND_FIXED = [
  "KUBE-SERVICES",
  "KUBE-NODEPORTS",
  "KUBE-EXTERNAL-SERVICES",
  "KUBE-PROXY-FIREWALL",
  "KUBE-FORWARD",
  "KUBE-FIREWALL",
  "KUBE-POSTROUTING",
  "KUBE-MARK-MASQ",
];

function declaredSharedChains(payload: string): string[] {
  return payload.split("\n").filter((l) => l.startsWith(":")).map((l) => l.slice(1).split(" ")[0]).filter((
    c,
  ) => SHARED_AND_FIXED.includes(c));
}

/** A FakeProxier given the same services/endpoints/settings, full-synced once. */
function freshFullSync(p: FakeProxier): FakeProxier {
  const fresh = new FakeProxier(p.settings);
  for (const svc of p.services.values()) fresh.setService(svc);
  for (const [k, eps] of p.endpoints) if (p.services.has(k)) fresh.endpoints.set(k, eps);
  const s = fresh.sync();
  assert.equal(s.error, null);
  return fresh;
}

// ---------------------------------------------------------------------------------------------------

describe("diffBlock", () => {
  const edits = (): TableEdits => ({ deletes: [], inserts: [] });
  const A = (s: string) => `-A KUBE-SERVICES -m comment --comment "${s}" -j KUBE-SVC-X`;

  it("rewrites -A lines as -D and positioned -I with the rule text unchanged", () => {
    assert.equal(deleteLine(A("a")), `-D KUBE-SERVICES -m comment --comment "a" -j KUBE-SVC-X`);
    assert.equal(
      insertLine("KUBE-SERVICES", 7, A("a")),
      `-I KUBE-SERVICES 7 -m comment --comment "a" -j KUBE-SVC-X`,
    );
    assert.throws(() => insertLine("KUBE-NODEPORTS", 1, A("a")), /not an -A KUBE-NODEPORTS rule/);
    assert.throws(() => deleteLine("-I KUBE-SERVICES 1 x"), /not an -A rule/);
  });

  it("leaves an equal block alone, deletes what went away, inserts what is new at its block position", () => {
    let e = edits();
    assert.equal(diffBlock("KUBE-SERVICES", [A("a"), A("b")], [A("a"), A("b")], 10, e), 0);
    assert.deepEqual(e, edits());

    e = edits();
    assert.equal(diffBlock("KUBE-SERVICES", [A("a"), A("c")], [A("a"), A("b"), A("c")], 10, e), 1);
    assert.deepEqual(e.deletes, []);
    assert.deepEqual(e.inserts, [insertLine("KUBE-SERVICES", 12, A("b"))]);

    e = edits();
    diffBlock("KUBE-SERVICES", [A("a"), A("b"), A("c")], [A("c")], 0, e);
    assert.deepEqual(e.deletes, [deleteLine(A("a")), deleteLine(A("b"))]);
    assert.deepEqual(e.inserts, []);
  });

  it("replaces the whole block when kept rules change order or a line repeats", () => {
    let e = edits();
    diffBlock("KUBE-SERVICES", [A("a"), A("b")], [A("b"), A("a")], 3, e);
    assert.deepEqual(e.deletes, [deleteLine(A("a")), deleteLine(A("b"))]);
    assert.deepEqual(e.inserts, [
      insertLine("KUBE-SERVICES", 4, A("b")),
      insertLine("KUBE-SERVICES", 5, A("a")),
    ]);

    e = edits();
    diffBlock("KUBE-SERVICES", [A("a"), A("a")], [A("a")], 0, e);
    assert.deepEqual(e.deletes, [deleteLine(A("a")), deleteLine(A("a"))]);
    assert.deepEqual(e.inserts, [insertLine("KUBE-SERVICES", 1, A("a"))]);
  });
});

describe("FakeIptables -D / -I", () => {
  it("deletes by exact rule text, inserts at 1..n+1, and fails the whole restore otherwise", () => {
    const ipt = new FakeIptables();
    ipt.restore("*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j KUBE-B\n-A KUBE-A -j RETURN\nCOMMIT\n");
    ipt.restore("*nat\n-I KUBE-A 3 -j MARK --or-mark 1\n-I KUBE-A 1 -j DROP\n-D KUBE-A -j RETURN\nCOMMIT\n");
    assert.deepEqual(ipt.rules("nat", "KUBE-A")!.map((r) => r.raw), [
      "-A KUBE-A -j DROP",
      "-A KUBE-A -j KUBE-B",
      "-A KUBE-A -j MARK --or-mark 1",
    ]);
    const before = ipt.save();
    assert.throws(
      () => ipt.restore("*nat\n-I KUBE-A 1 -j ACCEPT\n-D KUBE-A -j RETURN\nCOMMIT\n"),
      /does a matching rule exist/,
    );
    assert.throws(() => ipt.restore("*nat\n-I KUBE-A 5 -j ACCEPT\nCOMMIT\n"), /Index of insertion too big/);
    assert.throws(() => ipt.restore("*nat\n-I KUBE-A 1 -j KUBE-NOPE\nCOMMIT\n"), /target chain KUBE-NOPE/);
    assert.equal(ipt.save(), before, "failed restores change nothing");
  });
});

// ---------------------------------------------------------------------------------------------------
// (a) Random change sequences: full, then incremental syncs, must equal a fresh full sync after each.

class Scenario {
  readonly p: FakeProxier;
  private next = 0;
  constructor(readonly rnd: () => number, options: FakeProxierOptions = {}) {
    this.p = new FakeProxier(options);
    this.p.incremental = true;
  }
  pick<T>(xs: readonly T[]): T {
    return xs[Math.floor(this.rnd() * xs.length)];
  }
  chance(p: number): boolean {
    return this.rnd() < p;
  }
  /** Small pools so that addresses and ports collide across Services (order then matters). */
  clusterIP(): string {
    return `172.30.0.${1 + Math.floor(this.rnd() * 40)}`;
  }
  externalIPs(): string[] {
    const pool = ["192.168.99.1", "192.168.99.2", "192.168.99.3", "1.2.3.4", this.clusterIP()];
    return this.chance(0.5)
      ? []
      : [...new Set([this.pick(pool), ...(this.chance(0.3) ? [this.pick(pool)] : [])])];
  }
  lbVIPs(): string[] {
    return this.chance(0.5) ? [] : this.chance(0.7) ? [this.pick(["1.2.3.4", "5.6.7.8", "192.168.99.1"])] : [
      "1.2.3.4",
      "5.6.7.8",
    ];
  }
  ranges(): string[] {
    return this.pick([[], [], ["203.0.113.0/25"], ["192.168.0.0/24"], ["203.0.113.0/25", "192.168.0.0/24"]]);
  }
  endpoints(): EndpointInfo[] {
    const n = this.pick([0, 1, 1, 2, 3, 4]);
    const out: EndpointInfo[] = [];
    for (let i = 0; i < n; i++) {
      const ready = this.chance(0.8);
      out.push(
        makeEndpoint(`10.180.${Math.floor(this.rnd() * 4)}.${1 + Math.floor(this.rnd() * 20)}`, 80, {
          nodeName: this.chance(0.4) ? TEST_NODE_NAME : "other-node",
          ready,
          serving: ready || this.chance(0.5),
          terminating: !ready && this.chance(0.7),
        }),
      );
    }
    return [...new Map(out.map((e) => [e.endpoint, e])).values()];
  }
  addService(): void {
    const name = `svc${this.next++}`;
    const ns = this.pick(["ns1", "ns2", "ns3"]);
    const clusterIP = this.clusterIP();
    const ports: Array<[string, Protocol, number]> = this.chance(0.3)
      ? [["p80", "TCP", 80], ["p53", "UDP", 53]]
      : [[this.pick(["p80", ""]), this.pick<Protocol>(["TCP", "TCP", "UDP"]), this.pick([80, 8080])]];
    const lb = this.lbVIPs();
    const eLocal = this.chance(0.3);
    for (const [port, protocol, portNumber] of ports) {
      const svc = makeServicePort(ns, name, {
        port,
        protocol,
        portNumber,
        clusterIP,
        nodePort: this.chance(0.5) ? 30000 + Math.floor(this.rnd() * 50) : 0,
        externalIPs: this.externalIPs(),
        loadBalancerVIPs: lb,
        loadBalancerSourceRanges: lb.length > 0 ? this.ranges() : [],
        externalPolicyLocal: eLocal,
        internalPolicyLocal: this.chance(0.2),
        healthCheckNodePort: lb.length > 0 && eLocal && this.chance(0.7) ? 32000 + this.next : 0,
        stickyMaxAgeSeconds: this.chance(0.2) ? 10800 : 0,
      });
      this.p.setService(svc);
      this.p.setEndpoints(svc, this.endpoints());
    }
  }
  /** Applies one random change. */
  mutate(): string {
    const keys = [...this.p.services.keys()].sort();
    if (keys.length === 0 || this.chance(0.12)) {
      this.addService();
      return "add service";
    }
    const key = this.pick(keys);
    const svc = this.p.services.get(key)!;
    const set = (patch: Partial<ServicePortInfo>) => this.p.setService({ ...svc, ...patch });
    switch (
      this.pick(["delete", "eps", "eps", "eps", "ep1", "np", "ext", "lb", "ranges", "policy", "hc", "aff"])
    ) {
      case "delete":
        this.p.deleteService(svc.name.namespace, svc.name.name);
        return "delete service";
      case "eps":
        this.p.setEndpoints(svc, this.endpoints());
        return "replace endpoints";
      case "ep1": {
        const eps = [...(this.p.endpoints.get(key) ?? [])];
        if (eps.length === 0) return "no-op";
        eps[Math.floor(this.rnd() * eps.length)] = makeEndpoint(
          `10.181.0.${1 + Math.floor(this.rnd() * 200)}`,
          80,
        );
        this.p.setEndpoints(svc, [...new Map(eps.map((e) => [e.endpoint, e])).values()]);
        return "change one endpoint";
      }
      case "np":
        set({
          nodePort: svc.nodePort === 0
            ? 30000 + Math.floor(this.rnd() * 50)
            : this.pick([0, svc.nodePort + 1]),
        });
        return "nodePort";
      case "ext":
        set({ externalIPs: this.externalIPs() });
        return "externalIPs";
      case "lb": {
        const lb = this.lbVIPs();
        set({
          loadBalancerVIPs: lb,
          loadBalancerSourceRanges: lb.length > 0 ? svc.loadBalancerSourceRanges : [],
        });
        return "LB IPs";
      }
      case "ranges":
        set({ loadBalancerSourceRanges: svc.loadBalancerVIPs.length > 0 ? this.ranges() : [] });
        return "source ranges";
      case "policy":
        set(
          this.chance(0.5) ? { externalPolicyLocal: !svc.externalPolicyLocal } : {
            internalPolicyLocal: !svc.internalPolicyLocal,
          },
        );
        return "traffic policy";
      case "hc":
        set({ healthCheckNodePort: svc.healthCheckNodePort === 0 ? 32500 + Math.floor(this.rnd() * 10) : 0 });
        return "health check node port";
      default:
        set({ stickyMaxAgeSeconds: svc.stickyMaxAgeSeconds === 0 ? 10800 : 0 });
        return "session affinity";
    }
  }
}

function runRandomSequence(
  seed: number,
  steps: number,
  options: FakeProxierOptions = {},
  extra?: (s: Scenario) => string | null,
) {
  const sc = new Scenario(prng(seed), options);
  for (let i = 0; i < 8; i++) sc.addService();
  const first = sc.p.sync();
  assert.equal(first.error, null);
  assert.equal(first.result.mode, "full");
  const stats = { deletes: 0, inserts: 0, fixedRewrites: 0, incrementalBytes: 0, upstreamPartialBytes: 0 };
  const log: string[] = [];
  for (let step = 0; step < steps; step++) {
    const n = 1 + Math.floor(sc.rnd() * 3);
    for (let i = 0; i < n; i++) log.push(sc.mutate());
    const x = extra?.(sc);
    if (x) log.push(x);
    // What upstream's partial sync would write for the same change (same changed set, no state).
    const upstream = renderIptablesRules({
      ...sc.p.settings,
      services: sc.p.services,
      endpoints: sc.p.endpoints,
      full: false,
      changedServices: new Set(sc.p.changed),
      existingNatChains: sc.p.ipt.chains("nat"),
    });
    const s = sc.p.sync();
    const where = `seed ${seed} step ${step} after [${log.slice(-4).join(", ")}]`;
    assert.equal(s.error, null, `${where}: ${s.error}\n${s.result.payload}`);
    assert.equal(s.result.mode, "incremental", where);
    // The drift check's expectation, derived from the state alone, is what the payloads left.
    assert.deepEqual(expectationMismatches(expectationFromState(s.result.state), sc.p.ipt), [], where);
    const declared = declaredSharedChains(s.result.payload);
    stats.fixedRewrites += declared.length;
    if (extra === undefined) assert.deepEqual(declared, [], `${where}: shared chain re-declared`);
    stats.deletes += (s.result.payload.match(/^-D /gm) ?? []).length;
    stats.inserts += (s.result.payload.match(/^-I /gm) ?? []).length;
    stats.incrementalBytes += s.result.payload.length;
    stats.upstreamPartialBytes += upstream.payload.length;

    const fresh = freshFullSync(sc.p);
    const a = sc.p.ipt.save();
    const b = fresh.ipt.save();
    if (a !== b) {
      const al = a.split("\n"), bl = b.split("\n");
      const onlyA = al.filter((l) => !bl.includes(l)), onlyB = bl.filter((l) => !al.includes(l));
      assert.fail(
        `${where}: incremental rules differ from a fresh full sync\nonly incremental:\n${
          onlyA.join("\n")
        }\n` +
          `only full:\n${onlyB.join("\n")}\n(or same rules in another order)\npayload:\n${s.result.payload}`,
      );
    }
    assert.deepEqual(s.result.rulesTotal, fresh.lastSync!.result.rulesTotal, `${where}: rulesTotal`);
    assert.equal(
      renderIptablesRules({ ...fullInputOf(sc.p) }).payload,
      fresh.lastSync!.result.payload,
      "the full render does not depend on history",
    );
  }
  return stats;
}

function fullInputOf(p: FakeProxier): RenderInput {
  return {
    ...p.settings,
    services: p.services,
    endpoints: p.endpoints,
    full: true,
    changedServices: new Set(),
    existingNatChains: p.ipt.chains("nat"),
  };
}

describe("(a) random change sequences: incremental syncs equal a fresh full sync, rule for rule and in order", () => {
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    it(`seed ${seed}`, () => {
      const stats = runRandomSequence(seed, 40);
      // The sequences must actually exercise the edit paths.
      assert.ok(stats.deletes > 10 && stats.inserts > 10, JSON.stringify(stats));
      assert.ok(stats.incrementalBytes < stats.upstreamPartialBytes, JSON.stringify(stats));
    });
  }

  it("with nodePortAddresses and changing node IPs (the NodePorts jumps move), IPv4", () => {
    const nodeIPs = ["127.0.0.1", "192.168.0.2", "192.168.1.2"];
    const stats = runRandomSequence(
      11,
      30,
      { nodePortAddresses: ["192.168.0.0/16", "127.0.0.0/8"], nodeIPs },
      (sc) => {
        if (!sc.chance(0.3)) return null;
        const extra = `192.168.${2 + Math.floor(sc.rnd() * 3)}.2`;
        sc.p.settings = { ...sc.p.settings, nodeIPs: sc.chance(0.5) ? nodeIPs : [...nodeIPs, extra] };
        return "node IPs";
      },
    );
    assert.equal(stats.fixedRewrites, 0, "node IPs only move the NodePorts jumps");
  });

  it("when fixed chains change (nfacct, masquerade bit), only those are rewritten", () => {
    const stats = runRandomSequence(21, 20, {}, (sc) => {
      if (!sc.chance(0.25)) return null;
      const f = sc.p.settings.features;
      sc.p.settings = sc.chance(0.5)
        ? { ...sc.p.settings, features: { ...f, nfacct: !f.nfacct } }
        : { ...sc.p.settings, masqueradeBit: sc.p.settings.masqueradeBit === 14 ? 15 : 14 };
      return "fixed settings";
    });
    assert.ok(stats.fixedRewrites > 0);
  });
});

describe("incremental render properties", () => {
  function scenario(seed: number): Scenario {
    const sc = new Scenario(prng(seed));
    for (let i = 0; i < 12; i++) sc.addService();
    assert.equal(sc.p.sync().error, null);
    return sc;
  }

  it("is deterministic: same input and same state give the same bytes", () => {
    const sc = scenario(31);
    for (let i = 0; i < 5; i++) sc.mutate();
    const input: RenderInput = { ...fullInputOf(sc.p), full: false, changedServices: new Set(sc.p.changed) };
    const a = renderIptablesRules(input, sc.p.state);
    const b = renderIptablesRules(input, sc.p.state);
    assert.equal(a.mode, "incremental");
    assert.equal(a.payload, b.payload);
  });

  it("a full sync ignores the state; a partial sync without state is upstream's (shared chains rewritten)", () => {
    const sc = scenario(32);
    sc.mutate();
    const input = fullInputOf(sc.p);
    assert.equal(renderIptablesRules(input, sc.p.state).payload, renderIptablesRules(input).payload);
    const partial = renderIptablesRules({ ...input, full: false, changedServices: new Set(sc.p.changed) });
    assert.equal(partial.mode, "partial");
    assert.ok(declaredSharedChains(partial.payload).includes("KUBE-SERVICES"));
    // A state of the other family is not used.
    const v6 = renderIptablesRules(
      { ...input, full: false, changedServices: new Set() },
      { ...sc.p.state!, family: "IPv6" },
    );
    assert.equal(v6.mode, "partial");
  });

  it("no change at all writes two empty transactions", () => {
    const sc = scenario(33);
    const s = sc.p.sync();
    assert.equal(s.result.payload, "*filter\nCOMMIT\n*nat\nCOMMIT\n");
    assert.deepEqual(s.result.rulesWritten, { filter: 0, nat: 0 });
  });

  it("a change touching more per-service chains than incrementalMaxChains is written upstream's way", () => {
    const sc = new Scenario(prng(35), { incrementalMaxChains: 4 });
    const svcs = [0, 1, 2].map((i) => makeServicePort("ns1", `big${i}`, { clusterIP: `172.30.1.${i + 1}` }));
    const ep = (i: number, last: number) => makeEndpoint(`10.181.${i}.${last}`, 80);
    svcs.forEach((s, i) => sc.p.setService(s).setEndpoints(s, [ep(i, 1)]));
    assert.equal(sc.p.sync().result.mode, "full");
    // 1 SVC chain rewritten, 1 SEP chain declared, 1 stale SEP chain: 3 chains, incremental.
    sc.p.setEndpoints(svcs[0], [ep(0, 2)]);
    const small = sc.p.sync();
    assert.equal(small.error, null);
    assert.equal(small.result.mode, "incremental");
    // Three services at once: 6 chains declared, 3 stale: upstream's partial sync, shared chains rewritten.
    svcs.forEach((s, i) => sc.p.setEndpoints(s, [ep(i, 3)]));
    const big = sc.p.sync();
    assert.equal(big.error, null);
    assert.equal(big.result.mode, "partial");
    assert.ok(declaredSharedChains(big.result.payload).includes("KUBE-SERVICES"));
    assert.equal(sc.p.ipt.save(), freshFullSync(sc.p).ipt.save());
    // Its state is good for the next incremental sync.
    sc.p.deleteService("ns1", "big1");
    const next = sc.p.sync();
    assert.equal(next.result.mode, "incremental");
    assert.match(next.result.payload, /^-D KUBE-SERVICES .*"ns1\/big1:p80 cluster IP"/m);
    assert.equal(sc.p.ipt.save(), freshFullSync(sc.p).ipt.save());
  });

  it("a rule missing from the kernel fails the restore; the next sync is full and converges", () => {
    const sc = scenario(34);
    const victim = [...sc.p.services.values()].find((s) =>
      (sc.p.endpoints.get(servicePortKey(s.name)) ?? []).length > 0
    )!;
    const line = sc.p.ipt.rules("nat", "KUBE-SERVICES")!.find((r) =>
      r.raw.includes(`"${victim.name.namespace}/${victim.name.name}`)
    )!;
    // Someone else removes our rule behind our back.
    sc.p.ipt.restore(`*nat\n${deleteLine(line.raw)}\nCOMMIT\n`);
    sc.p.deleteService(victim.name.namespace, victim.name.name);
    const failed = sc.p.sync();
    assert.equal(failed.result.mode, "incremental");
    assert.match(failed.error ?? "", /does a matching rule exist/);
    assert.equal(sc.p.state, null, "state dropped after the failure");
    const retry = sc.p.sync();
    assert.equal(retry.error, null);
    assert.equal(retry.result.mode, "full");
    assert.equal(sc.p.ipt.save(), freshFullSync(sc.p).ipt.save());
  });
});

// ---------------------------------------------------------------------------------------------------
// (b) Size: a one-endpoint change does not depend on the number of unchanged Services.

function bigInput(
  n: number,
): { services: Map<string, ServicePortInfo>; endpoints: Map<string, EndpointInfo[]> } {
  const services = new Map<string, ServicePortInfo>();
  const endpoints = new Map<string, EndpointInfo[]>();
  for (let i = 0; i < n; i++) {
    const svc = makeServicePort(`ns${i % 10}`, `svc${i}`, {
      clusterIP: `172.30.${i >> 8}.${i & 255}`,
      nodePort: i % 4 === 0 ? 30000 + (i % 2000) : 0,
    });
    const key = servicePortKey(svc.name);
    services.set(key, svc);
    const eps: EndpointInfo[] = [];
    for (let e = 1; e <= 5; e++) eps.push(makeEndpoint(`10.${(i >> 8) & 255}.${i & 255}.${e}`, 8080));
    endpoints.set(key, eps);
  }
  return { services, endpoints };
}

function oneEndpointChange(
  n: number,
): { full: RenderResult; partial: RenderResult; ms: { full: number; partial: number } } {
  const { services, endpoints } = bigInput(n);
  const base = { ...fakeProxierDefaults(), services, endpoints, existingNatChains: null };
  let t = performance.now();
  const full = renderIptablesRules({ ...base, full: true, changedServices: new Set() });
  const fullMs = performance.now() - t;
  // svc7 (same name at every scale): one endpoint replaced.
  const key = "ns7/svc7:p80/TCP";
  const eps = [...endpoints.get(key)!];
  eps[2] = makeEndpoint("10.250.0.9", 8080);
  endpoints.set(key, eps.sort((a, b) => (a.endpoint < b.endpoint ? -1 : 1)));
  const activeBefore = full.activeNatChains;
  t = performance.now();
  const partial = renderIptablesRules(
    { ...base, full: false, changedServices: new Set(["ns7/svc7"]), existingNatChains: activeBefore },
    full.state,
  );
  return { full, partial, ms: { full: fullMs, partial: performance.now() - t } };
}

describe("(b) a one-endpoint change at scale", () => {
  it("re-declares no shared chain, and its size does not grow with the unchanged Services (1k vs 10k)", () => {
    const small = oneEndpointChange(1000);
    const large = oneEndpointChange(10000);
    for (const r of [small, large]) {
      assert.equal(r.partial.mode, "incremental");
      assert.deepEqual(declaredSharedChains(r.partial.payload), []);
      assert.doesNotMatch(r.partial.payload, /^-[DI] /m, "the endpoint change touches no shared chain");
      assert.equal(r.partial.staleChains.length, 1, "the replaced endpoint's SEP chain is deleted");
    }
    assert.ok(
      Math.abs(large.partial.payload.length - small.partial.payload.length) <= 64,
      `${small.partial.payload.length} vs ${large.partial.payload.length} bytes`,
    );
    const size = renderStateSize(large.full.state);
    const pct = (100 * large.partial.payload.length) / large.full.payload.length;
    console.log(
      `[render_incremental] 10k services/50k endpoints: full payload ${large.full.payload.length} bytes ` +
        `(${
          large.ms.full.toFixed(0)
        } ms), one-endpoint incremental payload ${large.partial.payload.length} bytes ` +
        `(${pct.toFixed(4)}% of full, render ${
          large.ms.partial.toFixed(0)
        } ms); 1k: ${small.partial.payload.length} bytes; ` +
        `state ${size.servicePorts} service ports, ${size.ownBytes} own bytes`,
    );
  });
});

// ---------------------------------------------------------------------------------------------------
// (d) Real kernel: iptables-restore --noflush in a throwaway network namespace.

/** A rule as iptables-save prints it, reduced to what identifies it (argument order differs). */
function savedRuleKey(line: string): string {
  const w = splitWords(line);
  const get = (opt: string) => {
    const i = w.indexOf(opt);
    return i < 0 ? "" : ((w[i - 1] === "!" ? "!" : "") + w[i + 1]).replace(/\/(32|128)$/, "");
  };
  return ["--comment", "-s", "-d", "-p", "--dport", "--dst-type", "--src-type", "-j"].map(get).join("|");
}

function rendered(payloadOrSave: string): Map<string, string[]> {
  // table/chain → rule keys in order; from iptables-save output or a full render's payload.
  const out = new Map<string, string[]>();
  let table = "";
  for (const l of payloadOrSave.split("\n")) {
    if (l.startsWith("*")) table = l.slice(1);
    else if (l.startsWith(":KUBE-")) {
      out.set(`${table}/${l.slice(1).split(" ")[0]}`, out.get(`${table}/${l.slice(1).split(" ")[0]}`) ?? []);
    } else if (l.startsWith("-A KUBE-")) {
      const chain = l.split(" ")[1];
      out.get(`${table}/${chain}`)!.push(savedRuleKey(l));
    }
  }
  return out;
}

const skipKernel = netnsUnavailableReason();

describe("(d) real iptables-restore --noflush in a network namespace", { skip: skipKernel || false }, () => {
  const scope = new NetnsScope("ep-incr");
  after(() => scope.cleanup());

  for (const backend of ["nft", "legacy"]) {
    const missing = ["/usr/sbin", "/sbin", "/usr/bin"].every((d) =>
      !existsSync(`${d}/iptables-${backend}-restore`)
    );
    it(`iptables-${backend}: full, then incremental payloads; iptables-save equals a fresh full render`, {
      skip: missing ? `iptables-${backend}-restore not installed` : undefined,
    }, async () => {
      const ns: Netns = await scope.create(backend);
      const restore = async (payload: string) => {
        const r = await ns.exec([`iptables-${backend}-restore`, "--noflush", "--counters"], {
          input: payload,
        });
        if (r.code !== 0) throw new Error(`iptables-${backend}-restore: ${r.stderr}\n${payload}`);
      };
      const save = async () => await ns.execOk([`iptables-${backend}-save`]);
      // No nfacct objects exist in a fresh namespace: render without nfacct matches.
      const sc = new Scenario(prng(41), {
        features: { randomFully: false, nfacct: false, dropInvalid: true },
      });
      for (let i = 0; i < 15; i++) sc.addService();
      const first = sc.p.sync();
      assert.equal(first.error, null);
      await restore(first.result.payload);
      let edits = 0;
      for (let step = 0; step < 12; step++) {
        for (let i = 0; i < 2; i++) sc.mutate();
        const s = sc.p.sync();
        assert.equal(s.error, null);
        assert.equal(s.result.mode, "incremental");
        edits += (s.result.payload.match(/^-[DI] /gm) ?? []).length;
        await restore(s.result.payload);
        const kernel = rendered(await save());
        const expected = rendered(freshFullSync(sc.p).lastSync!.result.payload);
        for (const [chain, rules] of expected) {
          assert.deepEqual(kernel.get(chain), rules, `step ${step}: ${chain}`);
        }
        const kernelChains = [...kernel.keys()].filter((c) => !c.endsWith("/KUBE-PROXY-CANARY")).sort();
        assert.deepEqual(kernelChains, [...expected.keys()].sort(), `step ${step}: chain set`);
      }
      assert.ok(edits > 5, `the sequence edited shared chains (${edits} edits)`);

      // A -D of a rule the kernel does not have fails the transaction (and nothing of it is applied).
      const before = await save();
      const bogus = "*nat\n-I KUBE-SERVICES 1 -m comment --comment x -j KUBE-MARK-MASQ\n" +
        '-D KUBE-SERVICES -m comment --comment "nope cluster IP" -m tcp -p tcp -d 10.9.9.9 --dport 1 -j KUBE-MARK-MASQ\n' +
        "COMMIT\n";
      await assert.rejects(() => restore(bogus), /line 3 failed/);
      assert.equal(await save().then((t) => t.replace(/^#.*\n/gm, "")), before.replace(/^#.*\n/gm, ""));
    });
  }
});
