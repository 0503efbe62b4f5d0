/**
 * What a render costs, in operations rather than time: an incremental partial sync processes only the
 * service ports that changed (endpoint categorisation, chain-name hashes, validation), whatever the
 * number of unchanged ones; full syncs given the previous state reuse its hashes. Also the pieces that
 * make that possible: prefix sums for `-I` positions, the lazily expanded active-chain set, chunked
 * payloads, and aggregates kept in the state equal to a from-scratch render's.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  type RenderInput,
  renderIptablesRules,
  type RenderResult,
} from "../../../../../lib/proxy/iptables/render/render.ts";
import { SharedChainPositions } from "../../../../../lib/proxy/iptables/render/positions.ts";
import { SHARED_CHAIN_COUNT } from "../../../../../lib/proxy/iptables/render/shared_chains.ts";
import type { EndpointInfo, Protocol, ServicePortInfo } from "../../../../../lib/proxy/types.ts";
import { servicePortKey } from "../../../../../lib/proxy/types.ts";
import { newNoOpLocalDetector } from "../../../../../lib/proxy/iptables/local_detector.ts";
import {
  fakeProxierDefaults,
  makeEndpoint,
  makeServicePort,
  TEST_NODE_NAME,
} from "../../../../support/tracer.ts";
import { mulberry32 as prng } from "../../../../support/random.ts";

function sortEndpoints(eps: EndpointInfo[]): EndpointInfo[] {
  return eps.sort((a, b) => (a.endpoint < b.endpoint ? -1 : a.endpoint > b.endpoint ? 1 : 0));
}

/** n Services of one port each (a quarter with a NodePort), `perService` endpoints each. */
function cluster(n: number, perService: number) {
  const services = new Map<string, ServicePortInfo>();
  const endpoints = new Map<string, readonly EndpointInfo[]>();
  for (let i = 0; i < n; i++) {
    const svc = makeServicePort(`ns${i % 10}`, `svc${i}`, {
      clusterIP: `172.30.${i >> 8}.${i & 255}`,
      nodePort: i % 4 === 0 ? 30000 + (i % 2000) : 0,
    });
    const key = servicePortKey(svc.name);
    services.set(key, svc);
    const eps: EndpointInfo[] = [];
    for (let e = 1; e <= perService; e++) {
      eps.push(makeEndpoint(`10.${(i >> 8) & 255}.${i & 255}.${e}`, 8080));
    }
    endpoints.set(key, sortEndpoints(eps));
  }
  return { services, endpoints };
}

function input(
  c: ReturnType<typeof cluster>,
  sync: { full: boolean; changed?: string[]; existing?: ReadonlySet<string> | null },
): RenderInput {
  return {
    ...fakeProxierDefaults(),
    services: c.services,
    endpoints: c.endpoints,
    full: sync.full,
    changedServices: new Set(sync.changed ?? []),
    existingNatChains: sync.existing ?? null,
  };
}

/** The aggregate fields a render computes over every service port. */
function aggregates(r: RenderResult) {
  return {
    rulesTotal: r.rulesTotal,
    noLocalEndpoints: r.noLocalEndpoints,
    totalEndpoints: r.totalEndpoints,
    largeClusterMode: r.largeClusterMode,
    skippedServices: r.skippedServices,
    warnings: r.warnings,
    activeNatChains: [...r.activeNatChains].sort(),
  };
}

