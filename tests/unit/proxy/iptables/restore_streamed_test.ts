/**
 * A full render's per-service chains are rendered from its facts as the restore plan is written
 * (SectionedPayload segments), not held in the result: the bytes iptables-restore reads, the whole payload
 * and every figure must stay what the render produced when it wrote them all up front, and a failing
 * restore must read the same lines back.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import {
  type RenderInput,
  renderIptablesRules,
  type RenderResult,
} from "../../../../lib/proxy/iptables/render/render.ts";
import {
  payloadChunksOf,
  payloadOf,
  planSections,
  type RestorePlanOptions,
} from "../../../../lib/proxy/iptables/restore_plan.ts";
import type { SectionedPayload } from "../../../../lib/proxy/iptables/restore_content.ts";
import { iptablesHost } from "../../../../lib/proxy/iptables/host.ts";
import {
  type IptablesRunner,
  RestoreError,
  type RestorePayload,
} from "../../../../lib/proxy/iptables/runner.ts";
import { IptablesBackend } from "../../../../lib/proxy/iptables/backend.ts";
import type { ProxyState } from "../../../../lib/proxy/provider.ts";
import { createKubeProxyMetrics } from "../../../../lib/metrics/kubeproxy.ts";
import { Registry } from "../../../../lib/metrics/registry.ts";
import { detectLocalByCIDR } from "../../../../lib/proxy/local_detect.ts";
import { iptablesLocalDetector } from "../../../../lib/proxy/iptables/local_detector.ts";
import { fakeProxierDefaults } from "../../../support/tracer.ts";
import { type OwnChainCluster, ownChainCluster } from "../../../support/own_chain_cluster.ts";

type Cluster = OwnChainCluster;

/**
 * Service ports of every own-chain shape (EXT, FW, SVL, affinity, several endpoints), one of them larger
 * than the small bounds below, and one skipped (unsafe endpoint).
 */
function cluster(n: number, gen: number): Cluster {
  return ownChainCluster(n, gen, true);
}

function input(
  c: Cluster,
  full: boolean,
  changed: string[],
  existing: ReadonlySet<string> | null,
): RenderInput {
  return {
    ...fakeProxierDefaults(),
    ...c,
    full,
    changedServices: new Set(changed),
    existingNatChains: existing,
  };
}

const sha = (s: string) => createHash("sha256").update(s).digest("hex").slice(0, 24);

/** The shapes pinned below: a first sync, a resync with stale chains, large-cluster mode, upstream partial. */
function shapes(): [string, () => RenderResult][] {
  const first = () => renderIptablesRules(input(cluster(60, 1), true, [], new Set()));
  const firstResult = first();
  const stale = new Set([
    ...firstResult.activeNatChains,
    "KUBE-SVC-STALE0000000000",
    "KUBE-SEP-STALE0000000000",
  ]);
  return [
    ["first sync", first],
    [
      "resync with a state and stale chains",
      () => renderIptablesRules(input(cluster(70, 2), true, [], stale), firstResult.state),
    ],
    ["large-cluster mode", () => renderIptablesRules(input(cluster(480, 3), true, [], stale))],
    [
      "upstream partial",
      () =>
        renderIptablesRules(
          input(cluster(60, 1), false, ["ns1/svc1", "ns2/svc2:p80/TCP", "ns3/svc8"], stale),
        ),
    ],
  ];
}

const PLANS: [string, RestorePlanOptions][] = [
  ["nft", { backend: "nf_tables" }],
  ["nft small", { backend: "nf_tables", maxChainsPerTransaction: 7, maxLinesPerTransaction: 40 }],
  ["legacy", { backend: "legacy" }],
];

/** A payload as the backend hands it to its host: the chunks are made only if iterated. */
function lazyPayload(r: RenderResult): Iterable<string> {
  return { [Symbol.iterator]: () => r.payloadChunks[Symbol.iterator]() };
}

/**
 * sha256 prefixes of the whole payload, of each plan's iptables-restore input, and of the figures, as
 * the render made them when it wrote every own chain into the result (commit e4acf8c).
 */
