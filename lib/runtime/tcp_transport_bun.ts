/**
 * The userspace proxy's TCP over Bun's native sockets (`Bun.listen`, `Bun.connect`): one handler object
 * for all connections, per-connection state in `socket.data`, no stream objects. Bytes a peer cannot take
 * at once are queued for it and the reading side is paused until the peer's `drain` (backpressure); a FIN
 * shuts down only the peer's write half, after its queue is written (half-close); a connection whose
 * directions have both finished is ended, one that fails tears its peer down. A pair that has moved
 * {@link HAND_OVER_BYTES} in one direction goes to the splice(2) worker (tcp_splice_bun.ts) on Linux, so
 * bulk bytes are not copied through the process.
 */
import { joinHostPort } from "../net/go_net.ts";
import {
  type RelayConn,
  type RelayListener,
  type SpliceCounter,
  stripMapped,
  type TcpTransport,
} from "./tcp_relay.ts";
import { type SplicedPair, spliceEngine } from "./tcp_splice_bun.ts";

/** Bind errors in node:net's words. */
const BIND_REASONS: Record<string, string> = {
  EADDRINUSE: "address already in use",
  EADDRNOTAVAIL: "address not available",
  EACCES: "permission denied",
};

/** The part of Bun's TCP socket used here. */
interface BunSocket {
  data: Side;
  readonly remoteAddress?: string;
  /** The socket's descriptor (Bun 1.1+); -1 or absent when there is none. */
  readonly fd?: number;
  write(data: Uint8Array): number;
  pause(): void;
  resume(): void;
  shutdown(halfClose?: boolean): void;
  end(): void;
  /** Closes at once (FIN; RST only when unread data is left, as close(2)). */
  close(): void;
  setNoDelay?(on: boolean): boolean;
}

interface BunSocketHandlers {
  open?(s: BunSocket): void;
  data(s: BunSocket, chunk: Uint8Array): void;
  drain(s: BunSocket): void;
  end(s: BunSocket): void;
  close(s: BunSocket): void;
  error(s: BunSocket, e: Error): void;
  connectError?(s: BunSocket, e: Error): void;
}

interface BunListener {
  readonly port: number;
  stop(closeActiveConnections?: boolean): void;
}

interface BunApi {
  listen(o: {
    hostname: string;
    port: number;
    allowHalfOpen: boolean;
    socket: BunSocketHandlers;
  }): BunListener;
  connect(o: {
    hostname: string;
    port: number;
    allowHalfOpen: boolean;
    data: Side;
    socket: BunSocketHandlers;
  }): Promise<BunSocket>;
}

/** One socket's side of a splice. */
class Side implements RelayConn {
  socket: BunSocket | null = null;
  remoteAddress = "";
  /** The other connection, once spliced. */
  peer: Side | null = null;
  /** Bytes read from the peer that this socket has not taken yet. */
  pending: Uint8Array[] = [];
  /** Bytes read from this socket before it was spliced. */
  early: Uint8Array[] = [];
  /** FIN received from this socket. */
  readEnded = false;
  /** This socket's write half shut down (after `pending` was written). */
  writeEnded = false;
  closed = false;
  /** Byte counting of what this socket reads ("in": the client's bytes). */
  count: (n: number) => void = () => {};
  /** Runs once when this socket closes. */
  onClose: () => void = () => {};
  /** Bytes this socket read and its peer took whole, while Bun relays the pair. */
  relayed = 0;
  /** Hands the pair to the splice worker (null: not available, or already tried). */
  handOver: (() => void) | null = null;
  /** Handed to the splice worker: Bun's socket is closed, the worker holds a duplicate. */
  spliced: SplicedPair | null = null;

  get destroyed(): boolean {
    return this.closed;
  }

  destroy(): void {
    if (this.closed) return;
    if (this.spliced !== null) return this.spliced.destroy(); // `closed` once the worker reports the end
    this.closed = true; // the close handler runs too; it does nothing twice
    this.socket?.close();
  }
}

/** Writes what `to` has queued; true when its queue is empty. */
function flush(to: Side): boolean {
  const s = to.socket!;
  while (to.pending.length > 0) {
    const chunk = to.pending[0];
    const n = s.write(chunk);
    if (n < chunk.length) {
      if (n > 0) to.pending[0] = chunk.subarray(n);
      return false;
    }
    to.pending.shift();
  }
  return true;
}

