/**
 * Time as the rest of edgeproxy sees it: a reading in milliseconds and one-shot timers. Code that waits
 * or measures takes a `Clock`, so tests hand in a `FakeClock` and move time by hand instead of sleeping.
 */

declare const timerBrand: unique symbol;

/** Opaque handle of a pending timer; only the clock that created it can cancel it. */
export interface TimerHandle {
  readonly [timerBrand]: true;
}

/** A source of time and one-shot timers. */
export interface Clock {
  /** Current time in milliseconds since the Unix epoch. */
  now(): number;
  /** Calls `fn` once, `ms` milliseconds from now (negative or NaN means as soon as possible). */
  setTimeout(fn: () => void, ms: number): TimerHandle;
  /** Cancels a pending timer; cancelling a fired or cancelled timer does nothing. */
  clearTimeout(handle: TimerHandle): void;
}

function delayOf(ms: number): number {
  return Number.isFinite(ms) && ms > 0 ? ms : 0;
}

/** Wraps the runtime's own timer value so it can travel as an opaque `TimerHandle`. */
class RealTimer {
  constructor(readonly raw: ReturnType<typeof globalThis.setTimeout>) {}
}

/**
 * The wall clock: `Date.now()` and the runtime's timers. Wall time can jump (an edge box without an RTC
 * sets its clock from NTP after boot); callers that compute intervals from `now()` clamp them.
 */
export class RealClock implements Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number {
    return Date.now();
  }

  /** A runtime timer; it keeps the process alive until it fires or is cleared. */
  setTimeout(fn: () => void, ms: number): TimerHandle {
    return new RealTimer(globalThis.setTimeout(fn, delayOf(ms))) as unknown as TimerHandle;
  }

  /** Clears a timer made by this clock. */
  clearTimeout(handle: TimerHandle): void {
    const timer = handle as unknown as RealTimer;
    if (timer instanceof RealTimer) globalThis.clearTimeout(timer.raw);
  }
}

/** The process-wide real clock. */
export const realClock: Clock = new RealClock();

interface FakeTimer {
  readonly seq: number;
  readonly due: number;
  readonly fn: () => void;
}

/** 2000-01-01T00:00:00Z, the epoch upstream's fake timers start from. */
const FAKE_EPOCH_MS = 946_684_800_000;

/**
 * A clock that only moves when told to. `advance(ms)` fires every timer that falls due on the way, in due
 * order (ties in creation order), with `now()` reading each timer's due time while it runs; timers created
 * by those callbacks fire too if they fall due within the same advance.
 */
export class FakeClock implements Clock {
  #now: number;
  #seq = 0;
  #timers = new Map<number, FakeTimer>();

  /** Starts at `startMs` (default 2000-01-01T00:00:00Z). */
  constructor(startMs: number = FAKE_EPOCH_MS) {
    this.#now = startMs;
  }

  /** The fake time in milliseconds. */
  now(): number {
    return this.#now;
  }

  /** Registers a timer due at now + ms. */
  setTimeout(fn: () => void, ms: number): TimerHandle {
    const seq = ++this.#seq;
    this.#timers.set(seq, { seq, due: this.#now + delayOf(ms), fn });
    return seq as unknown as TimerHandle;
  }

  /** Removes a pending timer. */
  clearTimeout(handle: TimerHandle): void {
    this.#timers.delete(handle as unknown as number);
  }

  /** Moves time forward by `ms`, firing due timers synchronously in order. */
  advance(ms: number): void {
    const target = this.#now + delayOf(ms);
    for (let t = this.#nextDue(target); t !== undefined; t = this.#nextDue(target)) {
      this.#fire(t);
    }
    this.#now = target;
  }

  /**
   * Like `advance`, but lets promise chains settle (one real macrotask) before the first timer and after
   * each fired one, so async work started by a timer can schedule further fake timers in time.
   */
  async advanceAsync(ms: number): Promise<void> {
    const target = this.#now + delayOf(ms);
    await macrotask();
    for (let t = this.#nextDue(target); t !== undefined; t = this.#nextDue(target)) {
      this.#fire(t);
      await macrotask();
    }
    this.#now = target;
  }

  /** Number of pending timers. */
  pendingCount(): number {
    return this.#timers.size;
  }

  /** Milliseconds until the earliest pending timer, or null when none is pending. */
  nextTimerIn(): number | null {
    const t = this.#nextDue(Infinity);
    return t === undefined ? null : t.due - this.#now;
  }

  #nextDue(limit: number): FakeTimer | undefined {
    let best: FakeTimer | undefined;
    for (const t of this.#timers.values()) {
      if (t.due > limit) continue;
      if (best === undefined || t.due < best.due || (t.due === best.due && t.seq < best.seq)) best = t;
    }
    return best;
  }

  #fire(t: FakeTimer): void {
    this.#timers.delete(t.seq);
    if (t.due > this.#now) this.#now = t.due;
    t.fn();
  }
}

function macrotask(): Promise<void> {
  return new Promise((resolve) => globalThis.setTimeout(resolve, 0));
}
