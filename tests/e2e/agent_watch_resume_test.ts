/**
 * The compiled agent against watch faults a flaky WAN link or a broken apiserver produces:
 * - all watches dropped 6 times within 2 minutes, each drop followed by a Service or EndpointSlice change:
 *   every change is in the kernel's nat table within 2 s of being made (an established watch resumes at
 *   once; no backoff builds up);
 * - the same with a 410 after each drop, as HTTP 410 and as an ERROR event in a 200 stream (relist at once);
 * - an apiserver whose watches send one endless line: the agent's RSS stays under 300 MB, /healthz answers
 *   within 1 s throughout, the limit error is logged, and the agent recovers once the streams are sane.
 * The 2 s and 1 s bounds are behaviour (what an operator is promised), not benchmarks.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import {
  createE2eCluster,
  E2E_ADDRS,
  type E2eCluster,
  e2eUnavailableReason,
} from "../support/e2e_cluster.ts";
import { e2eEndpointSlice, e2eService } from "../support/e2e_objects.ts";
import { httpGetIn } from "../support/e2e_http.ts";
import { natServiceTargets } from "../support/e2e_nat.ts";
import { pollUntil } from "../support/e2e_poll.ts";

const skip = e2eUnavailableReason();
if (skip !== "") console.log(`SKIP tests/e2e/agent_watch_resume_test.ts: ${skip}`);

const ECHO = 8080;
/** A change must be in the kernel this soon after it was made. */
const CHANGE_TO_KERNEL_MS = 2000;
/** Time between drops (6 drops ≈ 15-30 s, well within the 2 minutes the issue names). */
const DROP_SPACING_MS = 2500;
const MiB = 1024 * 1024;

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** VmRSS of a process in bytes (0 when it is gone). */
function rssBytes(pid: number): number {
  try {
    const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
    return m ? Number(m[1]) * 1024 : 0;
  } catch {
    return 0;
  }
}

