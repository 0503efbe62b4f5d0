/**
 * ServiceCIDRs from the apiserver (networking.k8s.io/v1), through the source, the StateStore and the
 * ServiceCIDR config into one CIDR list: list and watch (and poll mode) deliver adds, updates and deletes;
 * an apiserver without the API (404) or RBAC without it (403) does not hold the source's `synced` (the
 * first sync), and is retried; the source does not ask for them unless told to (the modes other than
 * nftables). --manifests reads them; the StateStore drops ServiceCIDRs only a state cache knew once the
 * live list is complete. Also the ServiceCIDR config alone: union, normalisation, bad values.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startTestApiserver, type TestApiserverOptions } from "../../support/apiserver.ts";
import { loadRestConfig } from "../../../lib/k8s/kubeconfig.ts";
import { ApiTransport, type Logger } from "../../../lib/k8s/transport.ts";
import { ApiStats } from "../../../lib/k8s/stats.ts";
import type { ServiceCIDR } from "../../../lib/k8s/objects.ts";
import type { ProxyHandlers } from "../../../lib/proxy/handlers.ts";
import { startApiserverSource } from "../../../lib/source/apiserver.ts";
import { StateStore } from "../../../lib/source/state_store.ts";
import {
  ServiceCIDRConfig,
  serviceCIDRsOf,
  withServiceCIDRConfig,
} from "../../../lib/source/service_cidrs.ts";
import { decodeState, encodeState } from "../../../lib/source/state_cache.ts";
import { startManifestsSource } from "../../../lib/source/manifests.ts";

const noop = () => {};
/** Handlers that record only the CIDR lists they are told. */
function recorder(): ProxyHandlers & { lists: string[][] } {
  const lists: string[][] = [];
  return {
    lists,
    onServiceAdd: noop,
    onServiceUpdate: noop,
    onServiceDelete: noop,
    onServicesSynced: noop,
    onEndpointSliceAdd: noop,
    onEndpointSliceUpdate: noop,
    onEndpointSliceDelete: noop,
    onEndpointSlicesSynced: noop,
    onNodeAdd: noop,
    onNodeUpdate: noop,
    onNodeDelete: noop,
    onNodeSynced: noop,
    onServiceCIDRsChanged: (c) => lists.push([...c]),
  };
}

const cidr = (name: string, cidrs: unknown[]): ServiceCIDR => ({
  metadata: { name },
  spec: { cidrs: cidrs as string[] },
});

async function waitFor(what: string, cond: () => boolean, timeoutMs = 15_000): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const TIMINGS = {
  backoff: { initialMs: 20, maxMs: 100 },
  watchTimeoutMinSeconds: 1,
  watchTimeoutMaxSeconds: 2,
  watchdogMs: 3000,
  shortWatchMs: 50,
};

