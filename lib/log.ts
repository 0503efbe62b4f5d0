/**
 * Process-wide logger. lib/log.ts is the only place that knows about consola; the rest of the code
 * calls `log.info(...)`, `log.warn(...)`, `log.debug(...)` etc., optionally with one object of
 * structured fields last: `log.info("Wrote configuration", { file })`.
 *
 * Output goes to stderr (like klog), one line per message:
 * - text, not a TTY (journald, files, pipes): `<level> <message> key=value ...`, no colour, no timestamp
 *   (journald stamps lines itself);
 * - text on a TTY: the same line prefixed with a local time and with a coloured level;
 * - json (`--logging-format=json`): `{"ts":<unix seconds>,"level":"info","msg":"...",...fields}`.
 *
 * Verbosity follows klog's `-v`: 0-3 print info and above (use `logV(n)` / `infoV(n, ...)` for klog's
 * "V(2)"-style extra info), 4-5 add debug, 6 and more add trace.
 */
import { type ConsolaReporter, createConsola, type LogObject } from "consola";

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
  /** Colour and timestamps for an interactive terminal; default: whether stderr is a TTY. */
  tty?: boolean;
  /** Output stream (tests); default process.stderr. */
  sink?: LogSink;
}

/** consola levels: error 0, warn 1, log 2, info 3, debug 4, trace 5. */
const LEVEL_INFO = 3;
const LEVEL_DEBUG = 4;
const LEVEL_TRACE = 5;

/** The consola level a klog verbosity maps to: 0-3 info, 4-5 debug, 6+ trace. */
export function levelForVerbosity(verbosity: number): number {
  if (verbosity >= 6) return LEVEL_TRACE;
  if (verbosity >= 4) return LEVEL_DEBUG;
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

/** The name printed for a consola log type. */
function levelName(obj: LogObject): string {
  switch (obj.type) {
    case "fatal":
    case "error":
      return "error";
    case "warn":
      return "warn";
    case "debug":
      return "debug";
    case "trace":
    case "verbose":
      return "trace";
    default:
      return "info";
  }
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (v === null || typeof v !== "object" || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** Splits consola args into the message text and structured fields. */
function splitArgs(args: readonly unknown[]): { msg: string; fields: Record<string, unknown> } {
  const words: string[] = [];
  const fields: Record<string, unknown> = {};
  const extra: unknown[] = [];
  for (const a of args) {
    if (a instanceof Error) fields.err = a.message;
    else if (isPlainObject(a)) Object.assign(fields, a);
    else if (typeof a === "string" && extra.length === 0 && Object.keys(fields).length === 0) words.push(a);
    else extra.push(a);
  }
  if (extra.length > 0) fields.args = extra;
  return { msg: words.join(" "), fields };
}

function oneLine(s: string): string {
  return s.replace(/\r?\n/g, "\\n");
}

function textValue(v: unknown): string {
  if (typeof v === "string") return /^[^\s"=\\]+$/.test(v) ? v : JSON.stringify(v);
  if (v === undefined) return "undefined";
  if (typeof v === "bigint") return v.toString();
  if (typeof v === "number" || typeof v === "boolean" || v === null) return String(v);
  try {
    return JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? x.toString() : x)) ?? String(v);
  } catch {
    return String(v);
  }
}

const COLOURS: Record<string, string> = { error: "31", warn: "33", info: "32", debug: "36", trace: "90" };

/** Formats one log object as a text line (without the trailing newline). */
export function formatTextLine(obj: LogObject, tty = false): string {
  const level = levelName(obj);
  const { msg, fields } = splitArgs(obj.args ?? []);
  const kv = Object.entries(fields).map(([k, v]) => `${k}=${textValue(v)}`);
  const tag = obj.tag ? `[${obj.tag}] ` : "";
  const body = oneLine(tag + [msg, ...kv].filter((x) => x !== "").join(" "));
  if (!tty) return `${level} ${body}`;
  const d = obj.date ?? new Date();
  const time = `${String(d.getHours()).padStart(2, "0")}:${String(d.getMinutes()).padStart(2, "0")}:${
    String(d.getSeconds()).padStart(2, "0")
  }.${String(d.getMilliseconds()).padStart(3, "0")}`;
  return `\x1b[90m${time}\x1b[0m \x1b[${COLOURS[level]}m${level.padEnd(5)}\x1b[0m ${body}`;
}

/** Formats one log object as a JSON line (without the trailing newline). */
export function formatJsonLine(obj: LogObject): string {
  const { msg, fields } = splitArgs(obj.args ?? []);
  const d = obj.date ?? new Date();
  const record: Record<string, unknown> = { ts: d.getTime() / 1000, level: levelName(obj), msg };
  if (obj.tag) record.logger = obj.tag;
  for (const [k, v] of Object.entries(fields)) record[k in record ? `field.${k}` : k] = v;
  try {
    return JSON.stringify(record, (_k, x) => (typeof x === "bigint" ? x.toString() : x));
  } catch {
    return JSON.stringify({ ts: record.ts, level: record.level, msg, err: "unserializable log fields" });
  }
}

/** The single reporter: reads the active settings on every call, so derived loggers follow them too. */
const reporter: ConsolaReporter = {
  log(obj) {
    if (obj.level > active.level) return;
    const line = active.format === "json" ? formatJsonLine(obj) : formatTextLine(obj, active.tty);
    active.sink.write(line + "\n");
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

/** klog's `V(n).Info(...)`: an info message printed only at `-v=n` or more. */
export function infoV(n: number, message: string, ...rest: unknown[]): void {
  if (logV(n)) log.info(message, ...rest);
}
