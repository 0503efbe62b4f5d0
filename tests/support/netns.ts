/**
 * Network-namespace helpers for e2e tests: uniquely named namespaces, veth pairs created directly inside
 * namespaces (nothing is ever added to the host's own namespace), addresses, routes, sysctls, commands and
 * long-running processes inside a namespace, and cleanup that always runs (also on process exit).
 *
 * Typical use:
 *   const env = new NetnsScope("ipt");
 *   after(() => env.cleanup());
 *   const node = await env.create("node"), client = await env.create("cli");
 *   await env.link(client, "eth0", "10.0.0.2/24", node, "vc", "10.0.0.1/24");
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { accessSync, constants as fsConstants } from "node:fs";
import { randomBytes } from "node:crypto";

/** Output of a command. */
export interface CmdResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

function findBinary(name: string): string | null {
  for (const d of ["/usr/sbin", "/sbin", "/usr/bin", "/bin"]) {
    try {
      accessSync(`${d}/${name}`, fsConstants.X_OK);
      return `${d}/${name}`;
    } catch {
      // next
    }
  }
  return null;
}

/** Absolute path of `ip` (the tests may run with a minimal PATH). */
export const IP_BIN: string = findBinary("ip") ?? "ip";

/** Runs argv, never rejects for a non-zero exit; optional stdin text and timeout. */
export function run(
  argv: readonly string[],
  opts: { input?: string; timeoutMs?: number } = {},
): Promise<CmdResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), {
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, LC_ALL: "C" },
    });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    const timer = opts.timeoutMs ? setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs) : null;
    child.stdout.on("data", (b: Buffer) => out.push(b));
    child.stderr.on("data", (b: Buffer) => err.push(b));
    child.on("error", (e) => {
      if (timer) clearTimeout(timer);
      reject(new Error(`cannot run ${argv.join(" ")}: ${e.message}`));
    });
    child.on("close", (code) => {
      if (timer) clearTimeout(timer);
      resolve({
        code: code ?? -1,
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: Buffer.concat(err).toString("utf8"),
      });
    });
    child.stdin.on("error", () => {});
    child.stdin.end(opts.input ?? "");
  });
}

/** Runs argv and throws (with stderr) unless it exits 0. */
export async function runOk(
  argv: readonly string[],
  opts: { input?: string; timeoutMs?: number } = {},
): Promise<string> {
  const r = await run(argv, opts);
  if (r.code !== 0) throw new Error(`${argv.join(" ")} exited ${r.code}: ${r.stderr.trim()}`);
  return r.stdout;
}

/**
 * Whether e2e tests can run here: root, and `ip netns add` works. Returns "" when they can, else a
 * reason suitable for a skip message.
 */
export function netnsUnavailableReason(): string {
  if (typeof process.getuid === "function" && process.getuid() !== 0) return "not root";
  if (findBinary("ip") === null) return "iproute2 `ip` not found";
  const probe = `epprobe-${process.pid}-${randomBytes(3).toString("hex")}`;
  try {
    execFileSync(IP_BIN, ["netns", "add", probe], { stdio: "pipe" });
  } catch (e) {
    return `ip netns add failed: ${(e as Error).message.split("\n")[0]}`;
  }
  try {
    execFileSync(IP_BIN, ["netns", "del", probe], { stdio: "pipe" });
  } catch {
    // best effort
  }
  return "";
}

/** A network namespace created by a `NetnsScope`. */
export interface Netns {
  readonly name: string;
  /** Command prefix for `createIptablesRunner({ commandPrefix })` and friends. */
  readonly prefix: readonly string[];
  /** Runs argv inside the namespace. */
  exec(argv: readonly string[], opts?: { input?: string; timeoutMs?: number }): Promise<CmdResult>;
  /** Runs argv inside the namespace; throws unless it exits 0. */
  execOk(argv: readonly string[], opts?: { input?: string; timeoutMs?: number }): Promise<string>;
}

const live = new Set<NetnsScope>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on("exit", () => {
    for (const scope of live) scope.cleanupSync();
  });
}

/**
 * Owns namespaces and processes created for one test file; `cleanup()` (call it in `after`) kills the
 * processes and deletes the namespaces, and a process-exit hook does the same if a test crashes.
 */
export class NetnsScope {
  readonly names: string[] = [];
  readonly children: ChildProcess[] = [];
  private readonly tag: string;

  constructor(prefix = "ep") {
    // Short and unique: parallel test files and concurrent helpers must never collide.
    this.tag = `${prefix}-${process.pid}-${randomBytes(3).toString("hex")}`;
    live.add(this);
    installExitHook();
  }

