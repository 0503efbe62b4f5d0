/**
 * One log call, independent of the output format: what klog's `InfoS(msg, kv...)` / `ErrorS(err, msg,
 * kv...)` carry. Built from the arguments of `log.info(message, fields?)` and friends: the first string
 * is the message, plain objects are key/value pairs (in their order), an Error is klog's `err`, anything
 * else is kept under `args`.
 */

/** klog severities: info, warning, error, fatal. */
export type Severity = "I" | "W" | "E" | "F";

/** A log entry. */
export interface LogEntry {
  severity: Severity;
  /** klog verbosity of an info message (`V(n)`); 0 for warnings; ignored for errors. */
  v: number;
  /** Microseconds since the Unix epoch. */
  micros: number;
  /** Caller path relative to the project root, and line. */
  file: string;
  line: number;
  /** Logger name (consola tag), klog's `logger` key. */
  logger: string;
  msg: string;
  /** A printf-style message (klog `Infof`): printed as is in text, not quoted. */
  unstructured: boolean;
  /** The error of the call (klog's `err` key), as its message. */
  err?: string;
  /** Key/value pairs in order; keys may repeat (klog prints duplicates). */
  kvs: Array<[string, unknown]>;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (v === null || typeof v !== "object" || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

/** The message and key/value pairs in a logger call's arguments. */
export function splitArgs(args: readonly unknown[]): Pick<LogEntry, "msg" | "err" | "kvs"> {
  const words: string[] = [];
  const kvs: Array<[string, unknown]> = [];
  const extra: unknown[] = [];
  let err: string | undefined;
  for (const a of args) {
    if (a instanceof Error && err === undefined) err = a.message;
    else if (isPlainObject(a)) kvs.push(...Object.entries(a));
    else if (typeof a === "string" && extra.length === 0 && kvs.length === 0) words.push(a);
    else extra.push(a);
  }
  if (extra.length > 0) kvs.push(["args", extra]);
  return { msg: words.join(" "), kvs, ...(err !== undefined ? { err } : {}) };
}
