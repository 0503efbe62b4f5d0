/**
 * Resident memory per idle HTTP listener, as the health-check node ports hold them (one per eTP=Local
 * LoadBalancer Service): the small server (lib/runtime/serve_small.ts, the agent's), `serveApp`
 * (Bun.serve / Deno.serve, the Hono apps') and a bare node:net server. Each kind runs in a process of its
 * own, opens N listeners on 127.0.0.1, answers one request on each (sent from the parent process, so the
 * client's memory is not counted), collects, and reports the VmRSS it added.
 *
 *   bun bench/listener_memory.ts [--listeners=450] [--rounds=2] [--idle]
 *
 * `--idle`: no request at all (listeners that nobody probes).
 *
 * Prints figures; nothing goes to results.json.
 */
import { parseArgs } from "node:util";
import { readFileSync } from "node:fs";
import { spawn } from "node:child_process";
import net from "node:net";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { serveSmall } from "../lib/runtime/serve_small.ts";
import { serveApp, type ServedApp } from "../lib/runtime/serve.ts";

const KINDS = ["small", "serve", "node-net"] as const;
type Kind = typeof KINDS[number];

function vmRssMiB(): number {
  return Number(/VmRSS:\s+(\d+)/.exec(readFileSync("/proc/self/status", "utf8"))![1]) / 1024;
}

async function settle(): Promise<void> {
  const bun = (globalThis as { Bun?: { gc(full: boolean): void } }).Bun;
  for (let i = 0; i < 3; i++) {
    bun?.gc(true);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function open(kind: Kind): Promise<ServedApp | net.Server> {
  const handler = () => new Response("{}", { status: 503, headers: { "Content-Type": "application/json" } });
  if (kind === "small") return await serveSmall(handler, { hostname: "127.0.0.1", port: 0 });
  if (kind === "serve") return await serveApp(handler, { hostname: "127.0.0.1", port: 0 });
  const srv = net.createServer((c) =>
    c.end("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 2\r\n\r\n{}")
  );
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  return srv;
}

const portOf = (l: ServedApp | net.Server) =>
  l instanceof net.Server ? (l.address() as net.AddressInfo).port : l.port;

/**
 * One kind in this process: opens the listeners, prints their ports, waits for a line on stdin (the parent
 * has sent one request to each, from its own process), then prints the VmRSS added as one JSON line.
 */
async function child(kind: Kind, n: number): Promise<void> {
  await settle();
  const before = vmRssMiB();
  const listeners = [];
  for (let i = 0; i < n; i++) listeners.push(await open(kind));
  process.stdout.write(JSON.stringify(listeners.map(portOf)) + "\n");
  await new Promise<void>((r) => process.stdin.once("data", () => r()));
  await settle();
  const added = vmRssMiB() - before;
  process.stdout.write(
    JSON.stringify({ kind, n, addedMiB: added, perListenerKiB: (added * 1024) / n }) + "\n",
  );
  process.exit(0);
}

/** Runs one kind in a child process; requests come from this one. */
function runChild(
  self: string,
  kind: Kind,
  n: number,
  requests: boolean,
): Promise<{ addedMiB: number; perListenerKiB: number }> {
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, [self, `--listeners=${n}`, `--child=${kind}`], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    let out = "";
    let asked = false;
    c.stdout.setEncoding("utf8");
    c.stdout.on("data", async (d: string) => {
      out += d;
      const lines = out.split("\n");
      if (!asked && lines.length > 1) {
        asked = true;
        for (const port of requests ? JSON.parse(lines[0]) as number[] : []) {
          const r = await fetch(`http://127.0.0.1:${port}/healthz`, { headers: { Connection: "close" } });
          await r.arrayBuffer();
        }
        c.stdin.write("measure\n");
      }
      if (lines.length > 2 && lines[1].startsWith("{")) resolve(JSON.parse(lines[1]));
    });
    c.on(
      "exit",
      (code) => code === 0 ? undefined : reject(new Error(`listener_memory: the ${kind} run exited ${code}`)),
    );
  });
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      listeners: { type: "string", default: "450" },
      rounds: { type: "string", default: "2" },
      child: { type: "string" },
      idle: { type: "boolean", default: false },
    },
  });
  const n = Number(values.listeners);
  if (values.child) return await child(values.child as Kind, n);
  const self = fileURLToPath(import.meta.url);
  console.log(
    `${n} listeners on 127.0.0.1, ${values.idle ? "no request" : "one request answered on each"}; ` +
      "VmRSS added after collecting",
  );
  for (let round = 1; round <= Number(values.rounds); round++) {
    for (const kind of KINDS) {
      const o = await runChild(self, kind, n, !values.idle);
      console.log(
        `  round ${round} ${kind.padEnd(8)} ${o.addedMiB.toFixed(1).padStart(6)} MiB  ` +
          `${o.perListenerKiB.toFixed(1).padStart(5)} KiB per listener`,
      );
    }
  }
}

if (import.meta.main) await main();