/** Runs the three kinds of change on a fresh cluster of n Services; returns each render's work. */
function changesAt(n: number) {
  const c = cluster(n, 2);
  const full = renderIptablesRules(input(c, { full: true }));
  const work: Record<string, RenderResult["work"]> = {};
  let state = full.state;
  let active = full.activeNatChains;
  const step = (name: string, changed: string[]) => {
    const r = renderIptablesRules(input(c, { full: false, changed, existing: active }), state);
    assert.equal(r.mode, "incremental", name);
    // The same aggregates as a render from scratch of the same input.
    const scratch = renderIptablesRules(input(c, { full: false, changed, existing: new Set(active) }));
    assert.deepEqual(aggregates(r), aggregates(scratch), `${n}: ${name}`);
    assert.deepEqual(r.staleChains, scratch.staleChains, `${n}: ${name}: stale chains`);
    work[name] = r.work;
    state = r.state;
    active = r.activeNatChains;
    return r;
  };

  // One endpoint of svc7 replaced (the proxier names the service port's key).
  const key7 = "ns7/svc7:p80/TCP";
  const eps = [...c.endpoints.get(key7)!];
  eps[1] = makeEndpoint("10.250.0.9", 8080);
  c.endpoints.set(key7, sortEndpoints(eps));
  const ep = step("one endpoint (key)", [key7]);
  assert.equal(ep.staleChains.length, 1);

  // The same, named as a Service (FakeProxier style).
  const eps2 = [...c.endpoints.get(key7)!];
  eps2[0] = makeEndpoint("10.250.0.10", 8080);
  c.endpoints.set(key7, sortEndpoints(eps2));
  step("one endpoint (Service)", ["ns7/svc7"]);

  // svc5 deleted.
  const key5 = "ns5/svc5:p80/TCP";
  c.services.delete(key5);
  c.endpoints.delete(key5);
  const del = step("delete", ["ns5/svc5"]);
  assert.match(del.payload, /^-D KUBE-SERVICES .*"ns5\/svc5:p80 cluster IP"/m);

  // A new Service, named by key.
  const added = makeServicePort("ns3", "added", { clusterIP: "172.29.0.1", nodePort: 31999 });
  const addedKey = servicePortKey(added.name);
  c.services.set(addedKey, added);
  c.endpoints.set(addedKey, [makeEndpoint("10.251.0.1", 80)]);
  const add = step("add (key)", [addedKey]);
  assert.match(add.payload, /^-I KUBE-SERVICES \d+ .*"ns3\/added:p80 cluster IP"/m);

  // A new port of an existing Service, named only as "namespace/name": found by scanning.
  const port2 = makeServicePort("ns3", "added", { clusterIP: "172.29.0.1", port: "p53", protocol: "UDP" });
  c.services.set(servicePortKey(port2.name), port2);
  step("new port (Service)", ["ns3/added"]);
  return { work, services: c.services.size };
}

describe("an incremental sync's work does not grow with the unchanged Services", () => {
  it("1k vs 10k Services: same service ports processed, hashes computed, endpoints categorised", () => {
    const small = changesAt(1000);
    const large = changesAt(10000);
    for (const name of ["one endpoint (key)", "one endpoint (Service)", "delete", "add (key)"]) {
      assert.deepEqual(large.work[name], small.work[name], name);
      assert.equal(large.work[name].scanned, 0, `${name}: found from changedServices alone`);
    }
    // One service port re-derived: 1 categorisation; its port hash plus one per reachable endpoint.
    assert.deepEqual(small.work["one endpoint (key)"], {
      servicePorts: 1,
      categorized: 1,
      hashes: 3,
      validated: 1,
      scanned: 0,
    });
    assert.equal(small.work["delete"].servicePorts, 0, "a deletion re-derives nothing");
    assert.equal(small.work["add (key)"].servicePorts, 1);
    // The documented fallback: a port added under a Service name makes the renderer compare every key.
    assert.equal(small.work["new port (Service)"].servicePorts, 2, "the Service's two ports");
    assert.equal(small.work["new port (Service)"].scanned, small.services);
    assert.equal(large.work["new port (Service)"].scanned, large.services);
  });

  it("a full sync given the previous state hashes and validates nothing that did not change", () => {
    const c = cluster(300, 3);
    const first = renderIptablesRules(input(c, { full: true }));
    assert.equal(first.work.hashes, 300 * (1 + 3));
    assert.equal(first.work.validated, 300);
    const again = renderIptablesRules(input(c, { full: true }), first.state);
    assert.equal(again.mode, "full");
    assert.equal(again.work.hashes, 0);
    assert.equal(again.work.validated, 0);
    // Own chains are rendered from the facts when the payload is read (not counted here): the render
    // itself re-derives nothing for unchanged service ports.
    assert.equal(first.work.categorized, 300);
    assert.equal(again.work.categorized, 0);
    assert.equal(again.payload, first.payload);
    // A changed setting the facts depend on (local detection) makes nothing reusable.
    const other = renderIptablesRules(
      { ...input(c, { full: true }), localDetector: newNoOpLocalDetector() },
      first.state,
    );
    assert.equal(other.work.hashes, first.work.hashes);
  });
});