/** Shuts down `to`'s write half when its reader sent FIN and everything read is written. */
function maybeHalfClose(to: Side): void {
  const from = to.peer!;
  if (!from.readEnded || to.writeEnded || to.pending.length > 0 || to.closed) return;
  to.writeEnded = true;
  // Both directions finished: end both connections.
  if (from.writeEnded) {
    to.socket!.end();
    from.socket!.end();
  } else {
    to.socket!.shutdown();
  }
}

const handlers: BunSocketHandlers = {
  data(s, chunk) {
    const side = s.data;
    side.count(chunk.length);
    const peer = side.peer;
    if (peer === null) {
      side.early.push(chunk); // read before the splice (pause takes effect on the next read)
      return;
    }
    if (peer.closed) return;
    if (peer.pending.length > 0) {
      peer.pending.push(chunk);
      return;
    }
    const n = peer.socket!.write(chunk);
    if (n < chunk.length) {
      // The peer's buffer is full: queue the rest, stop reading until it drains.
      peer.pending.push(n > 0 ? chunk.subarray(n) : chunk);
      s.pause();
      return;
    }
    // A connection that carries bulk goes to the splice worker at the first point where nothing is
    // queued on either side (Bun holds no byte of it then: a write it accepted whole is in the kernel).
    side.relayed += n;
    if (side.handOver !== null && side.relayed >= HAND_OVER_BYTES && side.pending.length === 0) {
      side.handOver();
    }
  },
  drain(s) {
    const side = s.data;
    const from = side.peer;
    if (from === null || side.closed || !flush(side)) return;
    if (from.readEnded) maybeHalfClose(side);
    else if (!from.closed) from.socket!.resume();
  },
  end(s) {
    const side = s.data;
    side.readEnded = true;
    if (side.peer !== null) maybeHalfClose(side.peer);
  },
  close(s) {
    const side = s.data;
    if (side.spliced !== null) return; // Bun let go of its descriptor; the worker relays the connection
    side.closed = true;
    const peer = side.peer;
    // A connection that closes before both directions finished (reset, error, teardown) takes its peer
    // with it; after a clean finish the peer is ending on its own.
    if (peer !== null && !peer.closed && !(side.readEnded && side.writeEnded)) peer.destroy();
    const onClose = side.onClose;
    side.onClose = () => {};
    onClose();
  },
  error(s) {
    s.data.destroy();
  },
};

/**
 * Bytes one direction of a pair moves through Bun's callbacks before the pair goes to the splice worker.
 * A hand-over costs about twenty system calls (descriptor duplicates, two pipes, epoll registrations, the
 * closes at the end) and a wake-up of the worker, so short connections (requests, answers) stay here and
 * only bulk ones move.
 */
export const HAND_OVER_BYTES = 256 * 1024;

/**
 * Hands a spliced pair to the splice worker when nothing is queued or half-closed on either side:
 * "taken"; "later" while something is; "refused" when the worker cannot take it (then Bun keeps
 * relaying it).
 */
function handOver(
  client: Side,
  up: Side,
  count: SpliceCounter,
  onEnd: () => void,
): "taken" | "later" | "refused" {
  const cs = client.socket!, us = up.socket!;
  if (client.early.length > 0 || up.early.length > 0 || client.pending.length > 0 || up.pending.length > 0) {
    return "later";
  }
  if (client.readEnded || up.readEnded || client.writeEnded || up.writeEnded || client.closed || up.closed) {
    return "later";
  }
  if (typeof cs.fd !== "number" || cs.fd < 0 || typeof us.fd !== "number" || us.fd < 0) return "refused";
  const engine = spliceEngine();
  const pair = engine?.take(cs.fd, us.fd, count, () => {
    client.closed = up.closed = true;
    onEnd();
  });
  if (!pair) return "refused";
  client.spliced = up.spliced = pair;
  // Closes only Bun's descriptors (close(2), no shutdown): the connections live on in the duplicates.
  cs.close();
  us.close();
  return "taken";
}