/** A source over a test apiserver feeding StateStore → ServiceCIDR config → a recorder. */
async function harness(
  opts: TestApiserverOptions,
  source: { mode: "watch" | "poll"; serviceCIDRs: boolean },
) {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-cidr-"));
  const srv = await startTestApiserver({ bookmarkIntervalMs: 200, ...opts });
  srv.create("nodes", { metadata: { name: "edge-1" } });
  const kc = join(dir, "kc");
  await srv.writeKubeconfig(kc, { user: "clientCert" });
  const logs: string[] = [];
  const log: Logger = { debug() {}, info() {}, warn: (m) => logs.push(m), error: (m) => logs.push(m) };
  const stats = new ApiStats();
  const t = new ApiTransport({
    config: await loadRestConfig({ kubeconfig: kc, env: {} }),
    qps: -1,
    stats,
    log,
  });
  const rec = recorder();
  const warnings: string[] = [];
  const store = new StateStore(withServiceCIDRConfig(rec, (m) => warnings.push(m)));
  const src = startApiserverSource({
    connection: t,
    nodeName: "edge-1",
    handlers: store,
    mode: source.mode,
    pollIntervalMs: 200,
    serviceCIDRs: source.serviceCIDRs,
    stats,
    log,
    timings: TIMINGS,
  });
  return {
    srv,
    src,
    rec,
    store,
    logs,
    warnings,
    last: () => rec.lists.at(-1),
    close: async () => {
      await src.stop();
      t.close();
      await srv.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

describe("ServiceCIDR source", () => {
  for (const mode of ["watch", "poll"] as const) {
    it(`${mode}: lists and follows ServiceCIDRs into one sorted CIDR list; the state cache carries them`, {
      timeout: 30_000,
    }, async () => {
      const h = await harness({}, { mode, serviceCIDRs: true });
      try {
        h.srv.create("servicecidrs", cidr("kubernetes", ["10.96.0.0/16", "fd00:10:96::/112"]));
        await h.src.synced;
        await waitFor("the first list", () => h.last() !== undefined && h.last()!.length === 2);
        assert.deepEqual(h.last(), ["10.96.0.0/16", "fd00:10:96::/112"]);
        h.srv.create("servicecidrs", cidr("extra", ["10.100.0.0/24"]));
        await waitFor("the add", () => h.last()?.length === 3);
        assert.deepEqual(h.last(), ["10.100.0.0/24", "10.96.0.0/16", "fd00:10:96::/112"]);
        h.srv.update("servicecidrs", cidr("extra", ["10.101.0.0/24"]));
        await waitFor("the update", () => h.last()?.includes("10.101.0.0/24") === true);
        assert.deepEqual(h.store.snapshot().serviceCIDRs?.map((c) => c.metadata?.name), [
          "extra",
          "kubernetes",
        ]);
        const decoded = decodeState(
          encodeState(h.store.snapshot(), "edge-1", Date.now()),
          "edge-1",
          Date.now(),
        );
        assert.ok(decoded.ok);
        assert.deepEqual(decoded.state.serviceCIDRs?.map((c) => c.spec?.cidrs), [["10.101.0.0/24"], [
          "10.96.0.0/16",
          "fd00:10:96::/112",
        ]]);
        h.srv.remove("servicecidrs", "", "extra");
        await waitFor("the delete", () => h.last()?.length === 2);
        assert.deepEqual(h.last(), ["10.96.0.0/16", "fd00:10:96::/112"]);
        assert.deepEqual(h.warnings, []);
      } finally {
        await h.close();
      }
    });
  }

  for (const [how, mode] of [["notFound", "watch"], ["forbidden", "watch"], ["notFound", "poll"]] as const) {
    it(
      `${mode}: an apiserver answering ${
        how === "notFound" ? 404 : 403
      } for servicecidrs does not hold the first sync; it is retried`,
      {
        timeout: 30_000,
      },
      async () => {
        const h = await harness({ serviceCIDRs: how }, { mode, serviceCIDRs: true });
        try {
          await h.src.synced;
          assert.equal(h.store.liveSynced, true);
          const code = how === "notFound" ? 404 : 403;
          await waitFor(
            "two refused lists",
            () =>
              h.srv.requests.filter((r) => r.path.includes("servicecidrs") && r.status === code).length >= 2,
          );
          assert.deepEqual(
            h.rec.lists,
            [],
            "no CIDR list: the rule is left out, as upstream without the API",
          );
          assert.ok(h.logs.some((l) => l.includes("servicecidrs")), h.logs.join("\n"));
        } finally {
          await h.close();
        }
      },
    );
  }

  it(
    "does not ask for servicecidrs unless told to (modes other than nftables)",
    { timeout: 30_000 },
    async () => {
      const h = await harness({}, { mode: "watch", serviceCIDRs: false });
      try {
        await h.src.synced;
        assert.equal(h.srv.requests.filter((r) => r.path.includes("servicecidrs")).length, 0);
      } finally {
        await h.close();
      }
    },
  );
});

describe("ServiceCIDR config", () => {
  it("hands over the union of every object's valid CIDRs, normalised, sorted, once per change", () => {
    const lists: string[][] = [];
    const warnings: string[] = [];
    const c = new ServiceCIDRConfig(
      { onServiceCIDRsChanged: (x) => lists.push([...x]) },
      (m) => warnings.push(m),
    );
    c.onServiceCIDRsSynced();
    assert.deepEqual(lists, [[]], "synced hands over the (empty) list, as upstream's Run");
    c.onServiceCIDRAdd(cidr("a", ["10.96.0.1/16"]));
    c.onServiceCIDRAdd(cidr("b", ["10.96.0.0/16", "FD00:10::/112"]));
    assert.deepEqual(lists.at(-1), ["10.96.0.0/16", "fd00:10::/112"]);
    const n = lists.length;
    c.onServiceCIDRUpdate(cidr("a", ["10.96.0.1/16"]), cidr("a", ["10.96.0.1/16"]));
    assert.equal(lists.length, n, "an unchanged list is not handed over again");
    // Upstream deletes a deleted object's CIDRs from one shared set even when another still holds them.
    c.onServiceCIDRDelete(cidr("a", ["10.96.0.1/16"]));
    assert.deepEqual(lists.at(-1), ["10.96.0.0/16", "fd00:10::/112"]);
    assert.deepEqual(warnings, []);
  });

  it("leaves out a bad value with one line naming the object and the field, once while it persists", () => {
    const lists: string[][] = [];
    const warnings: string[] = [];
    const c = new ServiceCIDRConfig(
      { onServiceCIDRsChanged: (x) => lists.push([...x]) },
      (m) => warnings.push(m),
    );
    const bad = cidr("broken", ["10.96.0.0/16", "10.97.0.0/33", 7]);
    c.onServiceCIDRAdd(bad);
    c.onServiceCIDRUpdate(bad, { ...bad, metadata: { name: "broken", labels: { x: "y" } } });
    assert.deepEqual(lists.at(-1), ["10.96.0.0/16"], "the object's good CIDR still counts");
    assert.deepEqual(warnings, [
      'ServiceCIDR "broken": spec.cidrs[1]: "10.97.0.0/33" is not a valid CIDR; ignored',
      'ServiceCIDR "broken": spec.cidrs[2]: 7 is not a valid CIDR; ignored',
    ]);
    assert.deepEqual(
      serviceCIDRsOf({ metadata: { name: "x" }, spec: { cidrs: "10.0.0.0/8" as unknown as string[] } }),
      {
        cidrs: [],
        problems: ['ServiceCIDR "x": spec.cidrs: "10.0.0.0/8" is not a list; ignored'],
      },
    );
  });
});

describe("ServiceCIDRs from --manifests and the state cache", () => {
  it("--manifests delivers ServiceCIDR documents and lists (cluster-scoped, no proxy label needed)", async () => {
    const dir = await mkdtemp(join(tmpdir(), "edgeproxy-cidr-m-"));
    try {
      await writeFile(
        join(dir, "cidrs.yaml"),
        "apiVersion: networking.k8s.io/v1\nkind: ServiceCIDR\nmetadata: {name: kubernetes, namespace: ignored}\n" +
          "spec: {cidrs: [10.96.0.0/16]}\n---\napiVersion: networking.k8s.io/v1\nkind: ServiceCIDRList\n" +
          "items: [{metadata: {name: extra}, spec: {cidrs: [10.100.0.0/24, bad]}}]\n---\n" +
          "apiVersion: networking.k8s.io/v1beta1\nkind: ServiceCIDR\nmetadata: {name: old}\nspec: {cidrs: [10.1.0.0/16]}\n",
      );
      const rec = recorder();
      const warnings: string[] = [];
      const src = startManifestsSource(
        dir,
        new StateStore(withServiceCIDRConfig(rec, (m) => warnings.push(m))),
        {
          nodeName: "edge-1",
          warn: (m) => warnings.push(m),
          pollIntervalMs: 60_000,
        },
      );
      src.stop();
      assert.deepEqual(rec.lists.at(-1), ["10.100.0.0/24", "10.96.0.0/16"]);
      assert.ok(
        warnings.includes('ServiceCIDR "extra": spec.cidrs[1]: "bad" is not a valid CIDR; ignored'),
        warnings.join("\n"),
      );
      assert.ok(
        warnings.some((w) => /ServiceCIDR: apiVersion "networking.k8s.io\/v1beta1" is not supported/.test(w)),
        warnings.join("\n"),
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("cached ServiceCIDRs are programmed until the live list, which removes those gone meanwhile", () => {
    const rec = recorder();
    const store = new StateStore(withServiceCIDRConfig(rec, noop));
    store.loadFromCache({
      services: [],
      endpointSlices: [],
      node: null,
      serviceCIDRs: [cidr("kubernetes", ["10.96.0.0/16"]), cidr("gone", ["10.200.0.0/16"])],
    });
    assert.deepEqual(rec.lists.at(-1), ["10.200.0.0/16", "10.96.0.0/16"]);
    store.onServiceCIDRAdd(cidr("kubernetes", ["10.96.0.0/16"]));
    store.onServiceCIDRsSynced();
    assert.deepEqual(rec.lists.at(-1), ["10.96.0.0/16"]);
    assert.deepEqual(store.snapshot().serviceCIDRs?.map((c) => c.metadata?.name), ["kubernetes"]);
  });
});
