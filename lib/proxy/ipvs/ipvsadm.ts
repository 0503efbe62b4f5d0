/**
 * IPVS through Debian's ipvsadm: the virtual and real servers read back from `ipvsadm -Sn` (and the
 * connection counts from `ipvsadm -Ln`), and the `ipvsadm -R` batch that turns what the kernel has into
 * what the model wants, as upstream's syncService / syncEndpoint / cleanLegacyService do one netlink call
 * at a time: add or edit virtual servers, add real servers or reset their weight to 1, give removed real
 * servers weight 0 (graceful termination, pkg/proxy/ipvs/graceful_termination.go) and delete virtual
 * servers no longer wanted (except other families' and those in --ipvs-exclude-cidrs). Pure.
 */
import type { IPFamily, Protocol } from "../types.ts";
import { cidrContains, joinHostPort, splitHostPort } from "../../net/go_net.ts";
import { type VirtualServer, virtualServerKey } from "./state.ts";

/** A virtual server as the kernel has it. */
export interface KernelVirtualServer {
  readonly address: string;
  readonly port: number;
  readonly protocol: Protocol;
  readonly scheduler: string;
  readonly persistentTimeout: number;
  readonly flags: string;
  /** "ip:port" (IPv6 bracketed) → weight. */
  readonly realServers: Map<string, number>;
}

const PROTO_FLAG: Record<Protocol, string> = { TCP: "-t", UDP: "-u", SCTP: "--sctp-service" };
const FLAG_PROTO: Record<string, Protocol> = { "-t": "TCP", "-u": "UDP", "--sctp-service": "SCTP" };

function hostPort(s: string): { address: string; port: number } | null {
  const hp = splitHostPort(s);
  if (!hp || !/^\d+$/.test(hp.port)) return null;
  return { address: hp.host, port: Number(hp.port) };
}

/** Parses `ipvsadm -Sn` (lines it does not understand are ignored). */
export function parseIpvsadmSave(text: string): Map<string, KernelVirtualServer> {
  const out = new Map<string, KernelVirtualServer>();
  for (const line of text.split("\n")) {
    const f = line.trim().split(/\s+/);
    if (f.length < 3 || !(f[1] in FLAG_PROTO)) continue;
    const protocol = FLAG_PROTO[f[1]];
    const vs = hostPort(f[2]);
    if (!vs) continue;
    const key = virtualServerKey({ ...vs, protocol });
    const opt = (name: string) => {
      const i = f.indexOf(name);
      return i >= 0 && i + 1 < f.length ? f[i + 1] : null;
    };
    if (f[0] === "-A") {
      out.set(key, {
        ...vs,
        protocol,
        scheduler: opt("-s") ?? "",
        persistentTimeout: f.includes("-p") ? Number(opt("-p") ?? 0) : 0,
        flags: opt("-b") ?? "",
        realServers: new Map(),
      });
    } else if (f[0] === "-a") {
      const rs = opt("-r");
      const parsed = rs ? hostPort(rs) : null;
      if (parsed) {
        out.get(key)?.realServers.set(joinHostPort(parsed.address, parsed.port), Number(opt("-w") ?? 1));
      }
    }
  }
  return out;
}

/** Active + inactive connections per real server from `ipvsadm -Ln`: "vsKey/ip:port" → count. */
export function parseIpvsadmConnections(text: string): Map<string, number> {
  const out = new Map<string, number>();
  let vs: string | null = null;
  for (const line of text.split("\n")) {
    const m = /^(TCP|UDP|SCTP)\s+(\S+)\s/.exec(line);
    if (m) {
      const hp = hostPort(m[2]);
      vs = hp ? virtualServerKey({ ...hp, protocol: m[1] }) : null;
      continue;
    }
    const r = /^\s+->\s+(\S+)\s+\S+\s+\d+\s+(\d+)\s+(\d+)/.exec(line);
    if (r && vs) out.set(`${vs}/${r[1]}`, Number(r[2]) + Number(r[3]));
  }
  return out;
}

function vsArgs(v: { address: string; port: number; protocol: Protocol }): string {
  return `${PROTO_FLAG[v.protocol]} ${joinHostPort(v.address, v.port)}`;
}

