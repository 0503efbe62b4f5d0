/**
 * SIGTERM/SIGINT handling with a bounded shutdown. main.ts installs the handlers first thing, so a signal
 * at any moment is handled (the runtime's default action would end the process "killed by SIGTERM").
 *
 * - Before the agent takes over (flag parsing, --help, start-up checks), a signal exits 0 at once: there
 *   is nothing to wind down.
 * - Once the agent has taken over, the first signal resolves `requested` and the agent stops in order
 *   (sources, proxiers, the last state-cache write, servers; rules stay in place). A backstop guarantees
 *   the bound whatever is in flight: after `graceMs`, or at a second signal, every tracked child process
 *   group is killed and the process exits 0.
 */
import process from "node:process";
import { killProcessGroups } from "../runtime/process_groups.ts";

/** The whole shutdown, from the signal to the exit, stays under this bound (ms). */
export const SHUTDOWN_BOUND_MS = 5000;
/** When the backstop ends the process if the orderly shutdown has not (ms after the signal). */
export const SHUTDOWN_BACKSTOP_MS = 4500;

/** The installed handlers. */
export interface ShutdownSignals {
  /** Resolves with the signal's name ("SIGTERM", "SIGINT") when the agent should stop. */
  readonly requested: Promise<string>;
  /** The first signal received, or null. */
  readonly signal: string | null;
  /** From now on a signal starts the agent's orderly shutdown (bounded by the backstop) instead of exiting at once. */
  takeOver(): void;
}

/** What the handlers act on; the defaults are the real process. Injected by tests. */
export interface ShutdownEnv {
  on(signal: "SIGTERM" | "SIGINT", handler: () => void): void;
  exit(code: number): void;
  /** Kills the tracked child process groups (default: killProcessGroups). */
  killChildren(): void;
  /** One line about what happens, e.g. on stderr. */
  note(message: string): void;
  backstopMs: number;
}

let installed: ShutdownSignals | null = null;

function defaultEnv(): ShutdownEnv {
  return {
    on: (signal, handler) => process.on(signal, handler),
    exit: (code) => process.exit(code),
    killChildren: () => killProcessGroups("SIGKILL"),
    note: (message) => process.stderr.write(`${message}\n`),
    backstopMs: SHUTDOWN_BACKSTOP_MS,
  };
}

/** Creates handlers on `env` (tests); the agent uses {@link installShutdownSignals}. */
export function createShutdownSignals(env: ShutdownEnv): ShutdownSignals {
  let signal: string | null = null;
  let agentRunning = false;
  let resolve: (sig: string) => void = () => {};
  const requested = new Promise<string>((r) => (resolve = r));
  const exitNow = (why: string) => {
    env.note(why);
    env.killChildren();
    env.exit(0);
  };
  const onSignal = (sig: string) => {
    if (!agentRunning) {
      signal ??= sig;
      exitNow(`received ${sig} before the agent started: exiting`);
      return;
    }
    if (signal !== null) {
      exitNow(`received ${sig} again while shutting down: killing child processes and exiting now`);
      return;
    }
    signal = sig;
    // Kept referenced: it must fire even if the orderly path waits on something that never settles.
    setTimeout(
      () =>
        exitNow(
          `shutdown did not finish within ${env.backstopMs}ms of ${sig}: killing child processes and exiting (rules stay in place)`,
        ),
      env.backstopMs,
    );
    resolve(sig);
  };
  env.on("SIGTERM", () => onSignal("SIGTERM"));
  env.on("SIGINT", () => onSignal("SIGINT"));
  return {
    requested,
    get signal() {
      return signal;
    },
    takeOver: () => {
      agentRunning = true;
    },
  };
}

/**
 * Installs the process's SIGTERM/SIGINT handlers once and returns them; later calls return the same
 * handlers (main.ts installs them first thing, the agent picks them up).
 */
export function installShutdownSignals(): ShutdownSignals {
  installed ??= createShutdownSignals(defaultEnv());
  return installed;
}