const PINNED: Record<string, Record<string, string>> = {
  "first sync": {
    nft: "d35bf0dd0ed920710a3009e2",
    "nft small": "16a6b9861bbb11efa454f103",
    legacy: "3c72881916b3dfcaae1e3c8a",
    payload: "70813d8982de4c7e8cf3d9a8",
    figures: "93cb11b981fb5dd8d7f3d2f8",
  },
  "resync with a state and stale chains": {
    nft: "847e2839fa6ad4dc63be12ca",
    "nft small": "c8efaa07581b135957e708a7",
    legacy: "a061cedaa0a2dd5467978efe",
    payload: "3e841139d8bc35c4c4787d48",
    figures: "4217bbc78b0bd9d8af1cbb33",
  },
  "large-cluster mode": {
    nft: "a5e2c90fe69fbee00082826e",
    "nft small": "9b8a9bf07827e6e483afee50",
    legacy: "d8aaa8d3836fa798a72a3e04",
    payload: "7b1b1749c66d338de1d00263",
    figures: "2b2f873ea1c269b667018711",
  },
  "upstream partial": {
    nft: "0f43234e542af697eb21d4b2",
    "nft small": "d3452032bd7d4435e175f158",
    legacy: "c5deb32b588cac9aea555106",
    payload: "e507d30c769fa6e863c54d50",
    figures: "da04a3537620d824e7a09877",
  },
};

