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

/** Running children, and whether each leads its own process group. */
const live = new Map<ChildProcess, boolean>();
let exitHookInstalled = false;

/**
 * Tracks `child` until it exits, so that `killProcessGroups` ends it: its whole process group when
 * `leadsGroup` (it was spawned `detached`), else the child alone.
 */
export function trackChildProcess(child: ChildProcess, leadsGroup = false): ChildProcess {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return child;
  if (!exitHookInstalled) {
    // However the process ends (a fatal error included), no tracked group outlives it.
    exitHookInstalled = true;
    process.on("exit", () => killProcessGroups());
  }
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

/** Sends `signal` to the process group `child` leads (started by spawnInProcessGroup); ignores one that is gone. */
export function killProcessGroup(child: ChildProcess, signal: NodeJS.Signals = "SIGKILL"): void {
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
