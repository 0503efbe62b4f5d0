/**
 * Start-up kernel settings, as upstream kube-proxy applies them (cmd/kube-proxy/app/server_linux.go and
 * pkg/proxy/conntrack/sysctls.go): the conntrack table size and timeouts, the process's OOM score, and
 * the two checks the iptables proxier makes (route_localnet for localhost NodePorts, and
 * bridge-nf-call-iptables). Upstream stops on most of these errors; edgeproxy keeps going with a warning.
 * A node whose /proc/sys is read-only (a container) still proxies, only with the kernel's defaults.
 */
import { constants as fsConstants } from "node:fs";
import { open, readFile } from "node:fs/promises";
import { availableParallelism, cpus } from "node:os";
import type { KubeProxyConntrackConfiguration } from "../config/types.ts";
import { log } from "../log.ts";
import { ensureSysctl, isUnavailableError, type Sysctl, SysctlError } from "./sysctl.ts";

/** What a setup step did: one line per sysctl or file changed, one line per problem. */
export interface SetupReport {
  readonly changed: string[];
  readonly warnings: string[];
}

/** The conntrack settings, field for field as in KubeProxyConntrackConfiguration (durations in ms). */
export type ConntrackSettings = Readonly<KubeProxyConntrackConfiguration>;

/** Where the conntrack setup reads and writes; every field has the real host's default. */
export interface ConntrackSetupEnv {
  readonly sysctl: Sysctl;
  /** CPUs to scale maxPerCore by; defaults to the host's CPU count. */
  readonly cpuCount?: number;
  /** Defaults to /sys/module/nf_conntrack/parameters/hashsize. */
  readonly hashsizePath?: string;
}

/** Upstream's sysctl names, relative to /proc/sys. */
export const SYSCTL = {
  conntrackMax: "net/netfilter/nf_conntrack_max",
  tcpTimeoutEstablished: "net/netfilter/nf_conntrack_tcp_timeout_established",
  tcpTimeoutCloseWait: "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
  tcpBeLiberal: "net/netfilter/nf_conntrack_tcp_be_liberal",
  udpTimeout: "net/netfilter/nf_conntrack_udp_timeout",
  udpTimeoutStream: "net/netfilter/nf_conntrack_udp_timeout_stream",
  routeLocalnet: "net/ipv4/conf/all/route_localnet",
  bridgeNfCallIptables: "net/bridge/bridge-nf-call-iptables",
} as const;

/** The module parameter upstream raises together with nf_conntrack_max. */
export const DEFAULT_HASHSIZE_PATH = "/sys/module/nf_conntrack/parameters/hashsize";

/** Where upstream's OOM adjuster writes for its own process. */
export const DEFAULT_OOM_SCORE_ADJ_PATH = "/proc/self/oom_score_adj";

/**
 * nf_conntrack_max to set (upstream getConntrackMax): maxPerCore × cpus, but at least `min`; 0 (leave the
 * kernel's value alone) when maxPerCore is 0 or less.
 */
export function conntrackMax(maxPerCore: number, min: number, cpuCount: number): number {
  if (!(maxPerCore > 0)) return 0;
  const floor = min > 0 ? Math.trunc(min) : 0;
  const scaled = Math.trunc(maxPerCore) * cpuCount;
  return scaled > floor ? scaled : floor;
}

/** Whole seconds of a millisecond duration, truncated like Go's `int(d / time.Second)`. */
function seconds(ms: number): number {
  return Math.trunc(ms / 1000);
}

/** The host's CPU count (all CPUs, not the process's affinity set, as upstream prefers). */
export function hostCpuCount(): number {
  const n = cpus().length;
  return n > 0 ? n : Math.max(1, availableParallelism());
}

function describe(err: unknown): string {
  if (err instanceof SysctlError) return `${err.code}: ${err.detail} (${err.path})`;
  const text = err instanceof Error ? err.message : String(err);
  // Node-style "EROFS: read-only file system, open '/path'": the path is already in the warning.
  return /^([A-Z]+: [^,]+), \w+ '.*'$/.exec(text)?.[1] ?? text;
}

/**
 * Applies the conntrack sysctls in upstream's order: nf_conntrack_max (and the hashsize when it is below
 * max/4), tcp established and close-wait timeouts, tcp_be_liberal, udp and udp-stream timeouts. A zero
 * duration, maxPerCore 0 and tcpBeLiberal false leave the kernel's value. Each failure becomes a warning
 * and the remaining settings are still tried.
 */
export async function applyConntrackSettings(
  settings: ConntrackSettings,
  env: ConntrackSetupEnv,
): Promise<SetupReport> {
  const report: SetupReport = { changed: [], warnings: [] };
  const { sysctl } = env;

  const max = conntrackMax(settings.maxPerCore, settings.min, env.cpuCount ?? hostCpuCount());
  if (max > 0) {
    log.info("Setting nf_conntrack_max", { nfConntrackMax: max });
    if (await ensureOne(sysctl, SYSCTL.conntrackMax, max, "conntrack.maxPerCore/min", report)) {
      await raiseHashsize(max, env.hashsizePath ?? DEFAULT_HASHSIZE_PATH, report);
    }
  }

  const timeouts: Array<[number, string, string]> = [
    [settings.tcpEstablishedTimeout, SYSCTL.tcpTimeoutEstablished, "conntrack.tcpEstablishedTimeout"],
    [settings.tcpCloseWaitTimeout, SYSCTL.tcpTimeoutCloseWait, "conntrack.tcpCloseWaitTimeout"],
  ];
  for (const [ms, name, field] of timeouts) {
    if (ms > 0) await ensureOne(sysctl, name, seconds(ms), field, report);
  }
  if (settings.tcpBeLiberal) {
    await ensureOne(sysctl, SYSCTL.tcpBeLiberal, 1, "conntrack.tcpBeLiberal", report);
  }
  const udp: Array<[number, string, string]> = [
    [settings.udpTimeout, SYSCTL.udpTimeout, "conntrack.udpTimeout"],
    [settings.udpStreamTimeout, SYSCTL.udpTimeoutStream, "conntrack.udpStreamTimeout"],
  ];
  for (const [ms, name, field] of udp) {
    if (ms > 0) await ensureOne(sysctl, name, seconds(ms), field, report);
  }
  return report;
}