function vsOptions(v: VirtualServer): string {
  let s = ` -s ${v.scheduler}`;
  if (v.persistentTimeout > 0) s += ` -p ${v.persistentTimeout}`;
  if (v.sourceHash) s += " -b flag-2";
  return s;
}

/** A real server given weight 0 that waits for its connections to drain. */
export interface TerminatingRealServer {
  readonly virtualServer: string;
  readonly protocol: Protocol;
  readonly vsArgs: string;
  readonly realServer: string;
}

/** The batch for `ipvsadm -R` and the real servers it starts terminating. */
export interface IpvsadmPlan {
  readonly lines: readonly string[];
  readonly terminating: readonly TerminatingRealServer[];
  readonly counts: {
    readonly vsAdded: number;
    readonly vsEdited: number;
    readonly vsDeleted: number;
    readonly rsChanged: number;
  };
}

/** Options of {@link planIpvsadm}. */
export interface PlanIpvsadmOptions {
  readonly family: IPFamily;
  readonly excludeCIDRs: readonly string[];
}

/**
 * The commands that make `current` equal `desired`. Removed TCP real servers get weight 0 and are
 * returned in `terminating`; UDP and SCTP ones are deleted at once (upstream: expire_nodest_conn drops
 * their flows on the next packet).
 */
export function planIpvsadm(
  desired: ReadonlyMap<string, VirtualServer>,
  current: ReadonlyMap<string, KernelVirtualServer>,
  opts: PlanIpvsadmOptions,
): IpvsadmPlan {
  const lines: string[] = [];
  const terminating: TerminatingRealServer[] = [];
  let vsAdded = 0, vsEdited = 0, vsDeleted = 0, rsChanged = 0;
  for (const [key, vs] of current) {
    if (desired.has(key)) continue;
    if (vs.address.includes(":") !== (opts.family === "IPv6")) continue; // not our family
    if (opts.excludeCIDRs.some((c) => cidrContains(c, vs.address))) continue;
    lines.push(`-D ${vsArgs(vs)}`);
    vsDeleted++;
  }
  for (const [key, vs] of desired) {
    const have = current.get(key);
    const args = vsArgs(vs);
    if (!have) {
      lines.push(`-A ${args}${vsOptions(vs)}`);
      vsAdded++;
    } else if (
      have.scheduler !== vs.scheduler || have.persistentTimeout !== vs.persistentTimeout ||
      (vs.sourceHash ? !have.flags.includes("flag-2") : have.flags !== "")
    ) {
      lines.push(`-E ${args}${vsOptions(vs)}`);
      vsEdited++;
    }
    const want = new Set<string>();
    for (const rs of vs.realServers) {
      const rsKey = joinHostPort(rs.address, rs.port);
      want.add(rsKey);
      const weight = have?.realServers.get(rsKey);
      if (weight === undefined) lines.push(`-a ${args} -r ${rsKey} -m -w ${rs.weight}`);
      else if (weight !== rs.weight) lines.push(`-e ${args} -r ${rsKey} -m -w ${rs.weight}`);
      else continue;
      rsChanged++;
    }
    if (!have) continue;
    for (const [rsKey, weight] of have.realServers) {
      if (want.has(rsKey)) continue;
      if (vs.protocol !== "TCP") {
        lines.push(`-d ${args} -r ${rsKey}`);
        rsChanged++;
        continue;
      }
      if (weight !== 0) {
        lines.push(`-e ${args} -r ${rsKey} -m -w 0`);
        rsChanged++;
      }
      terminating.push({ virtualServer: key, protocol: vs.protocol, vsArgs: args, realServer: rsKey });
    }
  }
  return { lines, terminating, counts: { vsAdded, vsEdited, vsDeleted, rsChanged } };
}

/** `-d` lines for terminating real servers whose connections have drained (count 0 or gone). */
export function drainedDeletes(
  terminating: readonly TerminatingRealServer[],
  connections: ReadonlyMap<string, number>,
): { lines: string[]; remaining: TerminatingRealServer[] } {
  const lines: string[] = [];
  const remaining: TerminatingRealServer[] = [];
  for (const t of terminating) {
    const n = connections.get(`${t.virtualServer}/${t.realServer}`);
    if (n === undefined) continue; // already gone
    if (n === 0) lines.push(`-d ${t.vsArgs} -r ${t.realServer}`);
    else remaining.push(t);
  }
  return { lines, remaining };
}
