/**
 * The host side of the IPVS mode: ipvsadm, ipset and ip(8) as child processes, behind the narrow
 * {@link IpvsHost} interface the backend uses (unit tests hand in a fake).
 */
import type { IPFamily } from "../types.ts";
import { runInProcessGroup } from "../../runtime/process_groups.ts";
import { resolveBinary } from "../iptables/runner.ts";
import { existsSync } from "node:fs";
import { DEFAULT_DUMMY_DEVICE } from "./chains.ts";
import type { IpvsLeftoverHost } from "./leftovers.ts";

/** What the IPVS backend does to the host. */
export interface IpvsHost {
  /** `ipvsadm -Sn`. */
  ipvsSave(): Promise<string>;
  /** `ipvsadm -Ln [<vs args>]` (with connection counts): every virtual server, or the one given. */
  ipvsList(vsArgs?: string): Promise<string>;
  /** `ipvsadm -R` with these lines; throws naming the first failing line's message. */
  ipvsRestore(lines: readonly string[]): Promise<void>;
  /** `ipvsadm --set tcp tcpfin udp` (seconds; 0 keeps the current value). */
  ipvsSetTimeouts(tcp: number, tcpFin: number, udp: number): Promise<void>;
  /** `ipset save`. */
  ipsetSave(): Promise<string>;
  /** `ipset -exist restore`. */
  ipsetRestore(text: string): Promise<void>;
  /** Creates kube-ipvs0 (a dummy interface, down is fine: addresses on it are local) unless it exists. */
  ensureDummy(): Promise<void>;
  /** Addresses of `family` on kube-ipvs0. */
  dummyAddresses(family: IPFamily): Promise<string[]>;
  /** Adds and removes kube-ipvs0 addresses (one `ip -batch`). */
  changeDummyAddresses(add: readonly string[], del: readonly string[]): Promise<void>;
  /** Local addresses of `family` on every interface but kube-ipvs0. */
  nodeAddresses(family: IPFamily): Promise<string[]>;
}

const TIMEOUT_MS = 120_000;

async function run(argv: readonly string[], stdin?: string): Promise<string> {
  const r = await runInProcessGroup(argv, {
    stdin: stdin ?? null,
    timeoutMs: TIMEOUT_MS,
    env: { ...process.env, LC_ALL: "C" },
  });
  if (r.code !== 0) {
    const msg = r.stderr.trim().split("\n").slice(0, 3).join("; ") || r.exit;
    throw new Error(`${argv.join(" ")}: ${msg}`);
  }
  return r.stdout.toString("utf8");
}

/** Parses `ip -o addr show` lines into [device, address]. */
export function parseIpAddrLines(text: string): [string, string][] {
  const out: [string, string][] = [];
  for (const line of text.split("\n")) {
    const m = /^\d+:\s+(\S+?)(?:@\S+)?\s+inet6?\s+([0-9a-fA-F.:]+)\//.exec(line);
    if (m) out.push([m[1], m[2]]);
  }
  return out;
}

