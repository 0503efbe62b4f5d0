/**
 * Timing breakdown of the agent's start (and of one endpoint change): runs dist/edgeproxy under
 * `strace -f --seccomp-bpf -e trace=execve` in a scratch namespace, the same setup as agent_bench.ts, and
 * prints every command the agent ran (iptables, iptables-save, iptables-restore, conntrack, …) with its
 * start and end relative to the spawn, next to the agent's own "sync took" log lines. The gaps between
 * commands are the agent's own compute (list decoding, model, render, plan).
 *
 *   bun bench/trace_agent.ts [--services=1000] [--cache] [--change] [--binary=dist/edgeproxy]
 *                            [--timeout=<s, for all rules>] [--log=<file for the agent's full log>]
 *                            [--monitor] [--poll] [--no-floor] [--extra=<agent flag>]…
 *
 * It also prints the timeline of the first sync (IPv4): exec → each list received and stored (the agent's
 * own "list …" lines) → full sync started (its `iptables-save -t nat`) → model, render and split done (the
 * `iptables-restore` spawned) → first nat transaction seen → each restore process exited (its last
 * transaction committed) → all rules seen; then the floor: a plain `iptables-restore` (no `--noflush`) of
 * the same cluster's rules, rendered in-process as the agent renders them, into an empty namespace, and
 * the ratio. With `--monitor`, `nft monitor` runs in the namespace and every transaction of the restore
 * gets a row; it prints every rule, so at thousands of Services it lags behind the kernel by seconds
 * and takes CPU from the agent: rows are arrival times, a diagnostic of the order, not of the time.
 * With `--poll`, the harness polls the nat table as agent_bench.ts does (first rule, all rules); without
 * it the run ends at the agent's "full sync of IPv4 rules took" line, and nothing else loads the machine.
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
import { type Netns, NetnsScope } from "../tests/support/netns.ts";
import { renderIptablesRules } from "../lib/proxy/iptables/render/render.ts";
import { encodeState, writeStateCache } from "../lib/source/state_cache.ts";
import { syntheticCluster } from "./synthetic_cluster.ts";
import { buildClusterModel, oneEndpointChange, plainServiceIndex, renderInputFor } from "./cluster_model.ts";
import { kubeServicesRuleCount } from "./render_bench.ts";
import {
  agentArgs,
  type AgentProc,
  type ApiSetup,
  observeStart,
  startAgent,
  startApi,
  type StartFigures,
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
  const pending = new Map<number, { path: string; args: string; ts: number }>();
  const out: TracedCommand[] = [];
  for (const line of text.split("\n")) {
    const m = /^(\d+)\s+(\d+\.\d+)\s+(.*)$/.exec(line);
    if (!m) continue;
    const pid = Number(m[1]);
    const ts = Number(m[2]);
    const rest = m[3];
    // With -f, a call another process interrupts is printed in two parts: "execve(…) <unfinished ...>",
    // then "<... execve resumed>) = 0"; the command starts at the first part.
    const unfinished = /^execve\("([^"]+)", \[(.*)\].* <unfinished \.\.\.>$/.exec(rest);
    if (unfinished) {
      pending.set(pid, { path: unfinished[1], args: unfinished[2], ts });
      continue;
    }
    const resumed = /^<\.\.\. execve resumed>.* = (-?\d+)/.exec(rest);
    const ex = resumed ? null : /^execve\("([^"]+)", \[(.*)\](?:, .*)? = 0$/.exec(rest);
    const started = ex
      ? { path: ex[1], args: ex[2], ts }
      : resumed?.[1] === "0"
      ? pending.get(pid)
      : undefined;
    if (resumed) pending.delete(pid);
    if (started) {
      if (pid === agentPid) continue;
      const args = [...started.args.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((a) => a[1]).slice(1, 8);
      open.set(pid, { argv: [started.path.split("/").pop(), ...args].join(" "), start: started.ts });
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

/** One `nft monitor` "# new generation N by process PID (comm)" line, with its arrival (epoch seconds). */
export interface GenerationEvent {
  readonly generation: number;
  readonly pid: number;
  /** The process name as the kernel reports it (15 characters at most: "iptables-restor"). */
  readonly comm: string;
  readonly at: number;
}

/** Parses one `nft monitor` line; null for anything but a "new generation" line. */
export function parseGenerationLine(line: string, at: number): GenerationEvent | null {
  const m = /^# new generation (\d+) by process (\d+) \(([^)]*)\)/.exec(line);
  return m ? { generation: Number(m[1]), pid: Number(m[2]), comm: m[3], at } : null;
}

