/**
 * The only code that runs iptables binaries (iptables, iptables-save, iptables-restore and their ip6
 * twins). Everything above it talks to the narrow `IptablesRunner` interface, so unit tests hand in a fake
 * and e2e tests the real thing inside a network namespace (`commandPrefix: ["ip","netns","exec",ns]`).
 *
 * Mirrors upstream pkg/util/iptables/iptables.go: version-derived wait flags, `iptables-restore -w 5
 * -W 100000 --noflush --counters` with the payload on stdin, `iptables-save -t <table>`.
 */
import { accessSync, constants as fsConstants } from "node:fs";
import type { IPFamily } from "../types.ts";
import {
  type IptablesFeatures,
  iptablesFeatures,
  type IptablesVersion,
  MIN_CHECK_VERSION,
  parseIptablesVersion,
  versionAtLeast,
  WAIT_RESTORE_MIN_VERSION,
} from "./version.ts";
import { runInProcessGroup, type RunResult } from "../../runtime/process_groups.ts";

/** The tables edgeproxy reads or writes. */
export type IptablesTable = "nat" | "filter" | "mangle";

/** Outcome of one `iptables` invocation (a non-zero code is data, not an exception). */
export interface ExecResult {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/** Absolute paths of the three binaries a runner uses. */
export interface IptablesBinaries {
  readonly iptables: string;
  readonly save: string;
  readonly restore: string;
}

/** Host side of iptables for one IP family. */
export interface IptablesRunner {
  /** "IPv4" drives iptables*, "IPv6" ip6tables*. */
  readonly family: IPFamily;
  /** Parsed `iptables --version` (or the assumed minimum when it could not be parsed; see `versionNote`). */
  readonly version: IptablesVersion;
  /** Why `version` is assumed rather than detected; "" when it was detected. */
  readonly versionNote: string;
  /** Version-derived flags and capabilities. */
  readonly features: IptablesFeatures;
  /** Resolved absolute paths. */
  readonly binaries: IptablesBinaries;
  /**
   * `iptables-restore <restoreWaitFlags> --noflush --counters` with `payload` streamed to stdin: one
   * string, or chunks written one after the other with back-pressure (never joined; a line may not span
   * two chunks). Throws `RestoreError` on a non-zero exit, `IptablesCommandError` when the process cannot
   * run.
   */
  restore(payload: RestorePayload): Promise<void>;
  /** `iptables-save -t <table>`; throws `IptablesCommandError` on failure. */
  save(table: IptablesTable): Promise<string>;
  /**
   * `iptables-save -t <table>` with its output handed to `onLine` line by line as it arrives, never held
   * whole (a 10k-Service nat table is ~25 MB of text); throws like `save`.
   */
  saveLines(table: IptablesTable, onLine: (line: string) => void): Promise<void>;
  /** `iptables <args>` exactly as given (no wait flags added); throws only when it cannot be started. */
  exec(args: readonly string[]): Promise<ExecResult>;
  /**
   * `exec` with stdout handed to `onLine` line by line as it arrives instead of kept (the result's
   * `stdout` is ""): a 10k-rule chain listing then costs one pipe chunk of memory, not its whole text.
   */
  execLines(args: readonly string[], onLine: (line: string) => void): Promise<ExecResult>;
}

/**
 * An iptables-restore input: one string, or chunks of whole lines (each ending with "\n") whose
 * concatenation is the text: an array, or any re-iterable that yields the same chunks on every iteration
 * (e.g. a restore plan rendered lazily, so the whole text is never held; it is iterated again only to
 * find the line a failure blames).
 */
export type RestorePayload = string | Iterable<string>;

/** Options of `createIptablesRunner`. */
export interface IptablesRunnerOptions {
  family: IPFamily;
  /** Prepended to every command, e.g. ["ip", "netns", "exec", "ns1"]; its first word is resolved too. */
  commandPrefix?: readonly string[];
  /** Overrides (absolute paths, or names resolved in `searchDirs`), e.g. iptables-legacy binaries. */
  binaries?: Partial<IptablesBinaries>;
  /** Where bare names are looked up; default /usr/sbin, /sbin, /usr/bin (the binary may run with no PATH). */
  searchDirs?: readonly string[];
  /** Kill a command that runs longer than this (ms); default 300000 (upstream's -C timeout). 0 = never. */
  timeoutMs?: number;
}

/** Default search path for binaries. */
export const DEFAULT_SEARCH_DIRS: readonly string[] = Object.freeze(["/usr/sbin", "/sbin", "/usr/bin"]);

const DEFAULT_TIMEOUT_MS = 300_000;
/** The offending line is cut to this length inside error messages (rules can be long). */
const MAX_LINE_IN_MESSAGE = 400;

/** A binary could not be found, started, or exited non-zero where that is an error (save, version). */
export class IptablesCommandError extends Error {
  /** Exit code; -1 when the process did not start or was killed. */
  readonly exitCode: number;
  /** Captured standard error. */
  readonly stderr: string;
  /** The argv that was run (prefix included). */
  readonly argv: readonly string[];
  constructor(message: string, argv: readonly string[], exitCode: number, stderr: string) {
    super(message);
    this.name = "IptablesCommandError";
    this.argv = argv;
    this.exitCode = exitCode;
    this.stderr = stderr;
  }
}

/** What `parseRestoreFailure` extracts from a failed iptables-restore. */
export interface RestoreFailure {
  /** 1-based payload line iptables-restore blamed, or null when it named none. */
  readonly line: number | null;
  /** Text of that payload line, or null. */
  readonly lineText: string | null;
  /** The meaningful part of stderr, one line, prefixes stripped. */
  readonly summary: string;
  /**
   * Transactions (COMMIT sections) of the payload that ended before the failing line; each COMMIT is
   * its own kernel transaction, so these were applied. null when the line is unknown.
   */
  readonly committedTransactions: number | null;
}

/** iptables-restore exited non-zero. The message names family, line, line text and stderr's gist. */
export class RestoreError extends Error {
  /** Family of the runner that failed. */
  readonly family: IPFamily;
  /** Exit code of iptables-restore (-1 when killed by a signal or timeout). */
  readonly exitCode: number;
  /** Full standard error. */
  readonly stderr: string;
  /** 1-based offending payload line, or null. */
  readonly line: number | null;
  /** The offending payload line's text, or null. */
  readonly lineText: string | null;
  /** See `RestoreFailure.committedTransactions`. */
  readonly committedTransactions: number | null;
  constructor(family: IPFamily, exitCode: number, stderr: string, payload: RestorePayload) {
    const f = parseRestoreFailure(stderr, payload);
    const cmd = family === "IPv6" ? "ip6tables-restore" : "iptables-restore";
    const summary = f.summary !== "" ? f.summary : `exit code ${exitCode}`;
    const where = f.line === null
      ? ""
      : `line ${f.line}: ${truncate(f.lineText ?? "", MAX_LINE_IN_MESSAGE)}: `;
    super(`${cmd} failed (${family}): ${where}${summary}`);
    this.name = "RestoreError";
    this.family = family;
    this.exitCode = exitCode;
    this.stderr = stderr;
    this.line = f.line;
    this.lineText = f.lineText;
    this.committedTransactions = f.committedTransactions;
  }
}

function truncate(s: string, n: number): string {
  return s.length <= n ? s : `${s.slice(0, n)}…`;
}

/** stderr lines that carry no information about the failure. */
function isNoiseLine(l: string): boolean {
  return l === "" || l.startsWith("Ignoring deprecated --wait-interval option") || l.startsWith("Try `") ||
    l.startsWith("Error occurred at line");
}

const PROGRAM_PREFIX = /^ip6?tables(?:-legacy|-nft)?-restore(?: v[0-9.]+(?: \([^)]*\))?)?:\s*/;
const LINE_PREFIX = /^line \d+(?: failed)?:?\s*/;

