/**
 * Userspace proxy mode benchmark: client, node and backend network namespaces (veth pairs, the node routes
 * between them); the node runs edgeproxy's UserspaceBackend (portals=none: the service IP is a local
 * address of the node) in its own process. Prints figures, asserts nothing:
 *   single-stream MiB/s (direct through the node's kernel routing, and through the proxy), new connections/s
 *   over 20k connections (failures counted), added latency p50 per connection, proxy CPU per GiB and per
 *   connection, time to bind 1,000 service ports, proxy RSS, UDP request/response rate and proxy CPU per
 *   UDP request.
 *
 * Run as root: `bun bench/userspace_bench.ts` (or `deno run -A bench/userspace_bench.ts`).
 * Options: --gib=N (single stream, default 2), --conns=N (default 20000), --concurrency=N (default 64),
 * --transport=node (the proxy's TCP over node:net even under Bun, to compare with Bun's native sockets),
 * --transport=bun-copy (Bun's sockets without the splice(2) worker: every byte through the callbacks),
 * --udp=node (the proxy's UDP over node:dgram even under Bun, to compare with Bun.udpSocket).
 */
import { execFileSync, spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import * as net from "node:net";
import * as dgram from "node:dgram";
import { fileURLToPath } from "node:url";

const SELF = fileURLToPath(import.meta.url);
const SVC_IP = "10.96.0.10";
const BACKEND_IP = "10.10.2.2";
const SINK_PORT = 9000; // counts bytes, answers the count after the client's FIN
const HELLO_PORT = 9001; // answers one byte and closes
const UDP_PORT = 9002; // echoes datagrams
const SVC = { sink: 80, hello: 81, udp: 53 };
const UDP_REQUESTS = 20000;

function arg(name: string, fallback: number): number {
  const a = process.argv.find((x) => x.startsWith(`--${name}=`));
  return a ? Number(a.split("=")[1]) : fallback;
}

function runtimeArgv(role: string): string[] {
  const isDeno = typeof (globalThis as { Deno?: unknown }).Deno !== "undefined";
  return isDeno
    ? [process.execPath, "run", "-A", SELF, `--role=${role}`]
    : [process.execPath, SELF, `--role=${role}`];
}

// ---- roles ------------------------------------------------------------------------------------------

function backendRole(): void {
  net.createServer({ allowHalfOpen: true }, (s) => {
    let n = 0;
    s.on("data", (d) => (n += d.length));
    s.on("end", () => s.end(`${n}\n`));
    s.on("error", () => {});
  }).listen(SINK_PORT, "0.0.0.0");
  net.createServer((s) => {
    s.on("error", () => {});
    s.end("x");
  }).listen({ port: HELLO_PORT, host: "0.0.0.0", backlog: 4096 });
  const u = dgram.createSocket("udp4");
  u.on("message", (m, r) => u.send(m, r.port, r.address));
  u.bind(UDP_PORT, "0.0.0.0", () => console.log("ready"));
}

async function proxyRole(): Promise<void> {
  const { UserspaceBackend } = await import("../lib/proxy/userspace/backend.ts");
  const { ServicePortMap } = await import("../lib/proxy/service_change_tracker.ts");
  const { EndpointsMap } = await import("../lib/proxy/endpoints_change_tracker.ts");
  const { NO_LOCAL_DETECTION } = await import("../lib/proxy/local_detect.ts");
  const { servicePortKey } = await import("../lib/proxy/types.ts");
  const { newEndpointInfo } = await import("../lib/proxy/endpoints.ts");
  const { tcpTransport } = await import("../lib/runtime/tcp_transport.ts");
  const { nodeTcpTransport } = await import("../lib/runtime/tcp_transport_node.ts");
  const { bunTcpTransport } = await import("../lib/runtime/tcp_transport_bun.ts");
  const transport = process.argv.includes("--transport=node")
    ? nodeTcpTransport
    : process.argv.includes("--transport=bun-copy")
    ? bunTcpTransport({ zeroCopy: false })!
    : tcpTransport();
  const { nodeUdpTransport } = await import("../lib/runtime/udp_transport_node.ts");
  const { udpTransport } = await import("../lib/runtime/udp_transport.ts");
  const udp = process.argv.includes("--udp=node") ? nodeUdpTransport : udpTransport();
  type SPI = import("../lib/proxy/types.ts").ServicePortInfo;
  const svc = (name: string, clusterIP: string, port: number, protocol: "TCP" | "UDP"): SPI => ({
    name: { namespace: "bench", name, port: "p", protocol },
    clusterIP,
    port,
    protocol,
    nodePort: 0,
    externalIPs: [],
    loadBalancerVIPs: [],
    loadBalancerSourceRanges: [],
    stickyMaxAgeSeconds: 0,
    externalPolicyLocal: false,
    internalPolicyLocal: false,
    healthCheckNodePort: 0,
  });
  const ep = (port: number) =>
    newEndpointInfo(
      {
        ip: BACKEND_IP,
        ready: true,
        serving: true,
        terminating: false,
        zoneHints: null,
        nodeHints: null,
        nodeName: "other",
        zone: "",
      },
      port,
      false,
    );
  const backend = new UserspaceBackend({
    family: "IPv4",
    nodeName: "bench-node",
    log: { warn: (m) => console.error(m), debug: () => {} },
    steering: {
      kind: "none",
      addresses: {
        device: "lo",
        sync: () => Promise.resolve(),
        removeAll: () => Promise.resolve(),
        nodeAddresses: () => Promise.resolve([]),
      },
    },
    nodePortAddresses: [],
    udpIdleTimeoutMs: 5000,
    transport,
    udpTransport: udp,
  });
  const services = new ServicePortMap();
  const endpoints = new EndpointsMap();
  const put = (s: SPI, port: number) => {
    services.set(servicePortKey(s.name), s);
    endpoints.set(servicePortKey(s.name), [ep(port)]);
  };
  const state = () => ({
    family: "IPv4" as const,
    services,
    endpoints,
    changedServices: new Set<string>(),
    nodeLabels: {},
    localDetection: NO_LOCAL_DETECTION,
  });
  // 1,000 service ports on loopback addresses (127.1.x.y:80), timed on their own.
  for (let i = 0; i < 1000; i++) put(svc(`s${i}`, `127.1.${i >> 8}.${i & 255}`, 80, "TCP"), HELLO_PORT);
  const t0 = performance.now();
  await backend.sync(state(), { full: true });
  const bindMs = performance.now() - t0;
  put(svc("sink", SVC_IP, SVC.sink, "TCP"), SINK_PORT);
  put(svc("hello", SVC_IP, SVC.hello, "TCP"), HELLO_PORT);
  put(svc("udp", SVC_IP, SVC.udp, "UDP"), UDP_PORT);
  await backend.sync(state(), { full: false });
  console.log(`ready ${bindMs.toFixed(1)} ${backend.listeners().size} ${transport.name} ${udp.name}`);
}

// ---- client measurements ------------------------------------------------------------------------------

function singleStream(host: string, port: number, bytes: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const chunk = Buffer.alloc(1 << 20, 7);
    const s = net.connect({ host, port, allowHalfOpen: true });
    let sent = 0;
    let reply = "";
    const t0 = performance.now();
    const pump = () => {
      while (sent < bytes) {
        sent += chunk.length;
        if (!s.write(chunk)) return void s.once("drain", pump);
      }
      s.end();
    };
    s.on("connect", pump);
    s.on("data", (d) => (reply += d));
    s.on("end", () => {
      const ms = performance.now() - t0;
      if (Number(reply.trim()) !== sent) reject(new Error(`sink saw ${reply.trim()} of ${sent} bytes`));
      else resolve(sent / (1 << 20) / (ms / 1000));
    });
    s.on("error", reject);
  });
}