/** The real host (binaries resolved in /usr/sbin, /sbin, /usr/bin). */
export function createIpvsHost(): IpvsHost {
  const ipvsadm = resolveBinary("ipvsadm");
  const ipset = resolveBinary("ipset");
  const ip = resolveBinary("ip");
  const dev = DEFAULT_DUMMY_DEVICE;
  return {
    ipvsSave: () => run([ipvsadm, "-Sn"]),
    ipvsList: (vsArgs) => run([ipvsadm, "-Ln", ...(vsArgs ? vsArgs.split(" ") : [])]),
    async ipvsRestore(lines) {
      if (lines.length > 0) await run([ipvsadm, "-R"], lines.join("\n") + "\n");
    },
    async ipvsSetTimeouts(tcp, tcpFin, udp) {
      await run([ipvsadm, "--set", String(tcp), String(tcpFin), String(udp)]);
    },
    ipsetSave: () => run([ipset, "save"]),
    async ipsetRestore(text) {
      if (text !== "") await run([ipset, "-exist", "restore"], text);
    },
    async ensureDummy() {
      const r = await runInProcessGroup([ip, "link", "show", dev], { timeoutMs: TIMEOUT_MS });
      if (r.code === 0) return;
      // The other family's provider, syncing at the same time, may have created it in between.
      const add = await runInProcessGroup([ip, "link", "add", dev, "type", "dummy"], {
        timeoutMs: TIMEOUT_MS,
      });
      if (add.code !== 0 && !/File exists/.test(add.stderr)) {
        throw new Error(`${ip} link add ${dev} type dummy: ${add.stderr.trim() || add.exit}`);
      }
    },
    async dummyAddresses(family) {
      const text = await run([ip, "-o", family === "IPv6" ? "-6" : "-4", "addr", "show", "dev", dev]);
      return parseIpAddrLines(text).map(([, a]) => a);
    },
    async changeDummyAddresses(add, del) {
      const cmds = [
        ...add.map((a) => `addr add ${a}/${a.includes(":") ? 128 : 32} dev ${dev}`),
        ...del.map((a) => `addr del ${a}/${a.includes(":") ? 128 : 32} dev ${dev}`),
      ];
      if (cmds.length > 0) await run([ip, "-batch", "-"], cmds.join("\n") + "\n");
    },
    async nodeAddresses(family) {
      const text = await run([ip, "-o", family === "IPv6" ? "-6" : "-4", "addr", "show"]);
      return parseIpAddrLines(text).filter(([d]) => d !== dev).map(([, a]) => a);
    },
  };
}

/**
 * The real host for cleanupIpvsLeftovers (leftovers.ts): nothing is run that would load a kernel module (ipvsadm
 * only when /proc/net/ip_vs exists, ipset only when the ip_set module is there), and a missing binary or
 * kube-ipvs0 reads as "nothing there".
 */
export function createIpvsLeftoverHost(
  opts: { readonly commandPrefix?: readonly string[] } = {},
): IpvsLeftoverHost {
  const prefix = opts.commandPrefix ?? [];
  const binary = (name: string): string | null => {
    try {
      return resolveBinary(name);
    } catch {
      return null;
    }
  };
  const ipvsadm = existsSync("/proc/net/ip_vs") ? binary("ipvsadm") : null;
  const ipset = existsSync("/sys/module/ip_set") ? binary("ipset") : null;
  const ip = binary("ip");
  const dev = DEFAULT_DUMMY_DEVICE;
  const need = (path: string | null, what: string): string => {
    if (path === null) throw new Error(`${what} is not available`);
    return path;
  };
  return {
    ipvsSave: async () => (ipvsadm === null ? null : await run([...prefix, ipvsadm, "-Sn"])),
    async ipvsRestore(lines) {
      if (lines.length > 0) await run([...prefix, need(ipvsadm, "ipvsadm"), "-R"], lines.join("\n") + "\n");
    },
    async ipvsFlush() {
      await run([...prefix, need(ipvsadm, "ipvsadm"), "-C"]);
    },
    ipsetSave: async () => (ipset === null ? null : await run([...prefix, ipset, "save"])),
    async ipsetDestroy(name) {
      await run([...prefix, need(ipset, "ipset"), "destroy", name]);
    },
    async dummyAddresses() {
      if (ip === null) return null;
      const r = await runInProcessGroup([...prefix, ip, "-o", "addr", "show", "dev", dev], {
        timeoutMs: TIMEOUT_MS,
        env: { ...process.env, LC_ALL: "C" },
      });
      if (r.code !== 0) return null; // no such device
      return parseIpAddrLines(r.stdout.toString("utf8")).map(([, a]) => a);
    },
    async deleteDummy() {
      await run([...prefix, need(ip, "ip"), "link", "del", dev]);
    },
    async iptables(family) {
      const { createIptablesRunner } = await import("../iptables/runner.ts");
      const { iptablesPresent } = await import("../iptables/cleanup.ts");
      let runner;
      try {
        runner = await createIptablesRunner({ family, commandPrefix: prefix });
      } catch {
        return null;
      }
      return (await iptablesPresent(runner)) ? runner : null;
    },
  };
}
