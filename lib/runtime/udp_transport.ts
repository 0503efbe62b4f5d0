/**
 * UDP for the userspace proxy mode, behind one narrow interface: bind a socket, send datagrams, get
 * datagrams. Two implementations: Bun's native UDP sockets (`Bun.udpSocket`, in the shipped binary: no
 * EventEmitter per socket and no object per datagram besides its bytes) and `node:dgram` (Deno, and
 * anywhere Bun's API is absent). {@link udpTransport} picks the one the running runtime has.
 */
import { bunUdpTransport } from "./udp_transport_bun.ts";
import { nodeUdpTransport } from "./udp_transport_node.ts";

export type { UdpReceive, UdpSocketHandle, UdpTransport } from "./udp_socket.ts";
import type { UdpTransport } from "./udp_socket.ts";

/** The UDP transport of the running runtime: Bun's native sockets under Bun, else node:dgram. */
export function udpTransport(): UdpTransport {
  return bunUdpTransport() ?? nodeUdpTransport;
}
