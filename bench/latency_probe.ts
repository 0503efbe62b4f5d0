/**
 * Diagnostic for the change-latency gap: where do the milliseconds between an EndpointSlice update and
 * the rule in the kernel go? Runs the agent at N Services (as agent_bench.ts), then measures, in its
 * namespace:
 *
 * - `iptables -t nat -S <chain>` (the bench's poll) and a small `-I`/`-D` restore;
 * - endpoint changes with nobody polling, with the bench's poller, and observed by `xtables-monitor`
 *   (netlink events, no polling: the commit time itself);
 * - a restore shaped like the agent's partial sync, with the agent alive, killed, and with the nat jump
 *   rules from the built-in chains removed (what nf_tables validates at commit, bench/README.md);
 *
 *   bun bench/latency_probe.ts [--services=10000] [--changes=3] [--binary=dist/edgeproxy] [--extra=<flag>]…
 *
 * Prints figures; nothing goes to results.json.
 */
import { parseArgs } from "node:util";
import { fileURLToPath } from "node:url";
import process from "node:process";
import { type Netns, type NetnsScope, run } from "../tests/support/netns.ts";
import { IPTABLES_JUMP_RULES, jumpRuleLine } from "../lib/proxy/iptables/jump_rules_table.ts";
import { syntheticCluster } from "./synthetic_cluster.ts";
import { oneEndpointChange, plainServiceIndex } from "./cluster_model.ts";
import { kubeServicesRuleCount } from "./render_bench.ts";
import {
  type AgentProc,
  type ApiSetup,
  changeChains,
  observeStart,
  withAgentSession,
} from "./agent_bench.ts";
import { round, sleep, summarize } from "./stats.ts";

const IPTABLES = "/usr/sbin/iptables";

async function timed(f: () => Promise<unknown>): Promise<number> {
  const s = performance.now();
  await f();
  return round(performance.now() - s);
}

/** `iptables-restore --noflush --counters` of `text` in `ns`; throws with stderr unless `tolerant`. */
async function restoreIn(ns: Netns, text: string, tolerant = false): Promise<void> {
  const r = await run([...ns.prefix, "/usr/sbin/iptables-restore", "-w", "5", "--noflush", "--counters"], {
    input: text,
  });
  if (r.code !== 0 && !tolerant) throw new Error(`iptables-restore failed: ${r.stderr.slice(0, 300)}`);
}

async function probeKernel(ns: Netns, label: string, chain: string, reps: number): Promise<void> {
  const list: number[] = [];
  const restore: number[] = [];
  for (let i = 0; i < reps; i++) {
    list.push(await timed(() => run([...ns.prefix, IPTABLES, "-w", "5", "-t", "nat", "-S", chain])));
    const rule = `-d 203.0.113.${i + 1}/32 -m comment --comment probe -j RETURN`;
    restore.push(await timed(() => restoreIn(ns, `*nat\n-I KUBE-SERVICES 1 ${rule}\nCOMMIT\n`)));
    restore.push(await timed(() => restoreIn(ns, `*nat\n-D KUBE-SERVICES ${rule}\nCOMMIT\n`, true)));
  }
  const l = summarize(list);
  const r = summarize(restore);
  process.stdout.write(
    `${label}: -S ${chain}: median ${l.median} ms (min ${l.min}); -I/-D restore: median ${r.median} ms (min ${r.min})\n`,
  );
}

/**
 * Restores a payload shaped like the agent's one-endpoint partial sync (the Service chain and its
 * endpoint chains declared, i.e. flushed, and written again with the same rules) and times it.
 */
async function replayShape(ns: Netns, label: string, svc: string): Promise<void> {
  const saved = (await run([...ns.prefix, "/usr/sbin/iptables-save", "-t", "nat"])).stdout.split("\n");
  const svcRules = saved.filter((l) => l.startsWith(`-A ${svc} `));
  const seps = svcRules.map((l) => / -j (KUBE-SEP-\w+)/.exec(l)?.[1]).filter((x): x is string => !!x);
  const sepRules = saved.filter((l) => seps.some((c) => l.startsWith(`-A ${c} `)));
  const text = [
    "*filter",
    "COMMIT",
    "*nat",
    ...seps.map((c) => `:${c} - [0:0]`),
    `:${svc} - [0:0]`,
    ...svcRules,
    ...sepRules,
    "COMMIT",
    "",
  ]
    .join("\n");
  const ts: number[] = [];
  for (let i = 0; i < 5; i++) {
    ts.push(await timed(() => restoreIn(ns, text)));
  }
  process.stdout.write(`${label}: partial-shaped restore (${text.length} B): ${ts.join(" / ")} ms\n`);
}

