/**
 * process_* metrics with client_golang's process collector names and help texts (no stability prefix:
 * upstream registers that collector directly). Read from /proc/self like procfs does; where /proc is not
 * readable, falls back to node:process (CPU time, RSS, start time) and leaves the rest out.
 */
import { readdirSync, readFileSync } from "node:fs";
import process from "node:process";
import type { Registry } from "./registry.ts";

/** Clock ticks per second of /proc/<pid>/stat times; procfs assumes 100 (USER_HZ) as well. */
const USER_HZ = 100;

/** One reading of the process's resources. Absent fields are left out of the scrape. */
export interface ProcessStats {
  cpuSeconds?: number;
  residentBytes?: number;
  virtualBytes?: number;
  startTimeSeconds?: number;
  openFds?: number;
  maxFds?: number;
  virtualMaxBytes?: number;
  networkReceiveBytes?: number;
  networkTransmitBytes?: number;
}

/** Options of {@link registerProcessMetrics}. */
export interface ProcessMetricsOptions {
  /** Directory standing for /proc/self (tests point it at a fixture). */
  readonly procSelf?: string;
  /** Directory standing for /proc (for /proc/stat's btime). */
  readonly procRoot?: string;
}

function readOr(path: string): string | null {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return null;
  }
}

/** Soft limit of a /proc/<pid>/limits row; "unlimited" becomes 2^64−1 as procfs reports it. */
function limit(limits: string, row: string): number | undefined {
  const line = limits.split("\n").find((l) => l.startsWith(row));
  if (!line) return undefined;
  const soft = line.slice(row.length).trim().split(/\s+/)[0];
  if (soft === "unlimited") return 18446744073709551615;
  const n = Number(soft);
  return Number.isFinite(n) ? n : undefined;
}

/** `Key:   123 kB` from /proc/<pid>/status, in bytes. */
function statusBytes(status: string, key: string): number | undefined {
  const m = new RegExp(`^${key}:\\s+(\\d+) kB$`, "m").exec(status);
  return m ? Number(m[1]) * 1024 : undefined;
}

/**
 * Reads /proc-style files. `stat` fields are counted after the `(comm)` field, whose text may contain spaces
 * and parentheses, so parsing starts after the last `)`.
 */
export function readProcStats(procSelf = "/proc/self", procRoot = "/proc"): ProcessStats | null {
  const stat = readOr(`${procSelf}/stat`);
  if (stat === null) return null;
  const fields = stat.slice(stat.lastIndexOf(")") + 2).trim().split(/\s+/);
  // fields[0] is field 3 (state) of proc(5); field N is fields[N - 3].
  const f = (n: number) => Number(fields[n - 3]);
  const out: ProcessStats = { cpuSeconds: (f(14) + f(15)) / USER_HZ, virtualBytes: f(23) };
  const btime = /^btime (\d+)$/m.exec(readOr(`${procRoot}/stat`) ?? "");
  if (btime) out.startTimeSeconds = Number(btime[1]) + f(22) / USER_HZ;
  const status = readOr(`${procSelf}/status`);
  if (status !== null) out.residentBytes = statusBytes(status, "VmRSS");
  try {
    out.openFds = readdirSync(`${procSelf}/fd`).length;
  } catch {
    // no fd directory: leave the metric out
  }
  const limits = readOr(`${procSelf}/limits`);
  if (limits !== null) {
    out.maxFds = limit(limits, "Max open files");
    out.virtualMaxBytes = limit(limits, "Max address space");
  }
  const netstat = readOr(`${procSelf}/net/netstat`);
  if (netstat !== null) {
    const lines = netstat.split("\n").filter((l) => l.startsWith("IpExt:"));
    if (lines.length >= 2) {
      const keys = lines[0].split(/\s+/), values = lines[1].split(/\s+/);
      const get = (k: string) => {
        const i = keys.indexOf(k);
        return i > 0 ? Number(values[i]) : undefined;
      };
      out.networkReceiveBytes = get("InOctets");
      out.networkTransmitBytes = get("OutOctets");
    }
  }
  return out;
}

/** The node:process fallback: CPU time, RSS and an estimated start time. */
function nodeProcessStats(startTimeSeconds: number): ProcessStats {
  const cpu = process.cpuUsage();
  return {
    cpuSeconds: (cpu.user + cpu.system) / 1e6,
    residentBytes: process.memoryUsage().rss,
    startTimeSeconds,
  };
}

/** Registers the process_* families, read at every scrape. */
export function registerProcessMetrics(registry: Registry, opts: ProcessMetricsOptions = {}): void {
  const fallbackStart = Math.floor((Date.now() - process.uptime() * 1000) / 10) / 100;
  // One reading serves all families of a scrape: they are rendered within the same few milliseconds.
  let cached: { at: number; stats: ProcessStats } | null = null;
  const read = (): ProcessStats => {
    const now = performance.now();
    if (cached === null || now - cached.at > 100) {
      cached = {
        at: now,
        stats: readProcStats(opts.procSelf, opts.procRoot) ?? nodeProcessStats(fallbackStart),
      };
    }
    return cached.stats;
  };
  const family = (
    name: string,
    help: string,
    type: "counter" | "gauge",
    pick: (s: ProcessStats) => number | undefined,
  ) =>
    registry.collector({
      name,
      help,
      type,
      collect: () => {
        const v = pick(read());
        return v === undefined || Number.isNaN(v) ? [] : [{ value: v }];
      },
    });
  family(
    "process_cpu_seconds_total",
    "Total user and system CPU time spent in seconds.",
    "counter",
    (s) => s.cpuSeconds,
  );
  family("process_open_fds", "Number of open file descriptors.", "gauge", (s) => s.openFds);
  family("process_max_fds", "Maximum number of open file descriptors.", "gauge", (s) => s.maxFds);
  family("process_virtual_memory_bytes", "Virtual memory size in bytes.", "gauge", (s) => s.virtualBytes);
  family(
    "process_virtual_memory_max_bytes",
    "Maximum amount of virtual memory available in bytes.",
    "gauge",
    (s) => s.virtualMaxBytes,
  );
  family("process_resident_memory_bytes", "Resident memory size in bytes.", "gauge", (s) => s.residentBytes);
  family(
    "process_start_time_seconds",
    "Start time of the process since unix epoch in seconds.",
    "gauge",
    (s) => s.startTimeSeconds,
  );
  family(
    "process_network_receive_bytes_total",
    "Number of bytes received by the process over the network.",
    "counter",
    (s) => s.networkReceiveBytes,
  );
  family(
    "process_network_transmit_bytes_total",
    "Number of bytes sent by the process over the network.",
    "counter",
    (s) => s.networkTransmitBytes,
  );
}
