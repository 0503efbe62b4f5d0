/**
 * Child processes the agent must be able to end at shutdown, whatever they are doing. Each is started in
 * its own process group (`detached`, i.e. setsid), so one kill of the group also ends anything it started
 * itself, and a Ctrl-C at a terminal reaches only the agent, which then decides. Every running group is
 * tracked until its leader exits; `killProcessGroups` ends them all. (An iptables-restore transaction is
 * atomic: killing one leaves the rules as they were.)
 */
import {
  type ChildProcess,
  type ChildProcessWithoutNullStreams,
  spawn,
  type SpawnOptionsWithoutStdio,
} from "node:child_process";
import process from "node:process";
import { Buffer } from "node:buffer";
import type { Writable } from "node:stream";

/** Running children (a ChildProcess, or a pid holder for Bun.spawn's), and whether each leads its own group. */
const live = new Map<{ readonly pid?: number }, boolean>();
let exitHookInstalled = false;

function installExitHook(): void {
  if (exitHookInstalled) return;
  // However the process ends (a fatal error included), no tracked group outlives it.
  exitHookInstalled = true;
  process.on("exit", () => killProcessGroups());
}

/** Tracks a child that leads its own process group until `exited` settles (Bun.spawn's children). */
function trackPid(handle: { readonly pid: number }, exited: Promise<unknown>): void {
  installExitHook();
  live.set(handle, true);
  const untrack = () => live.delete(handle);
  exited.then(untrack, untrack);
}

/**
 * Tracks `child` until it exits, so that `killProcessGroups` ends it: its whole process group when
 * `leadsGroup` (it was spawned `detached`), else the child alone.
 */
export function trackChildProcess(child: ChildProcess, leadsGroup = false): ChildProcess {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return child;
  installExitHook();
  live.set(child, leadsGroup);
  child.once("exit", () => live.delete(child));
  child.once("error", () => live.delete(child));
  return child;
}

/**
 * `spawn(command, args, opts)` with piped stdio, in a new process group, tracked for
 * {@link killProcessGroups}. Throws like `spawn`.
 */
export function spawnInProcessGroup(
  command: string,
  args: readonly string[],
  opts: Omit<SpawnOptionsWithoutStdio, "detached" | "stdio"> = {},
): ChildProcessWithoutNullStreams {
  const child = spawn(command, args, { ...opts, stdio: ["pipe", "pipe", "pipe"], detached: true });
  trackChildProcess(child, true);
  return child;
}

/** Sends `signal` to the process group `child` leads (started detached); ignores one that is gone. */
export function killProcessGroup(child: { readonly pid?: number }, signal: NodeJS.Signals = "SIGKILL"): void {
  if (child.pid === undefined) return;
  try {
    process.kill(-child.pid, signal);
  } catch {
    // Already gone.
  }
}

/** Number of tracked children still running. */
export function liveChildProcesses(): number {
  return live.size;
}

/**
 * Sends `signal` (default SIGKILL) to every tracked child: to its whole process group when it leads one.
 * Returns how many were signalled.
 */
export function killProcessGroups(signal: NodeJS.Signals = "SIGKILL"): number {
  let n = 0;
  for (const [child, leadsGroup] of live) {
    const pid = child.pid;
    if (pid === undefined) continue;
    try {
      process.kill(leadsGroup ? -pid : pid, signal);
      n++;
    } catch {
      // Already gone; its exit event untracks it.
    }
  }
  return n;
}

/** What {@link runInProcessGroup} feeds a child on stdin: one string, or chunks written in order. */
export type ProcessInput = string | Iterable<string>;