  /** Creates namespace "<prefix>-<pid>-<rand>-<role>" with loopback up. */
  async create(role: string): Promise<Netns> {
    const name = `${this.tag}-${role}`;
    await runOk([IP_BIN, "netns", "add", name]);
    this.names.push(name);
    await runOk([IP_BIN, "-n", name, "link", "set", "lo", "up"]);
    const prefix = [IP_BIN, "netns", "exec", name];
    return {
      name,
      prefix,
      exec: (argv, opts) => run([...prefix, ...argv], opts),
      execOk: (argv, opts) => runOk([...prefix, ...argv], opts),
    };
  }

  /**
   * Connects two namespaces with a veth pair (created inside `a`, peer moved straight into `b`), assigns
   * the addresses (CIDR notation) and brings both ends up.
   */
  async link(a: Netns, aIf: string, aAddr: string, b: Netns, bIf: string, bAddr: string): Promise<void> {
    await runOk([
      IP_BIN,
      "-n",
      a.name,
      "link",
      "add",
      aIf,
      "type",
      "veth",
      "peer",
      "name",
      bIf,
      "netns",
      b.name,
    ]);
    await addAddress(a, aIf, aAddr);
    await addAddress(b, bIf, bAddr);
    await runOk([IP_BIN, "-n", a.name, "link", "set", aIf, "up"]);
    await runOk([IP_BIN, "-n", b.name, "link", "set", bIf, "up"]);
  }

  /** Starts a long-running process inside `ns`; it is killed by `cleanup()`. */
  spawn(ns: Netns, argv: readonly string[]): ChildProcess {
    const child = spawn(IP_BIN, ["netns", "exec", ns.name, ...argv], {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, LC_ALL: "C", NO_COLOR: "1" },
    });
    this.children.push(child);
    return child;
  }

  /** Kills the processes (by pid) and deletes the namespaces. Safe to call twice. */
  async cleanup(): Promise<void> {
    for (const c of this.children.splice(0)) await stopChild(c);
    for (const name of this.names.splice(0)) await run([IP_BIN, "netns", "del", name]);
    live.delete(this);
  }

  /** Synchronous variant for the process-exit hook. */
  cleanupSync(): void {
    for (const c of this.children.splice(0)) {
      try {
        c.kill("SIGKILL");
      } catch {
        // already gone
      }
    }
    for (const name of this.names.splice(0)) {
      try {
        execFileSync(IP_BIN, ["netns", "del", name], { stdio: "pipe" });
      } catch {
        // already gone
      }
    }
    live.delete(this);
  }
}

async function stopChild(c: ChildProcess): Promise<void> {
  if (c.exitCode !== null || c.signalCode !== null) return;
  const gone = new Promise<void>((r) => c.once("exit", () => r()));
  c.kill("SIGTERM");
  const t = setTimeout(() => c.kill("SIGKILL"), 2000);
  await gone;
  clearTimeout(t);
}

/** `ip addr add <cidr> dev <ifname>` inside `ns` (IPv6 addresses get `nodad` so they are usable at once). */
export async function addAddress(ns: Netns, ifname: string, cidr: string): Promise<void> {
  const extra = cidr.includes(":") ? ["nodad"] : [];
  await runOk([IP_BIN, "-n", ns.name, "addr", "add", cidr, "dev", ifname, ...extra]);
}

/** `ip route add <dest> [via <via>] [dev <dev>]` inside `ns`. */
export async function addRoute(
  ns: Netns,
  dest: string,
  opts: { via?: string; dev?: string } = {},
): Promise<void> {
  const argv = [IP_BIN, "-n", ns.name, "route", "add", dest];
  if (opts.via) argv.push("via", opts.via);
  if (opts.dev) argv.push("dev", opts.dev);
  await runOk(argv);
}

/** Sets sysctls inside `ns` by writing /proc/sys (namespaced for net.*). */
export async function setSysctls(ns: Netns, values: Record<string, string>): Promise<void> {
  const script = Object.entries(values)
    .map(([k, v]) => `echo ${v} > /proc/sys/${k.replaceAll(".", "/")}`)
    .join(" && ");
  await ns.execOk([findBinary("sh") ?? "/bin/sh", "-c", script]);
}

/** Turns a namespace into a router for services: IPv4/IPv6 forwarding and route_localnet on all interfaces. */
export async function enableForwarding(ns: Netns): Promise<void> {
  await setSysctls(ns, {
    "net.ipv4.ip_forward": "1",
    "net.ipv4.conf.all.route_localnet": "1",
    "net.ipv6.conf.all.forwarding": "1",
  });
}
