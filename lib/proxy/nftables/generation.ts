/**
 * Which nftables ruleset changes were ours, from the kernel's generation id (lib/runtime/nft_netlink.ts).
 * Every commit in the network namespace moves the id by one, so our own transactions, read between two
 * looks at the id, account for their own step; any other step is a foreign commit (a firewall reload,
 * iptables-nft, `nft flush ruleset`). The drift check reads table `kube-proxy` only when the count of
 * foreign commits moved since its table was last known good: a check of an untouched ruleset costs one
 * netlink round trip instead of listing the table.
 *
 * One tracker per network namespace, shared by both families' hosts: the id is per namespace, and the
 * IPv4 host's commits must not look foreign to the IPv6 host. Commits and looks are serialized so a look
 * never lands between another family's commit and its second read.
 *
 * Known blind spot: a commit of ours that changes nothing does not move the id (the kernel skips empty
 * commits), so a foreign commit landing beside it would be taken for ours. Our transactions always add
 * or delete something (a rule, an element, a chain), so this needs a transaction that is all no-ops.
 */

/** Reads the current generation id; throws when it cannot. */
export interface NftGenerationSource {
  read(): number;
}

/** Counts foreign commits, given our own transactions go through {@link NftGenerationTracker.commit}. */
export class NftGenerationTracker {
  #queue: Promise<unknown> = Promise.resolve();
  #last: number | null = null;
  #foreign = 0;

  constructor(readonly source: NftGenerationSource) {}

  /**
   * Runs our transaction `apply`, attributing one generation step to it: more steps (or a step while it
   * failed) count as a foreign commit. A source that fails makes the count unknown until it reads again.
   */
  commit<T>(apply: () => Promise<T>): Promise<T> {
    return this.#serialized(async () => {
      const before = this.#look();
      let ours = false;
      try {
        const r = await apply();
        ours = true;
        return r;
      } finally {
        const after = this.#read();
        if (before === null || after === null) this.#unknown();
        else {
          // One step for a commit of ours (none for an empty one; a failed one commits nothing): any
          // other step was someone else's.
          if (after !== before && !(ours && after === nextGeneration(before))) this.#foreign++;
          this.#last = after;
        }
      }
    });
  }

  /**
   * The number of foreign commits seen so far after looking at the kernel now; equal values at two times
   * mean no foreign commit between them. Null when the id cannot be read.
   */
  foreignCommits(): Promise<number | null> {
    return this.#serialized(() => Promise.resolve(this.#look() === null ? null : this.#foreign));
  }

  /** Reads the id and counts a move since the last read as foreign; null when it cannot be read. */
  #look(): number | null {
    const g = this.#read();
    if (g === null) {
      this.#unknown();
      return null;
    }
    if (this.#last !== null && g !== this.#last) this.#foreign++;
    this.#last = g;
    return g;
  }

  #read(): number | null {
    try {
      return this.source.read();
    } catch {
      return null;
    }
  }

  /** After a failed read anything may have happened in between. */
  #unknown(): void {
    if (this.#last !== null) this.#foreign++;
    this.#last = null;
  }

  #serialized<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(fn);
    this.#queue = next.catch(() => {});
    return next;
  }
}

/** The id after `g`: a u32 that the kernel never sets to 0. */
export function nextGeneration(g: number): number {
  const n = (g + 1) >>> 0;
  return n === 0 ? 1 : n;
}
