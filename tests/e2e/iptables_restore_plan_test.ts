/**
 * Split restore plans against the real kernel: a plan must leave exactly the rules that upstream's
 * single transaction leaves, on a first sync and on a resync with deleted, changed and new Services.
 *
 * With EDGEPROXY_BENCH=1 it also prints benchmark figures (no timed assertions):
 *   EDGEPROXY_BENCH=1 ./node_modules/.bin/deno test -A tests/e2e/iptables_restore_plan_test.ts
 * (EDGEPROXY_BENCH_SERVICES="1000,2000" picks the sizes; EDGEPROXY_BENCH_DRIFT=10000 the drift-check size,
 * 0 to skip it.) Needs root and `ip netns`; skipped otherwise.
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { type Netns, NetnsScope, netnsUnavailableReason } from "../support/netns.ts";
import { createIptablesRunner, type IptablesRunner } from "../../lib/proxy/iptables/runner.ts";
import { ensureJumpRules } from "../../lib/proxy/iptables/jump_rules.ts";
import { DriftTracker } from "../support/owned_rules.ts";
import { payloadOf, splitRestorePayload } from "../../lib/proxy/iptables/restore_plan.ts";
import { parseIptablesSave } from "../../lib/proxy/iptables/save_parse.ts";
import { base32Encode } from "../../lib/proxy/iptables/chain_names.ts";
import { createHash } from "node:crypto";

const skip = netnsUnavailableReason();
if (skip !== "") {
  console.log(`SKIP tests/e2e/iptables_restore_plan_test.ts: ${skip} (needs root and ip netns)`);
}
const bench = process.env.EDGEPROXY_BENCH === "1";

interface Svc {
  i: number;
  gen: number;
}

/**
 * Chain names hashed like upstream's (base32 of sha256, 16 characters). Not sequential on purpose:
 * iptables-nft 1.8.9's iptables-save is pathologically slow (20-95 s for 60k chains) when chains were
 * created in name order, and kube-proxy's hashed names never are.
 */
const id16 = (p: string, n: number) =>
  `${p}${base32Encode(createHash("sha256").update(`${p}${n}`).digest()).slice(0, 16)}`;

/**
 * kube-proxy-shaped nat+filter payload in upstream's single-transaction layout: per Service a KUBE-SVC
 * chain (masquerade rule + 5 probability jumps) and 5 KUBE-SEP chains (masquerade + DNAT); every third
 * Service also a NodePort with KUBE-EXT. `written` ⊆ `all` are declared; `stale` are deleted.
 */
function kubePayload(all: Svc[], written: Svc[], stale: string[], endpoints = 5): string {
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
  L.push(
    '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT',
  );
  L.push("COMMIT", "*nat");
  for (const c of ["KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ"]) {
    L.push(`:${c} - [0:0]`);
  }
  const svc = (s: Svc) => id16("KUBE-SVC-", s.i);
  const ext = (s: Svc) => id16("KUBE-EXT-", s.i);
  const sep = (s: Svc, e: number) => id16("KUBE-SEP-", s.i * 100 + s.gen * 10 + e);
  for (const s of written) {
    L.push(`:${svc(s)} - [0:0]`);
    if (s.i % 3 === 0) L.push(`:${ext(s)} - [0:0]`);
    for (let e = 0; e < endpoints; e++) L.push(`:${sep(s, e)} - [0:0]`);
  }
  for (const c of stale) L.push(`:${c} - [0:0]`);
  L.push("-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN");
  L.push("-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000");
  L.push(
    '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
  );
  L.push("-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000");
  for (const s of all) {
    const ip = `10.${96 + (s.i >> 16)}.${(s.i >> 8) & 255}.${s.i & 255}`;
    L.push(
      `-A KUBE-SERVICES -m comment --comment "ns${
        s.i % 50
      }/svc${s.i}:http cluster IP" -m tcp -p tcp -d ${ip} --dport 80 -j ${svc(s)}`,
    );
    if (s.i % 3 === 0) {
      L.push(
        `-A KUBE-NODEPORTS -m comment --comment "ns${s.i % 50}/svc${s.i}:http" -m tcp -p tcp --dport ${
          30000 + (s.i % 2700)
        } -j ${ext(s)}`,
      );
    }
  }
  L.push(
    '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS',
  );
  for (const s of written) {
    const name = `ns${s.i % 50}/svc${s.i}:http`;
    L.push(`-A ${svc(s)} -m comment --comment "${name} cluster IP" ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ`);
    for (let e = 0; e < endpoints; e++) {
      const n = s.i * endpoints + e;
      const ep = `10.${244 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}`;
      const left = endpoints - e;
      const prob = left > 1 ? ` -m statistic --mode random --probability ${(1 / left).toFixed(10)}` : "";
      L.push(`-A ${svc(s)} -m comment --comment "${name} -> ${ep}:8080"${prob} -j ${sep(s, e)}`);
    }
    for (let e = 0; e < endpoints; e++) {
      const n = s.i * endpoints + e;
      const ep = `10.${244 + (n >> 16)}.${(n >> 8) & 255}.${n & 255}`;
      L.push(`-A ${sep(s, e)} -m comment --comment "${name}" -s ${ep} -j KUBE-MARK-MASQ`);
      L.push(
        `-A ${sep(s, e)} -m comment --comment "${name}" -m tcp -p tcp -j DNAT --to-destination ${ep}:8080`,
      );
    }
    if (s.i % 3 === 0) {
      L.push(
        `-A ${
          ext(s)
        } -m comment --comment "masquerade traffic for ${name} external destinations" -j KUBE-MARK-MASQ`,
      );
      L.push(`-A ${ext(s)} -j ${svc(s)}`);
    }
  }
  for (const c of stale) L.push(`-X ${c}`);
  L.push("COMMIT", "");
  return L.join("\n");
}

