import { writeStateSnapshot } from "./state_cache.ts";
import type { StateSnapshot } from "./state_store.ts";

/** What the writer needs from the store. */
export interface SnapshotSource {
  readonly version: number;
  /**
   * True once a live source has listed Services, EndpointSlices and the Node in this process's life.
   * Before that the store holds nothing (or only what the cache itself held): nothing worth persisting.
   */
  readonly liveSynced: boolean;
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
  /** Called every STATE_COLLECT_EVERY_BYTES of a write's payload (the agent: a collection). */
  collect?(): void;
}

/**
 * Writes the last-known state after successful syncs, coalesced: at most one write per minIntervalMs,
 * only when the store changed since the last write, and never two writes at once. Only a confirmed state
 * is ever written: nothing until the source reports `liveSynced`, so a shutdown before the first live
 * sync (an offline restart) leaves the previous cache exactly as it was, and a state loaded from the
 * cache is never written back with a new timestamp. The same failure is warned about once, not on every
 * attempt.
 */
export class StateCacheWriter {
  #writtenVersion = -1;
  #lastWriteMs = -Infinity;
  #timer: ReturnType<typeof setTimeout> | null = null;
  #inflight: Promise<void> | null = null;
  #stopped = false;
  #lastWarning = "";

  constructor(private readonly source: SnapshotSource, private readonly opts: StateCacheWriterOptions) {}

  /** Called after every successful sync; schedules a write when the state changed. */
  afterSync(): void {
    if (this.#stopped || !this.#due() || this.#timer) return;
    const wait = Math.max(0, this.#lastWriteMs + this.opts.minIntervalMs - this.opts.now());
    this.#timer = setTimeout(() => {
      this.#timer = null;
      void this.flush();
    }, wait);
  }

  /** Writes now if there is a confirmed, changed state (used by afterSync's timer and at shutdown). */
  async flush(): Promise<void> {
    if (this.#inflight) await this.#inflight;
    if (!this.#due()) return;
    const version = this.source.version;
    const now = this.opts.now();
    this.#inflight = writeStateSnapshot(this.opts.dir, this.source.snapshot(), this.opts.nodeName, now, {
      collect: () => this.opts.collect?.(),
    }).then(
      (size) => {
        this.#writtenVersion = version;
        this.#lastWriteMs = now;
        this.#lastWarning = "";
        this.opts.onWritten?.(now, size);
      },
      (e) => {
        const msg = `cannot write state cache in ${this.opts.dir}: ${(e as Error).message}`;
        if (msg !== this.#lastWarning) this.opts.warn(msg);
        this.#lastWarning = msg;
      },
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

  #due(): boolean {
    return this.source.liveSynced && this.source.version !== this.#writtenVersion;
  }
}
