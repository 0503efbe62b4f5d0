/**
 * A kubeconfig exec credential plugin that never returns must not hold shutdown: the compiled agent in a
 * network namespace, its plugin (a shell with a child of its own) sleeping forever; SIGTERM must end the
 * agent with exit 0 within 5 s and leave no process of the plugin behind.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NetnsScope, netnsUnavailableReason } from "../support/netns.ts";
import { agentBinaryMissingReason, startAgentProcess } from "../support/e2e_agent.ts";

const skip = netnsUnavailableReason() || agentBinaryMissingReason();
if (skip) console.log(`SKIP tests/e2e/agent_exec_plugin_test.ts: ${skip}`);

/** True while `pid` is a live process (a zombie waiting for its reaper counts as gone). */
async function alive(pid: number): Promise<boolean> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, "utf8");
    return !stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
  } catch {
    return false;
  }
}

describe("a hanging exec credential plugin", { skip }, () => {
  const scope = new NetnsScope("execplug");
  let dir = "";
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "edgeproxy-execplug-"));
  });
  after(async () => {
    await scope.cleanup();
    await rm(dir, { recursive: true, force: true });
  });

  it("SIGTERM kills its process group and the agent exits 0 within 5 s", { timeout: 120_000 }, async () => {
    const pids = join(dir, "plugin.pids");
    const plugin = join(dir, "plugin.sh");
    await writeFile(plugin, `#!/bin/sh\nsleep 100000 &\necho "$$ $!" > "${pids}"\nwait\n`);
    await chmod(plugin, 0o755);
    const kubeconfig = join(dir, "kubeconfig");
    await writeFile(
      kubeconfig,
      "current-context: c\nclusters: [{name: k, cluster: {server: https://127.0.0.1:6443}}]\n" +
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n" +
        `users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: ${plugin}}}}]\n`,
    );
    const ns = await scope.create("node");
    const agent = startAgentProcess(scope, ns, [
      "--hostname-override=n1",
      "--kubeconfig",
      kubeconfig,
      "--metrics-bind-address=127.0.0.1:10249",
    ]);
    let procs: number[] = [];
    for (let i = 0; i < 600 && procs.length !== 2 && agent.exit() === null; i++) {
      await new Promise((r) => setTimeout(r, 50));
      const t = (await readFile(pids, "utf8").catch(() => "")).trim().split(" ");
      if (t.length === 2) procs = t.map(Number);
    }
    assert.equal(procs.length, 2, `the plugin never started:\n${agent.tail()}`);
    await new Promise((r) => setTimeout(r, 500)); // the agent's requests now wait for the plugin
    for (const pid of procs) assert.ok(await alive(pid), "the plugin hangs");

    const t0 = Date.now();
    const exit = await agent.stop("SIGTERM", 10_000);
    const took = Date.now() - t0;
    assert.deepEqual(exit, { code: 0, signal: null }, agent.tail());
    assert.ok(took < 5_000, `exited ${took} ms after SIGTERM`);
    for (const pid of procs) assert.ok(!(await alive(pid)), `plugin process ${pid} still runs`);
  });
});
