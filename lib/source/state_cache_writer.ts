import { encodeState, writeStateCache } from "./state_cache.ts";
import type { StateSnapshot } from "./state_store.ts";

/** What the writer needs from the store. */
export interface SnapshotSource {
  readonly version: number;
  snapshot(): StateSnapshot;
}

/** Options of {@link StateCacheWriter}. */
export interface StateCacheWriterOptions {
  dir: string;
  nodeName: string;
  /** Minimum time between two writes; syncs in between are coalesced into one write. */
  minIntervalMs: number;
  now(): number;
  warn(msg: string): void;
  /** Called after each successful write (for metrics and tests). */
  onWritten?(atMs: number, bytes: number): void;
}

/**
 * Writes the last-known state after successful syncs, coalesced: at most one write per minIntervalMs,
 * only when the store changed since the last write, and never two writes at once. Never writes a state
 * that has not been programmed: callers invoke `afterSync()` only after a successful sync.
 */
export class StateCacheWriter {
  #writtenVersion = -1;
  #lastWriteMs = -Infinity;
  #timer: ReturnType<typeof setTimeout> | null = null;
  #inflight: Promise<void> | null = null;
  #stopped = false;

  constructor(private readonly source: SnapshotSource, private readonly opts: StateCacheWriterOptions) {}

  /** Called after every successful sync; schedules a write when the state changed. */
  afterSync(): void {
    if (this.#stopped || this.source.version === this.#writtenVersion || this.#timer) return;
    const wait = Math.max(0, this.#lastWriteMs + this.opts.minIntervalMs - this.opts.now());
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.flush();
    }, wait);
  }

  /** Writes now if the state changed (used by afterSync's timer and at shutdown). */
  async flush(): Promise<void> {
    if (this.#inflight) await this.#inflight;
    if (this.source.version === this.#writtenVersion) return;
    const version = this.source.version;
    const now = this.opts.now();
    const text = encodeState(this.source.snapshot(), this.opts.nodeName, now);
    this.#inflight = writeStateCache(this.opts.dir, text).then(
      () => {
        this.#writtenVersion = version;
        this.#lastWriteMs = now;
        this.opts.onWritten?.(now, text.length);
      },
      (e) => this.opts.warn(`cannot write state cache in ${this.opts.dir}: ${(e as Error).message}`),
    ).finally(() => {
      this.#inflight = null;
    });
    await this.#inflight;
  }

  /** Cancels a pending write; `flush()` may still be called afterwards. */
  stop(): void {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
  }
}
