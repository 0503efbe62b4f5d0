/**
 * Client side of tests/support/echo_server.ts, meant to run inside a network namespace
 * (`ip netns exec <ns> <runtime> run tests/support/echo_client.ts --host 10.96.0.10 --port 80`).
 * Makes `--count` sequential requests and prints one JSON array: per request the server's reply object,
 * "refused", "timeout", or {"error": "..."}. Always exits 0 when the arguments are valid.
 */
import { connect } from "node:net";
import { createSocket } from "node:dgram";

type Result = Record<string, unknown> | "refused" | "timeout" | { error: string };

function tcpRequest(host: string, port: number, timeoutMs: number): Promise<Result> {
  return new Promise((resolve) => {
    let buf = "";
    let settled = false;
    const finish = (r: Result) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      resolve(r);
    };
    const sock = connect({ host, port });
    const timer = setTimeout(() => finish("timeout"), timeoutMs);
    sock.on("data", (b: Buffer) => {
      buf += b.toString();
      const nl = buf.indexOf("\n");
      if (nl !== -1) finish(parse(buf.slice(0, nl)));
    });
    sock.on("end", () => finish(buf.trim() === "" ? { error: "closed without reply" } : parse(buf.trim())));
    sock.on(
      "error",
      (e: NodeJS.ErrnoException) =>
        finish(e.code === "ECONNREFUSED" ? "refused" : { error: `${e.code ?? ""} ${e.message}`.trim() }),
    );
  });
}

function udpRequest(host: string, port: number, timeoutMs: number): Promise<Result> {
  return new Promise((resolve) => {
    const sock = createSocket(host.includes(":") ? "udp6" : "udp4");
    let settled = false;
    const finish = (r: Result) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      try {
        sock.close();
      } catch {
        // already closed
      }
      resolve(r);
    };
    const timer = setTimeout(() => finish("timeout"), timeoutMs);
    sock.on("message", (msg: Buffer) => finish(parse(msg.toString().trim())));
    sock.on(
      "error",
      (e: NodeJS.ErrnoException) =>
        finish(e.code === "ECONNREFUSED" ? "refused" : { error: `${e.code ?? ""} ${e.message}`.trim() }),
    );
    // A connected socket reports ICMP port-unreachable as ECONNREFUSED.
    sock.connect(port, host, () => sock.send("ping\n"));
  });
}

function parse(s: string): Result {
  try {
    return JSON.parse(s) as Record<string, unknown>;
  } catch {
    return { error: `not JSON: ${s.slice(0, 200)}` };
  }
}

function argValue(args: string[], name: string, fallback?: string): string {
  const i = args.indexOf(name);
  if (i !== -1 && i + 1 < args.length) return args[i + 1];
  if (fallback !== undefined) return fallback;
  throw new Error(`missing ${name}`);
}

if (import.meta.main) {
  const args = process.argv.slice(2);
  const host = argValue(args, "--host");
  const port = Number(argValue(args, "--port"));
  const proto = argValue(args, "--proto", "tcp");
  const timeoutMs = Number(argValue(args, "--timeout", "2000"));
  const count = Number(argValue(args, "--count", "1"));
  const results: Result[] = [];
  for (let i = 0; i < count; i++) {
    results.push(
      await (proto === "udp" ? udpRequest(host, port, timeoutMs) : tcpRequest(host, port, timeoutMs)),
    );
  }
  console.log(JSON.stringify(results));
}