/** What {@link bunTcpTransport} may use. */
export interface BunTcpOptions {
  /**
   * Relay spliced connections with splice(2) on a worker thread (Linux), no byte copied through the
   * process (default true); false: Bun's socket callbacks copy every byte.
   */
  readonly zeroCopy?: boolean;
}

/** Bun's sockets, or null when not running on Bun. */
export function bunTcpTransport(opts: BunTcpOptions = {}): TcpTransport | null {
  const zeroCopy = opts.zeroCopy ?? true;
  const bun = (globalThis as { Bun?: BunApi }).Bun;
  if (bun === undefined || typeof bun.listen !== "function") return null;
  return {
    name: zeroCopy ? "bun" : "bun-copy",

    listen(host, port, onAccept, onClose): Promise<RelayListener> {
      let listener: BunListener;
      try {
        listener = bun.listen({
          hostname: host,
          port,
          allowHalfOpen: true,
          socket: {
            ...handlers,
            open(s) {
              const side = new Side();
              side.socket = s;
              side.remoteAddress = stripMapped(s.remoteAddress);
              side.onClose = () => onClose(side);
              s.data = side;
              s.pause(); // nothing is read before the upstream connection is there
              onAccept(side);
            },
          },
        });
      } catch (e) {
        // The message node:net gives: "listen EADDRINUSE: address already in use 10.96.0.1:80".
        const code = (e as { code?: string }).code ?? "";
        const reason = BIND_REASONS[code] ?? (e as Error).message;
        return Promise.reject(
          new Error(`listen ${code || "failed"}: ${reason} ${joinHostPort(host, port)}`, { cause: e }),
        );
      }
      return Promise.resolve({
        port: listener.port,
        close() {
          listener.stop(false);
          return Promise.resolve();
        },
      });
    },

    dial(host, port, timeoutMs) {
      return new Promise((resolve) => {
        const side = new Side();
        let settled = false;
        const timer = setTimeout(() => {
          // Bun cannot cancel a pending connect: a late one is torn down when it completes.
          settled = true;
          resolve(null);
        }, timeoutMs);
        bun.connect({ hostname: host, port, allowHalfOpen: true, data: side, socket: handlers }).then(
          (s) => {
            side.socket = s;
            if (settled) {
              side.destroy();
              return;
            }
            settled = true;
            clearTimeout(timer);
            s.setNoDelay?.(true);
            side.remoteAddress = stripMapped(s.remoteAddress);
            s.pause();
            resolve(side);
          },
          () => {
            if (settled) return;
            settled = true;
            clearTimeout(timer);
            resolve(null);
          },
        );
      });
    },

    splice(clientConn, upstreamConn, count, onClose) {
      const client = clientConn as Side;
      const up = upstreamConn as Side;
      if (client.closed || up.closed) {
        client.destroy();
        up.destroy();
        onClose();
        return;
      }
      const clientClose = client.onClose;
      if (zeroCopy) {
        // A refused hand-over (worker unavailable, queue full) is not tried again for the pair.
        const tryHandOver = () => {
          const r = handOver(client, up, count, () => {
            clientClose();
            onClose();
          });
          if (r !== "later") client.handOver = up.handOver = null;
        };
        client.handOver = up.handOver = tryHandOver;
      }
      client.peer = up;
      up.peer = client;
      client.count = (n) => count("in", n);
      up.count = (n) => count("out", n);
      let open = 2;
      const closed = () => {
        if (--open === 0) onClose();
      };
      client.onClose = () => {
        clientClose();
        closed();
      };
      up.onClose = closed;
      // What was read before the splice goes first; a FIN already received is passed on.
      for (const [from, to] of [[client, up], [up, client]] as const) {
        if (from.early.length === 0) continue;
        for (const chunk of from.early) from.count(chunk.length);
        to.pending.push(...from.early);
        from.early = [];
        flush(to);
      }
      if (client.readEnded) maybeHalfClose(up);
      if (up.readEnded) maybeHalfClose(client);
      // A side whose peer still has a queue stays paused until the peer's drain.
      if (up.pending.length === 0) client.socket!.resume();
      if (client.pending.length === 0) up.socket!.resume();
    },
  };
}
