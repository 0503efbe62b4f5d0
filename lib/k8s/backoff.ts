/**
 * Exponential backoff with jitter, modelled on client-go's reflector backoff manager
 * (wait.NewExponentialBackoffManager(800ms, 30s, 2m, 2.0, 1.0)): the base delay doubles from 800 ms up to
 * 30 s, each wait adds up to `jitter` × base of random extra, and after `resetAfterMs` without any backoff
 * the apiserver is assumed healthy again and the base returns to the start. Unlike client-go, the jittered
 * wait is capped at `maxMs` too (client-go waits up to 2 × 30 s): an edge node whose apiserver comes back
 * should not sit out a minute before noticing.
 */

/** Tunables of a {@link Backoff}; every field has client-go's default. */
export interface BackoffOptions {
  /** First base delay (ms). Default 800. */
  initialMs?: number;
  /** Largest base delay (ms). Default 30 000. */
  maxMs?: number;
  /** Base multiplier per consecutive failure. Default 2. */
  factor?: number;
  /** Random extra as a fraction of the base: the wait is in [base, min(maxMs, base × (1 + jitter))). Default 1.0. */
  jitter?: number;
  /** After this long (ms) without calling next(), start again from initialMs. Default 120 000. */
  resetAfterMs?: number;
  /** Random source in [0, 1) (tests pass a fixed one). */
  random?: () => number;
  /** Monotonic-enough clock in ms (tests pass a fake). */
  now?: () => number;
}

/** Client-go's reflector backoff parameters. */
export const DEFAULT_BACKOFF: Required<Omit<BackoffOptions, "random" | "now">> = {
  initialMs: 800,
  maxMs: 30_000,
  factor: 2,
  jitter: 1.0,
  resetAfterMs: 120_000,
};

/** Stateful backoff: call `next()` for each failure to get the delay to wait before retrying. */
export class Backoff {
  readonly #o: Required<BackoffOptions>;
  #base = 0;
  #lastAt = Number.NEGATIVE_INFINITY;

  /** Creates a backoff; omitted options take client-go's values. */
  constructor(opts: BackoffOptions = {}) {
    this.#o = {
      ...DEFAULT_BACKOFF,
      random: Math.random,
      now: () => Date.now(),
      ...Object.fromEntries(Object.entries(opts).filter(([, v]) => v !== undefined)),
    } as Required<BackoffOptions>;
  }

  /** The delay (ms) to wait after one more failure. */
  next(): number {
    const now = this.#o.now();
    if (this.#base === 0 || now - this.#lastAt > this.#o.resetAfterMs) this.#base = this.#o.initialMs;
    else this.#base = Math.min(this.#base * this.#o.factor, this.#o.maxMs);
    this.#lastAt = now;
    return Math.min(this.#o.maxMs, Math.round(this.#base * (1 + this.#o.jitter * this.#o.random())));
  }

  /** Forgets past failures: the next delay starts from initialMs again. */
  reset(): void {
    this.#base = 0;
  }

  /** The current base delay (0 when reset), for logs and tests. */
  get baseMs(): number {
    return this.#base;
  }
}

/**
 * Waits `ms`, or less if `signal` aborts first. Resolves `true` when the full time elapsed and `false`
 * when aborted; never rejects, and leaves no timer behind either way.
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, Math.max(0, ms));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
