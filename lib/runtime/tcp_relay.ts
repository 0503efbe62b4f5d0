/** The interface of the userspace proxy's TCP transport (lib/runtime/tcp_transport.ts) and what both implementations share. */

/** One TCP connection, accepted or dialed. */
export interface RelayConn {
  /** The peer's address (IPv4-mapped IPv6 addresses given as IPv4); "" when unknown. */
  readonly remoteAddress: string;
  /** Whether the connection is closed (or being torn down). */
  readonly destroyed: boolean;
  /** Tears the connection down at once (both directions). */
  destroy(): void;
}

/** A listening TCP socket. */
export interface RelayListener {
  /** The bound port (the kernel's choice when 0 was asked for). */
  readonly port: number;
  /**
   * Stops accepting at once; established connections are left alone. The promise may resolve only after
   * they have all closed (node:net), so a caller ends them before awaiting it.
   */
  close(): Promise<void>;
}

/** Byte counts of a splice: "in" flows client → upstream, "out" upstream → client. */
export type SpliceCounter = (direction: "in" | "out", n: number) => void;

/** What the userspace proxy needs of TCP. */
export interface TcpTransport {
  /** Which implementation ("bun" or "node"), for logs and tests. */
  readonly name: string;
  /**
   * Listens on `host:port`; `onAccept` gets each connection paused (no byte read until it is spliced).
   * `onClose` of an accepted connection runs once when it is closed. Rejects with the address and the
   * OS error in the message when it cannot bind.
   */
  listen(
    host: string,
    port: number,
    onAccept: (conn: RelayConn) => void,
    onClose: (conn: RelayConn) => void,
  ): Promise<RelayListener>;
  /** Connects to `host:port`; null when refused, failed or not connected within `timeoutMs`. */
  dial(host: string, port: number, timeoutMs: number): Promise<RelayConn | null>;
  /**
   * Copies bytes both ways until both directions have finished or either side fails: a FIN from one side
   * ends the other's write half once what it sent is written; a reader is paused while its peer cannot
   * take more (backpressure). Both connections are closed at the end; `onClose` runs once then.
   */
  splice(client: RelayConn, upstream: RelayConn, count: SpliceCounter, onClose: () => void): void;
}

/** "::ffff:10.0.0.1" → "10.0.0.1"; other addresses unchanged; undefined → "". */
export function stripMapped(ip: string | undefined): string {
  if (!ip) return "";
  return ip.startsWith("::ffff:") && ip.includes(".") ? ip.slice(7) : ip;
}