describe("streamed own chains", () => {
  for (const [name, make] of shapes()) {
    it(`${name}: the bytes iptables-restore reads and the payload are the ones pinned`, () => {
      const got: Record<string, string> = {};
      for (const [plan, opts] of PLANS) {
        // A fresh render per plan: the plan is streamed before the whole payload was ever made.
        const r = make();
        got[plan] = sha(payloadOf(planSections(r.sections!, lazyPayload(r), opts)));
      }
      const r = make();
      const length = r.payloadLength;
      got.payload = sha(r.payload);
      assert.equal(length, r.payload.length);
      got.figures = sha(JSON.stringify([
        r.mode,
        r.rulesWritten,
        r.rulesTotal,
        r.staleChains,
        [...r.activeNatChains].sort(),
        r.warnings,
        r.skippedServices,
        r.noLocalEndpoints,
        r.largeClusterMode,
      ]));
      assert.deepEqual(got, PINNED[name]);
      // What each shape is there for.
      const covers = {
        "first sync": r.skippedServices.length === 1 && r.sections!.segments.length > 1,
        "resync with a state and stale chains": r.staleChains.length > 0,
        "large-cluster mode": r.largeClusterMode,
        "upstream partial": r.mode === "partial" && r.sections!.segments.length > 0,
      }[name];
      assert.ok(covers, name);
    });
  }

  it("a segment's text is rendered when its transaction is reached, once per pass", () => {
    const r = renderIptablesRules(input(cluster(300, 1), true, [], new Set()));
    let rendered = 0;
    const counted: SectionedPayload = {
      shared: r.sections!.shared,
      segments: r.sections!.segments.map((g) => ({
        chains: g.chains,
        ruleLines: g.ruleLines,
        text: () => {
          rendered++;
          return g.text();
        },
      })),
    };
    // Segments within the bounds (a larger one is read back into chains when planned).
    const plan = planSections(counted, lazyPayload(r), { maxChainsPerTransaction: 600 });
    assert.equal(rendered, 0, "planning renders no own chain");
    assert.ok(plan.transactions.filter((t) => t.step === "nat-services").length > 1);
    const it = payloadChunksOf(plan)[Symbol.iterator]();
    assert.match(it.next().value as string, /^\*filter\n/);
    assert.equal(rendered, 0, "the filter table goes out before any own chain is rendered");
    let chunks = 1;
    while (!it.next().done) chunks++;
    const n = counted.segments.length;
    assert.ok(n > 2, `${n} segments`);
    assert.equal(rendered, n, "each segment rendered once");
    assert.ok(chunks > 2 * n);
    const eager = planSections(r.sections!, r.payloadChunks, { maxChainsPerTransaction: 600 });
    assert.equal([...payloadChunksOf(plan)].join(""), payloadOf(eager));
    assert.equal(rendered, 2 * n, "a second pass renders them again, nothing was kept");
  });

  it("a failing restore blames the same line as on the whole text, re-reading the streamed plan", async () => {
    const r = renderIptablesRules(input(cluster(60, 1), true, [], new Set()));
    const text = payloadOf(planSections(r.sections!, r.payloadChunks));
    const all = text.split("\n");
    // A rule in a nat-services transaction well into the stream, and a COMMIT naming a missing chain.
    const ruleLine = all.findIndex((l, i) => i > all.length / 2 && l.startsWith("-A KUBE-SEP-")) + 1;
    const commitLine = all.indexOf("COMMIT", ruleLine) + 1;
    const target =
      /-j (KUBE-SEP-\S+)/.exec(all.slice(0, commitLine).findLast((l) => /-j KUBE-SEP-/.test(l))!)![1];
    for (
      const stderr of [
        `iptables-restore: line ${ruleLine} failed\n`,
        `iptables-restore v1.8.9 (nf_tables): Chain '${target}' does not exist\nError occurred at line: ${commitLine}\n`,
      ]
    ) {
      const written: string[] = [];
      let failure: RestoreError | null = null;
      const runner = {
        version: { backend: "nf_tables" },
        family: "IPv4",
        restore(payload: RestorePayload): Promise<void> {
          // iptables-restore reads up to the failing line, then exits.
          let lines = 0;
          for (const c of typeof payload === "string" ? [payload] : payload) {
            written.push(c);
            lines += c.split("\n").length - 1;
            if (lines >= commitLine) break;
          }
          failure = new RestoreError("IPv4", 1, stderr, payload);
          return Promise.reject(failure);
        },
      } as unknown as IptablesRunner;
      const host = iptablesHost(runner);
      const fresh = renderIptablesRules(input(cluster(60, 1), true, [], new Set()));
      await assert.rejects(
        host.restore(lazyPayload(fresh), fresh.sections),
        (e) => e === failure,
      );
      const want = new RestoreError("IPv4", 1, stderr, text);
      const got = failure! as RestoreError;
      assert.equal(got.message, want.message);
      assert.deepEqual([got.line, got.lineText, got.committedTransactions], [
        want.line,
        want.lineText,
        want.committedTransactions,
      ]);
      assert.ok(text.startsWith(written.join("")));
    }
  });

  it("the backend streams a full sync, reports its size, and forgets its state when the restore fails", async () => {
    const c = cluster(60, 1);
    let fail = true;
    const restored: string[] = [];
    const runner = {
      version: { backend: "nf_tables" },
      family: "IPv4",
      features: { waitFlags: [] },
      restore(payload: RestorePayload): Promise<void> {
        const t = [...(typeof payload === "string" ? [payload] : payload)].join("");
        if (fail) {
          return Promise.reject(new RestoreError("IPv4", 1, "iptables-restore: line 3 failed\n", payload));
        }
        restored.push(t);
        return Promise.resolve();
      },
      exec: () => Promise.resolve({ code: 0, stdout: "", stderr: "" }),
    } as unknown as IptablesRunner;
    const host = iptablesHost(runner);
    const metrics = createKubeProxyMetrics(new Registry());
    const backend = new IptablesBackend({
      ...fakeProxierDefaults(),
      host: {
        ...host,
        natChains: () => Promise.resolve(new Set()),
        ensureBaseRules: () => Promise.resolve(),
      },
      log: { warn() {} },
      metrics,
      nodeIPs: () => fakeProxierDefaults().nodeIPs,
      primaryNodeIP: () => fakeProxierDefaults().primaryNodeIP,
    });
    const state: ProxyState = {
      family: "IPv4",
      services: c.services as unknown as ProxyState["services"],
      endpoints: c.endpoints as unknown as ProxyState["endpoints"],
      changedServices: new Set(),
      nodeLabels: {},
      localDetection: detectLocalByCIDR("10.0.0.0/8"),
    };
    await assert.rejects(backend.sync(state, { full: true }), RestoreError);
    assert.equal(metrics.iptablesRestoreFailuresTotal.get({ ip_family: "IPv4" }), 1);
    fail = false;
    // The failed sync's state was dropped: a partial sync cannot be incremental.
    assert.equal((await backend.sync(state, { full: false })).kind, "partial");
    const outcome = await backend.sync(state, { full: true });
    const r = renderIptablesRules({
      ...input(c, true, [], new Set()),
      localDetector: iptablesLocalDetector(state.localDetection),
    });
    assert.equal(restored[1], payloadOf(planSections(r.sections!, r.payloadChunks)));
    assert.equal(outcome.bytes, r.payload.length);
    assert.equal(outcome.kind, "full");
  });
});
