/**
 * Process-wide logger. lib/log.ts is the only place that knows about consola; the rest of the code
 * calls `log.info(...)`, `log.warn(...)`, `log.debug(...)` etc., optionally with one object of
 * structured fields last: `log.info("Wrote configuration", { file })`.
 *
 * consola provides the logger object (its methods, log types and levels, `withTag`) and hands every
 * call to one reporter; the reporter here writes klog's formats (lib/log/), all to stderr as
 * kube-proxy does:
 * - text (default): `I1123 19:50:34.575123   22152 proxier.ts:812] "Syncing iptables rules" ipFamily="IPv4"`;
 * - json (`--logging-format=json`): `{"ts":1700769034575.123,"caller":"proxier/proxier.ts:812",
 *   "msg":"Syncing iptables rules","v":0,"ipFamily":"IPv4"}`.
 *
 * Verbosity follows klog's `-v`: 0-3 print info and above (use `logV(n)` / `infoV(n, ...)` for klog's
 * "V(2)"-style extra info), 4-5 add debug (printed as klog V(4) info), 6 and more add trace (V(6)).
 */
import process from "node:process";
import { type ConsolaReporter, createConsola, type LogObject } from "consola";
import { captureCaller } from "./log/caller.ts";
import { wallMicros } from "./log/clock.ts";
import { type LogEntry, type Severity, splitArgs } from "./log/entry.ts";
import { formatJsonEntry } from "./log/json_entry.ts";
import { klogBody, klogHeader } from "./log/klog_text.ts";

/** Log output format, as kube-proxy's `--logging-format`. */
export type LogFormat = "text" | "json";

/** Where log lines are written; defaults to process.stderr. */
export interface LogSink {
  write(line: string): unknown;
}

/** Settings for `configureLogging`. */
export interface LoggingSettings {
  /** klog verbosity (`-v`). */
  verbosity: number;
  format: LogFormat;
  /** Colour the text header for an interactive terminal; default: whether stderr is a TTY. */
  tty?: boolean;
  /** Output stream (tests); default process.stderr. */
  sink?: LogSink;
}

/** consola levels: error 0, warn 1, log 2, info 3, debug 4, trace 5. */
const LEVEL_INFO = 3;
const LEVEL_DEBUG = 4;
const LEVEL_TRACE = 5;

/** The klog verbosity debug and trace messages are printed at. */
const V_DEBUG = 4;
const V_TRACE = 6;

/** The consola level a klog verbosity maps to: 0-3 info, 4-5 debug, 6+ trace. */
export function levelForVerbosity(verbosity: number): number {
  if (verbosity >= V_TRACE) return LEVEL_TRACE;
  if (verbosity >= V_DEBUG) return LEVEL_DEBUG;
  return LEVEL_INFO;
}

interface ActiveSettings {
  verbosity: number;
  format: LogFormat;
  tty: boolean;
  sink: LogSink;
  level: number;
}

const stderrSink: LogSink = { write: (line) => process.stderr.write(line) };

let active: ActiveSettings = {
  verbosity: 0,
  format: "text",
  tty: false,
  sink: stderrSink,
  level: LEVEL_INFO,
};

/** Extra properties our own calls put on a consola log object (consola copies them through). */
interface KlogExtras {
  /** klog V level of an infoV / infoVf message. */
  klogV?: number;
  /** A printf-style message (klog Infof). */
  klogUnstructured?: boolean;
}

/** klog severity and V level of a consola log object. */
function severityOf(obj: LogObject & KlogExtras): { severity: Severity; v: number } {
  switch (obj.type) {
    case "fatal":
      return { severity: "F", v: 0 };
    case "error":
      return { severity: "E", v: 0 };
    case "warn":
      return { severity: "W", v: 0 };
    case "debug":
      return { severity: "I", v: V_DEBUG };
    case "trace":
    case "verbose":
      return { severity: "I", v: V_TRACE };
    default:
      return { severity: "I", v: obj.klogV ?? 0 };
  }
}

/** A consola log object as a log entry (caller and time filled in by the caller). */
export function toEntry(obj: LogObject & KlogExtras, micros: number, file: string, line: number): LogEntry {
  return {
    ...severityOf(obj),
    micros,
    file,
    line,
    logger: obj.tag ?? "",
    unstructured: obj.klogUnstructured === true,
    ...splitArgs(obj.args ?? []),
  };
}

const COLOURS: Record<Severity, string> = { I: "32", W: "33", E: "31", F: "31" };

/** Formats one entry in the active format (without the trailing newline). */
export function formatEntry(e: LogEntry, format: LogFormat, tty = false, pid = process.pid): string {
  if (format === "json") return formatJsonEntry(e);
  const header = klogHeader(e, pid);
  if (!tty) return header + klogBody(e);
  return `\x1b[${COLOURS[e.severity]}m${header[0]}\x1b[90m${header.slice(1)}\x1b[0m${klogBody(e)}`;
}

/** The single reporter: reads the active settings on every call, so derived loggers follow them too. */
const reporter: ConsolaReporter = {
  log(obj) {
    if (obj.level > active.level) return;
    const micros = wallMicros();
    const caller = captureCaller();
    const entry = toEntry(obj, micros, caller.path, caller.line);
    active.sink.write(formatEntry(entry, active.format, active.tty) + "\n");
  },
};

/**
 * The logger every module imports. Level filtering happens in the reporter (consola's own level stays at
 * trace), so loggers derived with `log.withTag(...)` before `configureLogging` still follow `-v`.
 * Do not set `log.level` directly; call `configureLogging`.
 */
export const log = createConsola({ level: LEVEL_TRACE, throttle: 0, reporters: [reporter] });

/** Applies `-v` / `--logging-format` (and TTY detection) to `log` and everything derived from it. */
export function configureLogging(settings: LoggingSettings): void {
  const verbosity = Math.max(0, Math.trunc(settings.verbosity));
  active = {
    verbosity,
    format: settings.format === "json" ? "json" : "text",
    tty: settings.format === "json" ? false : (settings.tty ?? Boolean(process.stderr.isTTY)),
    sink: settings.sink ?? stderrSink,
    level: levelForVerbosity(verbosity),
  };
}

/** The configured klog verbosity. */
export function verbosity(): number {
  return active.verbosity;
}

/** klog's `V(n).Enabled()`: whether messages of verbosity `n` are printed. */
export function logV(n: number): boolean {
  return n <= active.verbosity;
}

/** klog's `V(n).InfoS(...)`: an info message printed only at `-v=n` or more. */
export function infoV(n: number, message: string, ...rest: unknown[]): void {
  if (logV(n)) log.info({ message, args: rest, klogV: n });
}

/** klog's `V(n).Infof(...)`: a preformatted message, printed as is (not quoted) at `-v=n` or more. */
export function infoVf(n: number, text: string): void {
  if (logV(n)) log.info({ message: text, args: [], klogV: n, klogUnstructured: true });
}
