/**
 * Whether the work that follows a sync (the state-cache write, the memory release) may run yet. At start
 * the IP families sync concurrently and the one with nothing to program (IPv6 on an IPv4 cluster) is done
 * while the other's first restore still runs: a state-cache write then (at 10k Services a 12 MB encode,
 * ~150 ms of the event loop) lands on the other family's render and restore, the agent's peak of memory,
 * and holds up the event loop that feeds that restore. So that work waits until every family has completed a first sync, or
 * at most `maxHoldMs` after the first one did (a family that keeps failing must not stop the cache).
 */
import type { IPFamily } from "../proxy/types.ts";

/** Tracks the families' first syncs; see the module comment. */
export class FirstSyncs {
  readonly #pending: Set<IPFamily>;
  #firstAtMs: number | null = null;

  constructor(families: readonly IPFamily[], private readonly maxHoldMs: number) {
    this.#pending = new Set(families);
  }

  /** Records a successful sync of `family` at `nowMs`; true when post-sync work may run. */
  synced(family: IPFamily, nowMs: number): boolean {
    this.#pending.delete(family);
    this.#firstAtMs ??= nowMs;
    return this.#pending.size === 0 || nowMs - this.#firstAtMs >= this.maxHoldMs;
  }
}
