/**
 * The one token bucket of the tree (upstream: flowcontrol's token-bucket rate limiter over
 * golang.org/x/time/rate). One token accrues per `periodMs`, at most `burst` are held, and the bucket starts
 * full. Used by BoundedFrequencyRunner (minSyncPeriod / burstSyncs) and, through lib/k8s/rate_limiter.ts,
 * by the apiserver client (clientConnection.qps / burst). Time is passed in, so it is pure and testable.
 * Tokens are kept as milliseconds of credit (a token = `periodMs` of credit) so whole millisecond steps add
 * up exactly instead of drifting in floating point.
 */
export class TokenBucket {
  readonly #periodMs: number;
  readonly #capacity: number;
  #credit: number;
  #last: number;

  /** `periodMs` > 0 between tokens, `burst` ≥ 1 tokens held at most; full at `nowMs`. */
  constructor(periodMs: number, burst: number, nowMs: number) {
    if (!(periodMs > 0) || !Number.isFinite(periodMs)) {
      throw new RangeError(`token bucket: period must be a positive number of ms, got ${periodMs}`);
    }
    if (!Number.isInteger(burst) || burst < 1) {
      throw new RangeError(`token bucket: burst must be an integer >= 1, got ${burst}`);
    }
    this.#periodMs = periodMs;
    this.#capacity = periodMs * burst;
    this.#credit = this.#capacity;
    this.#last = nowMs;
  }

  /** Adds the credit earned since the last call; a clock that went backwards accrues nothing. */
  #refill(nowMs: number): void {
    const elapsed = nowMs > this.#last ? nowMs - this.#last : 0;
    this.#credit = Math.min(this.#capacity, this.#credit + elapsed);
    this.#last = nowMs;
  }

  /** Takes one token if one is available at `nowMs`. */
  tryAccept(nowMs: number): boolean {
    this.#refill(nowMs);
    if (this.#credit >= this.#periodMs) {
      this.#credit -= this.#periodMs;
      return true;
    }
    return false;
  }

  /** Milliseconds from `nowMs` until a token is available (0 when one is); takes nothing. */
  msUntilToken(nowMs: number): number {
    this.#refill(nowMs);
    return Math.max(0, this.#periodMs - this.#credit);
  }
}
