/**
 * Shutdown and the state cache, end to end against dist/edgeproxy in a node namespace: an early SIGTERM
 * exits 0; a SIGTERM before the first live sync (quick restarts on an offline site) leaves the good cache
 * byte-identical and the next offline boot programs the Services from it; a symlink planted at the cache's
 * temp name is never followed; an iptables-restore that never returns is killed at shutdown (exit 0
 * within 5 s, rules in place, no orphaned processes). Topology: tests/support/e2e_cluster.ts.
 *
 * The hung iptables-restore is a script the agent finds at /usr/sbin/iptables-restore inside a private
 * mount namespace of its own (a bind-mounted copy of /usr/sbin whose entries link to the real ones); the
 * host's /usr/sbin is never touched.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { chmod, lstat, mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { createE2eCluster, type E2eCluster, e2eUnavailableReason } from "../support/e2e_cluster.ts";
import { EDGEPROXY_BINARY, startAgentProcess } from "../support/e2e_agent.ts";
import { e2eEndpointSlice, e2eService } from "../support/e2e_objects.ts";
import { pollUntil } from "../support/e2e_poll.ts";
import { parse as parseYaml, stringify as toYaml } from "yaml";
import type { EchoResult } from "../support/echo_server.ts";

const skip = e2eUnavailableReason();
if (skip !== "") console.log(`SKIP tests/e2e/agent_shutdown_test.ts: ${skip}`);

const ECHO = 8080;
const SVC_IP = "10.96.2.10";
const LATE_SVC_IP = "10.96.2.11";
const STATE_FILE = "state.json";

function ids(rs: readonly EchoResult[]): string[] {
  return rs.map((r) => (typeof r === "object" && r !== null && "id" in r ? r.id : JSON.stringify(r)));
}

/** Whether `pid` is a running process (a zombie waiting to be reaped is not). */
function running(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) [ZX] /s.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

/** Running processes whose parent is `ppid` or whose process group is one of `pgids`. */
function processesOf(ppid: number, pgids: readonly number[]): number[] {
  const out: number[] = [];
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, "utf8");
      const [state, parent, pgrp] = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (state !== "Z" && (Number(parent) === ppid || pgids.includes(Number(pgrp)))) out.push(Number(e));
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

