/**
 * Client-side request rate limiting, as client-go's token bucket (clientConnection.qps / burst): the bucket
 * holds up to `burst` tokens, refills at `qps` tokens per second, and every request takes one. A watch takes
 * one token when it starts, not for the events it streams.
 */

/** client-go's defaults when qps/burst are 0. */
export const DEFAULT_QPS = 5;
/** client-go's defaults when qps/burst are 0. */
export const DEFAULT_BURST = 10;

/** A token bucket; waiters are served in arrival order. */
export class TokenBucket {
  readonly qps: number;
  readonly burst: number;
  readonly #now: () => number;
  #tokens: number;
  #last: number;
  #queue: Promise<void> = Promise.resolve();

  /**
   * qps 0 means the default (5) and burst 0 the default (10); a negative qps disables limiting, as in
   * client-go's rest.Config.
   */
  constructor(qps: number, burst: number, now: () => number = () => performance.now()) {
    this.qps = qps === 0 ? DEFAULT_QPS : qps;
    this.burst = burst <= 0 ? DEFAULT_BURST : Math.max(1, Math.floor(burst));
    this.#now = now;
    this.#tokens = this.burst;
    this.#last = now();
  }

  /** Whether requests are limited at all. */
  get limited(): boolean {
    return this.qps > 0 && Number.isFinite(this.qps);
  }

  #refill(): void {
    const now = this.#now();
    this.#tokens = Math.min(this.burst, this.#tokens + ((now - this.#last) / 1000) * this.qps);
    this.#last = now;
  }

  /** Takes a token now if one is available. */
  tryAcquire(): boolean {
    if (!this.limited) return true;
    this.#refill();
    if (this.#tokens >= 1) {
      this.#tokens -= 1;
      return true;
    }
    return false;
  }

  /**
   * Waits for a token. Rejects with the signal's reason when `signal` aborts while waiting (no token is
   * consumed then).
   */
  acquire(signal?: AbortSignal): Promise<void> {
    if (!this.limited) return Promise.resolve();
    const turn = this.#queue.then(() => this.#wait(signal));
    // The next waiter queues behind this one whether it succeeds or is aborted.
    this.#queue = turn.catch(() => {});
    return turn;
  }

  async #wait(signal?: AbortSignal): Promise<void> {
    for (;;) {
      if (signal?.aborted) throw signal.reason ?? new DOMException("aborted", "AbortError");
      if (this.tryAcquire()) return;
      const ms = Math.ceil(((1 - this.#tokens) / this.qps) * 1000);
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
