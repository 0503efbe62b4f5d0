/**
 * JavaScriptCore (the shipped binary's engine) tuned for an agent, not for the machine, through options
 * it reads only as it starts, from `BUN_JSC_*` environment variables: edgeproxy re-executes itself once
 * with them set ({@link engineOptionsExec}: same PID, same arguments) before the rest of the program is
 * evaluated (engine_options_boot.ts, main.ts's first import). That costs ~40 ms at start (a --dry-run of the
 * example: median 192 against 149 ms with the variables already set). An operator's own value of each wins.
 * Bun only (the shipped binary); Deno (the development runtime) runs V8, which has neither option.
 *
 * - Heap sizing. The engine sets how far the heap may grow before the next collection from the machine's
 *   RAM: below a quarter of it, twice the heap the last collection left, so on a machine with gigabytes a
 *   60 MiB heap grows to ~120 MiB of garbage before a full collection, whatever the agent needs. Told the
 *   machine has {@link HEAP_RAM_BYTES} (`forceRAMSize`; no cap: a larger heap still grows, by 1.24× instead
 *   of 2×), it collects sooner: at 10k Services the first sync's peak ~188 → ~171 MiB in iptables mode and
 *   ~243 → ~219 in nftables mode, settled RSS ~10–18 MiB lower, the sync no slower. 0 restores the default.
 * - No FTL tier (`useFTLJIT=0`). The engine's fourth tier compiles hot functions a second time, through a
 *   compiler whose own code (tens of MiB of the executable) and compile-time memory count in the agent's
 *   RSS. The agent's work is strings, maps and objects, where the third tier (DFG) already does well: at
 *   10k Services the nftables first sync's peak ~206–211 → ~188–190 MiB and iptables mode's ~159 → ~155,
 *   the syncs no slower; without the third tier too, decoding the lists took twice as long (bench/README.md
 *   has the figures). 1 restores it.
 */
import process from "node:process";

/** The environment variable through which Bun sets JavaScriptCore's `forceRAMSize` option. */
export const HEAP_RAM_ENV = "BUN_JSC_forceRAMSize";

/**
 * The RAM the runtime is told the machine has: 128 MiB. 64 MiB measured the same at 10k Services; the
 * runtime's default (the machine's RAM) ~16 MiB higher at the peak and ~10 MiB settled.
 */
export const HEAP_RAM_BYTES = 128 * 1024 * 1024;

/** The environment variable through which Bun sets JavaScriptCore's `useFTLJIT` option. */
export const FTL_JIT_ENV = "BUN_JSC_useFTLJIT";

/** Each option the agent runs with: its variable and value, in the order they are logged. */
export const ENGINE_OPTIONS: readonly { readonly env: string; readonly value: string }[] = [
  { env: HEAP_RAM_ENV, value: String(HEAP_RAM_BYTES) },
  { env: FTL_JIT_ENV, value: "0" },
];

/** Where a compiled Bun executable's own bundle lives in its `process.argv[1]`. */
const BUN_COMPILED_ROOT = "/$bunfs/";

/** The process as {@link engineOptionsExec} needs to see it. */
export interface ProcessView {
  /** Whether the runtime is Bun (whose engine reads the options). */
  readonly isBun: boolean;
  readonly env: Readonly<Record<string, string | undefined>>;
  /** `process.argv`: the runtime, the script (a `/$bunfs/` path in a compiled executable), the arguments. */
  readonly argv: readonly string[];
  /** `process.argv0`: the name the process was started under. */
  readonly argv0: string;
  /** `process.execPath`: the executable to run again. */
  readonly execPath: string;
}

/** An execve(2) of the same executable with the engine options in its environment. */
export interface EngineOptionsExec {
  readonly file: string;
  /** argv, argv[0] first. */
  readonly args: string[];
  readonly env: Record<string, string>;
}

/**
 * The exec that restarts this process with every {@link ENGINE_OPTIONS} variable set, or null when none
 * is needed: not Bun, or all are already set (by an operator, or by this exec: it runs once); only unset
 * ones are added. A compiled executable gets its own arguments back without the `/$bunfs/` script path the
 * runtime adds to argv; `bun main.ts` keeps its script.
 */
export function engineOptionsExec(p: ProcessView): EngineOptionsExec | null {
  if (!p.isBun) return null;
  const missing = ENGINE_OPTIONS.filter((o) => p.env[o.env] === undefined);
  if (missing.length === 0) return null;
  const compiled = (p.argv[1] ?? "").startsWith(BUN_COMPILED_ROOT);
  const rest = p.argv.slice(compiled ? 2 : 1);
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(p.env)) if (v !== undefined) env[k] = v;
  for (const o of missing) env[o.env] = o.value;
  return { file: p.execPath, args: [p.argv0, ...rest], env };
}

interface ExecveProcess {
  execve?(file: string, args: string[], env: Record<string, string>): never;
}

/**
 * Re-executes this process with the engine options when {@link engineOptionsExec} asks for it; on success
 * it does not return. Call before anything is opened or written (file descriptors without close-on-exec
 * and unflushed output would otherwise carry over or be lost). Returns null when nothing was needed, or
 * the reason it could not re-execute ("execve …: <error>"), for the caller to log once logging is set up:
 * the agent then runs with the engine's defaults.
 */
export function applyEngineOptions(): string | null {
  const plan = engineOptionsExec({
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
 * What the agent logs at -v=2 about the engine options it runs with: each variable and its value ("unset"
 * only where the re-exec could not run), or null off Bun.
 */
export function engineOptionsLogFields(): Record<string, string> | null {
  if ((globalThis as { Bun?: unknown }).Bun === undefined) return null;
  const fields: Record<string, string> = {};
  for (const o of ENGINE_OPTIONS) fields[o.env] = process.env[o.env] ?? "unset";
  return fields;
}
