/**
 * BoundedFrequencyRunner: upstream pkg/util/async's scheduler for the proxier's sync function, in an event
 * loop instead of goroutines.
 *
 * - Runs are at least `minIntervalMs` apart (from the end of one to the start of the next), except that up
 *   to `burstRuns` may happen back to back; burst credit accrues one run per `minIntervalMs`.
 * - `run()` asks for a run as soon as allowed. Requests that arrive while a run is pending or in progress
 *   are coalesced into one.
 * - The function runs at least once per `maxIntervalMs`, even if nobody asks.
 * - `retryAfter(ms)` makes sure it runs again no later than `ms` from the call; any run in the meantime
 *   satisfies the retry.
 * - The function never runs concurrently with itself; an async function is awaited.
 *
 * The loop handles three kinds of events: the timer firing, a run request and a retry request. Like
 * upstream's select loop, it handles them one at a time. When several are pending it takes the timer first,
 * then run, then retry, so a retry requested by the run that has just finished is applied after that run
 * has reset the timer.
 */
import { infoV, log } from "../../log.ts";
import { type Clock, realClock, type TimerHandle } from "../../runtime/clock.ts";
import { TokenBucket } from "../../util/token_bucket.ts";

/** The function a BoundedFrequencyRunner schedules. It should handle its own errors (and call retryAfter). */
export type RunnerFunction = () => void | Promise<void>;

/** Settings of a BoundedFrequencyRunner. */
export interface BoundedFrequencyRunnerOptions {
  /** Names the runner in log lines (upstream: "sync-runner"). */
  readonly name: string;
  readonly fn: RunnerFunction;
  /** Minimum time between runs (modulo bursts); 0 disables rate limiting. */
  readonly minIntervalMs: number;
  /** Maximum time between runs; must be >= minIntervalMs. */
  readonly maxIntervalMs: number;
  /** Runs allowed back to back (integer >= 1). kube-proxy's iptables proxier uses 2. */
  readonly burstRuns: number;
  /** Defaults to the real clock. */
  readonly clock?: Clock;
}

interface Limiter {
  tryAccept(nowMs: number): boolean;
}

const unlimited: Limiter = { tryAccept: () => true };

/** Schedules runs of one function between a minimum and a maximum interval. */
export class BoundedFrequencyRunner {
  readonly name: string;
  readonly #fn: RunnerFunction;
  readonly #minInterval: number;
  readonly #maxInterval: number;
  readonly #clock: Clock;
  readonly #limiter: Limiter;

  #timer: TimerHandle | null = null;
  /** Absolute due time of the timer; meaningful only while #timer is set. */
  #timerDue = 0;
  #lastRun: number | null = null;

  #pendingTick = false;
  #pendingRun = false;
  #pendingRetry = false;
  #retryTime: number | null = null;

  #looping = false;
  #stopped = false;
  #drain: Promise<void> | null = null;
  #stoppedSignal: () => void = () => {};
  readonly #stoppedPromise: Promise<void>;

