/**
 * The failure handling of the reflector and the poller: exponential backoff with jitter, at least the
 * server's Retry-After; auth errors (401/403) logged once per failure streak; recovery logged once.
 */
import { Backoff, type BackoffOptions, sleep } from "./backoff.ts";
import { ApiError, errorChain, isAuthError, type Logger, NetworkError } from "./transport.ts";

/**
 * Shared failure handling of the reflector and the poller: logs (auth errors once per streak), waits the
 * backoff (at least Retry-After), and reports recovery once.
 */
export class FailureTracker {
  readonly #backoff: Backoff;
  readonly #log: Logger;
  readonly #what: string;
  readonly #maxRetryAfterMs: number;
  readonly #describeCreds: () => string;
  #failing = false;
  #authLogged = false;

  constructor(
    what: string,
    log: Logger,
    backoff: BackoffOptions | undefined,
    maxRetryAfterMs: number,
    creds: () => string,
  ) {
    this.#what = what;
    this.#log = log;
    this.#backoff = new Backoff(backoff);
    this.#maxRetryAfterMs = maxRetryAfterMs;
    this.#describeCreds = creds;
  }

  /** The backoff, for tests and stats. */
  get backoff(): Backoff {
    return this.#backoff;
  }

  /** Logs `err` and waits before the next attempt; resolves false when `signal` aborted the wait. */
  async fail(op: string, err: unknown, signal: AbortSignal): Promise<boolean> {
    let delay = this.#backoff.next();
    if (err instanceof ApiError && err.retryAfterMs !== undefined) {
      delay = Math.max(delay, Math.min(err.retryAfterMs, this.#maxRetryAfterMs));
    }
    const secs = delay < 1000 ? `${delay}ms` : `${(delay / 1000).toFixed(1)}s`;
    if (isAuthError(err)) {
      const msg = `${op} ${this.#what}: the apiserver rejected our credentials (${this.#describeCreds()}): ` +
        `${(err as Error).message}; retrying with backoff`;
      if (!this.#authLogged) this.#log.error(msg);
      else this.#log.debug(`${msg} (again, next try in ${secs})`);
      this.#authLogged = true;
    } else {
      const text = err instanceof ApiError || err instanceof NetworkError ? err.message : errorChain(err);
      this.#log.warn(`${op} ${this.#what} failed: ${text}; retrying in ${secs}`);
    }
    this.#failing = true;
    return await sleep(delay, signal);
  }

  /** Records a success: ends the failure streak (logged once). */
  ok(op: string): void {
    if (this.#failing) this.#log.info(`${op} ${this.#what}: apiserver reachable again`);
    this.#failing = false;
    this.#authLogged = false;
  }
}
