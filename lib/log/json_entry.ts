/**
 * Kubernetes' JSON log format (`--logging-format=json`, component-base/logs/json: zap through zapr):
 * `{"ts":<ms>,"logger":...,"caller":"dir/file:line","msg":"...","v":<n>,<key/values>...,"err":"..."}`.
 *
 * - `ts` is what upstream's epochMillisTimeEncoder writes: milliseconds since the epoch as a float
 *   (microsecond fraction);
 * - `caller` is zap's ShortCallerEncoder form (last directory and file);
 * - `v` is the verbosity of info messages (warnings are info at v=0, as klog hands them to logr);
 *   error entries have no `v` but an `err` key, last;
 * - keys are written in call order and may repeat, as zap does.
 */
import { shortPath } from "./caller.ts";
import type { LogEntry } from "./entry.ts";

function value(v: unknown): string {
  if (v instanceof Error) return JSON.stringify(v.message);
  if (v === undefined) return "null";
  try {
    return JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? x.toString() : x)) ?? "null";
  } catch (e) {
    return JSON.stringify(`<internal error: ${(e as Error).message}>`);
  }
}

/** One JSON entry (no trailing newline). */
export function formatJsonEntry(e: LogEntry): string {
  let out = `{"ts":${e.micros / 1000}`;
  if (e.logger !== "") out += `,"logger":${JSON.stringify(e.logger)}`;
  out += `,"caller":${JSON.stringify(`${shortPath(e.file)}:${e.line}`)},"msg":${JSON.stringify(e.msg)}`;
  const isError = e.severity === "E" || e.severity === "F";
  if (!isError) out += `,"v":${e.v}`;
  for (const [k, v] of e.kvs) out += `,${JSON.stringify(k)}:${value(v)}`;
  if (e.err !== undefined) out += `,"err":${JSON.stringify(e.err)}`;
  return out + "}";
}