/** Options of {@link runInProcessGroup}. */
export interface RunOptions {
  /** The child's whole environment (default: ours). */
  readonly env?: NodeJS.ProcessEnv;
  /** Written to stdin with back-pressure, then stdin is closed; none: stdin is closed at once. */
  readonly stdin?: ProcessInput | null;
  /**
   * The command opens its input by name (`conntrack -R -` opens /dev/stdin). Bun hands a child's stdin over
   * as a socket, which /dev/stdin cannot open (ENXIO); with this set Bun gets the input as one in-memory
   * file instead (whole, so for small inputs only). Other runtimes pass a pipe, which opens by name.
   */
  readonly stdinByPath?: boolean;
  /** Kills the group after this many ms; 0 or none: never. */
  readonly timeoutMs?: number;
  /** Aborting kills the group; already aborted: rejects with its reason and runs nothing. */
  readonly signal?: AbortSignal;
  /**
   * Streams stdout as lines (UTF-8, "\n"-separated, a last unterminated line included) instead of keeping
   * it: `stdout` stays empty and `stdoutLines` counts them. Big outputs (conntrack listings) never sit in
   * memory.
   */
  readonly onStdoutLine?: (line: string) => void;
  /** Kills the group once stdout (kept, not streamed) exceeds this many bytes. Default: no cap. */
  readonly maxStdoutBytes?: number;
  /** Stderr stops being kept once this many characters are held (default 64 KiB). */
  readonly maxStderrChars?: number;
}

/** Outcome of {@link runInProcessGroup}; a non-zero exit is data, not an exception. */
export interface RunResult {
  /** Exit code, or null when a signal ended the child. */
  readonly code: number | null;
  /** The signal that ended the child, or null. */
  readonly signal: string | null;
  /** Why we killed the group, or null when we did not. */
  readonly killed: "timeout" | "abort" | "output" | null;
  /** Stdout, unless it was streamed to `onStdoutLine`. */
  readonly stdout: Buffer;
  /** Lines streamed to `onStdoutLine` (0 when stdout was kept). */
  readonly stdoutLines: number;
  /** Stderr (UTF-8), capped at `maxStderrChars`. */
  readonly stderr: string;
  /**
   * One description of how it ended: "exit status N", "killed by SIGTERM", "timed out after N ms
   * (process group killed)", "aborted", or "output larger than N bytes".
   */
  readonly exit: string;
}

/** The child could not be started (missing binary, no permission, ...). `code` is the errno name. */
export class SpawnError extends Error {
  /** errno name such as "ENOENT", or undefined. */
  readonly code: string | undefined;
  /** The argv that could not run. */
  readonly argv: readonly string[];
  constructor(argv: readonly string[], cause: NodeJS.ErrnoException) {
    super(`${argv.join(" ")}: cannot run: ${cause.message}`, { cause });
    this.name = "SpawnError";
    this.argv = argv;
    this.code = cause.code;
  }
}

/** Stdin is written in slices of this many UTF-16 units, honouring back-pressure. */
const WRITE_CHUNK = 1 << 20;

/**
 * The one way the agent runs a command: `argv` in its own tracked process group (a timeout, an abort, an
 * output cap or the agent's shutdown kills the group with anything it started), stdin fed and closed,
 * stdout and stderr collected with caps. Resolves with the outcome whatever the exit status; rejects with
 * {@link SpawnError} when the command cannot be started.
 *
 * Under Bun a command without stdin runs through `Bun.spawn`: Bun's `node:child_process` layer leaves
 * ~0.2 MiB of garbage per process (stream objects and their buffers), which the drift check's ~45
 * `iptables -S` calls every syncPeriod turned into a 10 MiB RSS bump. Commands fed on stdin (restores)
 * keep `node:child_process`, whose writable stream gives the back-pressure they need.
 */
export function runInProcessGroup(argv: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
  if (opts.signal?.aborted) return Promise.reject(opts.signal.reason);
  const input = opts.stdin ?? "";
  const bun = (globalThis as { Bun?: BunSpawnApi }).Bun;
  if (bun !== undefined && input === "") return runWithBunSpawn(bun, argv, opts, null);
  if (bun !== undefined && opts.stdinByPath === true) {
    return runWithBunSpawn(bun, argv, opts, new Blob(typeof input === "string" ? [input] : [...input]));
  }
  return runWithChildProcess(argv, opts, input);
}

