/**
 * Diagnostic for the RSS gaps: runs the agent at N Services (as agent_bench.ts) and prints its VmRSS (anonymous
 * + file-backed) and VmHWM every 2 s, its own "list", "released memory", "paged out" and "sync took" log
 * lines, and, 20 s after all rules are in,
 * where the resident pages are: RssAnon / RssFile and the resident size of each mapping (the executable's
 * code and embedded bundle, anonymous memory, libraries).
 *
 *   bun bench/rss_probe.ts [--services=10000] [--binary=dist/edgeproxy] [--watch=40] [--extra=<flag>]…
 *                          [--every=<ms between samples, 2000>] [--apiserver-fields] [--until-synced]
 *                          [--all-log] [--healthz] [--sigterm-after=<ms>]
 *
 * `--apiserver-fields`: the test apiserver serves the objects as a real one does (managedFields, kubectl's
 * last-applied annotation, owner references, targetRef; synthetic_cluster.ts withApiserverFields).
 * `--all-log`: every line the agent logs, not only those.
 * `--until-synced`: the first sync is over at the agent's "full sync of IPv4 rules took" line, not when
 * the namespace's iptables rules are all in (for `--extra=--proxy-mode=nftables`, which writes none).
 * `--healthz`: asks the agent's /healthz (curl in its namespace, 30 s limit) one request after another,
 * 100 ms apart, from its start to the end of the first sync, and prints how long the slowest answer took:
 * a sync that holds the agent's event loop shows here.
 * `--sigterm-after`: sends the agent SIGTERM that many ms after its start (e.g. during its first sync) and
 * prints how long it took to exit (its shutdown is bounded at 5 s), instead of the rest.
 *
 * Prints figures; nothing goes to results.json.
 */
import { parseArgs } from "node:util";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import process from "node:process";
import { syntheticCluster, withApiserverFields } from "./synthetic_cluster.ts";
import { kubeServicesRuleCount } from "./render_bench.ts";
import { observeStart, readRss, withAgentSession } from "./agent_bench.ts";
import { sleep } from "./stats.ts";

