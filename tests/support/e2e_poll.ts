/**
 * Polling with a deadline for e2e tests: wait for a condition (traffic reaches an endpoint, a server
 * answers) instead of sleeping a fixed time, and fail with the last value seen when the deadline passes.
 */

/** Options of pollUntil. */
export interface PollOptions {
  /** Give up after this long (ms). */
  readonly timeoutMs: number;
  /** Pause between probes (ms, default 200). */
  readonly intervalMs?: number;
  /** What is awaited, for the error message ("traffic to 10.96.0.10:80 reaches pod2"). */
  readonly what: string;
}

/** Result of pollUntil: the accepted value and how long it took. */
export interface Polled<T> {
  readonly value: T;
  readonly elapsedMs: number;
}

function describeValue(v: unknown): string {
  if (v instanceof Error) return `error: ${v.message}`;
  try {
    const s = JSON.stringify(v);
    return s === undefined ? String(v) : s.length > 600 ? `${s.slice(0, 600)}…` : s;
  } catch {
    return String(v);
  }
}

/**
 * Calls `probe` until `accept` returns true for its value, at most until `timeoutMs` has passed (the probe
 * running when the deadline passes still counts). A probe that throws counts as a rejected value. Throws
 * an Error naming `what`, the time waited and the last value (or error) seen.
 */
export async function pollUntil<T>(
  probe: () => Promise<T>,
  accept: (value: T) => boolean,
  opts: PollOptions,
): Promise<Polled<T>> {
  const start = Date.now();
  const interval = opts.intervalMs ?? 200;
  let last: unknown = "(never probed)";
  for (;;) {
    try {
      const v = await probe();
      if (accept(v)) return { value: v, elapsedMs: Date.now() - start };
      last = v;
    } catch (e) {
      last = e;
    }
    const elapsed = Date.now() - start;
    if (elapsed >= opts.timeoutMs) {
      throw new Error(`timed out after ${elapsed} ms waiting for ${opts.what}; last: ${describeValue(last)}`);
    }
    await new Promise((r) => setTimeout(r, Math.min(interval, Math.max(0, opts.timeoutMs - elapsed))));
  }
}