function oneConnection(host: string, port: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    const s = net.connect({ host, port });
    let got = false;
    s.on("data", () => (got = true));
    s.on("close", () => (got ? resolve(performance.now() - t0) : reject(new Error("no byte"))));
    s.on("error", reject);
  });
}

async function manyConnections(host: string, port: number, total: number, concurrency: number) {
  let next = 0;
  let failures = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < total) {
      next++;
      await oneConnection(host, port).catch(() => failures++);
    }
  }));
  return { perSecond: total / ((performance.now() - t0) / 1000), failures };
}

async function latencyP50(host: string, port: number, n: number): Promise<number> {
  const xs: number[] = [];
  for (let i = 0; i < n; i++) xs.push(await oneConnection(host, port));
  xs.sort((a, b) => a - b);
  return xs[Math.floor(xs.length / 2)];
}

async function udpRate(host: string, port: number, n: number): Promise<number> {
  const s = dgram.createSocket("udp4");
  await new Promise<void>((r) => s.connect(port, host, r));
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`UDP reply ${i} timed out`)), 2000);
      s.once("message", () => (clearTimeout(timer), resolve()));
      s.send("ping");
    });
  }
  const rate = n / ((performance.now() - t0) / 1000);
  s.close();
  return rate;
}

async function clientRole(): Promise<void> {
  const gib = arg("gib", 2);
  const conns = arg("conns", 20000);
  const conc = arg("concurrency", 64);
  const bytes = gib * (1 << 30);
  const out: Record<string, number> = {};
  out.directMiBs = await singleStream(BACKEND_IP, SINK_PORT, bytes);
  console.log("phase stream");
  await waitLine("go");
  out.proxyMiBs = await singleStream(SVC_IP, SVC.sink, bytes);
  console.log("phase conns");
  await waitLine("go");
  const d = await manyConnections(BACKEND_IP, HELLO_PORT, conns, conc);
  out.directConnsPerS = d.perSecond;
  const p = await manyConnections(SVC_IP, SVC.hello, conns, conc);
  out.proxyConnsPerS = p.perSecond;
  out.proxyConnFailures = p.failures + d.failures;
  console.log("phase latency");
  await waitLine("go");
  out.directP50Ms = await latencyP50(BACKEND_IP, HELLO_PORT, 2000);
  out.proxyP50Ms = await latencyP50(SVC_IP, SVC.hello, 2000);
  console.log("phase udp");
  await waitLine("go");
  out.udpDirectPerS = await udpRate(BACKEND_IP, UDP_PORT, UDP_REQUESTS);
  out.udpProxyPerS = await udpRate(SVC_IP, SVC.udp, UDP_REQUESTS);
  console.log(`result ${JSON.stringify(out)}`);
}