/**
 * Extracts the blamed line and a one-line summary from iptables-restore's stderr. Handles the formats
 * of iptables 1.8 nft and legacy: "line N: CHAIN_DEL failed (...)", "line N failed",
 * "Error occurred at line: N", "COMMIT expected at line N". nft reports a jump to a missing chain at the
 * COMMIT line; then the rule in that transaction that jumps to the named chain is blamed instead.
 */
export function parseRestoreFailure(stderr: string, payload: RestorePayload): RestoreFailure {
  const lines = stderr.split("\n").map((l) => l.trimEnd());
  let summary = "";
  for (const raw of lines) {
    if (isNoiseLine(raw)) continue;
    const s = raw.replace(PROGRAM_PREFIX, "").replace(LINE_PREFIX, "").trim();
    if (s !== "") {
      summary = s;
      break;
    }
  }
  const m = /^line (\d+):/m.exec(stderr) ?? /line (\d+) failed/.exec(stderr) ??
    /Error occurred at line: (\d+)/.exec(stderr) ?? /at line (\d+)/.exec(stderr);
  if (m === null) return { line: null, lineText: null, summary, committedTransactions: null };
  let line = Number(m[1]);
  const index = indexPayloadLines(payload, line);
  let lineText = index.text;
  const missing = /Chain '([^']+)' does not exist/.exec(stderr);
  if (lineText === "COMMIT" && missing !== null) {
    const blamed = findJumpInTransaction(index.before, missing[1]);
    if (blamed !== null) {
      line = blamed.line;
      lineText = blamed.text;
    }
  }
  let committed = 0;
  for (let i = 0; i < index.before.length && i < line - 1; i++) if (index.before[i] === "COMMIT") committed++;
  return { line, lineText, summary, committedTransactions: committed };
}