/** The part of Bun's API runWithBunSpawn uses. */
interface BunSpawnApi {
  spawn(cmd: string[], opts: {
    env?: NodeJS.ProcessEnv;
    stdin: "ignore" | Blob;
    stdout: "pipe";
    stderr: "pipe";
    detached: true;
  }): BunSubprocess;
}

interface BunSubprocess {
  readonly pid: number;
  readonly exited: Promise<number>;
  readonly exitCode: number | null;
  readonly signalCode: string | null;
  readonly stdout: ReadableStream<Uint8Array>;
  readonly stderr: ReadableStream<Uint8Array>;
}

/** Timeout, abort and output-cap kills of one run, and how the run is described once it ended. */
class RunControl {
  killed: RunResult["killed"] = null;
  readonly #timer: ReturnType<typeof setTimeout> | null;
  readonly #onAbort: () => void;

  constructor(private readonly opts: RunOptions, private readonly killGroup: () => void) {
    const timeoutMs = opts.timeoutMs ?? 0;
    this.#timer = timeoutMs > 0 ? setTimeout(() => this.kill("timeout"), timeoutMs) : null;
    this.#onAbort = () => this.kill("abort");
    opts.signal?.addEventListener("abort", this.#onAbort, { once: true });
  }

  kill(why: NonNullable<RunResult["killed"]>): void {
    this.killed ??= why;
    this.killGroup();
  }

  /** Stops the timer and the abort listener. */
  done(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.opts.signal?.removeEventListener("abort", this.#onAbort);
  }

  /** See RunResult.exit. */
  exit(code: number | null, signal: string | null): string {
    return this.killed === "timeout"
      ? `timed out after ${this.opts.timeoutMs ?? 0} ms (process group killed)`
      : this.killed === "abort"
      ? "aborted"
      : this.killed === "output"
      ? `output larger than ${this.opts.maxStdoutBytes} bytes`
      : signal !== null
      ? `killed by ${signal}`
      : `exit status ${code}`;
  }
}

/** A child's stdout (kept under its cap, or streamed as lines) and stderr (kept up to its cap). */
class RunOutput {
  readonly #out: Buffer[] = [];
  #outBytes = 0;
  #lines = 0;
  #partial = "";
  readonly #lineDecoder = new TextDecoder();
  readonly #errDecoder = new TextDecoder();
  #stderr = "";

  constructor(private readonly opts: RunOptions, private readonly control: RunControl) {}

  stdout(b: Uint8Array): void {
    const onLine = this.opts.onStdoutLine;
    if (onLine !== undefined) {
      const parts = (this.#partial + this.#lineDecoder.decode(b, { stream: true })).split("\n");
      this.#partial = parts.pop() ?? "";
      this.#lines += parts.length;
      for (const line of parts) onLine(line);
      return;
    }
    this.#outBytes += b.length;
    if (this.#outBytes > (this.opts.maxStdoutBytes ?? Infinity)) this.control.kill("output");
    else this.#out.push(Buffer.from(b.buffer, b.byteOffset, b.length));
  }

  stderr(b: Uint8Array): void {
    if (this.#stderr.length < (this.opts.maxStderrChars ?? 64 * 1024)) {
      this.#stderr += this.#errDecoder.decode(b, { stream: true });
    }
  }

  result(code: number | null, signal: string | null): RunResult {
    const onLine = this.opts.onStdoutLine;
    if (onLine !== undefined) {
      const last = this.#partial + this.#lineDecoder.decode();
      if (last !== "") {
        this.#lines++;
        onLine(last);
      }
    }
    return {
      code,
      signal,
      killed: this.control.killed,
      stdout: Buffer.concat(this.#out),
      stdoutLines: this.#lines,
      stderr: this.#stderr,
      exit: this.control.exit(code, signal),
    };
  }
}

/** runInProcessGroup through Bun.spawn: no stdin, or all of it at once (Bun backs a Blob with a memfd). */
async function runWithBunSpawn(
  bun: BunSpawnApi,
  argv: readonly string[],
  opts: RunOptions,
  input: Blob | null,
): Promise<RunResult> {
  let proc: BunSubprocess;
  try {
    proc = bun.spawn([...argv], {
      ...(opts.env === undefined ? {} : { env: opts.env }),
      stdin: input ?? "ignore",
      stdout: "pipe",
      stderr: "pipe",
      detached: true,
    });
  } catch (e) {
    throw new SpawnError(argv, e as NodeJS.ErrnoException);
  }
  const handle = { pid: proc.pid };
  trackPid(handle, proc.exited);
  const control = new RunControl(opts, () => killProcessGroup(handle));
  const output = new RunOutput(opts, control);
  try {
    await Promise.all([
      drain(proc.stdout, (b) => output.stdout(b)),
      drain(proc.stderr, (b) => output.stderr(b)),
      proc.exited,
    ]);
  } finally {
    control.done();
  }
  return output.result(proc.signalCode === null ? proc.exitCode : null, proc.signalCode);
}

/** Reads a stream to its end. */
async function drain(stream: ReadableStream<Uint8Array>, onChunk: (b: Uint8Array) => void): Promise<void> {
  const reader = stream.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    onChunk(value);
  }
}

/** runInProcessGroup through node:child_process. */
function runWithChildProcess(
  argv: readonly string[],
  opts: RunOptions,
  input: ProcessInput,
): Promise<RunResult> {
  return new Promise((resolve, reject) => {
    let child: ChildProcessWithoutNullStreams;
    try {
      child = spawnInProcessGroup(argv[0], argv.slice(1), opts.env === undefined ? {} : { env: opts.env });
    } catch (e) {
      reject(new SpawnError(argv, e as NodeJS.ErrnoException));
      return;
    }
    const control = new RunControl(opts, () => killProcessGroup(child));
    const output = new RunOutput(opts, control);
    child.stdout.on("data", (b: Buffer) => output.stdout(b));
    child.stderr.on("data", (b: Buffer) => output.stderr(b));

    let failed = false;
    child.on("error", (e: NodeJS.ErrnoException) => {
      failed = true;
      control.done();
      reject(new SpawnError(argv, e));
    });
    child.on("close", (code: number | null, signal: string | null) => {
      if (failed) return;
      control.done();
      resolve(output.result(code, signal));
    });
    // A child that exits early closes its stdin: EPIPE is expected then, the exit status tells the story.
    child.stdin.on("error", () => {});
    if (input === "") child.stdin.end();
    else void writeAll(child.stdin, typeof input === "string" ? [input] : input);
  });
}

/**
 * Writes the chunks in order, each in bounded slices, waiting for 'drain' so tens of MB never sit in one
 * buffer copy (and a chunked input is never joined).
 */
async function writeAll(stdin: Writable, chunks: Iterable<string>): Promise<void> {
  for (const s of chunks) {
    if (!(await writeString(stdin, s))) return;
  }
  stdin.end();
}

/** Writes one string in bounded slices with back-pressure; false when stdin went away. */
async function writeString(stdin: Writable, s: string): Promise<boolean> {
  let off = 0;
  while (off < s.length) {
    let end = Math.min(off + WRITE_CHUNK, s.length);
    // Never split a surrogate pair across two writes.
    const c = s.charCodeAt(end - 1);
    if (end < s.length && c >= 0xd800 && c <= 0xdbff) end--;
    const ok = stdin.write(off === 0 && end === s.length ? s : s.slice(off, end));
    off = end;
    if (stdin.destroyed) return false;
    if (!ok) {
      await new Promise<void>((r) => {
        const done = () => {
          stdin.removeListener("drain", done);
          stdin.removeListener("close", done);
          stdin.removeListener("error", done);
          r();
        };
        stdin.once("drain", done);
        stdin.once("close", done);
        stdin.once("error", done);
      });
      if (stdin.destroyed) return false;
    }
  }
  return true;
}