let stdinBuf = "";
function waitLine(word: string): Promise<void> {
  return new Promise((resolve) => {
    const check = () => {
      const i = stdinBuf.indexOf(`${word}\n`);
      if (i >= 0) {
        stdinBuf = stdinBuf.slice(i + word.length + 1);
        process.stdin.off("data", onData);
        resolve();
      }
    };
    const onData = (d: Buffer) => {
      stdinBuf += d.toString();
      check();
    };
    process.stdin.on("data", onData);
    check();
  });
}

// ---- orchestration -------------------------------------------------------------------------------------

function ip(...args: string[]): void {
  execFileSync("ip", args, { stdio: ["ignore", "ignore", "inherit"] });
}

/** utime and stime of a process, in seconds (clock ticks, USER_HZ 100). */
function cpuTimes(pid: number): { user: number; sys: number } {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return { user: Number(f[11]) / 100, sys: Number(f[12]) / 100 };
}

function cpuSeconds(pid: number): number {
  const t = cpuTimes(pid);
  return t.user + t.sys;
}

function rssMiB(pid: number): { rss: number; hwm: number } {
  const s = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (k: string) => Number(new RegExp(`${k}:\\s+(\\d+)`).exec(s)?.[1] ?? 0) / 1024;
  return { rss: kb("VmRSS"), hwm: kb("VmHWM") };
}

function start(ns: string, role: string, extra: string[] = []) {
  const child = spawn("ip", ["netns", "exec", ns, ...runtimeArgv(role), ...extra], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  let buf = "";
  const waiters: { word: string; resolve: (line: string) => void }[] = [];
  child.stdout!.on("data", (d: Buffer) => {
    buf += d.toString();
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      const w = waiters.findIndex((x) => line.startsWith(x.word));
      if (w >= 0) waiters.splice(w, 1)[0].resolve(line);
    }
  });
  return {
    child,
    line: (word: string) => new Promise<string>((resolve) => waiters.push({ word, resolve })),
  };
}