/**
 * Payload line `n` (1-based) and the lines before it, scanning no further than needed. Chunks are read
 * in order; a chunk's last line is complete (no line spans two chunks).
 */
function indexPayloadLines(payload: RestorePayload, n: number): { text: string | null; before: string[] } {
  const before: string[] = [];
  let i = 1;
  for (const chunk of typeof payload === "string" ? [payload] : payload) {
    let start = 0;
    while (start < chunk.length) {
      const nl = chunk.indexOf("\n", start);
      const end = nl === -1 ? chunk.length : nl;
      if (i === n) return { text: chunk.slice(start, end), before };
      before.push(chunk.slice(start, end));
      i++;
      start = end + 1;
    }
  }
  return { text: null, before };
}

/** Last rule in the current transaction (after the latest "*table") that jumps/goes to `chain`. */
function findJumpInTransaction(before: string[], chain: string): { line: number; text: string } | null {
  for (let i = before.length - 1; i >= 0; i--) {
    const l = before[i];
    if (l.startsWith("*")) break;
    if (
      l.endsWith(` -j ${chain}`) || l.includes(` -j ${chain} `) || l.endsWith(` -g ${chain}`) ||
      l.includes(` -g ${chain} `)
    ) {
      return { line: i + 1, text: l };
    }
  }
  return null;
}

/**
 * Upstream IsNotFoundError: stderr of an `iptables` call that failed because a chain, rule or target
 * does not exist (as opposed to a real failure). Covers legacy and nft wordings.
 */
export function isNotFoundError(stderr: string): boolean {
  return stderr.includes("No chain/target/match by that name") ||
    stderr.includes("No such file or directory") ||
    stderr.includes("does a matching rule exist") || stderr.includes("does not exist");
}

/** Upstream makeFullArgs with the wait flags in front: `<wait> <op> <chain> -t <table> <args…>`. */
export function iptablesArgs(
  runner: Pick<IptablesRunner, "features">,
  op: string,
  table: IptablesTable,
  chain: string,
  args: readonly string[] = [],
): string[] {
  return [...runner.features.waitFlags, op, chain, "-t", table, ...args];
}

/** First executable `name` in `dirs`; an absolute path is checked as is. */
export function resolveBinary(name: string, dirs: readonly string[] = DEFAULT_SEARCH_DIRS): string {
  const candidates = name.startsWith("/") ? [name] : dirs.map((d) => `${d}/${name}`);
  for (const c of candidates) {
    try {
      accessSync(c, fsConstants.X_OK);
      return c;
    } catch {
      // not here; try the next directory
    }
  }
  throw new IptablesCommandError(
    name.startsWith("/") ? `${name} is not executable` : `${name} not found in ${dirs.join(", ")}`,
    [name],
    -1,
    "",
  );
}

interface RunOutput {
  code: number;
  signal: string | null;
  stdout: Buffer;
  stderr: string;
}

/**
 * Runs argv with the one spawner (own process group, stdin streamed, C locale); never rejects for a
 * non-zero exit. With `onStdoutLine`, stdout is streamed to it line by line and not kept. A kill is noted
 * at the end of stderr, where error messages pick it up.
 */
async function runProcess(
  argv: readonly string[],
  input: RestorePayload | null,
  timeoutMs: number,
  onStdoutLine?: (line: string) => void,
): Promise<RunOutput> {
  let r: RunResult;
  try {
    r = await runInProcessGroup(argv, {
      env: { ...process.env, LC_ALL: "C" },
      stdin: input,
      timeoutMs,
      maxStderrChars: Infinity, // RestoreError keeps it whole
      onStdoutLine,
    });
  } catch (e) {
    throw new IptablesCommandError((e as Error).message, argv, -1, "");
  }
  let stderr = r.stderr;
  if (r.killed === "timeout") stderr += `\nkilled after ${timeoutMs} ms`;
  else if (r.signal !== null) stderr += `\nkilled by ${r.signal}`; // e.g. its process group, at shutdown
  return { code: r.code ?? -1, signal: r.signal, stdout: r.stdout, stderr };
}

class RealIptablesRunner implements IptablesRunner {
  constructor(
    readonly family: IPFamily,
    readonly version: IptablesVersion,
    readonly versionNote: string,
    readonly features: IptablesFeatures,
    readonly binaries: IptablesBinaries,
    private readonly prefix: readonly string[],
    private readonly timeoutMs: number,
  ) {}

