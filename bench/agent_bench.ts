/**
 * End-to-end figures of the compiled agent (dist/edgeproxy) running in a scratch network namespace
 * against the in-process test apiserver (reached over a unix-socket bridge, so no routed address is
 * used): start → first rule / all rules in the kernel (from the apiserver, and from the state cache with
 * the apiserver unreachable), EndpointSlice change → rule in the kernel, and RSS (settled and idle).
 *
 * "In the kernel" is observed by polling `iptables -t nat -S <chain>` inside the namespace; every figure
 * is an upper bound whose resolution is one poll (its cost is recorded). The agent's own "sync took"
 * log lines (-v=4) are recorded next to it.
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { existsSync, readFileSync } from "node:fs";
import type { ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import process from "node:process";
import { type Netns, NetnsScope, run } from "../tests/support/netns.ts";
import { startTestApiserver, type TestApiserver } from "../tests/support/apiserver.ts";
import { type Bridge, serveUnixToTcp } from "../tests/support/socket_bridge.ts";
import { encodeState, writeStateCache } from "../lib/source/state_cache.ts";
import { servicePortChains, servicePortEndpointChain } from "../lib/proxy/iptables/chain_names.ts";
import { servicePortNameString } from "../lib/proxy/types.ts";
import type { SyntheticCluster } from "./synthetic_cluster.ts";
import { buildClusterModel, oneEndpointChange } from "./cluster_model.ts";
import { round, sleep, summarize, type Summary } from "./stats.ts";

const IPTABLES = "/usr/sbin/iptables";
const REPO = fileURLToPath(new URL("..", import.meta.url));
const BUN = join(REPO, "node_modules/.bin/bun");
const TCP_TO_UNIX = join(REPO, "tests/support/tcp_to_unix.ts");

/** A time observed by polling: upper bound `ms`, resolution one poll (`pollMs`, mean poll cost). */
export interface Observed {
  readonly ms: number;
  readonly pollMs: number;
  readonly polls: number;
}

/** Memory of the agent process (MiB, from /proc/<pid>/status). */
export interface RssFigure {
  readonly vmRssMiB: number;
  readonly vmHwmMiB: number;
  /**
   * VmRSS split: private anonymous memory (heap, allocator, JIT) and file-backed pages (the executable's
   * code and embedded bundle: shared, clean, reclaimable under memory pressure). Absent in old results.
   */
  readonly rssAnonMiB?: number;
  readonly rssFileMiB?: number;
}

/** One start of the agent. */
export interface StartFigures {
  /** Spawn → KUBE-MARK-MASQ has its rule (the first nat transaction landed). */
  readonly firstRule: Observed | null;
  /** Spawn → nat KUBE-SERVICES holds every expected rule (the first complete sync is in the kernel). */
  readonly allRules: Observed | null;
  /** Spawn → the agent logged its first "full sync … took" line; and the duration it logged. */
  readonly agentLoggedSyncAtMs: number | null;
  readonly agentReportedSyncMs: number | null;
}

/** Figures of the agent benchmarks at one size. */
export interface AgentFigures {
  readonly services: number;
  readonly ok: boolean;
  /** Why (part of) the run could not be measured; "" when everything was. */
  readonly note: string;
  readonly fromApiserver?: StartFigures;
  /** RSS after the first complete sync and `settleMs` of quiet. */
  readonly settledRss?: RssFigure;
  /** EndpointSlice update in the apiserver → the Service's chain jumps to the new endpoint's chain. */
  readonly endpointChange?: Summary & {
    /** Mean cost of one poll; 0 when observed by xtables-monitor (netlink events, no polling). */
    readonly pollMs: number;
    /** How "in the kernel" was seen: the commit's netlink event, or polling `iptables -S`. */
    readonly observedBy?: "xtables-monitor" | "poll";
    /**
     * The kernel's floor for any sync that adds a rule with a verdict or target (median ms): restoring
     * one `-j RETURN` rule into an unreferenced scratch chain in the agent's namespace. nf_tables then
     * validates every chain reachable from the built-in chains at commit (bench/README.md).
     */
    readonly commitFloorMs?: number | null;
    /** The agent's own "sync took" figure for the sync that carried each change. */
    readonly agentReportedSyncMs: Summary | null;
    /** Mode(s) and payload bytes the agent logged for those syncs. */
    readonly agentModes: readonly string[];
    readonly agentPayloadBytes: number | null;
  };
  readonly fromCache?: StartFigures;
  readonly cacheNote?: string;
}

