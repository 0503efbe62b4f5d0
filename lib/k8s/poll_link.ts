/**
 * What poll mode's bounded watches on one connection have learnt about the link. Over HTTP/2 the watches
 * of one {@link ApiTransport} share one TCP connection, so one watch ending every `--poll-interval` (the
 * "keeper") is enough to keep the link from idling; the others need the short bound only while the link
 * might buffer responses (then their changes would wait for the end of the watch). Once a watch delivered
 * data well before its end, the link has proven it streams and the other watches are bounded at a few
 * intervals; any watch that looks buffered again takes that back at once, ending the relaxed watches in
 * flight so they resume at the interval. Over HTTP/1.1 each watch is its own connection: nothing relaxes.
 */
import type { ApiTransport } from "./transport.ts";

/** Shared streaming state of one connection's bounded watches; see the module header. */
export class PollLink {
  #streams = false;
  #keepers = 0;
  readonly #onSuspect = new Set<() => void>();

  /** True once a watch streamed, until one looks buffered. */
  get streams(): boolean {
    return this.#streams;
  }

  /** Other watches may run longer: the link streams and a keeper is running (someone ends every interval). */
  get relaxed(): boolean {
    return this.#streams && this.#keepers > 0;
  }

  /** A keeper's loop runs until the returned function is called. */
  addKeeper(): () => void {
    this.#keepers++;
    let done = false;
    return () => {
      if (!done) this.#keepers--;
      done = true;
    };
  }

  /** A watch delivered data well before its end: the link streams. */
  proven(): void {
    this.#streams = true;
  }

  /** A watch looked buffered: every watch goes back to the interval, relaxed ones in flight end now. */
  suspect(): void {
    if (!this.#streams) return;
    this.#streams = false;
    for (const f of [...this.#onSuspect]) f();
  }

  /** Calls `f` on the next {@link suspect} that takes the proof back; returns the unsubscribe. */
  onSuspect(f: () => void): () => void {
    this.#onSuspect.add(f);
    return () => this.#onSuspect.delete(f);
  }
}

const LINKS = new WeakMap<ApiTransport, PollLink>();

/** The one {@link PollLink} of a transport (its connection), shared by every poller on it. */
export function pollLinkFor(transport: ApiTransport): PollLink {
  let l = LINKS.get(transport);
  if (!l) LINKS.set(transport, l = new PollLink());
  return l;
}