function range(from: number, to: number, gen = 0): Svc[] {
  return Array.from({ length: to - from }, (_, k) => ({ i: from + k, gen }));
}

function chainsOf(s: Svc, endpoints = 5): string[] {
  const out = [id16("KUBE-SVC-", s.i)];
  if (s.i % 3 === 0) out.push(id16("KUBE-EXT-", s.i));
  for (let e = 0; e < endpoints; e++) out.push(id16("KUBE-SEP-", s.i * 100 + s.gen * 10 + e));
  return out;
}

/** nat and filter as chain → rules (iptables' own normalised text), for comparing two namespaces. */
async function tables(runner: IptablesRunner): Promise<Record<string, Record<string, string[]>>> {
  const out: Record<string, Record<string, string[]>> = {};
  for (const t of ["nat", "filter"] as const) {
    const parsed = parseIptablesSave(await runner.save(t)).get(t)!;
    out[t] = Object.fromEntries([...parsed.chains.values()].map((c) => [c.name, c.rules]).sort());
  }
  return out;
}

async function timed<T>(f: () => Promise<T>): Promise<[T, number]> {
  const t0 = performance.now();
  const v = await f();
  return [v, performance.now() - t0];
}

const fmt = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

describe("iptables e2e: split restore plans", { skip: skip || undefined }, () => {
  const env = new NetnsScope("ipp");
  after(() => env.cleanup());

  async function runnerIn(ns: Netns): Promise<IptablesRunner> {
    const r = await createIptablesRunner({ family: "IPv4", commandPrefix: ns.prefix });
    await ensureJumpRules(r);
    return r;
  }

  it("a plan leaves the same rules as one transaction: first sync and a resync (300 Services × 5)", async () => {
    const [single, split] = await Promise.all([
      env.create("single").then(runnerIn),
      env.create("split").then(runnerIn),
    ]);
    const all1 = range(0, 300);
    const p1 = kubePayload(all1, all1, []);
    await single.restore(p1);
    const plan1 = splitRestorePayload(p1, { maxChainsPerTransaction: 120 });
    const [, ms1] = await timed(() => split.restore(payloadOf(plan1)));
    assert.deepEqual(await tables(split), await tables(single));

    // Resync: 0..99 deleted, 100..199 new endpoints, 200..299 unchanged, 300..399 new.
    const all2 = [...range(100, 200, 1), ...range(200, 400)];
    const stale = [
      ...range(0, 100).flatMap((s) => chainsOf(s)),
      ...range(100, 200).flatMap((s) => chainsOf(s).filter((c) => c.startsWith("KUBE-SEP-"))),
    ];
    const p2 = kubePayload(all2, all2, stale);
    await single.restore(p2);
    const plan2 = splitRestorePayload(p2, { maxChainsPerTransaction: 120 });
    const [, ms2] = await timed(() => split.restore(payloadOf(plan2)));
    const got = await tables(split);
    assert.deepEqual(got, await tables(single));
    assert.equal(got.nat["KUBE-SERVICES"].length, 301);
    assert.equal(got.nat[id16("KUBE-SVC-", 0)], undefined, "deleted Service's chain is gone");
    console.log(
      `split plan: first sync ${plan1.transactions.length} transactions ${
        fmt(ms1)
      }, resync ${plan2.transactions.length} transactions ${fmt(ms2)}`,
    );
  });

  it("benchmark: one transaction vs a split plan, and the drift check at scale (EDGEPROXY_BENCH=1)", {
    skip: bench ? undefined : "set EDGEPROXY_BENCH=1",
  }, async () => {
    const sizes = (process.env.EDGEPROXY_BENCH_SERVICES ?? "1000,2000").split(",").map(Number);
    for (const n of sizes) {
      const all = range(0, n);
      const p = kubePayload(all, all, []);
      const plan = splitRestorePayload(p);
      const planned = payloadOf(plan);
      const single = await runnerIn(await env.create(`b${n}a`));
      const split = await runnerIn(await env.create(`b${n}b`));
      const [, s1] = await timed(() => single.restore(p));
      const [, s2] = await timed(() => single.restore(p));
      const [, p1] = await timed(() => split.restore(planned));
      const [, p2] = await timed(() => split.restore(planned));
      console.log(
        `BENCH ${n} Services × 5 endpoints (${p.split("\n").length} lines, ${
          (p.length / 1e6).toFixed(1)
        } MB, ` +
          `iptables ${single.version.text} ${single.version.backend}): one transaction: first ${
            fmt(s1)
          }, again ${fmt(s2)}; ` +
          `split (${plan.transactions.length} transactions, one process): first ${fmt(p1)}, again ${fmt(p2)}`,
      );
    }
    const driftN = Number(process.env.EDGEPROXY_BENCH_DRIFT ?? "10000");
    if (driftN > 0) {
      const all = range(0, driftN);
      const p = kubePayload(all, all, []);
      const ns = await env.create(`d${driftN}`);
      const runner = await runnerIn(ns);
      const [, restoreMs] = await timed(() => runner.restore(payloadOf(splitRestorePayload(p))));
      const tracker = new DriftTracker();
      tracker.recordRestore(p, true);
      const [natText, saveNatMs] = await timed(() => runner.save("nat"));
      const [, saveFilterMs] = await timed(() => runner.save("filter"));
      const t0 = performance.now();
      parseIptablesSave(natText);
      const parseMs = performance.now() - t0;
      const [cheap, cheapMs] = await timed(() => tracker.check(runner, { mode: "cheap", sampleSize: 16 }));
      const [full, fullMs] = await timed(() => tracker.check(runner, { mode: "full" }));
      assert.equal(cheap?.drifted, false, cheap?.reasons.join("; ") ?? "");
      assert.equal(full?.drifted, false, full?.reasons.join("; ") ?? "");
      await ns.execOk(["iptables", "-t", "nat", "-F", "KUBE-SERVICES"]);
      const [flushed, flushedMs] = await timed(() => tracker.check(runner, { mode: "cheap" }));
      assert.deepEqual(flushed?.reasons, [`nat KUBE-SERVICES has 0 rules, expected ${driftN + 1}`]);
      console.log(
        `BENCH drift at ${driftN} Services × 5 (${(natText.length / 1e6).toFixed(1)} MB nat): split restore ${
          fmt(restoreMs)
        }; ` +
          `iptables-save nat ${fmt(saveNatMs)}, filter ${fmt(saveFilterMs)}, parse nat ${
            parseMs.toFixed(0)
          } ms; ` +
          `cheap check (${cheap?.commands} iptables -S) ${fmt(cheapMs)}; full check ${fmt(fullMs)}; ` +
          `cheap check after a flush ${fmt(flushedMs)}: "${flushed?.reasons[0]}"`,
      );
    }
  });
});