describe("bookkeeping kept in the state equals a render from scratch", () => {
  for (const seed of [1, 2, 3, 4]) {
    it(`seed ${seed}: random changes named by key or by Service, skipped ports, setting changes`, () => {
      const rnd = prng(seed);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)];
      const byKey = seed % 2 === 0;
      const services = new Map<string, ServicePortInfo>();
      const endpoints = new Map<string, readonly EndpointInfo[]>();
      const changed = new Set<string>();
      let settings = fakeProxierDefaults();
      let next = 0;
      const mark = (svc: ServicePortInfo) =>
        changed.add(byKey ? servicePortKey(svc.name) : `${svc.name.namespace}/${svc.name.name}`);
      const eps = () => {
        const out = new Map<string, EndpointInfo>();
        for (let i = pick([0, 1, 2, 3, 40]); i > 0; i--) {
          const ready = rnd() < 0.8;
          const ep = makeEndpoint(`10.180.${Math.floor(rnd() * 4)}.${1 + Math.floor(rnd() * 60)}`, 80, {
            nodeName: rnd() < 0.4 ? TEST_NODE_NAME : "other",
            ready,
            serving: ready || rnd() < 0.5,
            terminating: !ready && rnd() < 0.7,
          });
          out.set(ep.endpoint, ep);
        }
        return sortEndpoints([...out.values()]);
      };
      const add = () => {
        const name = `svc${next++}`;
        const ns = pick(["ns1", "ns2"]);
        const ports: Array<[string, Protocol]> = rnd() < 0.3
          ? [["p80", "TCP"], ["p53", "UDP"]]
          : [["p80", "TCP"]];
        const lb = rnd() < 0.5 ? [] : ["1.2.3.4"];
        for (const [port, protocol] of ports) {
          const svc = makeServicePort(ns, name, {
            port,
            protocol,
            clusterIP: rnd() < 0.05 ? "not-an-ip" : `172.30.0.${1 + Math.floor(rnd() * 40)}`,
            nodePort: rnd() < 0.5 ? 30000 + Math.floor(rnd() * 50) : 0,
            externalIPs: rnd() < 0.3 ? ["192.168.99.1"] : [],
            loadBalancerVIPs: lb,
            loadBalancerSourceRanges: lb.length > 0 && rnd() < 0.5 ? ["192.168.0.0/16"] : [],
            externalPolicyLocal: rnd() < 0.3,
            internalPolicyLocal: rnd() < 0.2,
            stickyMaxAgeSeconds: rnd() < 0.2 ? 10800 : 0,
          });
          services.set(servicePortKey(svc.name), svc);
          endpoints.set(servicePortKey(svc.name), eps());
          mark(svc);
        }
      };
      for (let i = 0; i < 12; i++) add();
      let last = renderIptablesRules({
        ...settings,
        services,
        endpoints,
        full: true,
        changedServices: new Set(),
        existingNatChains: null,
      });
      changed.clear();
      for (let step = 0; step < 40; step++) {
        for (let n = 1 + Math.floor(rnd() * 3); n > 0; n--) {
          const keys = [...services.keys()];
          if (keys.length === 0 || rnd() < 0.15) {
            add();
            continue;
          }
          const key = pick(keys);
          const svc = services.get(key)!;
          const r = rnd();
          if (r < 0.15) {
            for (const [k, s] of services) {
              if (s.name.namespace !== svc.name.namespace || s.name.name !== svc.name.name) continue;
              services.delete(k);
              endpoints.delete(k);
              mark(s);
            }
          } else if (r < 0.7) {
            endpoints.set(key, eps());
            mark(svc);
          } else {
            services.set(key, {
              ...svc,
              nodePort: svc.nodePort === 0 ? 30001 : 0,
              internalPolicyLocal: r < 0.8,
            });
            mark(svc);
          }
        }
        if (rnd() < 0.1) settings = { ...settings, masqueradeAll: !settings.masqueradeAll };
        if (rnd() < 0.1) {
          settings = { ...settings, nodeLabels: { "topology.kubernetes.io/zone": pick(["a", "b"]) } };
        }
        const base = { ...settings, services, endpoints, full: false, changedServices: new Set(changed) };
        const r = renderIptablesRules({ ...base, existingNatChains: last.activeNatChains }, last.state);
        const copy = renderIptablesRules(
          { ...base, existingNatChains: new Set(last.activeNatChains) },
          last.state,
        );
        const scratch = renderIptablesRules({ ...base, existingNatChains: new Set(last.activeNatChains) });
        const where = `seed ${seed} step ${step}`;
        assert.equal(r.mode, "incremental", where);
        assert.equal(
          r.payload,
          copy.payload,
          `${where}: stale chains from the facts = from a scan of the set`,
        );
        assert.deepEqual(r.staleChains, scratch.staleChains, where);
        assert.deepEqual(aggregates(r), aggregates(scratch), where);
        assert.equal(r.payloadChunks.join(""), r.payload);
        last = r;
        changed.clear();
      }
    });
  }
});