describe("edgeproxy e2e: a broken watch resumes at once", { skip: skip || undefined }, () => {
  let c: E2eCluster;
  let svcNo = 0;

  before(async () => {
    c = await createE2eCluster({ prefix: "wres", apiserver: { bookmarkIntervalMs: 1000 } });
  });

  after(async () => {
    await c?.teardown();
  });

  /** Waits until `clusterIP` has exactly `targets` in the kernel; returns the time since `t0`. */
  async function inKernel(clusterIP: string, targets: string[], t0: number, what: string): Promise<number> {
    const want = JSON.stringify([...targets].sort());
    await pollUntil(
      async () => {
        if (c.agent!.exit() !== null) throw new Error(`agent exited: ${c.agent!.tail(30)}`);
        return JSON.stringify(natServiceTargets(await c.iptablesSave("nat")).get(clusterIP) ?? []);
      },
      (v) => v === want,
      { timeoutMs: 60_000, intervalMs: 50, what: `${what} in the kernel` },
    ).catch((e) => {
      throw new Error(`${(e as Error).message}\nagent log:\n${c.agent!.tail(40)}`);
    });
    return Date.now() - t0;
  }

  /**
   * 6 rounds of: drop every watch (after `beforeDrop`), then change something at once: even rounds create
   * a Service with one endpoint, odd rounds move that Service's endpoint to another pod. Returns the time
   * from each change to the kernel.
   */
  async function dropRounds(label: string, beforeDrop: () => void): Promise<number[]> {
    const lags: number[] = [];
    const started = Date.now();
    let name = "";
    let ip = "";
    for (let round = 0; round < 6; round++) {
      await pause(DROP_SPACING_MS);
      beforeDrop();
      c.apiserver.faults.dropWatches();
      const t0 = Date.now();
      const pod = c.localPods[round % c.localPods.length];
      if (round % 2 === 0) {
        svcNo++;
        name = `wr${svcNo}`;
        ip = `10.96.8.${svcNo}`;
        c.apiserver.create(
          "services",
          e2eService({ name, clusterIP: ip, ports: [{ port: 80, targetPort: ECHO }] }),
        );
      }
      const slice = e2eEndpointSlice({
        service: name,
        ports: [{ port: ECHO }],
        endpoints: [{ ip: pod.ip, nodeName: c.nodeName }],
      });
      if (round % 2 === 0) c.apiserver.create("endpointslices", slice);
      else c.apiserver.update("endpointslices", slice);
      lags.push(
        await inKernel(ip, [`${pod.ip}:${ECHO}`], t0, `${label} round ${round + 1}: ${name} → ${pod.ip}`),
      );
    }
    const total = Date.now() - started;
    console.log(`${label}: change → kernel after each drop (ms): ${lags.join(", ")}; 6 drops in ${total} ms`);
    assert.ok(total < 120_000, `6 drops took ${total} ms`);
    assert.ok(
      lags.every((l) => l <= CHANGE_TO_KERNEL_MS),
      `${label}: every change in the kernel within ${CHANGE_TO_KERNEL_MS} ms of being made; got ${
        lags.join(", ")
      } ms` +
        `\nagent log:\n${c.agent!.tail(30)}`,
    );
    assert.equal(c.agent!.exit(), null);
    return lags;
  }

  it(
    "6 dropped watches within 2 minutes: every change is in the kernel within 2 s",
    { timeout: 400_000 },
    async () => {
      await dropRounds("drops", () => {});
    },
  );

  it(
    "6 drops each followed by HTTP 410: every change is in the kernel within 2 s",
    { timeout: 400_000 },
    async () => {
      await dropRounds("drops + HTTP 410", () => c.apiserver.faults.goneNextWatch("status"));
    },
  );

  it("6 drops each followed by an ERROR 410 event: every change is in the kernel within 2 s", {
    timeout: 400_000,
  }, async () => {
    await dropRounds("drops + ERROR 410 event", () => c.apiserver.faults.goneNextWatch("event"));
  });

  it("an endless watch line: RSS stays under 300 MB, /healthz answers within 1 s, the agent recovers", {
    timeout: 400_000,
  }, async () => {
    const pid = c.agent!.pid;
    const limitLine = /one event line is larger than the limit of 16 MiB/;
    c.apiserver.faults.endlessWatchLine();
    c.apiserver.faults.dropWatches();
    const until = Date.now() + 30_000;
    let maxRss = rssBytes(pid);
    let probes = 0;
    let slowest = 0;
    while (Date.now() < until || !limitLine.test(c.agent!.logs())) {
      if (Date.now() > until + 60_000) break;
      maxRss = Math.max(maxRss, rssBytes(pid));
      const t0 = Date.now();
      const h = await httpGetIn(c.node, `http://${E2E_ADDRS.healthz}/healthz`, { timeoutMs: 1000 });
      slowest = Math.max(slowest, Date.now() - t0);
      probes++;
      assert.equal(h.status, 200, `/healthz answered within 1 s during the endless line (${h.curlError})`);
      maxRss = Math.max(maxRss, rssBytes(pid));
      await pause(200);
    }
    console.log(
      `endless line: max RSS ${
        (maxRss / MiB).toFixed(1)
      } MiB, ${probes} /healthz probes all 200 within 1 s ` +
        `(slowest probe incl. curl start ${slowest} ms)`,
    );
    assert.ok(maxRss > 0 && maxRss < 300 * 1e6, `agent RSS peaked at ${(maxRss / MiB).toFixed(1)} MiB`);
    assert.match(c.agent!.logs(), limitLine, "the limit error is logged");
    assert.equal(c.agent!.exit(), null);

    c.apiserver.faults.clear();
    svcNo++;
    const ip = `10.96.8.${svcNo}`;
    const pod = c.localPods[0];
    const t0 = Date.now();
    c.apiserver.create(
      "services",
      e2eService({ name: `wr${svcNo}`, clusterIP: ip, ports: [{ port: 80, targetPort: ECHO }] }),
    );
    c.apiserver.create(
      "endpointslices",
      e2eEndpointSlice({
        service: `wr${svcNo}`,
        ports: [{ port: ECHO }],
        endpoints: [{ ip: pod.ip, nodeName: c.nodeName }],
      }),
    );
    // the watches come back after their backoff (at most 30 s)
    const lag = await inKernel(ip, [`${pod.ip}:${ECHO}`], t0, "a change after the endless line ended");
    console.log(`endless line: recovered, change → kernel ${lag} ms after the streams were sane`);
  });
});
