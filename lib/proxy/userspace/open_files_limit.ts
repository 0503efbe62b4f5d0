/**
 * The userspace mode's open-files limit (upstream pkg/proxy/userspace/rlimit.go, setRLimit): every proxied
 * connection holds two sockets in this process, so the mode raises RLIMIT_NOFILE to 64000 at start.
 * Unlike upstream (which set both limits to exactly 64000) a higher limit is never lowered, and a limit
 * that cannot be raised is one warning, not a failed start.
 */
import type { OpenFilesLimit, RLimit } from "../../runtime/rlimit.ts";

/** Upstream's userspace proxier: setRLimit(64 * 1000). */
export const USERSPACE_OPEN_FILES_LIMIT = 64000;

/** The limit to set so that both soft and hard reach `want`, or null when they already do. */
export function openFilesTarget(current: RLimit, want: number): RLimit | null {
  if (current.soft >= want && current.hard >= want) return null;
  return { soft: Math.max(current.soft, want), hard: Math.max(current.hard, want) };
}

/**
 * Raises RLIMIT_NOFILE to `want` (soft and hard, never lowering either). When the hard limit cannot be
 * raised (no CAP_SYS_RESOURCE) the soft limit is still raised to the hard one, and one warning names the
 * limit the process runs with. Returns the limit in effect afterwards (null when it cannot be read).
 */
export function raiseOpenFilesLimit(
  limit: OpenFilesLimit | null,
  log: { warn(msg: string): void },
  want = USERSPACE_OPEN_FILES_LIMIT,
): RLimit | null {
  const fail = `failed to set open file handler limit to ${want}`;
  if (limit === null) {
    log.warn(`${fail}: this runtime cannot call setrlimit; the limit is left as it is`);
    return null;
  }
  let current: RLimit;
  try {
    current = limit.get();
  } catch (e) {
    log.warn(`${fail}: ${(e as Error).message}`);
    return null;
  }
  const target = openFilesTarget(current, want);
  if (target === null) return current;
  const err = limit.set(target);
  if (err === null) return target;
  // The hard limit could not be raised: take what the hard limit allows.
  let now = current;
  if (current.soft < current.hard && limit.set({ soft: current.hard, hard: current.hard }) === null) {
    now = { soft: current.hard, hard: current.hard };
  }
  log.warn(`${fail}: setrlimit: ${err}; open files limit is ${now.soft} (hard ${now.hard})`);
  return now;
}
