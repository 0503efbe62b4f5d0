/**
 * The compiled edgeproxy agent (dist/edgeproxy, built by `bash compile.sh`) as a process inside a network
 * namespace: start it, keep its log for failure messages, stop it by its pid, and run one-shot commands
 * (`--cleanup`) with it.
 */
import { accessSync, constants as fsConstants } from "node:fs";
import { fileURLToPath } from "node:url";
import type { ChildProcess } from "node:child_process";
import process from "node:process";
import type { CmdResult, Netns, NetnsScope } from "./netns.ts";

/**
 * The agent binary the e2e tests run: $EDGEPROXY_E2E_BINARY when set (e.g. a build elsewhere), else
 * dist/edgeproxy of this checkout.
 */
export const EDGEPROXY_BINARY: string = process.env.EDGEPROXY_E2E_BINARY ||
  fileURLToPath(new URL("../../dist/edgeproxy", import.meta.url));

/** "" when `binary` exists and is executable, else a reason for a skip message. */
export function agentBinaryMissingReason(binary: string = EDGEPROXY_BINARY): string {
  try {
    accessSync(binary, fsConstants.X_OK);
    return "";
  } catch {
    return `${binary} is missing (build it with \`bash compile.sh\`)`;
  }
}

/** How the agent process ended. */
export interface AgentExit {
  readonly code: number | null;
  readonly signal: string | null;
}

/** A running (or ended) agent process. */
export interface E2eAgent {
  /** The agent's arguments (after the binary). */
  readonly args: readonly string[];
  readonly pid: number;
  /** Everything the agent wrote to stdout and stderr so far (the last 4 MiB). */
  logs(): string;
  /** The last `lines` lines of the log, for assertion messages. */
  tail(lines?: number): string;
  /** null while it runs. */
  exit(): AgentExit | null;
  /** Resolves when the process has ended. */
  readonly exited: Promise<AgentExit>;
  /** Sends `signal` (default SIGTERM) to its pid, SIGKILL after `timeoutMs` (default 5000); resolves on exit. */
  stop(signal?: NodeJS.Signals, timeoutMs?: number): Promise<AgentExit>;
}

const LOG_LIMIT = 4 * 1024 * 1024;

/**
 * Starts `binary args...` inside `ns` as a child owned by `scope` (killed by `scope.cleanup()` if still
 * running). `ip netns exec` execs the binary, so the child's pid is the agent's.
 */
export function startAgentProcess(
  scope: NetnsScope,
  ns: Netns,
  args: readonly string[],
  binary: string = EDGEPROXY_BINARY,
): E2eAgent {
  const child: ChildProcess = scope.spawn(ns, [binary, ...args]);
  let log = "";
  const append = (b: Buffer) => {
    log += b.toString("utf8");
    if (log.length > LOG_LIMIT) log = log.slice(log.length - LOG_LIMIT);
  };
  child.stdout!.on("data", append);
  child.stderr!.on("data", append);
  let ended: AgentExit | null = null;
  const exited = new Promise<AgentExit>((resolve) => {
    child.once("exit", (code, signal) => {
      ended = { code, signal };
      resolve(ended);
    });
  });
  return {
    args: [...args],
    pid: child.pid ?? -1,
    logs: () => log,
    tail: (lines = 40) => log.trimEnd().split("\n").slice(-lines).join("\n"),
    exit: () => ended,
    exited,
    stop: async (signal = "SIGTERM", timeoutMs = 5000) => {
      if (ended) return ended;
      // process.kill, not child.kill: Deno's child.kill() makes the exit event report the signal it sent
      // even when the child handled it and exited 0 (measured with a shell that traps TERM).
      const send = (sig: NodeJS.Signals) => {
        try {
          if (!ended && child.pid !== undefined) process.kill(child.pid, sig);
        } catch {
          // already gone
        }
      };
      send(signal);
      const t = setTimeout(() => send("SIGKILL"), timeoutMs);
      const r = await exited;
      clearTimeout(t);
      return r;
    },
  };
}

/** Runs `binary args...` inside `ns` to completion (e.g. `--cleanup`). */
export function runAgentOnce(
  ns: Netns,
  args: readonly string[],
  opts: { binary?: string; timeoutMs?: number } = {},
): Promise<CmdResult> {
  return ns.exec([opts.binary ?? EDGEPROXY_BINARY, ...args], { timeoutMs: opts.timeoutMs ?? 30000 });
}
