/**
 * A tiny TCP + UDP echo server for e2e tests, plus helpers to start it and to query it from inside a
 * network namespace. Every TCP connection and every UDP datagram is answered with one JSON line
 * `{"id":"<id>","remote":"<source ip>:<port>","proto":"tcp|udp"}` so a test sees which endpoint answered
 * and which source address it saw (i.e. whether the traffic was masqueraded).
 *
 * As a program (runs under Deno or Bun, node: built-ins only):
 *   ./node_modules/.bin/deno run -A tests/support/echo_server.ts --id pod1 --port 8080 [--host 0.0.0.0]
 *   ./node_modules/.bin/bun run tests/support/echo_server.ts --id pod1 --port 8080
 * It prints "ready <port>" once both sockets listen and exits on SIGTERM.
 */
import { createServer } from "node:net";
import { createSocket } from "node:dgram";
import { fileURLToPath } from "node:url";
import type { ChildProcess } from "node:child_process";
import type { Netns, NetnsScope } from "./netns.ts";

/** What a server answered. */
export interface EchoReply {
  readonly id: string;
  readonly remote: string;
  readonly proto: "tcp" | "udp";
}

/** Outcome of one request: the reply, or why there was none. */
export type EchoResult = EchoReply | "refused" | "timeout" | { readonly error: string };

function formatRemote(address: string | undefined, port: number | undefined): string {
  const a = address ?? "?";
  return a.includes(":") ? `[${a}]:${port}` : `${a}:${port}`;
}

/** Starts listening (TCP and UDP on the same port); resolves when both are bound. */
export function serveEcho(id: string, port: number, host = "0.0.0.0"): Promise<{ close(): void }> {
  return new Promise((resolve, reject) => {
    const tcp = createServer((sock) => {
      const reply: EchoReply = {
        id,
        remote: formatRemote(sock.remoteAddress, sock.remotePort),
        proto: "tcp",
      };
      sock.on("error", () => {});
      sock.end(`${JSON.stringify(reply)}\n`);
    });
    const udp = createSocket(host.includes(":") ? "udp6" : "udp4");
    udp.on("message", (_msg, rinfo) => {
      const reply: EchoReply = { id, remote: formatRemote(rinfo.address, rinfo.port), proto: "udp" };
      udp.send(`${JSON.stringify(reply)}\n`, rinfo.port, rinfo.address);
    });
    let bound = 0;
    const done = () => {
      if (++bound === 2) resolve({ close: () => (tcp.close(), udp.close()) });
    };
    tcp.on("error", reject);
    udp.on("error", reject);
    tcp.listen(port, host, done);
    udp.bind(port, host, done);
  });
}

/** argv to run a TS file with the runtime that runs this process (deno run -A / bun run). */
export function runtimeArgv(file: string): string[] {
  const isDeno = typeof (globalThis as { Deno?: unknown }).Deno !== "undefined";
  return isDeno ? [process.execPath, "run", "-A", file] : [process.execPath, "run", file];
}

const SERVER_FILE = fileURLToPath(import.meta.url);
const CLIENT_FILE = fileURLToPath(new URL("./echo_client.ts", import.meta.url));

/**
 * Starts the echo server inside `ns` (owned by `scope`, which kills it on cleanup) and waits for "ready".
 */
export async function startEchoServer(
  scope: NetnsScope,
  ns: Netns,
  opts: { id: string; port: number; host?: string; timeoutMs?: number },
): Promise<ChildProcess> {
  const argv = [...runtimeArgv(SERVER_FILE), "--id", opts.id, "--port", String(opts.port)];
  if (opts.host) argv.push("--host", opts.host);
  const child = scope.spawn(ns, argv);
  await new Promise<void>((resolve, reject) => {
    let out = "";
    let err = "";
    const timer = setTimeout(
      () => reject(new Error(`echo server ${opts.id} in ${ns.name} not ready: ${err.trim()}`)),
      opts.timeoutMs ?? 20000,
    );
    child.stdout!.on("data", (b: Buffer) => {
      out += b.toString();
      if (out.includes("ready")) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.stderr!.on("data", (b: Buffer) => (err += b.toString()));
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`echo server ${opts.id} in ${ns.name} exited ${code}: ${err.trim()}`));
    });
  });
  return child;
}

/**
 * Sends `count` requests (sequential connections or datagrams) from inside `ns` to host:port by running
 * tests/support/echo_client.ts there. Each result is a reply, "refused", "timeout" or an error.
 */
export async function echoRequest(
  ns: Netns,
  opts: { host: string; port: number; proto?: "tcp" | "udp"; timeoutMs?: number; count?: number },
): Promise<EchoResult[]> {
  const timeoutMs = opts.timeoutMs ?? 2000;
  const count = opts.count ?? 1;
  const argv = [
    ...runtimeArgv(CLIENT_FILE),
    "--host",
    opts.host,
    "--port",
    String(opts.port),
    "--proto",
    opts.proto ?? "tcp",
    "--timeout",
    String(timeoutMs),
    "--count",
    String(count),
  ];
  const r = await ns.exec(argv, { timeoutMs: 30000 + timeoutMs * count });
  if (r.code !== 0) throw new Error(`echo client in ${ns.name} exited ${r.code}: ${r.stderr.trim()}`);
  const line = r.stdout.trim().split("\n").pop() ?? "";
  return JSON.parse(line) as EchoResult[];
}

function argValue(args: string[], name: string, fallback?: string): string {
  const i = args.indexOf(name);
  if (i !== -1 && i + 1 < args.length) return args[i + 1];
  if (fallback !== undefined) return fallback;
  throw new Error(`missing ${name}`);
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const id = argValue(args, "--id");
  const port = Number(argValue(args, "--port"));
  const host = argValue(args, "--host", "0.0.0.0");
  const server = await serveEcho(id, port, host);
  process.on("SIGTERM", () => {
    server.close();
    process.exit(0);
  });
  console.log(`ready ${port}`);
}