/** Options of {@link benchAgent}. */
export interface AgentBenchOptions {
  readonly binary: string;
  readonly cluster: SyntheticCluster;
  /** nat KUBE-SERVICES rules of the complete ruleset (from the in-process render of the same cluster). */
  readonly kubeServicesRules: number;
  /** Index of the Service whose EndpointSlice is changed. */
  readonly changedIndex: number;
  /** Number of endpoint changes measured. */
  readonly changes: number;
  /** Limit for one start to reach all rules, and for one change to reach the kernel. */
  readonly startTimeoutMs: number;
  readonly changeTimeoutMs: number;
  readonly settleMs: number;
  /** Also start from the state cache. */
  readonly cacheStart: boolean;
  readonly progress: (m: string) => void;
}

/** Why the agent benchmarks cannot run here ("" when they can). */
export function agentUnavailableReason(binary: string): string {
  try {
    readFileSync(binary, { flag: "r" }).subarray(0, 4);
  } catch (e) {
    return `${binary} not readable (${(e as Error).message.split("\n")[0]}); build it with bash compile.sh`;
  }
  try {
    readFileSync(BUN, { flag: "r" }).subarray(0, 4);
  } catch {
    return `${BUN} missing (needed for the namespace side of the apiserver bridge)`;
  }
  return "";
}

