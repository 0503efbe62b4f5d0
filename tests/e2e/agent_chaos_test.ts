/**
 * The whole agent against a misbehaving apiserver: dropped watches, 410 Gone (compaction), 500 storms,
 * garbage watch lines, a truncated list and a 60 s outage, with Services and EndpointSlices changing
 * throughout. After every phase the kernel's nat table (ClusterIP → DNAT targets) must equal what the
 * apiserver holds, and the agent must still be running.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createE2eCluster, type E2eCluster, e2eUnavailableReason } from "../support/e2e_cluster.ts";
import { e2eEndpointSlice, e2eService } from "../support/e2e_objects.ts";
import { pollUntil } from "../support/e2e_poll.ts";
import type { EndpointSlice, Service } from "../../lib/k8s/objects.ts";
import { natServiceTargets } from "../support/e2e_nat.ts";

const skip = e2eUnavailableReason();
if (skip !== "") console.log(`SKIP tests/e2e/agent_chaos_test.ts: ${skip}`);

/** Outage length; the issue asks for 60 s. EDGEPROXY_CHAOS_OUTAGE_MS shortens it for local runs. */
const OUTAGE_MS = Number(process.env.EDGEPROXY_CHAOS_OUTAGE_MS ?? 60_000);
const ECHO = 8080;

/** The same map computed from the apiserver's objects. */
function expected(services: Service[], slices: EndpointSlice[]): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const s of services) {
    const eps = slices
      .filter((e) => e.metadata?.labels?.["kubernetes.io/service-name"] === s.metadata?.name)
      .flatMap((e) => (e.endpoints ?? []).map((ep) => `${ep.addresses![0]}:${ECHO}`));
    if (eps.length > 0) out.set(s.spec!.clusterIP!, [...new Set(eps)].sort());
  }
  return out;
}

const show = (m: Map<string, string[]>) => JSON.stringify([...m].sort());

describe("edgeproxy e2e: the agent converges through apiserver chaos", { skip: skip || undefined }, () => {
  let c: E2eCluster;
  let rnd = 7;
  const next = () => (rnd = (rnd * 1103515245 + 12345) % 2147483648) / 2147483648;
  const live = new Set<number>();

  function setService(i: number): void {
    const pods = c.localPods;
    const count = Math.floor(next() * (pods.length + 1)); // 0..n endpoints
    const start = Math.floor(next() * pods.length);
    const endpoints = Array.from({ length: count }, (_, j) => ({
      ip: pods[(start + j) % pods.length].ip,
      nodeName: c.nodeName,
    }));
    const svc = e2eService({
      name: `s${i}`,
      clusterIP: `10.96.9.${i}`,
      ports: [{ name: "http", port: 80, targetPort: ECHO }],
    });
    const slice = e2eEndpointSlice({ service: `s${i}`, ports: [{ name: "http", port: ECHO }], endpoints });
    if (live.has(i)) {
      c.apiserver.update("endpointslices", slice);
    } else {
      c.apiserver.create("services", svc);
      c.apiserver.create("endpointslices", slice);
      live.add(i);
    }
  }

  function churn(n: number): void {
    for (let k = 0; k < n; k++) {
      const i = 1 + Math.floor(next() * 12);
      if (live.has(i) && next() < 0.3) {
        c.apiserver.remove("services", "e2e", `s${i}`);
        const slice = (c.apiserver.list("endpointslices") as EndpointSlice[]).find((e) =>
          e.metadata?.labels?.["kubernetes.io/service-name"] === `s${i}`
        );
        if (slice) c.apiserver.remove("endpointslices", "e2e", slice.metadata!.name!);
        live.delete(i);
      } else {
        setService(i);
      }
    }
  }

  async function assertConverged(phase: string): Promise<void> {
    const want = () =>
      show(
        expected(
          (c.apiserver.list("services") as Service[]).filter((s) => s.metadata?.name?.startsWith("s")),
          c.apiserver.list("endpointslices") as EndpointSlice[],
        ),
      );
    const got = await pollUntil(
      async () => {
        if (c.agent!.exit() !== null) throw new Error(`agent exited: ${c.agent!.tail(30)}`);
        const m = natServiceTargets(await c.iptablesSave("nat"));
        for (const ip of [...m.keys()]) if (!ip.startsWith("10.96.9.")) m.delete(ip);
        return show(m);
      },
      (v) => v === want(),
      { timeoutMs: 150_000, intervalMs: 500, what: `the kernel to match the apiserver after ${phase}` },
    ).catch(async (e) => {
      if (process.env.EDGEPROXY_CHAOS_LOG) {
        await import("node:fs/promises").then((fs) =>
          fs.writeFile(process.env.EDGEPROXY_CHAOS_LOG!, c.agent!.logs())
        );
      }
      throw new Error(`${(e as Error).message}\nagent log:\n${c.agent!.tail(40)}`);
    });
    assert.equal(got.value, want());
    assert.equal(c.agent!.exit(), null, `the agent exited during ${phase}:\n${c.agent!.tail(30)}`);
    console.log(`${phase}: converged after ${got.elapsedMs} ms`);
  }

  before(async () => {
    c = await createE2eCluster({
      prefix: "chaos",
      apiserver: { historyLimit: 50, bookmarkIntervalMs: 1000 },
    });
    churn(12);
    await assertConverged("the initial list");
  });

  after(async () => {
    await c?.teardown();
  });

  it("dropped watches: changes made meanwhile arrive after reconnecting", { timeout: 200_000 }, async () => {
    c.apiserver.faults.dropWatches();
    churn(6);
    await assertConverged("dropped watches");
  });

  it("410 Gone after compaction: relist without ghosts", { timeout: 200_000 }, async () => {
    c.apiserver.faults.dropWatches();
    churn(30); // more than historyLimit while the watch reconnects
    c.apiserver.faults.compact();
    await assertConverged("compaction (410)");
  });

  it("a 500 storm and garbage watch lines", { timeout: 200_000 }, async () => {
    c.apiserver.faults.failNext(6, 500); // two per resource, on top of the backoff earlier phases built up
    c.apiserver.faults.dropWatches();
    churn(5);
    c.apiserver.faults.garbageNextWatchLine();
    churn(5);
    await assertConverged("a 500 storm and garbage");
  });

  it("a truncated list during a relist", { timeout: 200_000 }, async () => {
    c.apiserver.faults.truncateNextList();
    c.apiserver.faults.compact();
    churn(4);
    c.apiserver.faults.dropWatches();
    await assertConverged("a truncated list");
  });

  it(`an apiserver outage of ${OUTAGE_MS / 1000} s with changes meanwhile`, {
    timeout: OUTAGE_MS + 200_000,
  }, async () => {
    await c.apiserver.faults.down();
    churn(8);
    await new Promise((r) => setTimeout(r, OUTAGE_MS));
    assert.equal(c.agent!.exit(), null, `the agent exited during the outage:\n${c.agent!.tail(30)}`);
    await c.apiserver.faults.up();
    await assertConverged("the outage");
  });
});