/** Resident MiB per mapping name ("[anon]" for anonymous mappings) from /proc/<pid>/smaps. */
export function residentByMapping(smaps: string): Map<string, number> {
  const byName = new Map<string, number>();
  let current = "";
  for (const line of smaps.split("\n")) {
    const head = /^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      current = head[1] || "[anon]";
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss) byName.set(current, (byName.get(current) ?? 0) + Number(rss[1]) / 1024);
  }
  return byName;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      services: { type: "string", default: "10000" },
      binary: { type: "string", default: fileURLToPath(new URL("../dist/edgeproxy", import.meta.url)) },
      watch: { type: "string", default: "40" },
      extra: { type: "string", multiple: true, default: [] },
      every: { type: "string", default: "2000" },
      "apiserver-fields": { type: "boolean", default: false },
      "until-synced": { type: "boolean", default: false },
      "all-log": { type: "boolean", default: false },
      healthz: { type: "boolean", default: false },
      "sigterm-after": { type: "string" },
    },
  });
  const n = Number(values.services);
  const generated = syntheticCluster({ services: n });
  const cluster = values["apiserver-fields"] ? withApiserverFields(generated) : generated;
  await withAgentSession(
    { cluster, prefix: "brss", binary: values.binary!, extra: values.extra as string[] },
    async ({ ns, agent, setup }) => {
      const t = () => Math.round(performance.now() - agent.startedAt);
      const listedAt = new Map<string, number>();
      let synced = () => {};
      const firstSync = new Promise<void>((r) => (synced = r));
      agent.child.stderr?.on("data", (b: Buffer) => {
        for (const l of b.toString().split("\n")) {
          if (/full sync of IPv4 rules took/.test(l)) synced();
          if (
            values["all-log"]
              ? l !== ""
              : /released memory|paged out|sync of IPv\d rules took|"list \w+:/.test(l)
          ) {
            process.stdout.write(`  t=${t()} ${l}\n`);
          }
          const list = /"list (\w+): \d+ objects/.exec(l);
          if (list && !listedAt.has(list[1])) listedAt.set(list[1], t());
        }
      });
      const timer = setInterval(() => {
        const r = readRss(agent.pid);
        if (r) {
          process.stdout.write(
            `  t=${t()} VmRSS ${r.vmRssMiB} MiB (anon ${r.rssAnonMiB} + file ${r.rssFileMiB}), VmHWM ${r.vmHwmMiB} MiB\n`,
          );
        }
      }, Number(values.every));
      const waits: number[] = [];
      let polling = values.healthz;
      const poller = (async () => {
        while (polling) {
          const s = performance.now();
          const r = await ns.exec([
            "curl",
            "-s",
            "-o",
            "/dev/null",
            "-m",
            "30",
            "-w",
            "%{http_code}",
            "http://127.0.0.1:10256/healthz",
          ]);
          const waited = performance.now() - s;
          // Before the agent listens curl fails at once ("000"); a timeout is "000" too, and counts.
          if (r.stdout !== "000" || waited >= 1000) waits.push(waited);
          await sleep(100);
        }
      })();
      try {
        if (values["sigterm-after"] !== undefined) {
          await sleep(Math.max(0, Number(values["sigterm-after"]) - (performance.now() - agent.startedAt)));
          const sent = performance.now();
          const sentAt = t();
          const exited = new Promise<number | null>((r) => agent.child.once("exit", (code) => r(code)));
          agent.child.kill("SIGTERM");
          const code = await exited;
          process.stdout.write(
            `${n} Services: SIGTERM at t=${sentAt}: exited (code ${code}) ${
              Math.round(performance.now() - sent)
            } ms later\n`,
          );
          return;
        }
        if (values["until-synced"]) {
          const exited = new Promise<never>((_, reject) =>
            agent.child.once(
              "exit",
              (code) => reject(new Error(`the agent exited (${code}) before its first sync`)),
            )
          );
          await Promise.race([firstSync, exited]);
          process.stdout.write(`${n} Services: first IPv4 sync logged at t=${t()}\n`);
        } else {
          const start = await observeStart(agent, ns, kubeServicesRuleCount(cluster), 300_000);
          process.stdout.write(`${n} Services: all rules after ${start.allRules?.ms} ms\n`);
        }
        polling = false;
        await poller;
        if (values.healthz) {
          process.stdout.write(
            `  /healthz during the first sync: ${waits.length} requests, slowest answer ${
              Math.round(Math.max(0, ...waits))
            } ms (curl included)\n`,
          );
        }
        // The first LIST of each resource: from the body handed to the socket to the agent's "list" line
        // (transfer, decoding, the store and the handlers).
        for (const r of setup.api.requests.filter((q) => q.method === "GET" && !q.watch)) {
          const resource = r.path.split("/").pop() ?? "";
          const logged = listedAt.get(resource);
          if (logged === undefined || r.sentAt === 0) continue;
          listedAt.delete(resource);
          const sent = Math.round(r.sentAt - agent.startedAt);
          process.stdout.write(
            `  first list ${resource}: ${(r.bytes / 1048576).toFixed(1)} MiB${r.gzip ? " gzip" : ""}, ` +
              `served t=${Math.round(r.at - agent.startedAt)}, body sent t=${sent}, listed t=${logged}: ` +
              `${logged - sent} ms after the body was sent\n`,
          );
        }
        const watchMs = Number(values.watch) * 1000;
        await sleep(Math.min(20_000, watchMs));
        const status = readFileSync(`/proc/${agent.pid}/status`, "utf8").split("\n")
          .filter((l) => /^(VmRSS|VmHWM|RssAnon|RssFile|Threads)/.test(l)).map((l) => l.replace(/\s+/g, " "));
        process.stdout.write(`  ${status.join(" | ")}\n`);
        const maps = [...residentByMapping(readFileSync(`/proc/${agent.pid}/smaps`, "utf8"))]
          .sort((a, b) => b[1] - a[1]).slice(0, 6);
        for (const [name, mib] of maps) {
          process.stdout.write(`    ${mib.toFixed(1).padStart(7)} MiB  ${name}\n`);
        }
        await sleep(Math.max(0, watchMs - 20_000));
      } finally {
        polling = false;
        clearInterval(timer);
      }
    },
  );
}

if (import.meta.main) await main();
