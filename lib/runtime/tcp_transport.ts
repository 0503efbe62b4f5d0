/**
 * TCP for the userspace proxy mode, behind one narrow interface: listen, dial with a timeout, and splice
 * two connections (both directions, with backpressure and half-close). Two implementations: Bun's native
 * sockets (`Bun.listen`/`Bun.connect`, in the shipped binary: no stream objects per connection, so fewer
 * allocations and less CPU per connection; bulk connections relayed by splice(2) on a worker thread, so
 * no copy per byte) and `node:net` (Deno, and anywhere Bun's API is absent). {@link tcpTransport} picks
 * the one the running runtime has.
 */
import { bunTcpTransport } from "./tcp_transport_bun.ts";
import { nodeTcpTransport } from "./tcp_transport_node.ts";

export type { RelayConn, RelayListener, SpliceCounter, TcpTransport } from "./tcp_relay.ts";
export { stripMapped } from "./tcp_relay.ts";
import type { TcpTransport } from "./tcp_relay.ts";

/** The TCP transport of the running runtime: Bun's native sockets under Bun, else node:net. */
export function tcpTransport(): TcpTransport {
  return bunTcpTransport() ?? nodeTcpTransport;
}