/**
 * Epoch seconds of a klog line ("I1125 11:47:06.646874 …", local time, no year) on the calendar day of
 * `near` (epoch seconds); null for other lines. A time more than 12 h after `near` is taken from the day
 * before (a run across midnight).
 */
export function klogEpochSeconds(line: string, near: number): number | null {
  const m = /^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6}) /.exec(line);
  if (!m) return null;
  const day = new Date(near * 1000);
  const d = new Date(
    day.getFullYear(),
    Number(m[1]) - 1,
    Number(m[2]),
    Number(m[3]),
    Number(m[4]),
    Number(m[5]),
    Number(m[6]) / 1000,
  );
  const t = d.getTime() / 1000;
  return t - near > 43_200 ? t - 86_400 : t;
}

/** One event of the first sync, in ms after the agent's exec. */
export interface TimelineRow {
  readonly ms: number;
  readonly event: string;
}

/** What {@link firstSyncTimeline} reads. All times are epoch seconds. */
export interface TimelineInput {
  /** The agent's execve. */
  readonly t0: number;
  /** The agent's log lines (klog text). */
  readonly log: readonly string[];
  readonly commands: readonly TracedCommand[];
  readonly generations: readonly GenerationEvent[];
  /** When the harness saw every KUBE-SERVICES rule (null: never). */
  readonly allRulesAt: number | null;
  /** When the harness saw the first nat rule (KUBE-MARK-MASQ's; null: never). */
  readonly firstRuleAt: number | null;
}

/**
 * The IPv4 first sync as a list of events: each list stored (the reflector's line, logged after the list's
 * objects went through the handlers), the full sync's `iptables-save -t nat` (its start is the sync's
 * start: the model is built from the trackers right before), the `iptables-restore` spawned (render and
 * split done), each of its transactions committed (its pid's "new generation" events), its exit, the
 * rules seen by the harness and the agent's own "sync … took" line.
 */
export function firstSyncTimeline(i: TimelineInput): TimelineRow[] {
  const ms = (t: number) => round((t - i.t0) * 1000);
  const rows: TimelineRow[] = [{ ms: 0, event: "agent exec" }];
  const seen = new Set<string>();
  let listsStart = Infinity;
  let syncLogged: { at: number; line: string } | null = null;
  for (const line of i.log) {
    const at = klogEpochSeconds(line, i.t0);
    if (at === null) continue;
    const list = /"list (\w+): (\d+) objects in (\d+) page/.exec(line);
    if (list && !seen.has(list[1])) {
      seen.add(list[1]);
      rows.push({ ms: ms(at), event: `list ${list[1]} stored (${list[2]} objects, ${list[3]} pages)` });
      if (list[1] !== "nodes") listsStart = Math.min(listsStart, at);
    }
    const sync = /full sync of IPv4 rules took (\d+)ms/.exec(line);
    if (sync && syncLogged === null) {
      syncLogged = { at, line: `agent logs "full sync of IPv4 rules took ${sync[1]}ms"` };
    }
  }
  const services = i.commands.filter((c) => c.start >= listsStart);
  const restore = services.find((c) => c.argv.startsWith("iptables-restore"));
  const save = restore
    ? services.filter((c) => c.argv.startsWith("iptables-save") && c.start <= restore.start).at(-1)
    : undefined;
  if (save) rows.push({ ms: ms(save.start), event: "full sync starts (iptables-save -t nat: stale chains)" });
  if (restore) {
    rows.push({ ms: ms(restore.start), event: "model + render + split done: iptables-restore spawned" });
    const commits = i.generations.filter((g) => g.pid === restore.pid);
    commits.forEach((g, k) => {
      rows.push({
        ms: ms(g.at),
        event: `transaction ${
          k + 1
        }/${commits.length} committed (generation ${g.generation}; arrival at nft monitor)`,
      });
    });
  }
  // Every restore process after the lists ends with its last commit: the full sync's, the other family's,
  // the jump rules'.
  for (const c of services) {
    if (c.end === null || !/^ip6?tables-restore/.test(c.argv)) continue;
    const what = c === restore ? "the full sync's iptables-restore" : c.argv.split(" ")[0];
    rows.push({ ms: ms(c.end), event: `${what} exited (its last transaction committed)` });
  }
  if (i.firstRuleAt !== null) {
    rows.push({
      ms: ms(i.firstRuleAt),
      event: "first nat transaction seen (poll: KUBE-MARK-MASQ has its rule)",
    });
  }
  if (i.allRulesAt !== null) {
    rows.push({ ms: ms(i.allRulesAt), event: "every KUBE-SERVICES rule seen (poll)" });
  }
  if (syncLogged) rows.push({ ms: ms(syncLogged.at), event: syncLogged.line });
  return rows.sort((a, b) => a.ms - b.ms);
}