describe("SharedChainPositions", () => {
  it("prefix sums match a naive sum after builds, updates and clones", () => {
    let seed = 7;
    const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
    for (const size of [0, 1, 2, 5, 17, 64, 100]) {
      const counts = Array.from(
        { length: size },
        () => Array.from({ length: SHARED_CHAIN_COUNT }, () => Math.floor(rnd() * 5)),
      );
      const p = SharedChainPositions.build(size, (i, c) => counts[i][c]);
      const q = p.clone();
      for (let k = 0; k < 50 && size > 0; k++) {
        const i = Math.floor(rnd() * size),
          c = Math.floor(rnd() * SHARED_CHAIN_COUNT),
          d = Math.floor(rnd() * 7) - 3;
        counts[i][c] += d;
        q.add(c, i, d);
      }
      for (let c = 0; c < SHARED_CHAIN_COUNT; c++) {
        let sum = 0;
        for (let i = 0; i <= size; i++) {
          assert.equal(q.before(c, i), sum, `size ${size} chain ${c} index ${i}`);
          if (i < size) sum += counts[i][c];
        }
      }
      // The original is untouched by the clone's updates.
      const rebuilt = SharedChainPositions.build(size, (i, c) => counts[i][c]);
      for (let c = 0; c < SHARED_CHAIN_COUNT; c++) assert.equal(rebuilt.before(c, size), q.before(c, size));
      if (size > 0) assert.equal(p.byteLength, q.byteLength);
    }
  });
});

describe("RenderResult.activeNatChains and payloadChunks", () => {
  const c = cluster(40, 3);
  const r = renderIptablesRules(input(c, { full: true }));

  it("activeNatChains holds exactly the declared per-service chains and is read-only", () => {
    const declared = r.payload.split("\n").filter((l) => /^:KUBE-(SVC|SVL|EXT|FW|SEP)-/.test(l)).map((l) =>
      l.slice(1).split(" ")[0]
    );
    assert.equal(r.activeNatChains.size, declared.length);
    assert.deepEqual([...r.activeNatChains].sort(), declared.sort());
    assert.ok(declared.every((d) => r.activeNatChains.has(d)));
    assert.equal(new Set(r.activeNatChains).size, declared.length);
    assert.ok(r.activeNatChains.isSupersetOf(new Set(declared.slice(0, 3))));
    assert.throws(() => r.activeNatChains.add("KUBE-SEP-X"), /read-only/);
    assert.throws(() => r.activeNatChains.delete(declared[0]), /read-only/);
    assert.throws(() => r.activeNatChains.clear(), /read-only/);
  });

  it("the payload comes in flat chunks of whole lines", () => {
    const big = renderIptablesRules(input(cluster(2000, 3), { full: true }));
    const chunks = big.payloadChunks;
    assert.ok(chunks.length > 10, `${chunks.length} chunks`);
    for (const ch of chunks) {
      assert.ok(ch.endsWith("\n"));
      assert.ok(ch.length < 200_000, `chunk of ${ch.length} chars`);
    }
    const joined = chunks.join("");
    assert.equal(big.payload, joined);
    assert.deepEqual(big.payloadChunks, [joined], "once joined, the chunks are dropped");
  });
});
