/**
 * Returning the heap to the OS after a large burst of allocation. A full sync at 10k Services allocates
 * hundreds of MiB of short-lived strings (list pages, the payload, the split plan); without a collection
 * afterwards the runtime keeps those pages mapped for minutes, and an operator reads that as RSS.
 */

import type { Clock, TimerHandle } from "./clock.ts";

interface BunMemoryApi {
  gc(force: boolean): void;
  shrink?(): void;
}

/**
 * Forces a full collection and asks the runtime to release free heap pages. Bun: `Bun.gc(true)` then
 * `Bun.shrink()`. Deno/V8 exposes a collector only with `--expose-gc`; without it this does nothing (Deno
 * is the development runtime, the shipped binary is Bun's). Returns whether a collection ran.
 */
export function releaseMemory(): boolean {
  const ran = collectGarbage();
  (globalThis as { Bun?: BunMemoryApi }).Bun?.shrink?.();
  return ran;
}

/**
 * A forced full collection (Bun: `Bun.gc(true)`), without asking the runtime to give pages back as
 * {@link releaseMemory} does: for the middle of a large allocation burst, whose freed memory is reused at
 * once. Deno/V8: `gc()` with `--expose-gc`, else nothing. Returns whether a collection ran.
 */
export function collectGarbage(): boolean {
  const bun = (globalThis as { Bun?: BunMemoryApi }).Bun;
  if (bun !== undefined) {
    bun.gc(true);
    return true;
  }
  const gc = (globalThis as { gc?: () => void }).gc;
  if (typeof gc === "function") {
    gc();
    return true;
  }
  return false;
}

/**
 * Asks the runtime for a collection without forcing a full synchronous one (Bun: `Bun.gc(false)`; twenty
 * of them add ~0.2–0.3 s to a 10k-Service nftables render, twenty of `Bun.gc(true)` ~1.4 s): cheap enough
 * to run many times inside one long render, whose garbage would otherwise pile up until it ends. Elsewhere
 * (Deno, the development runtime) nothing. Returns whether it was asked.
 */
export function requestCollection(): boolean {
  const bun = (globalThis as { Bun?: BunMemoryApi }).Bun;
  if (bun === undefined) return false;
  bun.gc(false);
  return true;
}

/**
 * Full syncs over at least this many service ports collect the heap before rendering, while the host lists
 * what the kernel holds (iptables-save's nat chains, the nftables table's objects). What the lists and the
 * model build left behind is then freed and the render reuses it instead of adding to it: a full render
 * at 10k Services allocates too little to trigger a collection of its own, so without this the first
 * sync's peak RSS held that garbage and the render's output together (bench/rss_probe.ts at 10k, iptables
 * mode: median peak 295 MiB without, 280 with; the collection takes 50-150 ms).
 */
export const COLLECT_BEFORE_FULL_RENDER = 2000;

/**
 * Runs `release` once, `delayMs` after the last `schedule()` call: both families' full syncs and the
 * state-cache write that follows them are then one burst, released once.
 */
export class MemoryRelease {
  #timer: TimerHandle | null = null;
  #stopped = false;

  constructor(
    private readonly clock: Clock,
    private readonly delayMs: number,
    private readonly release: () => boolean = releaseMemory,
    private readonly onReleased?: (tookMs: number) => void,
  ) {}

  /** (Re)starts the delay. */
  schedule(): void {
    if (this.#stopped) return;
    if (this.#timer !== null) this.clock.clearTimeout(this.#timer);
    this.#timer = this.clock.setTimeout(() => {
      this.#timer = null;
      const start = performance.now();
      if (this.release()) this.onReleased?.(performance.now() - start);
    }, this.delayMs);
  }

  /** Cancels a pending release (shutdown). */
  stop(): void {
    this.#stopped = true;
    if (this.#timer !== null) this.clock.clearTimeout(this.#timer);
    this.#timer = null;
  }
}
