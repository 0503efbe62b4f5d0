/**
 * Dataplane and memory figures of the compiled agent, iptables mode beside nftables mode (figures only, no
 * assertions):
 *
 * - new TCP connections/s from a client namespace through ONE Service's ClusterIP to a backend namespace,
 *   with only that Service programmed and with N Services × 5 endpoints programmed;
 * - the agent's VmRSS / VmHWM after its first sync settled, at both sizes.
 *
 *   bun bench/dataplane_bench.ts [--services=5000] [--modes=iptables,nftables] [--connections=10000]
 *     [--workers=64] [--limit=8] [--runs=9] [--settle=5] [--binary=dist/edgeproxy]
 *
 * Topology per (mode, size), every namespace fresh and deleted afterwards: the agent's namespace "a" (as
 * agent_bench.ts: the test apiserver over a unix-socket bridge) forwards between a client namespace
 * (192.168.77.2) and a backend namespace holding the Service's 5 endpoint addresses, where an accept-and-close
 * server listens on the target port. The client is outside --cluster-cidr, so the agent masquerades it.
 */
import { parseArgs } from "node:util";
import { execFileSync } from "node:child_process";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import process from "node:process";
import { addAddress, addRoute, enableForwarding, type Netns, setSysctls } from "../tests/support/netns.ts";
import { run } from "../tests/support/netns.ts";
import { readRss, type RssFigure, withAgentSession } from "./agent_bench.ts";
import { type SyntheticCluster, syntheticCluster } from "./synthetic_cluster.ts";
import { round, sleep, summarize } from "./stats.ts";
import type { ConnectResult } from "./dataplane_traffic.ts";

const REPO = fileURLToPath(new URL("..", import.meta.url));
const BUN = join(REPO, "node_modules/.bin/bun");
const TRAFFIC = join(REPO, "bench/dataplane_traffic.ts");

/** Figures of one (mode, size). */
interface RunFigures {
  readonly mode: string;
  readonly services: number;
  readonly firstSyncLoggedAtMs: number | null;
  readonly agentSyncMs: number | null;
  readonly rss: RssFigure | null;
  readonly runs: ConnectResult[];
  readonly note: string;
}

/** Whether a Service is a plain ClusterIP TCP Service (no affinity, no local policy, no external IPs). */
function isPlain(s: SyntheticCluster["services"][number]): boolean {
  return s.spec?.type === "ClusterIP" && s.spec.sessionAffinity === undefined &&
    s.spec.internalTrafficPolicy === undefined && s.spec.externalIPs === undefined &&
    s.spec.ports?.length === 1;
}

/**
 * The plain Service in the middle of nat KUBE-SERVICES: iptables mode matches ClusterIPs rule by rule, in
 * sorted service-port order (upstream: map order), so a typical Service is halfway down the chain.
 */