describe("edgeproxy e2e: bounded shutdown, and a state cache that survives it", {
  skip: skip || undefined,
}, () => {
  let c: E2eCluster;
  let work: string;
  let stateDir: string;

  const flushAll = async () => {
    for (const t of ["nat", "filter", "mangle"]) {
      const r1 = await c.node.exec(["iptables", "-t", t, "-F"]);
      const r2 = await c.node.exec(["iptables", "-t", t, "-X"]);
      assert.equal(r1.code + r2.code, 0, `flushing ${t}: ${r1.stderr}${r2.stderr}`);
    }
  };
  const stateText = () => readFile(join(stateDir, STATE_FILE), "utf8").catch(() => "");

  before(async () => {
    work = await mkdtemp(join(tmpdir(), "edgeproxy-shutdown-"));
    stateDir = join(work, "state");
    await mkdir(stateDir, { mode: 0o700 });
    c = await createE2eCluster({ prefix: "shut", agent: false });
    const [pod1, pod2] = c.localPods;
    c.apiserver.create(
      "services",
      e2eService({ name: "web", clusterIP: SVC_IP, ports: [{ name: "http", port: 80, targetPort: ECHO }] }),
    );
    c.apiserver.create(
      "endpointslices",
      e2eEndpointSlice({
        service: "web",
        ports: [{ name: "http", port: ECHO }],
        endpoints: [{ ip: pod1.ip, nodeName: c.nodeName }, { ip: pod2.ip, nodeName: c.nodeName }],
      }),
    );
  });

  after(async () => {
    await c?.teardown();
    if (work) await rm(work, { recursive: true, force: true });
  });

  it("exits 0 on a SIGTERM that arrives before the agent runs (still reading its --config)", async () => {
    // Reading a FIFO blocks until a writer appears: the agent is parked inside flag/config handling.
    const fifo = join(work, "config.fifo");
    execFileSync("mkfifo", [fifo]);
    const agent = startAgentProcess(c.scope, c.node, ["--config", fifo]);
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal(agent.exit(), null, `the agent must still be reading its config; log:\n${agent.tail()}`);
    const t0 = Date.now();
    const exit = await agent.stop("SIGTERM", 3000);
    const ms = Date.now() - t0;
    console.log(`early SIGTERM: exit ${JSON.stringify(exit)} after ${ms} ms`);
    assert.deepEqual(exit, { code: 0, signal: null }, `log:\n${agent.tail()}`);
    assert.ok(ms < 2000, `took ${ms} ms`);
  });

  it("a SIGTERM before the first live sync keeps the good cache byte-identical; the next offline boot programs from it", async () => {
    const [, , pod3] = c.localPods;
    await c.startAgent({ stateDir, syncPeriod: "3s" });
    await pollUntil(stateText, (t) => t.includes(SVC_IP), { timeoutMs: 20_000, what: "state.json with web" });
    assert.deepEqual(await c.stopAgent(), { code: 0, signal: null }, c.agent!.tail());
    const good = await readFile(join(stateDir, STATE_FILE));

    await c.apiserverLink.cut();
    try {
      // Restart 1: SIGTERM while still waiting for the apiserver, before the cache deadline.
      const a1 = await c.startAgent({
        stateDir,
        waitReady: false,
        extraArgs: ["--cache-start-deadline", "60s"],
      });
      await new Promise((r) => setTimeout(r, 2000));
      assert.equal(a1.exit(), null, a1.tail());
      assert.deepEqual(await a1.stop("SIGTERM", 8000), { code: 0, signal: null }, a1.tail());
      assert.ok(
        (await readFile(join(stateDir, STATE_FILE))).equals(good),
        `a shutdown before the first live sync must leave state.json as it was; now:\n${await stateText()}\nlog:\n${a1.tail()}`,
      );

      // Restart 2: serving from the cache, then SIGTERM: the cache is not rewritten either.
      const a2 = await c.startAgent({
        stateDir,
        waitReady: false,
        extraArgs: ["--cache-start-deadline", "1s"],
      });
      await pollUntil(() => Promise.resolve(a2.logs()), (l) => /from the state cache written/.test(l), {
        timeoutMs: 10_000,
        what: "the agent to program from the cache",
      });
      assert.deepEqual(await a2.stop("SIGTERM", 8000), { code: 0, signal: null }, a2.tail());
      assert.ok(
        (await readFile(join(stateDir, STATE_FILE))).equals(good),
        "state.json rewritten by restart 2",
      );

      // A reboot while still offline: empty tables, and the cache brings web back.
      await flushAll();
      const a3 = await c.startAgent({
        stateDir,
        waitReady: false,
        extraArgs: ["--cache-start-deadline", "1s"],
      });
      await pollUntil(
        async () => ids(await c.request(pod3.ns, { host: SVC_IP, port: 80, timeoutMs: 1500 })),
        (r) => r[0]?.startsWith("pod"),
        {
          timeoutMs: 15_000,
          intervalMs: 200,
          what: `ClusterIP ${SVC_IP} programmed from the kept cache; log:\n${a3.tail()}`,
        },
      );
      assert.match(a3.logs(), /programming 1 Services and 1 EndpointSlices from the state cache/);
      assert.deepEqual(await a3.stop("SIGTERM", 8000), { code: 0, signal: null }, a3.tail());
    } finally {
      await c.apiserverLink.restore();
    }
  });

  it("never follows a symlink planted at the state file's temp name", async () => {
    const dir = join(work, "state-planted");
    await mkdir(dir, { mode: 0o700 });
    const victim = join(work, "root-owned-file");
    await writeFile(victim, "precious\n", { mode: 0o644 });
    const agent = await c.startAgent({ stateDir: dir, syncPeriod: "3s", waitReady: false });
    // The name the agent used to use for its temp file, planted before its first write.
    await symlink(victim, join(dir, `.${STATE_FILE}.${agent.pid}.tmp`));
    await c.waitAgentReady();
    await pollUntil(() => stat(join(dir, STATE_FILE)).then(() => true, () => false), (x) => x, {
      timeoutMs: 20_000,
      what: "state.json in the planted dir",
    });
    assert.equal(await readFile(victim, "utf8"), "precious\n", "the planted symlink's target was written");
    assert.ok((await lstat(join(dir, STATE_FILE))).isFile(), "state.json must be a regular file");
    assert.match(await readFile(join(dir, STATE_FILE), "utf8"), new RegExp(SVC_IP.replaceAll(".", "\\.")));
    assert.deepEqual(await c.stopAgent(), { code: 0, signal: null });
  });

  it("kills an iptables-restore that does not return: exit 0 within 5 s, rules in place, no orphans", async () => {
    const d = join(work, "fake-sbin");
    await mkdir(join(d, "real-sbin"), { recursive: true });
    await mkdir(join(d, "sbin"));
    for (const name of readdirSync("/usr/sbin")) {
      if (name !== "iptables-restore") await symlink(join(d, "real-sbin", name), join(d, "sbin", name));
    }
    // Passes through to the real binary until "hang" exists; then ignores SIGTERM and waits on a child.
    await writeFile(
      join(d, "sbin", "iptables-restore"),
      `#!/bin/sh
echo "$$" >> ${d}/calls
if [ -e ${d}/hang ]; then
  trap '' TERM INT HUP
  sleep 1000 &
  echo "$$ $!" > ${d}/hung
  wait
fi
exec ${d}/real-sbin/iptables-restore "$@"
`,
    );
    await chmod(join(d, "sbin", "iptables-restore"), 0o755);
    const wrapper = join(d, "edgeproxy-in-own-mount-ns");
    await writeFile(
      wrapper,
      `#!/bin/sh
exec unshare --mount --propagation private /bin/sh -c 'mount --bind /usr/sbin ${d}/real-sbin && mount --bind ${d}/sbin /usr/sbin && exec "$0" "$@"' ${EDGEPROXY_BINARY} "$@"
`,
    );
    await chmod(wrapper, 0o755);

    const agent = await c.startAgent({ syncPeriod: "3s", binary: wrapper });
    assert.ok(existsSync(join(d, "calls")), "the agent must have run the wrapped iptables-restore");
    const before = await c.iptablesSave("nat");
    assert.match(before, new RegExp(SVC_IP.replaceAll(".", "\\.")));

    await writeFile(join(d, "hang"), "");
    c.apiserver.create(
      "services",
      e2eService({
        name: "late",
        clusterIP: LATE_SVC_IP,
        ports: [{ name: "http", port: 80, targetPort: ECHO }],
      }),
    );
    const hung = await pollUntil(
      () => readFile(join(d, "hung"), "utf8").catch(() => ""),
      (t) => /^\d+ \d+\n$/.test(t),
      { timeoutMs: 15_000, what: "a sync to hang in iptables-restore" },
    );
    const [leader, grandchild] = hung.value.trim().split(" ").map(Number);
    assert.ok(running(leader) && running(grandchild));
    // Everything the agent started, and their process groups (a child started in its own group leads it).
    const children = processesOf(agent.pid, []);
    assert.ok(children.includes(leader), `the hung restore ${leader} must be the agent's child: ${children}`);

    const t0 = Date.now();
    const exit = await agent.stop("SIGTERM", 10_000);
    const ms = Date.now() - t0;
    console.log(`shutdown with a hung iptables-restore: exit ${JSON.stringify(exit)} after ${ms} ms`);
    assert.deepEqual(exit, { code: 0, signal: null }, `log:\n${agent.tail()}`);
    assert.ok(ms < 5000, `shutdown took ${ms} ms\n${agent.tail()}`);

    assert.match(agent.logs(), /killed 1 child process group\(s\) still running at shutdown/);
    const after = await c.iptablesSave("nat");
    assert.match(after, new RegExp(SVC_IP.replaceAll(".", "\\.")), "the rules must stay in place");
    assert.ok(!after.includes(LATE_SVC_IP), "the killed restore must not have applied anything");

    const left = await pollUntil(
      () =>
        Promise.resolve([...new Set([...processesOf(agent.pid, children), ...[grandchild].filter(running)])]),
      (l) => l.length === 0,
      {
        timeoutMs: 2000,
        intervalMs: 100,
        what: `no orphan of the agent (children ${children}, their groups)`,
      },
    );
    assert.deepEqual(left.value, []);
  });

  it("a pending apiserver start (a credential plugin that never answers) does not delay shutdown past 5 s", async () => {
    const pids = join(work, "plugin-pids");
    const plugin = join(work, "hanging-credential-plugin");
    await writeFile(plugin, `#!/bin/sh\ntrap '' TERM INT HUP\nsleep 1000 &\necho "$$ $!" >> ${pids}\nwait\n`);
    await chmod(plugin, 0o755);
    const kc = parseYaml(await readFile(c.kubeconfig, "utf8"));
    kc.users[0].user = {
      exec: { apiVersion: "client.authentication.k8s.io/v1", command: plugin, interactiveMode: "Never" },
    };
    const kubeconfig = join(work, "kubeconfig-exec");
    await writeFile(kubeconfig, toYaml(kc), { mode: 0o600 });
    const agent = startAgentProcess(c.scope, c.node, [...c.agentArgs({}), "--kubeconfig", kubeconfig]);
    try {
      await pollUntil(() => readFile(pids, "utf8").catch(() => ""), (t) => t !== "", {
        timeoutMs: 15_000,
        what: `the credential plugin to be started; log:\n${agent.tail()}`,
      });
      assert.equal(agent.exit(), null, agent.tail());
      const t0 = Date.now();
      const exit = await agent.stop("SIGTERM", 10_000);
      const ms = Date.now() - t0;
      console.log(`shutdown with a hanging credential plugin: exit ${JSON.stringify(exit)} after ${ms} ms`);
      assert.deepEqual(exit, { code: 0, signal: null }, `log:\n${agent.tail()}`);
      assert.ok(ms < 5000, `shutdown took ${ms} ms\n${agent.tail()}`);
    } finally {
      // The plugin's own lifetime belongs to the credential code; end what this test started.
      for (const pid of (await readFile(pids, "utf8").catch(() => "")).split(/\s+/).filter(Boolean)) {
        try {
          process.kill(Number(pid), "SIGKILL");
        } catch {
          // already gone
        }
      }
    }
  });
});
