/**
 * klog's text format: `Lmmdd hh:mm:ss.uuuuuu threadid file:line] msg key=value ...`, as
 * k8s.io/klog/v2 writes it (header: internal/buffer FormatHeader; values: internal/serialize):
 *
 * - severity letter I/W/E/F, month and day, local time with microseconds, the pid right-aligned in 7
 *   columns, the caller's base file name and line, `] `;
 * - a structured message is quoted (Go strconv.Quote), a printf-style one (`Infof`) is written as is;
 * - `err="..."` follows the message, then the key/value pairs in order;
 * - strings are quoted, numbers and booleans bare, other values as JSON (Go's encoder, which escapes
 *   `<`, `>` and `&`); a string with a line break is written klog's multi-line way:
 *   `key=<` newline, each line tab-indented, newline, ` >`.
 */
import { baseName } from "./caller.ts";
import type { LogEntry } from "./entry.ts";

const HEX = "0123456789abcdef";

/** Go's unicode.IsPrint: letters, marks, numbers, punctuation, symbols and ASCII space. */
const NON_PRINTABLE = /[\p{C}\p{Z}]/u;

/** Go's strconv.Quote: a double-quoted string with Go escapes for non-printable characters. */
export function goQuote(s: string): string {
  if (/^[\x20-\x7e]*$/.test(s) && !/["\\]/.test(s)) return `"${s}"`; // fast path: printable ASCII
  let out = '"';
  for (const ch of s) {
    const r = ch.codePointAt(0)!;
    switch (ch) {
      case '"':
        out += '\\"';
        continue;
      case "\\":
        out += "\\\\";
        continue;
      case "\x07":
        out += "\\a";
        continue;
      case "\b":
        out += "\\b";
        continue;
      case "\f":
        out += "\\f";
        continue;
      case "\n":
        out += "\\n";
        continue;
      case "\r":
        out += "\\r";
        continue;
      case "\t":
        out += "\\t";
        continue;
      case "\v":
        out += "\\v";
        continue;
    }
    if (r < 0x20 || r === 0x7f) {
      out += "\\x" + HEX[r >> 4] + HEX[r & 15];
    } else if (r === 0x20 || !NON_PRINTABLE.test(ch)) {
      out += ch;
    } else if (r >= 0xd800 && r <= 0xdfff) {
      out += "\\ufffd"; // a lone surrogate: Go would see invalid UTF-8 and write U+FFFD
    } else if (r < 0x10000) {
      out += "\\u" + r.toString(16).padStart(4, "0");
    } else {
      out += "\\U" + r.toString(16).padStart(8, "0");
    }
  }
  return out + '"';
}

/** Go's encoding/json output for a value (HTML-escaped, like json.Encoder's default). */
export function goJSON(v: unknown): string {
  let s: string | undefined;
  try {
    s = JSON.stringify(v, (_k, x) => (typeof x === "bigint" ? x.toString() : x));
  } catch (e) {
    return goQuote(`<internal error: json: ${(e as Error).message}>`);
  }
  if (s === undefined) return "null";
  return s.replace(/[<>&\u2028\u2029]/g, (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
}

/** klog's writeStringValue: quoted, or the multi-line form for a string with a line break. */
function stringValue(v: string): string {
  if (!v.includes("\n")) return "=" + goQuote(v);
  const lines = v.split("\n");
  const last = lines.pop()!;
  let out = "=<\n";
  for (const l of lines) out += "\t" + l + "\n";
  return last === "" ? out + " >" : out + "\t" + last + "\n >";
}

/** One ` key=value` pair, klog's formatKV. */
export function formatKV(key: string, v: unknown): string {
  let value: string;
  if (typeof v === "string") value = stringValue(v);
  else if (v instanceof Error) value = stringValue(v.message);
  else if (typeof v === "number") {
    value = "=" + (Number.isFinite(v) ? String(v) : Number.isNaN(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf");
  } else if (typeof v === "boolean" || typeof v === "bigint") value = "=" + String(v);
  else if (v === undefined || v === null) value = "=<nil>";
  else if (v instanceof Date) value = "=" + goQuote(v.toISOString());
  else value = "=" + goJSON(v);
  return " " + key + value;
}

function two(n: number): string {
  return n < 10 ? "0" + n : String(n);
}

/** klog's header, `I0102 15:04:05.067890    1234 file.ts:12] ` (local time, as klog). */
export function klogHeader(e: Pick<LogEntry, "severity" | "micros" | "file" | "line">, pid: number): string {
  const d = new Date(Math.floor(e.micros / 1000));
  const micro = String(e.micros % 1_000_000).padStart(6, "0");
  const pidText = String(pid % 10_000_000).padStart(7, " ");
  return `${e.severity}${two(d.getMonth() + 1)}${two(d.getDate())} ${two(d.getHours())}:${
    two(d.getMinutes())
  }:${two(d.getSeconds())}.${micro} ${pidText} ${baseName(e.file)}:${e.line}] `;
}

/** The message and key/value pairs after the header (no trailing newline). */
export function klogBody(e: LogEntry): string {
  let out = e.unstructured ? e.msg : goQuote(e.msg);
  if (e.logger !== "") out += formatKV("logger", e.logger);
  if (e.err !== undefined) out += formatKV("err", e.err);
  for (const [k, v] of e.kvs) out += formatKV(k, v);
  return out;
}

/** One klog text entry (no trailing newline). */
export function formatKlogText(e: LogEntry, pid: number): string {
  return klogHeader(e, pid) + klogBody(e);
}