function middleService(cluster: SyntheticCluster): number {
  const order = cluster.services.map((s, i) => ({ key: `${s.metadata?.namespace}/${s.metadata?.name}`, i }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  for (let d = 0; d < order.length; d++) {
    for (const pos of [Math.floor(order.length / 2) + d, Math.floor(order.length / 2) - d]) {
      const c = order[pos];
      if (c !== undefined && isPlain(cluster.services[c.i])) return c.i;
    }
  }
  throw new Error("synthetic cluster has no plain ClusterIP Service");
}

function load(): string {
  return execFileSync("uptime", { encoding: "utf8" }).trim().replace(/^.*load average: /, "");
}

async function connectRun(
  cli: Netns,
  ip: string,
  port: number,
  total: number,
  workers: number,
  limitMs: number,
): Promise<ConnectResult> {
  const r = await run([
    ...cli.prefix,
    BUN,
    TRAFFIC,
    "connect",
    ip,
    String(port),
    String(total),
    String(workers),
    String(limitMs),
  ], { timeoutMs: limitMs + 30_000 });
  if (r.code !== 0) {
    throw new Error(`connection generator exited ${r.code}: ${r.stderr.trim().slice(0, 300)}`);
  }
  return JSON.parse(r.stdout.trim().split("\n").pop()!) as ConnectResult;
}

/** A configured (mode, size) with its agent synced: `measure` runs one timed batch of connections. */
interface Ready {
  readonly figures: RunFigures;
  measure(): Promise<void>;
}

/**
 * Starts one (mode, size): agent, namespaces, server; waits for the first sync, settles, reads RSS, probes and
 * warms up, then runs `inner` with the agent still alive (so configurations can be measured interleaved).
 */
async function withReady(
  o: {
    mode: string;
    cluster: SyntheticCluster;
    target: number;
    binary: string;
    connections: number;
    workers: number;
    limitMs: number;
    settleMs: number;
    startTimeoutMs: number;
  },
  inner: (ready: Ready | null) => Promise<void>,
): Promise<RunFigures> {
  const n = o.cluster.services.length;
  const svc = o.cluster.services[o.target];
  const slice = o.cluster.endpointSlices[o.target];
  const clusterIP = svc.spec!.clusterIP!;
  const port = svc.spec!.ports![0].port!;
  const targetPort = slice.ports![0].port!;
  const endpoints = (slice.endpoints ?? []).map((e) => e.addresses![0]);
  const progress = (m: string) => process.stderr.write(`[${o.mode} ${n}] ${m}\n`);
  return await withAgentSession(
    {
      cluster: o.cluster,
      prefix: "bdpl",
      binary: o.binary,
      extra: [`--proxy-mode=${o.mode}`, "--iptables-sync-period=1h"],
    },
    async ({ scope, ns, agent }) => {
      const figures: RunFigures = {
        mode: o.mode,
        services: n,
        firstSyncLoggedAtMs: null,
        agentSyncMs: null,
        rss: null,
        runs: [],
        note: "",
      };
      const set = (f: Partial<RunFigures>) => Object.assign(figures, f);
      // Errors (klog E lines) and every "sync … took" line, for the note of a failed start.
      const notable: string[] = [];
      agent.child.stderr?.on("data", (b: Buffer) => {
        for (const l of b.toString().split("\n")) {
          if ((/^E\d{4}/.test(l) || / sync of IPv\d rules took/.test(l)) && notable.length < 40) {
            notable.push(l.slice(0, 300));
          }
        }
      });
      // Topology, while the agent lists and programs.
      await enableForwarding(ns);
      const cli = await scope.create("cli");
      const be = await scope.create("be");
      await scope.link(cli, "eth0", "192.168.77.2/24", ns, "vc", "192.168.77.1/24");
      await scope.link(be, "eth0", "192.168.78.2/24", ns, "vb", "192.168.78.1/24");
      await addRoute(cli, "default", { via: "192.168.77.1" });
      await addRoute(be, "default", { via: "192.168.78.1" });
      for (const ep of endpoints) {
        await addAddress(be, "eth0", `${ep}/32`);
        await addRoute(ns, `${ep}/32`, { via: "192.168.78.2" });
      }
      // Many short connections from one address: the whole port range, and TIME_WAIT ports reused.
      await setSysctls(cli, { "net.ipv4.ip_local_port_range": "1024 65535", "net.ipv4.tcp_tw_reuse": "1" });
      const server = scope.spawn(be, [BUN, TRAFFIC, "serve", String(targetPort)]);
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(() => reject(new Error("accept server did not start within 20 s")), 20_000);
        server.stdout?.on("data", (b: Buffer) => {
          if (b.toString().includes("listening")) {
            clearTimeout(t);
            resolve();
          }
        });
      });

      // The first sync: the agent's own "sync of IPv4 rules took" line.
      const t0 = agent.startedAt;
      while (agent.syncs.length === 0 && performance.now() - t0 < o.startTimeoutMs) {
        if (agent.exited !== null) {
          set({ note: `agent exited: ${agent.stderrTail.slice(-4).join(" | ")}` });
          await inner(null);
          return figures;
        }
        await sleep(50);
      }
      const first = agent.syncs[0];
      if (first === undefined) {
        set({ note: `no IPv4 sync logged within ${o.startTimeoutMs} ms: ${notable.join(" | ")}` });
        await inner(null);
        return figures;
      }
      set({ firstSyncLoggedAtMs: round(first.at - t0), agentSyncMs: first.ms });
      progress(`first sync logged after ${figures.firstSyncLoggedAtMs} ms (agent: ${first.ms} ms); settling`);
      await sleep(o.settleMs);
      set({ rss: readRss(agent.pid) });

      // The Service must answer before anything is timed.
      const probe = await connectRun(cli, clusterIP, port, 20, 4, 10_000);
      if (probe.ok !== 20) {
        set({ note: `probe through ${clusterIP}:${port}: ${JSON.stringify(probe)}` });
        await inner(null);
        return figures;
      }
      await connectRun(cli, clusterIP, port, 1000, o.workers, 5000); // warm-up
      progress(`ready (${clusterIP}:${port} → ${endpoints.length} endpoints :${targetPort})`);
      await inner({
        figures,
        async measure() {
          const r = await connectRun(cli, clusterIP, port, o.connections, o.workers, o.limitMs);
          progress(`${r.perSecond} conn/s (${r.ok} ok, ${r.errors} errors, ${r.ms} ms)`);
          figures.runs.push(r);
        },
      });
      return figures;
    },
  );
}

