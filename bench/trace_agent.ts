/**
 * Timing breakdown of the agent's start (and of one endpoint change): runs dist/edgeproxy under
 * `strace -f --seccomp-bpf -e trace=execve` in a scratch namespace, the same setup as agent_bench.ts, and
 * prints every command the agent ran (iptables, iptables-save, iptables-restore, conntrack, …) with its
 * start and end relative to the spawn, next to the agent's own "sync took" log lines. The gaps between
 * commands are the agent's own compute (list decoding, model, render, plan).
 *
 *   bun bench/trace_agent.ts [--services=1000] [--cache] [--change] [--binary=dist/edgeproxy]
 *                            [--timeout=<s, for all rules>] [--log=<file for the agent's full log>]
 *
 * strace stops the agent only at execve/exit (seccomp-bpf), so the traced run is close to an untraced
 * one; it is a diagnostic, not a benchmark (no figures go to results.json).
 */
import { parseArgs } from "node:util";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import process from "node:process";
import { NetnsScope } from "../tests/support/netns.ts";
import { encodeState, writeStateCache } from "../lib/source/state_cache.ts";
import { syntheticCluster } from "./synthetic_cluster.ts";
import { oneEndpointChange, plainServiceIndex } from "./cluster_model.ts";
import { kubeServicesRuleCount } from "./render_bench.ts";
import {
  agentArgs,
  type ApiSetup,
  observeStart,
  startAgent,
  startApi,
  startNsBridge,
  stopAgent,
} from "./agent_bench.ts";
import { round, sleep } from "./stats.ts";

/** One command the agent ran. */
export interface TracedCommand {
  readonly pid: number;
  readonly argv: string;
  /** Seconds since the epoch (strace -ttt). */
  readonly start: number;
  readonly end: number | null;
}

/**
 * Parses `strace -f -ttt -e trace=execve` output: each successful execve after the first (the agent
 * itself) starts a command; "+++ exited" ends it.
 */
export function parseStraceExecs(text: string, agentPid: number | null): TracedCommand[] {
  const open = new Map<number, { argv: string; start: number }>();
  const out: TracedCommand[] = [];
  for (const line of text.split("\n")) {
    const m = /^(\d+)\s+(\d+\.\d+)\s+(.*)$/.exec(line);
    if (!m) continue;
    const pid = Number(m[1]);
    const ts = Number(m[2]);
    const rest = m[3];
    const ex = /^execve\("([^"]+)", \[(.*)\](?:, .*)? = 0$/.exec(rest);
    if (ex) {
      if (pid === agentPid) continue;
      const args = [...ex[2].matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((a) => a[1]).slice(1, 8);
      open.set(pid, { argv: [ex[1].split("/").pop(), ...args].join(" "), start: ts });
      continue;
    }
    if (rest.startsWith("+++ exited") || rest.startsWith("+++ killed")) {
      const o = open.get(pid);
      if (o) {
        out.push({ pid, argv: o.argv, start: o.start, end: ts });
        open.delete(pid);
      }
    }
  }
  for (const [pid, o] of open) out.push({ pid, argv: o.argv, start: o.start, end: null });
  return out.sort((a, b) => a.start - b.start);
}

