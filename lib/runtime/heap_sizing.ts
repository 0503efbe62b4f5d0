/**
 * Sizing the runtime's heap for an agent, not for the machine. JavaScriptCore (the shipped binary's
 * engine) sets how far the heap may grow before the next collection from the machine's RAM: below a
 * quarter of it, twice the heap the last collection left. On a machine with gigabytes that means a
 * 60 MiB heap grows to ~120 MiB of garbage before a full collection, whatever the agent itself needs.
 * Told the machine has {@link HEAP_RAM_BYTES} (JavaScriptCore's `forceRAMSize` option; no cap: a heap
 * larger than that still grows, by 1.24× instead of 2×), it collects sooner. Measured at 10k Services
 * (bench/README.md): first-sync peak ~188 → ~171 MiB in iptables mode and ~243 → ~219 MiB in nftables
 * mode, settled RSS ~10–18 MiB lower, the first sync no slower.
 *
 * The option is read only as the runtime starts, from `BUN_JSC_forceRAMSize`, so edgeproxy re-executes
 * itself once with it set ({@link heapSizingExec}: same PID, same arguments) before the rest of the program
 * is evaluated (heap_sizing_boot.ts, main.ts's first import). That costs ~40 ms at start (a --dry-run of the
 * example: median 192 against 149 ms with the variable already set).
 * An operator's own value wins, including 0 (the machine's RAM, the runtime's default). Bun only (the
 * shipped binary); Deno (the development runtime) runs V8, which has no such option.
 */
import process from "node:process";

/** The environment variable through which Bun sets JavaScriptCore's `forceRAMSize` option. */
export const HEAP_RAM_ENV = "BUN_JSC_forceRAMSize";

/**
 * The RAM the runtime is told the machine has: 128 MiB. 64 MiB measured the same at 10k Services; the
 * runtime's default (the machine's RAM) ~16 MiB higher at the peak and ~10 MiB settled.
 */
export const HEAP_RAM_BYTES = 128 * 1024 * 1024;

/** Where a compiled Bun executable's own bundle lives in its `process.argv[1]`. */
const BUN_COMPILED_ROOT = "/$bunfs/";

/** The process as {@link heapSizingExec} needs to see it. */
export interface ProcessView {
  /** Whether the runtime is Bun (whose engine reads the option). */
  readonly isBun: boolean;
  readonly env: Readonly<Record<string, string | undefined>>;
  /** `process.argv`: the runtime, the script (a `/$bunfs/` path in a compiled executable), the arguments. */
  readonly argv: readonly string[];
  /** `process.argv0`: the name the process was started under. */
  readonly argv0: string;
  /** `process.execPath`: the executable to run again. */
  readonly execPath: string;
}

/** An execve(2) of the same executable with the heap sizing in its environment. */
export interface HeapSizingExec {
  readonly file: string;
  /** argv, argv[0] first. */
  readonly args: string[];
  readonly env: Record<string, string>;
}

/**
 * The exec that restarts this process with {@link HEAP_RAM_ENV} set, or null when none is needed: not
 * Bun, or the variable is already set (by an operator, or by this exec: it runs once). A compiled
 * executable gets its own arguments back without the `/$bunfs/` script path the runtime adds to argv;
 * `bun main.ts` keeps its script.
 */
export function heapSizingExec(p: ProcessView): HeapSizingExec | null {
  if (!p.isBun || p.env[HEAP_RAM_ENV] !== undefined) return null;
  const compiled = (p.argv[1] ?? "").startsWith(BUN_COMPILED_ROOT);
  const rest = p.argv.slice(compiled ? 2 : 1);
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(p.env)) if (v !== undefined) env[k] = v;
  env[HEAP_RAM_ENV] = String(HEAP_RAM_BYTES);
  return { file: p.execPath, args: [p.argv0, ...rest], env };
}

interface ExecveProcess {
  execve?(file: string, args: string[], env: Record<string, string>): never;
}

/**
 * Re-executes this process with the heap sizing when {@link heapSizingExec} asks for it; on success it
 * does not return. Call before anything is opened or written (file descriptors without close-on-exec and
 * unflushed output would otherwise carry over or be lost). Returns null when nothing was needed, or the
 * reason it could not re-execute ("execve …: <error>"), for the caller to log once logging is set up: the
 * agent then runs with the runtime's default sizing.
 */
export function applyHeapSizing(): string | null {
  const plan = heapSizingExec({
    isBun: (globalThis as { Bun?: unknown }).Bun !== undefined,
    env: process.env,
    argv: process.argv,
    argv0: process.argv0,
    execPath: process.execPath,
  });
  if (plan === null) return null;
  const execve = (process as unknown as ExecveProcess).execve;
  if (typeof execve !== "function") return `execve ${plan.file}: not available in this runtime`;
  try {
    execve.call(process, plan.file, plan.args, plan.env);
  } catch (e) {
    return `execve ${plan.file}: ${(e as Error).message}`;
  }
  return `execve ${plan.file}: returned`;
}

/**
 * What the agent logs at -v=2 about the heap sizing it runs with: the variable and its value (unset only
 * where the re-exec could not run), or null off Bun.
 */
export function heapSizingLogFields(): Record<string, string> | null {
  if ((globalThis as { Bun?: unknown }).Bun === undefined) return null;
  return { env: HEAP_RAM_ENV, value: process.env[HEAP_RAM_ENV] ?? "unset" };
}