function median(runs: readonly ConnectResult[]): number | null {
  return runs.length === 0 ? null : summarize(runs.map((r) => r.perSecond)).median;
}

/** The best run: on a shared, loaded machine the closest to what the dataplane does without competition. */
function best(runs: readonly ConnectResult[]): number | null {
  return runs.length === 0 ? null : Math.max(...runs.map((r) => r.perSecond));
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      services: { type: "string", default: "5000" },
      modes: { type: "string", default: "iptables,nftables" },
      connections: { type: "string", default: "10000" },
      workers: { type: "string", default: "64" },
      limit: { type: "string", default: "8" },
      runs: { type: "string", default: "9" },
      settle: { type: "string", default: "5" },
      "start-timeout": { type: "string", default: "180" },
      binary: { type: "string", default: join(REPO, "dist/edgeproxy") },
    },
  });
  const n = Number(values.services);
  const big = syntheticCluster({ services: n });
  const target = middleService(big);
  const one: SyntheticCluster = {
    services: [big.services[target]],
    endpointSlices: [big.endpointSlices[target]],
    node: big.node,
  };
  const started = performance.now();
  const loadBefore = load();
  const configs = values.modes!.split(",").flatMap((mode) =>
    ([[one, 0], [big, target]] as const).map(([cluster, idx]) => ({
      mode,
      cluster,
      target: idx,
      binary: values.binary!,
      connections: Number(values.connections),
      workers: Number(values.workers),
      limitMs: Number(values.limit) * 1000,
      settleMs: Number(values.settle) * 1000,
      startTimeoutMs: Number(values["start-timeout"]) * 1000,
    }))
  );
  // Every configuration stays up until all are measured; the runs go round-robin, so the machine's
  // changing load spreads over all of them alike.
  const ready: Ready[] = [];
  const results: RunFigures[] = [];
  const nest = async (k: number): Promise<void> => {
    if (k === configs.length) {
      for (let r = 0; r < Number(values.runs); r++) {
        for (const h of ready) await h.measure();
      }
      return;
    }
    results.push(
      await withReady(configs[k], async (h) => {
        if (h !== null) ready.push(h);
        await nest(k + 1);
      }),
    );
  };
  await nest(0);
  results.reverse();
  const loadAfter = load();
  const out = (s: string) => process.stdout.write(`${s}\n`);
  out(
    `\nDataplane: new TCP connections/s through one ClusterIP (${values.workers} workers, ` +
      `${values.connections} connections or ${values.limit} s per run, ${values.runs} runs each, round-robin)`,
  );
  out(
    `load average before: ${loadBefore}; after: ${loadAfter}; wall ${
      round((performance.now() - started) / 1000)
    } s\n`,
  );
  out(
    "| mode | Services | first sync logged (agent ms) | conn/s median (min–max) | median / 1-Service | " +
      "conn/s best | best / 1-Service | VmRSS MiB (anon + file) | VmHWM MiB | failed connects | note |",
  );
  out("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
  const pct = (x: number | null, y: number | null, one: boolean) =>
    x !== null && y !== null && !one ? `${round((x / y) * 100)} %` : "";
  for (const r of results) {
    const base = results.find((b) => b.mode === r.mode && b.services === 1);
    const [m, mb, top, topb] = [
      median(r.runs),
      median(base?.runs ?? []),
      best(r.runs),
      best(base?.runs ?? []),
    ];
    const low = r.runs.length ? Math.min(...r.runs.map((x) => x.perSecond)) : null;
    const rss = r.rss ? `${r.rss.vmRssMiB} (${r.rss.rssAnonMiB} + ${r.rss.rssFileMiB})` : "–";
    const errors = r.runs.reduce((n, x) => n + x.errors, 0);
    const firstError = r.runs.find((x) => x.firstError)?.firstError;
    out(
      `| ${r.mode} | ${r.services} | ${r.firstSyncLoggedAtMs ?? "–"} (${r.agentSyncMs ?? "–"}) | ${
        m ?? "–"
      } (${low ?? "–"}–${top ?? "–"}) | ${pct(m, mb, r.services === 1)} | ${top ?? "–"} | ${
        pct(top, topb, r.services === 1)
      } | ${rss} | ${r.rss?.vmHwmMiB ?? "–"} | ${errors}${
        firstError ? ` (${firstError})` : ""
      } | ${r.note} |`,
    );
  }
  out("");
  for (const r of results) out(`runs ${r.mode} ${r.services}: ${r.runs.map((x) => x.perSecond).join(", ")}`);
}

if (import.meta.main) await main();