async function main(): Promise<void> {
  const tag = `usb${process.pid}`;
  const [C, N, B] = [`${tag}-c`, `${tag}-n`, `${tag}-b`];
  const kids: ReturnType<typeof start>[] = [];
  try {
    for (const ns of [C, N, B]) ip("netns", "add", ns);
    ip("link", "add", `${tag}c`, "netns", C, "type", "veth", "peer", "name", `${tag}nc`, "netns", N);
    ip("link", "add", `${tag}b`, "netns", B, "type", "veth", "peer", "name", `${tag}nb`, "netns", N);
    ip("-n", C, "addr", "add", "10.10.1.2/24", "dev", `${tag}c`);
    ip("-n", N, "addr", "add", "10.10.1.1/24", "dev", `${tag}nc`);
    ip("-n", N, "addr", "add", "10.10.2.1/24", "dev", `${tag}nb`);
    ip("-n", B, "addr", "add", `${BACKEND_IP}/24`, "dev", `${tag}b`);
    ip("-n", N, "addr", "add", `${SVC_IP}/32`, "dev", "lo");
    for (
      const [ns, ifs] of [[C, [`${tag}c`, "lo"]], [N, [`${tag}nc`, `${tag}nb`, "lo"]], [B, [
        `${tag}b`,
        "lo",
      ]]] as const
    ) {
      for (const i of ifs) ip("-n", ns, "link", "set", i, "up");
    }
    ip("-n", C, "route", "add", "default", "via", "10.10.1.1");
    ip("-n", B, "route", "add", "default", "via", "10.10.2.1");
    execFileSync("ip", ["netns", "exec", N, "sysctl", "-qw", "net.ipv4.ip_forward=1"]);

    const backend = start(B, "backend");
    kids.push(backend);
    await backend.line("ready");
    const proxy = start(
      N,
      "proxy",
      process.argv.filter((a) => a.startsWith("--transport=") || a.startsWith("--udp=")),
    );
    kids.push(proxy);
    const [, bindMs, listeners, transportName, udpName] = (await proxy.line("ready")).split(" ");
    const pid = proxy.child.pid!;
    const client = start(C, "client", process.argv.slice(2));
    kids.push(client);
    await client.line("phase stream");
    const cpuA = cpuSeconds(pid);
    const splitA = cpuTimes(pid);
    client.child.stdin!.write("go\n");
    await client.line("phase conns");
    const cpuB = cpuSeconds(pid);
    const splitB = cpuTimes(pid);
    client.child.stdin!.write("go\n");
    await client.line("phase latency");
    const cpuC = cpuSeconds(pid);
    client.child.stdin!.write("go\n");
    await client.line("phase udp");
    const cpuD = cpuSeconds(pid);
    client.child.stdin!.write("go\n");
    const result = JSON.parse((await client.line("result")).slice(7));
    const cpuE = cpuSeconds(pid);
    const mem = rssMiB(pid);
    const gib = arg("gib", 2);
    const conns = arg("conns", 20000);
    const f = (x: number, d = 0) => x.toFixed(d);
    const rows: [string, string, string][] = [
      ["single stream", `${f(result.proxyMiBs)} MiB/s (direct ${f(result.directMiBs)})`, "≥ 750 MiB/s"],
      [
        `new connections (${conns}, concurrency ${arg("concurrency", 64)})`,
        `${f(result.proxyConnsPerS)}/s (direct ${
          f(result.directConnsPerS)
        }/s), failures ${result.proxyConnFailures}`,
        "≥ 10,000/s, 0 failures",
      ],
      [
        "added latency p50",
        `${f(result.proxyP50Ms - result.directP50Ms, 3)} ms (proxy ${f(result.proxyP50Ms, 3)}, direct ${
          f(result.directP50Ms, 3)
        })`,
        "≤ 0.2 ms",
      ],
      [
        "CPU per GiB",
        `${f((cpuB - cpuA) / gib, 2)} s (user ${f((splitB.user - splitA.user) / gib, 2)}, kernel ${
          f((splitB.sys - splitA.sys) / gib, 2)
        })`,
        "≤ 0.7 s",
      ],
      ["CPU per connection", `${f(((cpuC - cpuB) / conns) * 1e6)} µs`, "≤ 100 µs"],
      ["1,000 service ports bound", `${f(Number(bindMs), 1)} ms (${listeners} listeners in all)`, "≤ 100 ms"],
      ["proxy RSS after load", `${f(mem.rss)} MiB (peak ${f(mem.hwm)} MiB)`, "≤ 100 MiB"],
      [
        "UDP request/response",
        `${f(result.udpProxyPerS)}/s (direct ${f(result.udpDirectPerS)}/s)`,
        "measured",
      ],
      ["proxy CPU per UDP request and reply", `${f(((cpuE - cpuD) / UDP_REQUESTS) * 1e6)} µs`, "measured"],
    ];
    const runtime = typeof (globalThis as { Deno?: unknown }).Deno !== "undefined" ? "deno" : "bun";
    console.log(
      `userspace proxy benchmark (${runtime}, TCP: ${transportName} sockets, UDP: ${udpName}, ${gib} GiB stream)`,
    );
    for (const [k, v, t] of rows) console.log(`  ${k.padEnd(44)} ${v.padEnd(60)} target ${t}`);
  } finally {
    for (const k of kids) k.child.kill("SIGKILL");
    for (const ns of [C, N, B]) {
      try {
        ip("netns", "del", ns);
      } catch { /* already gone */ }
    }
  }
}

const role = process.argv.find((a) => a.startsWith("--role="))?.slice(7);
if (role === "backend") backendRole();
else if (role === "proxy") await proxyRole();
else if (role === "client") await clientRole();
else await main();