  /** Validates the intervals (upstream panics on maxInterval < minInterval; this throws). */
  constructor(opts: BoundedFrequencyRunnerOptions) {
    const { name, minIntervalMs, maxIntervalMs, burstRuns } = opts;
    if (!Number.isFinite(minIntervalMs) || minIntervalMs < 0) {
      throw new RangeError(`${name}: minInterval must be a finite number of ms >= 0, got ${minIntervalMs}`);
    }
    if (!(maxIntervalMs >= minIntervalMs) || !Number.isFinite(maxIntervalMs)) {
      throw new RangeError(
        `${name}: maxInterval (${maxIntervalMs}ms) must be finite and >= minInterval (${minIntervalMs}ms)`,
      );
    }
    if (!Number.isInteger(burstRuns) || burstRuns < 1) {
      throw new RangeError(`${name}: burstRuns must be an integer >= 1, got ${burstRuns}`);
    }
    this.name = name;
    this.#fn = opts.fn;
    this.#minInterval = minIntervalMs;
    this.#maxInterval = maxIntervalMs;
    this.#clock = opts.clock ?? realClock;
    this.#limiter = minIntervalMs === 0
      ? unlimited
      : new TokenBucket(minIntervalMs, burstRuns, this.#clock.now());
    this.#stoppedPromise = new Promise((resolve) => (this.#stoppedSignal = resolve));
  }

  /**
   * Starts handling events; resolves once `stop()` has been called and any run in progress has finished.
   * The first periodic run is due maxInterval from now; call `run()` for an immediate one.
   */
  loop(): Promise<void> {
    if (this.#looping || this.#stopped) {
      throw new Error(`${this.name}: loop() called twice, or after stop()`);
    }
    this.#looping = true;
    infoV(3, `${this.name} Loop running`);
    this.#resetTimer(this.#maxInterval);
    this.#kick();
    return this.#stoppedPromise;
  }

  /**
   * Requests a run as soon as allowed. Never blocks and never runs the function synchronously. Before
   * `loop()` the request waits for the loop to start; after `stop()` it is ignored.
   */
  run(): void {
    if (this.#stopped) return;
    this.#pendingRun = true;
    this.#kick();
  }

  /**
   * Ensures a run no later than `ms` from now (upstream RetryAfter). Callable from inside the function.
   * The earliest of several outstanding retries wins.
   */
  retryAfter(ms: number): void {
    if (this.#stopped) return;
    const retryTime = this.#clock.now() + (Number.isFinite(ms) && ms > 0 ? ms : 0);
    if (this.#retryTime !== null && this.#retryTime < retryTime) return;
    this.#retryTime = retryTime;
    this.#pendingRetry = true;
    this.#kick();
  }

  /** Stops the loop and its timer; resolves when a run in progress (if any) has finished. */
  async stop(): Promise<void> {
    if (!this.#stopped) {
      this.#stopped = true;
      this.#clearTimer();
      infoV(3, `${this.name} Loop stopping`);
    }
    while (this.#drain !== null) await this.#drain;
    this.#stoppedSignal();
  }

  /** Milliseconds until the timer fires (the next periodic, deferred or retry run), or null if none is set. */
  nextTimerIn(): number | null {
    return this.#timer === null ? null : Math.max(0, this.#timerDue - this.#clock.now());
  }

  #kick(): void {
    if (this.#drain !== null || !this.#looping || this.#stopped) return;
    if (!this.#pendingTick && !this.#pendingRun && !this.#pendingRetry) return;
    this.#drain = this.#handleEvents().finally(() => {
      this.#drain = null;
      this.#kick(); // events that arrived after the last check
    });
  }

  async #handleEvents(): Promise<void> {
    await Promise.resolve(); // always asynchronous to the caller of run()/retryAfter()/the timer
    while (!this.#stopped) {
      if (this.#pendingTick) {
        this.#pendingTick = false;
        await this.#tryRun();
      } else if (this.#pendingRun) {
        this.#pendingRun = false;
        await this.#tryRun();
      } else if (this.#pendingRetry) {
        this.#pendingRetry = false;
        this.#doRetry();
      } else {
        return;
      }
    }
  }

  async #tryRun(): Promise<void> {
    const now = this.#clock.now();
    if (this.#limiter.tryAccept(now)) {
      try {
        await this.#fn();
      } catch (err) {
        log.error(
          `${this.name}: run failed: ${err instanceof Error ? err.stack ?? err.message : String(err)}`,
        );
      }
      this.#lastRun = this.#clock.now();
      if (this.#stopped) return;
      this.#resetTimer(this.#maxInterval);
      infoV(
        3,
        `${this.name}: ran, next possible in ${this.#minInterval}ms, periodic in ${this.#maxInterval}ms`,
      );
      return;
    }
    // Not allowed yet: run when minInterval has passed since the last run, unless the timer is sooner.
    // Elapsed is clamped so a wall clock that stepped backwards cannot push the run past minInterval.
    const elapsed = this.#lastRun === null ? Infinity : Math.max(0, now - this.#lastRun);
    const nextPossible = this.#minInterval - elapsed;
    const nextScheduled = Math.min(nextPossible, this.#remaining());
    infoV(4, `${this.name}: ${elapsed}ms since last run, possible in ${nextPossible}ms`);
    this.#resetTimer(nextScheduled);
  }

  #doRetry(): void {
    if (this.#retryTime === null) return;
    const retryInterval = this.#retryTime - this.#clock.now();
    this.#retryTime = null;
    if (retryInterval < this.#remaining()) {
      infoV(3, `${this.name}: retrying in ${retryInterval}ms`);
      this.#resetTimer(retryInterval);
    }
  }

  /** Time until the timer fires; a timer that is not set is infinitely far away. */
  #remaining(): number {
    return this.#timer === null ? Infinity : this.#timerDue - this.#clock.now();
  }

  #resetTimer(delayMs: number): void {
    this.#clearTimer();
    const delay = delayMs > 0 ? delayMs : 0;
    this.#timerDue = this.#clock.now() + delay;
    const handle = this.#clock.setTimeout(() => {
      if (this.#timer !== handle) return;
      this.#timer = null;
      this.#pendingTick = true;
      this.#kick();
    }, delay);
    this.#timer = handle;
  }

  #clearTimer(): void {
    if (this.#timer !== null) {
      this.#clock.clearTimeout(this.#timer);
      this.#timer = null;
    }
  }
}
