/**
 * The source location of a log call, as klog's `file:line` header field and the JSON `caller` key.
 *
 * Taken from `new Error().stack`: the first frame that is neither the logger (lib/log.ts, lib/log/,
 * lib/server/logger.ts) nor a dependency (node_modules, e.g. consola) is the caller. Under Deno and
 * `bun test` frames name the source files; the compiled binary is built with `--sourcemap`, so its
 * minified frames map back to them too. A frame without a source file name (a binary built without
 * the source map) gives klog's own placeholder `???:1`.
 */

/** A caller: `path` relative to the project root (e.g. "lib/proxy/proxier.ts") and the line. */
export interface Caller {
  path: string;
  line: number;
}

/** klog's location when the caller cannot be determined. */
export const UNKNOWN_CALLER: Caller = { path: "???", line: 1 };

const FRAME_RE = /\(?((?:[a-z][a-z0-9+.-]*:\/\/)?[^()\s]+?):(\d+):\d+\)?$/i;
const SOURCE_FILE_RE = /\.(?:ts|tsx|mts|cts|js|mjs|cjs)$/;
const LOGGER_FILE_RE = /(?:^|\/)lib\/(?:log\.ts|log\/[^/]+\.ts|server\/logger\.ts)$/;

/** The file and line of one stack line ("    at fn (file:line:col)"), or null. */
function parseFrame(line: string): { file: string; line: number } | null {
  const m = FRAME_RE.exec(line.trim());
  if (m === null) return null;
  return { file: m[1], line: Number(m[2]) };
}

/** This file's own frame file, to find the project root it is relative to (lib/log/caller.ts). */
function ownRoot(): string {
  const first = (new Error().stack ?? "").split("\n").map(parseFrame).find((f) => f !== null);
  const file = first?.file ?? "";
  const at = file.lastIndexOf("lib/log/caller.ts");
  return at >= 0 ? file.slice(0, at) : "";
}

const ROOT = ownRoot();

/** The caller in a stack string (exported for tests). */
export function callerFromStack(stack: string, root = ROOT): Caller {
  for (const text of stack.split("\n").slice(1)) {
    const f = parseFrame(text);
    if (f === null) continue;
    if (f.file.includes("node_modules/") || LOGGER_FILE_RE.test(f.file)) continue;
    if (!SOURCE_FILE_RE.test(f.file)) return UNKNOWN_CALLER;
    const path = root !== "" && f.file.startsWith(root) ? f.file.slice(root.length) : f.file;
    return { path: path.replace(/^file:\/\//, ""), line: f.line };
  }
  return UNKNOWN_CALLER;
}

/** The caller of the logger, from the current stack. */
export function captureCaller(): Caller {
  const e = Error as unknown as { stackTraceLimit?: number };
  const limit = e.stackTraceLimit;
  e.stackTraceLimit = 30;
  const stack = new Error().stack ?? "";
  e.stackTraceLimit = limit;
  return callerFromStack(stack);
}

/** klog's header form: the base name (`proxier.ts`). */
export function baseName(path: string): string {
  return path.slice(path.lastIndexOf("/") + 1);
}

/** zap's ShortCallerEncoder form: the last directory and the file (`proxier/proxier.ts`). */
export function shortPath(path: string): string {
  const last = path.lastIndexOf("/");
  if (last < 0) return path;
  const prev = path.lastIndexOf("/", last - 1);
  return path.slice(prev + 1);
}