/** VmRSS / VmHWM of a process, or null when it is gone. */
export function readRss(pid: number): RssFigure | null {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/status`, "utf8");
  } catch {
    return null;
  }
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(text)?.[1] ?? NaN);
  return {
    vmRssMiB: round(kb("VmRSS") / 1024),
    vmHwmMiB: round(kb("VmHWM") / 1024),
    rssAnonMiB: round(kb("RssAnon") / 1024),
    rssFileMiB: round(kb("RssFile") / 1024),
  };
}

/** `iptables -t nat -S <chain>` inside the namespace: the rule lines, or null when the chain is missing. */
async function natChainRules(ns: Netns, chain: string): Promise<string[] | null> {
  const r = await run([...ns.prefix, IPTABLES, "-w", "5", "-t", "nat", "-S", chain], { timeoutMs: 30_000 });
  if (r.code !== 0) return null;
  return r.stdout.split("\n").filter((l) => l.startsWith("-A "));
}

/** A running agent and what it logged. */
export interface AgentProc {
  readonly child: ChildProcess;
  readonly pid: number;
  readonly startedAt: number;
  /** Arrival time (performance.now()), mode, logged ms and payload size of each "<mode> sync … took" line. */
  readonly syncs: Array<{ at: number; full: boolean; mode: string; ms: number; bytes: number | null }>;
  readonly stderrTail: string[];
  exited: { code: number | null; signal: string | null } | null;
}

/** Spawns `binary args` inside `ns` (killed by the scope's cleanup) and follows its log. */
export function startAgent(
  scope: NetnsScope,
  ns: Netns,
  binary: string,
  args: readonly string[],
): AgentProc {
  const startedAt = performance.now();
  const child = scope.spawn(ns, [binary, ...args]);
  const proc: AgentProc = {
    child,
    pid: child.pid ?? -1,
    startedAt,
    syncs: [],
    stderrTail: [],
    exited: null,
  };
  let buf = "";
  const onData = (b: Buffer) => {
    buf += b.toString("utf8");
    let nl: number;
    while ((nl = buf.indexOf("\n")) !== -1) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      const m = /(\w+) sync of IPv4 rules took (\d+)ms(?: \((\d+) bytes\))?/.exec(line);
      if (m) {
        proc.syncs.push({
          at: performance.now(),
          full: m[1] === "full",
          mode: m[1],
          ms: Number(m[2]),
          bytes: m[3] === undefined ? null : Number(m[3]),
        });
      }
      if (!/^debug /.test(line) || proc.stderrTail.length < 5) {
        proc.stderrTail.push(line.slice(0, 400));
        if (proc.stderrTail.length > 30) proc.stderrTail.shift();
      }
    }
  };
  child.stderr?.on("data", onData);
  child.stdout?.on("data", onData);
  child.on("exit", (code, signal) => (proc.exited = { code, signal }));
  return proc;
}

/** SIGTERM, then SIGKILL after 5 s. */
export async function stopAgent(p: AgentProc): Promise<void> {
  if (p.exited !== null) return;
  const gone = new Promise<void>((r) => p.child.once("exit", () => r()));
  p.child.kill("SIGTERM");
  const t = setTimeout(() => p.child.kill("SIGKILL"), 5000);
  await gone;
  clearTimeout(t);
}

class AgentDied extends Error {}

function agentDiedMessage(p: AgentProc): string {
  const tail = p.stderrTail.filter((l) => !l.startsWith("debug ")).slice(-6).join(" | ");
  return `agent exited (code ${p.exited?.code}, signal ${p.exited?.signal}): ${tail}`;
}

/**
 * Polls `check` until it returns true; between polls waits as long as the last poll took (at least
 * `minGapMs`), so polling never takes more than about half a core from the agent. Times are relative to
 * `t0`. Returns null on timeout; throws AgentDied when the agent exits.
 */
async function pollUntil(
  agent: AgentProc,
  t0: number,
  check: () => Promise<boolean>,
  timeoutMs: number,
  minGapMs: number,
): Promise<Observed | null> {
  let polls = 0;
  let spent = 0;
  while (performance.now() - t0 < timeoutMs) {
    if (agent.exited !== null) throw new AgentDied(agentDiedMessage(agent));
    const s = performance.now();
    const ok = await check();
    const e = performance.now();
    polls++;
    spent += e - s;
    if (ok) return { ms: round(e - t0), pollMs: round(spent / polls), polls };
    await sleep(Math.max(minGapMs, e - s));
  }
  return null;
}

/** Rule events of one namespace, as `xtables-monitor -e -4` prints them, with their arrival times. */
interface RuleMonitor {
  /** Resolves when a line matching `match` arrives at or after `t0`; null after `timeoutMs`. */
  waitFor(
    match: (line: string) => boolean,
    t0: number,
    timeoutMs: number,
    agent: AgentProc,
  ): Promise<Observed | null>;
}

const XTABLES_MONITOR = "/usr/sbin/xtables-monitor";
const STDBUF = "/usr/bin/stdbuf";

/**
 * Starts `xtables-monitor -e -4` (nf_tables only; null when the tools are missing or the namespace's
 * iptables is legacy) and waits until it runs: a marker chain created after the start must be reported.
 */
async function startRuleMonitor(scope: NetnsScope, ns: Netns): Promise<RuleMonitor | null> {
  if (!existsSync(XTABLES_MONITOR) || !existsSync(STDBUF)) return null;
  const version = await run([...ns.prefix, IPTABLES, "--version"]);
  if (!version.stdout.includes("nf_tables")) return null;
  const child = scope.spawn(ns, [STDBUF, "-oL", XTABLES_MONITOR, "-e", "-4"]);
  const lines: Array<{ at: number; text: string }> = [];
  let buf = "";
  child.stdout?.on("data", (b: Buffer) => {
    buf += b.toString("utf8");
    let nl: number;
    while ((nl = buf.indexOf("\n")) !== -1) {
      lines.push({ at: performance.now(), text: buf.slice(0, nl).trimEnd() });
      buf = buf.slice(nl + 1);
      if (lines.length > 10_000) lines.splice(0, 5_000);
    }
  });
  const find = (match: (l: string) => boolean, t0: number) => lines.find((l) => l.at >= t0 && match(l.text));
  const marker = `KUBE-BENCH-MON-${process.pid}`;
  const t0 = performance.now();
  for (let i = 0; i < 50 && find((l) => l.includes(marker), t0) === undefined; i++) {
    await run([...ns.prefix, IPTABLES, "-w", "5", "-t", "nat", "-N", marker]);
    await run([...ns.prefix, IPTABLES, "-w", "5", "-t", "nat", "-X", marker]);
    await sleep(100);
  }
  if (find((l) => l.includes(marker), t0) === undefined) {
    child.kill("SIGKILL");
    return null;
  }
  return {
    async waitFor(match, start, timeoutMs, agent) {
      while (performance.now() - start < timeoutMs) {
        if (agent.exited !== null) throw new AgentDied(agentDiedMessage(agent));
        const hit = find(match, start);
        if (hit) return { ms: round(hit.at - start), pollMs: 0, polls: 0 };
        await sleep(1);
      }
      return null;
    },
  };
}

/**
 * Median ms of restoring one `-j RETURN` rule into an unreferenced scratch chain (then removing the
 * chain, untimed): the commit-time validation every rule-adding sync pays in this namespace.
 */
async function commitFloor(ns: Netns): Promise<number | null> {
  const chain = `KUBE-BENCH-FLOOR-${process.pid}`;
  const restore = (text: string) =>
    run([...ns.prefix, "/usr/sbin/iptables-restore", "-w", "5", "--noflush", "--counters"], { input: text });
  const samples: number[] = [];
  for (let i = 0; i < 3; i++) {
    const t = performance.now();
    const r = await restore(`*nat\n:${chain} - [0:0]\n-A ${chain} -j RETURN\nCOMMIT\n`);
    const ms = performance.now() - t;
    await restore(`*nat\n:${chain} - [0:0]\n-X ${chain}\nCOMMIT\n`);
    if (r.code !== 0) return null;
    samples.push(ms);
  }
  return summarize(samples).median;
}

/** Waits for the first rule and for all rules after a start at `agent.startedAt`. */
export async function observeStart(
  agent: AgentProc,
  ns: Netns,
  expectedKubeServices: number,
  timeoutMs: number,
): Promise<StartFigures> {
  const t0 = agent.startedAt;
  const firstRule = await pollUntil(
    agent,
    t0,
    async () => {
      const rules = await natChainRules(ns, "KUBE-MARK-MASQ");
      return rules !== null && rules.length > 0;
    },
    timeoutMs,
    5,
  );
  let allRules: Observed | null = null;
  if (firstRule !== null) {
    allRules = await pollUntil(
      agent,
      t0,
      async () => {
        const rules = await natChainRules(ns, "KUBE-SERVICES");
        return rules !== null && rules.length >= expectedKubeServices;
      },
      timeoutMs,
      5,
    );
  }
  // The agent logs its "full sync … took" line after the jump rules that follow the restore: give it a
  // moment once the rules are visible.
  for (let i = 0; i < 100 && allRules !== null && !agent.syncs.some((s) => s.full); i++) await sleep(50);
  const firstSync = agent.syncs.find((s) => s.full);
  return {
    firstRule,
    allRules,
    agentLoggedSyncAtMs: firstSync ? round(firstSync.at - t0) : null,
    agentReportedSyncMs: firstSync?.ms ?? null,
  };
}

/** The Service chain of a plain ClusterIP Service's port and the chain of its changed endpoint. */
export function changeChains(
  cluster: SyntheticCluster,
  index: number,
  generation: number,
): { svc: string; sep: string } {
  const changed = oneEndpointChange(cluster, index, generation);
  const model = buildClusterModel({
    services: [cluster.services[index]],
    endpointSlices: [changed],
    node: cluster.node,
  });
  for (const [key, info] of model.services) {
    const spn = servicePortNameString(info.name);
    const protocol = info.protocol.toLowerCase();
    const fresh = (model.endpoints.get(key) ?? []).find((e) => e.ip.startsWith("11."));
    if (fresh === undefined) continue;
    return {
      svc: servicePortChains(spn, protocol).clusterPolicy,
      sep: servicePortEndpointChain(spn, protocol, fresh.endpoint),
    };
  }
  throw new Error(`no changed endpoint for Service index ${index}`);
}

/**
 * Flags of every benchmarked agent: min-sync-period 0, -v=4, no host-global conntrack settings, and a
 * per-run --state-dir (the default /var/lib/edgeproxy is shared by every agent on the host: a cache left
 * there by another run would be programmed whenever the initial list takes longer than the 3 s
 * --cache-start-deadline, which it does at 10k Services).
 */
export function agentArgs(
  kubeconfig: string,
  nodeName: string,
  stateDir: string,
  extra: readonly string[] = [],
): string[] {
  return [
    `--kubeconfig=${kubeconfig}`,
    `--state-dir=${stateDir}`,
    `--hostname-override=${nodeName}`,
    "--cluster-cidr=10.0.0.0/8",
    "--iptables-min-sync-period=0s",
    // nf_conntrack hashsize is global to the host: leave every conntrack setting alone.
    "--conntrack-max-per-core=0",
    "--conntrack-tcp-timeout-established=0s",
    "--conntrack-tcp-timeout-close-wait=0s",
    "--conntrack-udp-timeout=0s",
    "--conntrack-udp-timeout-stream=0s",
    "--metrics-bind-address=127.0.0.1:10249",
    "--healthz-bind-address=127.0.0.1:10256",
    "--v=4",
    ...extra,
  ];
}

/** The test apiserver holding the cluster, and the namespace-side bridge to it. */
export interface ApiSetup {
  readonly api: TestApiserver;
  readonly bridge: Bridge;
  readonly kubeconfig: string;
}

/** Starts the test apiserver with the cluster's objects, the unix-socket bridge and a kubeconfig in `dir`. */
export async function startApi(cluster: SyntheticCluster, dir: string): Promise<ApiSetup> {
  const api = await startTestApiserver({ tlsDir: join(dir, "tls") });
  const strip = <T extends { metadata?: { resourceVersion?: string } }>(o: T): T => ({
    ...o,
    metadata: { ...o.metadata, resourceVersion: undefined },
  });
  api.create("nodes", strip(cluster.node));
  for (const s of cluster.services) api.create("services", strip(s));
  for (const e of cluster.endpointSlices) api.create("endpointslices", strip(e));
  const bridge = await serveUnixToTcp(join(dir, "api.sock"), "127.0.0.1", api.port);
  const kubeconfig = join(dir, "kubeconfig");
  await api.writeKubeconfig(kubeconfig);
  return { api, bridge, kubeconfig };
}

/** Starts tcp_to_unix.ts inside `ns` (127.0.0.1:<port> → the unix socket) and waits until it listens. */
export async function startNsBridge(scope: NetnsScope, ns: Netns, port: number, sock: string): Promise<void> {
  const child = scope.spawn(ns, [BUN, TCP_TO_UNIX, "127.0.0.1", String(port), sock]);
  await new Promise<void>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error("tcp_to_unix.ts did not start within 20 s")), 20_000);
    let out = "";
    child.stdout?.on("data", (b: Buffer) => {
      out += b.toString();
      if (out.includes("listening")) {
        clearTimeout(t);
        resolve();
      }
    });
    child.on("exit", (code) => {
      clearTimeout(t);
      reject(new Error(`tcp_to_unix.ts exited ${code}`));
    });
  });
}

/** A live agent in its own namespace, against the test apiserver holding a cluster (for diagnostics). */
export interface AgentSession {
  readonly setup: ApiSetup;
  readonly scope: NetnsScope;
  readonly ns: Netns;
  readonly agent: AgentProc;
  /** Scratch directory of the session (deleted afterwards). */
  readonly dir: string;
}

/**
 * Starts the test apiserver with `cluster`, a namespace named `<prefix>-…` with the bridge to it, and the
 * agent (`extra` flags after the bench's: later flags win); runs `fn`; always stops and deletes it all.
 */
export async function withAgentSession<T>(
  o: { cluster: SyntheticCluster; prefix: string; binary: string; extra?: readonly string[] },
  fn: (s: AgentSession) => Promise<T>,
): Promise<T> {
  const dir = await mkdtemp(join(tmpdir(), `edgeproxy-${o.prefix}-`));
  const scope = new NetnsScope(o.prefix);
  let setup: ApiSetup | null = null;
  try {
    setup = await startApi(o.cluster, dir);
    const ns = await scope.create("a");
    await startNsBridge(scope, ns, setup.api.port, join(dir, "api.sock"));
    const nodeName = o.cluster.node.metadata?.name ?? "bench-node";
    const agent = startAgent(
      scope,
      ns,
      o.binary,
      agentArgs(setup.kubeconfig, nodeName, join(dir, "state"), o.extra),
    );
    try {
      return await fn({ setup, scope, ns, agent, dir });
    } finally {
      await stopAgent(agent);
    }
  } finally {
    await scope.cleanup();
    await setup?.bridge.close();
    await setup?.api.close();
    await rm(dir, { recursive: true, force: true });
  }
}

/** Runs the agent benchmarks for one cluster; never throws for agent failures (they become `note`). */
export async function benchAgent(o: AgentBenchOptions): Promise<AgentFigures> {
  const n = o.cluster.services.length;
  const nodeName = o.cluster.node.metadata?.name ?? "bench-node";
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-bench-"));
  const scope = new NetnsScope("bagt");
  let setup: ApiSetup | null = null;
  const figures: {
    -readonly [K in keyof AgentFigures]: AgentFigures[K];
  } = { services: n, ok: false, note: "" };
  try {
    setup = await startApi(o.cluster, dir);
    const ns = await scope.create("live");
    await startNsBridge(scope, ns, setup.api.port, join(dir, "api.sock"));
    const agent = startAgent(
      scope,
      ns,
      o.binary,
      agentArgs(setup.kubeconfig, nodeName, join(dir, "state-live")),
    );
    try {
      o.progress(`agent ${n} services: started (pid ${agent.pid}), waiting for the first complete sync`);
      const start = await observeStart(agent, ns, o.kubeServicesRules, o.startTimeoutMs);
      figures.fromApiserver = start;
      if (start.allRules === null) {
        figures.note = `rules not complete within ${o.startTimeoutMs} ms (first rule: ${
          start.firstRule?.ms ?? "never"
        }); agent log: ${agent.stderrTail.slice(-4).join(" | ")}`;
        return figures;
      }
      o.progress(`agent ${n} services: all rules after ${start.allRules.ms} ms; settling ${o.settleMs} ms`);
      await sleep(o.settleMs);
      figures.settledRss = readRss(agent.pid) ?? undefined;

      // On nf_tables the commit of the change is seen as a netlink event (xtables-monitor): the exact
      // time, where polling `iptables -S` would add its own cost as resolution. Legacy: polling.
      const monitor = await startRuleMonitor(scope, ns);
      const samples: number[] = [];
      let pollMs = 0;
      const reported: number[] = [];
      const modes = new Set<string>();
      let payloadBytes: number | null = null;
      for (let g = 1; g <= o.changes; g++) {
        const chains = changeChains(o.cluster, o.changedIndex, g);
        const slice = oneEndpointChange(o.cluster, o.changedIndex, g);
        const syncsBefore = agent.syncs.length;
        const t0 = performance.now();
        setup.api.update("endpointslices", {
          ...slice,
          metadata: { ...slice.metadata, resourceVersion: undefined },
        });
        const seen = monitor !== null
          ? await monitor.waitFor(
            (l) => l.includes(`-A ${chains.svc} `) && l.endsWith(`-j ${chains.sep}`),
            t0,
            o.changeTimeoutMs,
            agent,
          )
          : await pollUntil(
            agent,
            t0,
            async () => {
              const rules = await natChainRules(ns, chains.svc);
              return rules !== null && rules.some((r) => r.endsWith(`-j ${chains.sep}`));
            },
            o.changeTimeoutMs,
            0,
          );
        if (seen === null) {
          figures.note = `endpoint change ${g} not in the kernel within ${o.changeTimeoutMs} ms`;
          break;
        }
        samples.push(seen.ms);
        pollMs = Math.max(pollMs, seen.pollMs);
        await sleep(300);
        const logged = agent.syncs.slice(syncsBefore).find((s) => !s.full) ?? agent.syncs[syncsBefore];
        if (logged) {
          reported.push(logged.ms);
          modes.add(logged.mode);
          payloadBytes = logged.bytes ?? payloadBytes;
        }
        o.progress(`agent ${n} services: endpoint change ${g} in the kernel after ${seen.ms} ms`);
        await sleep(700);
      }
      const commitFloorMs = await commitFloor(ns);
      if (samples.length > 0) {
        figures.endpointChange = {
          ...summarize(samples),
          pollMs,
          observedBy: monitor !== null ? "xtables-monitor" : "poll",
          commitFloorMs,
          agentReportedSyncMs: reported.length > 0 ? summarize(reported) : null,
          agentModes: [...modes],
          agentPayloadBytes: payloadBytes,
        };
      }
    } catch (e) {
      figures.note = e instanceof AgentDied ? e.message : `agent benchmark failed: ${(e as Error).message}`;
      return figures;
    } finally {
      await stopAgent(agent);
    }

    if (o.cacheStart) {
      const c = await cacheStart(o, scope, dir, setup, nodeName);
      figures.fromCache = c.figures;
      if (c.note) figures.cacheNote = c.note;
    }
    figures.ok = figures.note === "";
    return figures;
  } catch (e) {
    figures.note = `agent benchmark setup failed: ${(e as Error).message}`;
    return figures;
  } finally {
    await scope.cleanup();
    await setup?.bridge.close();
    await setup?.api.close();
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Start from the state cache: a cache file of the same cluster written with encodeState/writeStateCache,
 * a fresh namespace with no bridge (the kubeconfig's 127.0.0.1:<port> refuses connections there), and
 * --cache-start-deadline=0s.
 */
async function cacheStart(
  o: AgentBenchOptions,
  scope: NetnsScope,
  dir: string,
  setup: ApiSetup,
  nodeName: string,
): Promise<{ figures?: StartFigures; note?: string }> {
  const stateDir = join(dir, "state");
  await writeStateCache(
    stateDir,
    encodeState(
      { services: o.cluster.services, endpointSlices: o.cluster.endpointSlices, node: o.cluster.node },
      nodeName,
      Date.now(),
    ),
  );
  const ns = await scope.create("cache");
  const agent = startAgent(
    scope,
    ns,
    o.binary,
    agentArgs(setup.kubeconfig, nodeName, stateDir, ["--cache-start-deadline=0s"]),
  );
  try {
    const f = await observeStart(agent, ns, o.kubeServicesRules, o.startTimeoutMs);
    o.progress(
      `agent ${o.cluster.services.length} services from the state cache: first rule ${
        f.firstRule?.ms ?? "never"
      } ms, all rules ${f.allRules?.ms ?? "never"} ms`,
    );
    if (f.allRules === null) {
      return {
        figures: f,
        note: `from the cache, rules not complete within ${o.startTimeoutMs} ms; agent log: ${
          agent.stderrTail.slice(-4).join(" | ")
        }`,
      };
    }
    return { figures: f };
  } catch (e) {
    return { note: e instanceof AgentDied ? e.message : (e as Error).message };
  } finally {
    await stopAgent(agent);
  }
}

/** Idle RSS: the agent with an empty cluster (only its Node), after its first sync and `settleMs`. */
export async function benchIdleRss(
  binary: string,
  node: SyntheticCluster["node"],
  settleMs: number,
  timeoutMs: number,
): Promise<{ rss: RssFigure | null; note: string }> {
  const r = await benchAgentQuiet(binary, { services: [], endpointSlices: [], node }, settleMs, timeoutMs);
  return r;
}

async function benchAgentQuiet(
  binary: string,
  cluster: SyntheticCluster,
  settleMs: number,
  timeoutMs: number,
): Promise<{ rss: RssFigure | null; note: string }> {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-bench-"));
  const scope = new NetnsScope("bidl");
  let setup: ApiSetup | null = null;
  try {
    setup = await startApi(cluster, dir);
    const ns = await scope.create("idle");
    await startNsBridge(scope, ns, setup.api.port, join(dir, "api.sock"));
    const agent = startAgent(
      scope,
      ns,
      binary,
      agentArgs(setup.kubeconfig, cluster.node.metadata?.name ?? "", join(dir, "state")),
    );
    try {
      const start = await observeStart(agent, ns, 1, timeoutMs);
      if (start.firstRule === null) {
        return {
          rss: null,
          note: `no rules within ${timeoutMs} ms: ${agent.stderrTail.slice(-4).join(" | ")}`,
        };
      }
      await sleep(settleMs);
      return { rss: readRss(agent.pid), note: "" };
    } catch (e) {
      return { rss: null, note: (e as Error).message };
    } finally {
      await stopAgent(agent);
    }
  } catch (e) {
    return { rss: null, note: `idle RSS setup failed: ${(e as Error).message}` };
  } finally {
    await scope.cleanup();
    await setup?.bridge.close();
    await setup?.api.close();
    await rm(dir, { recursive: true, force: true });
  }
}