  async restore(payload: RestorePayload): Promise<void> {
    const argv = [
      ...this.prefix,
      this.binaries.restore,
      ...this.features.restoreWaitFlags,
      "--noflush",
      "--counters",
    ];
    const r = await runProcess(argv, payload, this.timeoutMs);
    if (r.code !== 0 || r.signal !== null) throw new RestoreError(this.family, r.code, r.stderr, payload);
  }

  async save(table: IptablesTable): Promise<string> {
    return (await this.#save(table)).stdout.toString("utf8");
  }

  async saveLines(table: IptablesTable, onLine: (line: string) => void): Promise<void> {
    await this.#save(table, onLine);
  }

  async #save(table: IptablesTable, onLine?: (line: string) => void): Promise<RunOutput> {
    const argv = [...this.prefix, this.binaries.save, "-t", table];
    const r = await runProcess(argv, null, this.timeoutMs, onLine);
    if (r.code !== 0 || r.signal !== null) {
      throw new IptablesCommandError(
        `${argv.join(" ")} failed (exit ${r.code}): ${firstMeaningfulLine(r.stderr)}`,
        argv,
        r.code,
        r.stderr,
      );
    }
    return r;
  }

  async exec(args: readonly string[]): Promise<ExecResult> {
    const argv = [...this.prefix, this.binaries.iptables, ...args];
    const r = await runProcess(argv, null, this.timeoutMs);
    return { code: r.code, stdout: r.stdout.toString("utf8"), stderr: r.stderr };
  }

  async execLines(args: readonly string[], onLine: (line: string) => void): Promise<ExecResult> {
    const argv = [...this.prefix, this.binaries.iptables, ...args];
    const r = await runProcess(argv, null, this.timeoutMs, onLine);
    return { code: r.code, stdout: "", stderr: r.stderr };
  }
}

/** First stderr line that is not wait-interval noise (for one-line error messages). */
export function firstMeaningfulLine(stderr: string): string {
  for (const l of stderr.split("\n")) {
    const t = l.trim();
    if (!isNoiseLine(t)) return t;
  }
  return "";
}

/**
 * Resolves the binaries for `family`, probes `iptables --version` (and `iptables-restore --version` below
 * 1.6.2, as upstream), and returns a runner. Throws `IptablesCommandError` when a binary is missing or
 * cannot be started. An unparsable version is not fatal: like upstream, 1.4.11 is assumed and
 * `versionNote` says so.
 */
export async function createIptablesRunner(opts: IptablesRunnerOptions): Promise<IptablesRunner> {
  const dirs = opts.searchDirs ?? DEFAULT_SEARCH_DIRS;
  const v6 = opts.family === "IPv6";
  const binaries: IptablesBinaries = {
    iptables: resolveBinary(opts.binaries?.iptables ?? (v6 ? "ip6tables" : "iptables"), dirs),
    save: resolveBinary(opts.binaries?.save ?? (v6 ? "ip6tables-save" : "iptables-save"), dirs),
    restore: resolveBinary(opts.binaries?.restore ?? (v6 ? "ip6tables-restore" : "iptables-restore"), dirs),
  };
  const prefix = opts.commandPrefix && opts.commandPrefix.length > 0
    ? [resolveBinary(opts.commandPrefix[0], dirs), ...opts.commandPrefix.slice(1)]
    : [];
  const timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;

  const vr = await runProcess([...prefix, binaries.iptables, "--version"], null, timeoutMs);
  const vtext = `${vr.stdout.toString("utf8")}${vr.stderr}`;
  let version = vr.code === 0 ? parseIptablesVersion(vtext) : null;
  let versionNote = "";
  if (version === null) {
    versionNote = `could not read the version of ${binaries.iptables} (exit ${vr.code}: ${
      firstMeaningfulLine(vtext)
    }); assuming ${MIN_CHECK_VERSION.join(".")}`;
    version = { parts: [...MIN_CHECK_VERSION], text: MIN_CHECK_VERSION.join("."), backend: "unknown" };
  }
  let restoreAnswers = true;
  if (!versionAtLeast(version.parts, WAIT_RESTORE_MIN_VERSION)) {
    const rr = await runProcess([...prefix, binaries.restore, "--version"], "", timeoutMs);
    restoreAnswers = rr.code === 0 &&
      parseIptablesVersion(`${rr.stdout.toString("utf8")}${rr.stderr}`) !== null;
  }
  return new RealIptablesRunner(
    opts.family,
    version,
    versionNote,
    iptablesFeatures(version, restoreAnswers),
    binaries,
    prefix,
    timeoutMs,
  );
}
