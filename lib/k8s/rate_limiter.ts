/**
 * Client-side request rate limiting, as client-go's token bucket (clientConnection.qps / burst): the bucket
 * holds up to `burst` tokens, refills at `qps` tokens per second, and every request takes one. A watch takes
 * one token when it starts, not for the events it streams.
 */
import { TokenBucket } from "../util/token_bucket.ts";

/** client-go's defaults when qps/burst are 0. */
export const DEFAULT_QPS = 5;
/** client-go's defaults when qps/burst are 0. */
export const DEFAULT_BURST = 10;

/**
 * The client's rate limiter (client-go flowcontrol.NewTokenBucketRateLimiter): a {@link TokenBucket} with
 * client-go's defaults and an arrival-order queue of waiters.
 */
export class RateLimiter {
  readonly qps: number;
  readonly burst: number;
  readonly #now: () => number;
  /** null when limiting is off (negative or infinite qps). */
  readonly #bucket: TokenBucket | null;
  #queue: Promise<void> = Promise.resolve();

  /**
   * qps 0 means the default (5) and burst 0 the default (10); a negative qps disables limiting, as in
   * client-go's rest.Config.
   */
  constructor(qps: number, burst: number, now: () => number = () => performance.now()) {
    this.qps = qps === 0 ? DEFAULT_QPS : qps;
    this.burst = burst <= 0 ? DEFAULT_BURST : Math.max(1, Math.floor(burst));
    this.#now = now;
    this.#bucket = this.limited ? new TokenBucket(1000 / this.qps, this.burst, now()) : null;
  }

  /** Whether requests are limited at all. */
  get limited(): boolean {
    return this.qps > 0 && Number.isFinite(this.qps);
  }

  /** Takes a token now if one is available. */
  tryAcquire(): boolean {
    return this.#bucket === null || this.#bucket.tryAccept(this.#now());
  }

  /**
   * Waits for a token. Rejects with the signal's reason when `signal` aborts while waiting (no token is
   * consumed then).
   */
  acquire(signal?: AbortSignal): Promise<void> {
    if (this.#bucket === null) return Promise.resolve();
    const bucket = this.#bucket;
    const turn = this.#queue.then(() => this.#wait(bucket, signal));
    // The next waiter queues behind this one whether it succeeds or is aborted.
    this.#queue = turn.catch(() => {});
    return turn;
  }

  async #wait(bucket: TokenBucket, signal?: AbortSignal): Promise<void> {
    for (;;) {
      if (signal?.aborted) throw signal.reason ?? new DOMException("aborted", "AbortError");
      if (bucket.tryAccept(this.#now())) return;
      const ms = Math.ceil(bucket.msUntilToken(this.#now()));
      await new Promise<void>((resolve) => {
        const onAbort = () => {
          clearTimeout(t);
          resolve();
        };
        const t = setTimeout(() => {
          signal?.removeEventListener("abort", onAbort);
          resolve();
        }, Math.max(1, ms));
        signal?.addEventListener("abort", onAbort, { once: true });
      });
    }
  }
}