/** Stops the traced agent (the first pid in the strace output): SIGTERM, SIGKILL after 5 s. */
async function stopTraced(traceFile: string): Promise<void> {
  const first = /^(\d+)\s/m.exec(await readFile(traceFile, "utf8").catch(() => ""));
  if (!first) return;
  const pid = Number(first[1]);
  const alive = () => {
    try {
      process.kill(pid, 0);
      return true;
    } catch {
      return false;
    }
  };
  if (!alive()) return;
  process.kill(pid, "SIGTERM");
  for (let i = 0; i < 50 && alive(); i++) await sleep(100);
  if (alive()) process.kill(pid, "SIGKILL");
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      services: { type: "string", default: "1000" },
      cache: { type: "boolean", default: false },
      change: { type: "boolean", default: false },
      binary: { type: "string", default: fileURLToPath(new URL("../dist/edgeproxy", import.meta.url)) },
      timeout: { type: "string", default: "300" },
      log: { type: "string" },
    },
  });
  const n = Number(values.services);
  const cluster = syntheticCluster({ services: n });
  const expectedRules = kubeServicesRuleCount(cluster);
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-trace-"));
  const scope = new NetnsScope("btrc");
  let setup: ApiSetup | null = null;
  try {
    setup = await startApi(cluster, dir);
    const ns = await scope.create("t");
    const extra: string[] = [];
    if (values.cache) {
      const stateDir = join(dir, "state");
      await writeStateCache(
        stateDir,
        encodeState(
          { services: cluster.services, endpointSlices: cluster.endpointSlices, node: cluster.node },
          "bench-node",
          Date.now(),
        ),
      );
      extra.push("--cache-start-deadline=0s");
    } else {
      await startNsBridge(scope, ns, setup.api.port, join(dir, "api.sock"));
    }
    const traceFile = join(dir, "strace.txt");
    const agent = startAgent(scope, ns, "/usr/bin/strace", [
      "-f",
      "--seccomp-bpf",
      "-ttt",
      "-e",
      "trace=execve",
      "-o",
      traceFile,
      values.binary!,
      ...agentArgs(setup.kubeconfig, "bench-node", join(dir, "state"), extra),
    ]);
    const log: Buffer[] = [];
    agent.child.stderr?.on("data", (b: Buffer) => log.push(b));
    const start = await observeStart(agent, ns, expectedRules, Number(values.timeout) * 1000);
    let changeAt: number | null = null;
    if (values.change && !values.cache) {
      await sleep(2000);
      const slice = oneEndpointChange(cluster, plainServiceIndex(cluster), 1);
      changeAt = Date.now() / 1000;
      setup.api.update("endpointslices", {
        ...slice,
        metadata: { ...slice.metadata, resourceVersion: undefined },
      });
      await sleep(3000);
    } else {
      await sleep(1000);
    }
    // SIGTERM to strace would detach and leave the traced agent running: stop the agent itself first.
    await stopTraced(traceFile);
    await stopAgent(agent);
    if (values.log) await writeFile(values.log, Buffer.concat(log));
    const text = await readFile(traceFile, "utf8");
    const first = /^(\d+)\s+(\d+\.\d+)\s+execve\(/m.exec(text);
    const agentPid = first ? Number(first[1]) : null;
    const t0 = first ? Number(first[2]) : 0;
    const cmds = parseStraceExecs(text, agentPid);
    const ms = (t: number) => round((t - t0) * 1000);
    process.stdout.write(
      `edgeproxy ${n} Services${
        values.cache ? " from the state cache" : ""
      }: first rule ${start.firstRule?.ms} ms, ` +
        `all rules ${start.allRules?.ms} ms after spawn (traced)\n`,
    );
    for (const s of agent.syncs) {
      process.stdout.write(
        `  log: ${s.mode} sync took ${s.ms} ms (${s.bytes} bytes), logged at ${
          round(s.at - agent.startedAt)
        } ms\n`,
      );
    }
    if (changeAt !== null) process.stdout.write(`  endpoint change written at ${ms(changeAt)} ms\n`);
    process.stdout.write("  start ms    end ms   took ms  command\n");
    for (const c of cmds) {
      const took = c.end === null ? "?" : String(round((c.end - c.start) * 1000));
      process.stdout.write(
        `  ${String(ms(c.start)).padStart(8)}  ${String(c.end === null ? "?" : ms(c.end)).padStart(8)}  ${
          took.padStart(8)
        }  ${c.argv.slice(0, 100)}\n`,
      );
    }
  } finally {
    await scope.cleanup();
    await setup?.bridge.close();
    await setup?.api.close();
    await rm(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) await main();