/** ensureSysctl with logging; false (and a warning) when the write failed. */
async function ensureOne(
  sysctl: Sysctl,
  name: string,
  value: number,
  field: string,
  report: SetupReport,
): Promise<boolean> {
  try {
    if (await ensureSysctl(sysctl, name, value) === "changed") {
      log.info("Set sysctl", { entry: name, value });
      report.changed.push(`${name}=${value}`);
    }
    return true;
  } catch (err) {
    const kept = isUnavailableError(err) ? ", kernel value kept" : "";
    warn(report, `${field}: cannot set sysctl ${name} to ${value}${kept}: ${describe(err)}`);
    return false;
  }
}

/**
 * Upstream's SetMax tail: a conntrack table larger than 4 × hashsize gets a bigger hash table. Writing it
 * fails outside the initial network namespace and on a read-only /sys; both are warnings.
 */
async function raiseHashsize(max: number, path: string, report: SetupReport): Promise<void> {
  const want = Math.floor(max / 4);
  let current: number;
  try {
    const text = (await readFile(path, "utf8")).trim();
    if (!/^\d+$/.test(text)) throw new Error(`not an integer: ${JSON.stringify(text)}`);
    current = Number(text);
  } catch (err) {
    warn(
      report,
      `cannot read conntrack hashsize ${path} (needed for nf_conntrack_max=${max}): ${describe(err)}`,
    );
    return;
  }
  if (current >= want) return;
  log.info("Setting conntrack hashsize", { conntrackHashsize: want });
  try {
    await writeExisting(path, String(want));
    report.changed.push(`${path}=${want}`);
  } catch (err) {
    const hint = (err as { code?: unknown }).code === "EROFS"
      ? " (/sys is read-only: cannot modify conntrack limits, problems may arise later)"
      : "";
    warn(report, `cannot set conntrack hashsize ${path} to ${want}${hint}: ${describe(err)}`);
  }
}

/**
 * Writes the process's oom_score_adj (upstream applies --oom-score-adj, default -999, and only logs a
 * failure). Lowering it needs CAP_SYS_RESOURCE, so an unprivileged run gets a warning.
 */
export async function applyOOMScoreAdj(
  value: number,
  path: string = DEFAULT_OOM_SCORE_ADJ_PATH,
): Promise<SetupReport> {
  const report: SetupReport = { changed: [], warnings: [] };
  if (!Number.isInteger(value) || value < -1000 || value > 1000) {
    warn(report, `oomScoreAdj: ${value} is not an integer in [-1000, 1000]; ${path} left unchanged`);
    return report;
  }
  try {
    await writeExisting(path, String(value));
    report.changed.push(`${path}=${value}`);
  } catch (err) {
    warn(report, `oomScoreAdj: cannot write ${value} to ${path}: ${describe(err)}`);
  }
  return report;
}

/**
 * Sets net/ipv4/conf/all/route_localnet=1, which NodePorts on 127.0.0.1 need (upstream: when
 * iptables.localhostNodePorts is true and nodePortAddresses includes an IPv4 loopback address; the caller
 * decides that). Without it, localhost NodePorts do not work; that is a warning here.
 */
export async function ensureRouteLocalnet(sysctl: Sysctl): Promise<SetupReport> {
  const report: SetupReport = { changed: [], warnings: [] };
  try {
    if (await ensureSysctl(sysctl, SYSCTL.routeLocalnet, 1) === "changed") {
      log.info(
        "Setting route_localnet=1 to allow node-ports on localhost; to change this either disable " +
          "iptables.localhostNodePorts (--iptables-localhost-nodeports) or set nodePortAddresses " +
          "(--nodeport-addresses) to filter loopback addresses",
      );
      report.changed.push(`${SYSCTL.routeLocalnet}=1`);
    }
  } catch (err) {
    warn(
      report,
      `cannot set sysctl ${SYSCTL.routeLocalnet} to 1: NodePorts on localhost will not work: ${
        describe(err)
      }`,
    );
  }
  return report;
}

/**
 * Upstream's check: when net/bridge/bridge-nf-call-iptables is readable and not 1, bridged pod traffic
 * bypasses iptables. An unreadable entry (br_netfilter not loaded) is not reported, as upstream.
 */
export async function checkBridgeNfCallIptables(sysctl: Sysctl): Promise<SetupReport> {
  const report: SetupReport = { changed: [], warnings: [] };
  let value: string;
  try {
    value = await sysctl.get(SYSCTL.bridgeNfCallIptables);
  } catch {
    return report;
  }
  if (value !== "1") {
    warn(
      report,
      `Missing br-netfilter module or unset sysctl br-nf-call-iptables, proxy may not work as intended ` +
        `(${SYSCTL.bridgeNfCallIptables}=${value})`,
    );
  }
  return report;
}

function warn(report: SetupReport, line: string): void {
  log.warn(line);
  report.warnings.push(line);
}

/** Writes a file that must already exist (a /proc or /sys entry), replacing its content. */
async function writeExisting(path: string, text: string): Promise<void> {
  const fh = await open(path, fsConstants.O_WRONLY | fsConstants.O_TRUNC);
  try {
    await fh.writeFile(text);
  } finally {
    await fh.close();
  }
}