/** Starts `xtables-monitor -e -4` in `ns`; resolves lines with their arrival time. */
function startMonitor(scope: NetnsScope, ns: Netns): { lines: Array<{ at: number; text: string }> } {
  const child = scope.spawn(ns, ["/usr/bin/stdbuf", "-oL", "/usr/sbin/xtables-monitor", "-e", "-4"]);
  const out = { lines: [] as Array<{ at: number; text: string }> };
  let buf = "";
  child.stdout?.on("data", (b: Buffer) => {
    buf += b.toString();
    let nl: number;
    while ((nl = buf.indexOf("\n")) !== -1) {
      out.lines.push({ at: performance.now(), text: buf.slice(0, nl) });
      buf = buf.slice(nl + 1);
    }
  });
  return out;
}

async function changes(
  label: string,
  agent: AgentProc,
  setup: ApiSetup,
  cluster: ReturnType<typeof syntheticCluster>,
  index: number,
  gens: number[],
  observe: (chains: { svc: string; sep: string }, t0: number) => Promise<number | null>,
): Promise<void> {
  const seen: number[] = [];
  const logged: number[] = [];
  for (const g of gens) {
    const chains = changeChains(cluster, index, g);
    const slice = oneEndpointChange(cluster, index, g);
    const before = agent.syncs.length;
    const t0 = performance.now();
    setup.api.update("endpointslices", {
      ...slice,
      metadata: { ...slice.metadata, resourceVersion: undefined },
    });
    const ms = await observe(chains, t0);
    if (ms !== null) seen.push(ms);
    await sleep(1500);
    const s = agent.syncs.slice(before).find((x) => !x.full);
    if (s) logged.push(s.ms);
    process.stdout.write(
      `  ${label} gen ${g}: observed ${ms ?? "never"} ms; agent logged ${s?.ms ?? "?"} ms at ${
        s ? round(s.at - t0) : "?"
      } ms after the update\n`,
    );
  }
  if (seen.length > 0) {
    process.stdout.write(
      `${label}: observed median ${summarize(seen).median} ms; logged median ${
        logged.length ? summarize(logged).median : "?"
      } ms\n`,
    );
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      services: { type: "string", default: "10000" },
      changes: { type: "string", default: "3" },
      binary: { type: "string", default: fileURLToPath(new URL("../dist/edgeproxy", import.meta.url)) },
      extra: { type: "string", multiple: true, default: [] },
    },
  });
  const n = Number(values.services);
  const k = Number(values.changes);
  const cluster = syntheticCluster({ services: n });
  const index = plainServiceIndex(cluster);
  await withAgentSession(
    // Later flags win (pflag), so --extra=--state-dir= turns the state cache off.
    { cluster, prefix: "bprb", binary: values.binary!, extra: values.extra as string[] },
    async ({ setup, scope, ns, agent }) => {
      const start = await observeStart(agent, ns, kubeServicesRuleCount(cluster), 300_000);
      process.stdout.write(`agent ${n}: all rules after ${start.allRules?.ms} ms\n`);
      await sleep(5000);
      const svcChain = changeChains(cluster, index, 1).svc;
      await probeKernel(ns, "agent ns, agent alive", svcChain, 5);

      let gen = 1;
      const gens = () => Array.from({ length: k }, () => gen++);
      await changes("no poller", agent, setup, cluster, index, gens(), () => Promise.resolve(null));
      await changes("bench poller", agent, setup, cluster, index, gens(), async (chains, t0) => {
        while (performance.now() - t0 < 10_000) {
          const r = await run([...ns.prefix, IPTABLES, "-w", "5", "-t", "nat", "-S", chains.svc]);
          if (r.stdout.split("\n").some((l) => l.endsWith(`-j ${chains.sep}`))) {
            return round(performance.now() - t0);
          }
        }
        return null;
      });
      const mon = startMonitor(scope, ns);
      await sleep(1000);
      await changes("xtables-monitor", agent, setup, cluster, index, gens(), async (chains, t0) => {
        while (performance.now() - t0 < 10_000) {
          const hit = mon.lines.find((l) =>
            l.at >= t0 && l.text.includes(chains.svc) && l.text.includes(chains.sep)
          );
          if (hit) return round(hit.at - t0);
          await sleep(2);
        }
        return null;
      });

      await replayShape(ns, "agent ns, agent alive", svcChain);
      agent.child.kill("SIGKILL");
      await sleep(500);
      await probeKernel(ns, "agent ns, agent killed", svcChain, 5);
      await replayShape(ns, "agent ns, agent killed", svcChain);

      // The cause: without the jumps from the built-in chains into KUBE-SERVICES, nf_tables has almost
      // nothing to validate at commit, and the same restore is cheap.
      const natJumps = IPTABLES_JUMP_RULES.filter((j) => j.table === "nat");
      await restoreIn(
        ns,
        `*nat\n${natJumps.map((j) => jumpRuleLine(j).replace(/^-A /, "-D ")).join("\n")}\nCOMMIT\n`,
      );
      await replayShape(ns, "agent ns, agent killed, nat jump rules removed", svcChain);
    },
  );
}

if (import.meta.main) await main();
