/**
 * stop() leaves nothing behind: node:test under `deno test` runs without Deno's resource/op sanitizers, so
 * this test checks the stronger property directly. It runs this same file as a program (in a child process
 * of the same runtime) that starts the apiserver source against the test apiserver, goes through outages,
 * stalls and relists, stops everything, and then must exit on its own, promptly: any timer, socket or
 * stream left open would keep the child alive.
 */
import { it } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const CHILD_ENV = "EDGEPROXY_K8S_LEAK_CHILD";

async function childScenario(): Promise<void> {
  const { startTestApiserver } = await import("../../support/apiserver.ts");
  const { loadRestConfig } = await import("../../../lib/k8s/kubeconfig.ts");
  const { ApiTransport } = await import("../../../lib/k8s/transport.ts");
  const { startApiserverSource } = await import("../../../lib/source/apiserver.ts");
  const { recordStartingEvent } = await import("../../../lib/k8s/events.ts");
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-leak-"));
  const srv = await startTestApiserver({ bookmarkIntervalMs: 50 });
  const kc = join(dir, "kc");
  await srv.writeKubeconfig(kc, { user: "clientCert" });
  const transport = new ApiTransport({
    config: await loadRestConfig({ kubeconfig: kc, env: {} }),
    qps: 50,
    burst: 5,
  });
  const noop = () => {};
  const handlers = {
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
  };
  const timings = { backoff: { initialMs: 20, maxMs: 100 }, watchdogMs: 300, shortWatchMs: 20 };
  const watch = startApiserverSource({
    connection: transport,
    nodeName: "n1",
    handlers,
    mode: "watch",
    timings,
  });
  const poll = startApiserverSource({
    connection: transport,
    nodeName: "n1",
    handlers,
    mode: "poll",
    pollIntervalMs: 50,
    timings,
  });
  await Promise.all([watch.synced, poll.synced]);
  await recordStartingEvent(transport, "n1");
  const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
  srv.create("services", { metadata: { name: "a", namespace: "d" } });
  srv.faults.stallWatches();
  await pause(400);
  await srv.faults.down();
  await pause(150); // stop() while backing off
  await srv.faults.up();
  srv.faults.compact();
  await pause(150);
  // stop() while requests are in flight (kept short: the test apiserver's own delay timer is not cancelled
  // by its close())
  srv.faults.slow(300);
  await pause(100);
  await Promise.all([watch.stop(), poll.stop()]);
  transport.close();
  srv.faults.slow(0);
  await srv.close();
  await pause(400); // let the test apiserver's delay timers run out before measuring
  await rm(dir, { recursive: true, force: true });
  console.log("SCENARIO-DONE");
}

if (process.env[CHILD_ENV]) {
  await childScenario();
} else {
  it("after stop() and close(), nothing keeps the process alive", { timeout: 60_000 }, async () => {
    const self = fileURLToPath(import.meta.url);
    const isDeno = typeof (globalThis as { Deno?: unknown }).Deno !== "undefined";
    const args = isDeno ? ["run", "-A", self] : ["run", self];
    const child = spawn(process.execPath, args, { env: { ...process.env, [CHILD_ENV]: "1" }, stdio: "pipe" });
    let out = "";
    let doneAt = 0;
    child.stdout.on("data", (d) => {
      out += String(d);
      if (!doneAt && out.includes("SCENARIO-DONE")) doneAt = Date.now();
    });
    child.stderr.on("data", (d) => (out += String(d)));
    const killer = setTimeout(() => child.kill("SIGKILL"), 30_000);
    const code = await new Promise<number | null>((r) => child.on("exit", (c) => r(c)));
    clearTimeout(killer);
    assert.ok(doneAt > 0, `scenario did not finish:\n${out}`);
    assert.equal(code, 0, out);
    const lingered = Date.now() - doneAt;
    assert.ok(lingered < 1500, `process lingered ${lingered} ms after everything was stopped`);
  });
}
