/**
 * The two ends of the dataplane benchmark's traffic (bench/dataplane_bench.ts runs each inside its own
 * network namespace):
 *
 *   bun bench/dataplane_traffic.ts serve PORT
 *     accepts TCP connections on 0.0.0.0:PORT and drops each when the client resets it; prints "listening".
 *   bun bench/dataplane_traffic.ts connect HOST PORT TOTAL WORKERS LIMIT_MS
 *     opens TOTAL new connections to HOST:PORT (WORKERS in parallel, each connect → reset → next) and stops
 *     early after LIMIT_MS; prints one JSON line {ok, errors, ms, perSecond}.
 *
 * The client ends each connection with a reset: no TIME_WAIT on either side, so the source ports the
 * client reuses never meet an old connection's state (with a FIN close, reused ports hit 1 s SYN
 * retransmits that dominated short runs).
 *
 * Bounded in count and time; the traffic never leaves the benchmark's namespaces.
 */
import { connect, createServer } from "node:net";
import process from "node:process";

/** Result of one `connect` run. */
export interface ConnectResult {
  readonly ok: number;
  readonly errors: number;
  readonly ms: number;
  readonly perSecond: number;
  readonly firstError?: string;
}

function serve(port: number): void {
  const server = createServer((socket) => {
    socket.on("error", () => socket.destroy());
    socket.on("end", () => socket.destroy());
  });
  server.listen(port, "0.0.0.0", () => process.stdout.write("listening\n"));
}

async function connectLoop(
  host: string,
  port: number,
  total: number,
  workers: number,
  limitMs: number,
): Promise<ConnectResult> {
  let started = 0;
  let ok = 0;
  let errors = 0;
  let firstError: string | undefined;
  const t0 = performance.now();
  const one = () =>
    new Promise<void>((resolve) => {
      const s = connect({ host, port });
      const timer = setTimeout(() => s.destroy(new Error("connect timeout (2 s)")), 2000);
      s.once("connect", () => {
        clearTimeout(timer);
        ok++;
        s.resetAndDestroy();
        resolve();
      });
      s.once("error", (e) => {
        clearTimeout(timer);
        errors++;
        firstError ??= e.message;
        resolve();
      });
    });
  const worker = async () => {
    while (started < total && performance.now() - t0 < limitMs) {
      started++;
      await one();
    }
  };
  await Promise.all(Array.from({ length: workers }, worker));
  const ms = performance.now() - t0;
  return { ok, errors, ms: Math.round(ms), perSecond: Math.round(ok / (ms / 1000)), firstError };
}

if (import.meta.main) {
  const [cmd, ...a] = process.argv.slice(2);
  if (cmd === "serve") {
    serve(Number(a[0]));
  } else if (cmd === "connect") {
    const r = await connectLoop(a[0], Number(a[1]), Number(a[2]), Number(a[3]), Number(a[4]));
    process.stdout.write(`${JSON.stringify(r)}\n`);
    process.exit(0);
  } else {
    process.stderr.write(
      "usage: dataplane_traffic.ts serve PORT | connect HOST PORT TOTAL WORKERS LIMIT_MS\n",
    );
    process.exit(2);
  }
}