/** The timeline as text: ms after exec, ms since the previous row, event. */
export function formatTimeline(rows: readonly TimelineRow[]): string {
  let prev = 0;
  const out = ["     at ms      +ms  event"];
  for (const r of rows) {
    out.push(`  ${String(r.ms).padStart(8)} ${String(round(r.ms - prev)).padStart(8)}  ${r.event}`);
    prev = r.ms;
  }
  return out.join("\n") + "\n";
}

/** Follows `nft monitor` in `ns`, recording "new generation" events as they arrive. */
function followGenerations(scope: NetnsScope, ns: Netns): GenerationEvent[] {
  const out: GenerationEvent[] = [];
  const child = scope.spawn(ns, ["nft", "monitor"]);
  let buf = "";
  child.stdout?.on("data", (b: Buffer) => {
    const at = Date.now() / 1000;
    buf += b.toString("utf8");
    let nl: number;
    while ((nl = buf.indexOf("\n")) !== -1) {
      const g = parseGenerationLine(buf.slice(0, nl), at);
      buf = buf.slice(nl + 1);
      if (g) out.push(g);
    }
  });
  return out;
}

/**
 * The floor: ms from spawn to exit of `iptables-restore -w 5 --counters` (no --noflush: the payload's
 * tables are flushed, one transaction per table) of `payload` in a fresh namespace; null when it failed.
 */
async function floorRun(scope: NetnsScope, payload: string, timeoutMs: number): Promise<number | null> {
  const ns = await scope.create("floor");
  const t = performance.now();
  const r = await ns.exec(["iptables-restore", "-w", "5", "--counters"], { input: payload, timeoutMs });
  return r.code === 0 ? round(performance.now() - t) : null;
}

/** Waits for the agent's first "full sync of IPv4 rules took" line (no polling of the kernel). */
async function loggedFullSync(agent: AgentProc, timeoutMs: number): Promise<StartFigures> {
  const t0 = performance.now();
  while (!agent.syncs.some((x) => x.full) && performance.now() - t0 < timeoutMs) {
    if (agent.exited !== null) throw new Error(`agent exited: ${agent.stderrTail.slice(-3).join(" | ")}`);
    await sleep(50);
  }
  const first = agent.syncs.find((x) => x.full);
  return {
    firstRule: null,
    allRules: null,
    agentLoggedSyncAtMs: first ? round(first.at - agent.startedAt) : null,
    agentReportedSyncMs: first?.ms ?? null,
  };
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
      monitor: { type: "boolean", default: false },
      poll: { type: "boolean", default: false },
      extra: { type: "string", multiple: true, default: [] },
      "no-floor": { type: "boolean", default: false },
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
    const extra: string[] = [...(values.extra as string[])];
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
    const generations = values.monitor ? followGenerations(scope, ns) : [];
    if (values.monitor) await sleep(300);
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
    // Polling `iptables -S` dumps the whole nat table every few ms and takes CPU from the restore (the
    // floor runs without it): by default wait for the agent's own "full sync … took" line instead.
    const start = values.poll
      ? await observeStart(agent, ns, expectedRules, Number(values.timeout) * 1000)
      : await loggedFullSync(agent, Number(values.timeout) * 1000);
    const allRulesAt = start.allRules === null
      ? null
      : (performance.timeOrigin + agent.startedAt + start.allRules.ms) / 1000;
    const firstRuleAt = start.firstRule === null
      ? null
      : (performance.timeOrigin + agent.startedAt + start.firstRule.ms) / 1000;
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
    const rows = firstSyncTimeline({
      t0,
      log: Buffer.concat(log).toString("utf8").split("\n"),
      commands: cmds,
      generations,
      allRulesAt,
      firstRuleAt,
    });
    process.stdout.write(`first sync timeline (IPv4, ms after the agent's exec):\n${formatTimeline(rows)}`);
    if (!values["no-floor"] && !values.cache) {
      const full = renderIptablesRules(
        renderInputFor(buildClusterModel(cluster), { full: true, existingNatChains: new Set() }),
      );
      const floorMs = await floorRun(scope, full.payload, Number(values.timeout) * 1000);
      const done = rows.find((r) => r.event.startsWith("the full sync's iptables-restore exited"))?.ms ??
        null;
      process.stdout.write(
        `floor: plain iptables-restore of the same rules (${
          round(full.payload.length / 2 ** 20)
        } MiB, rendered in-process) into an empty namespace: ${floorMs ?? "FAILED"} ms\n` +
          `first sync / floor: ${
            done === null || floorMs === null
              ? "not measured"
              : `${done} / ${floorMs} ms = ${round(done / floorMs)} ×`
          } (agent exec → its full-sync iptables-restore exited)\n`,
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
