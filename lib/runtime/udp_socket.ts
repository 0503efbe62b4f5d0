/** The interface of the userspace proxy's UDP transport (lib/runtime/udp_transport.ts) and what both implementations share. */
import { joinHostPort } from "../net/go_net.ts";

/** Gets one datagram: its bytes (valid during the call only) and where it came from. */
export type UdpReceive = (data: Uint8Array, port: number, address: string) => void;

/** One bound UDP socket. */
export interface UdpSocketHandle {
  /** The bound port (the kernel's choice when 0 was asked for). */
  readonly port: number;
  /** Sends one datagram; one the kernel cannot take now is dropped, as UDP may. */
  send(data: Uint8Array, port: number, address: string): void;
  /** Closes the socket; no datagram is delivered after it. Resolves once the port is free again. */
  close(): Promise<void>;
}

/** What the userspace proxy needs of UDP. */
export interface UdpTransport {
  /** Which implementation ("bun" or "node"), for logs and tests. */
  readonly name: string;
  /**
   * Binds `host:port` (host null: the family's wildcard address; port 0: a port the kernel chooses) with
   * exclusive use of the address. `onError` gets errors the socket reports later (e.g. ECONNREFUSED after
   * an ICMP port unreachable). Rejects with the address and the OS error in the message
   * ("bind EADDRINUSE 10.96.0.10:53") when it cannot bind.
   */
  bind(
    family: "udp4" | "udp6",
    host: string | null,
    port: number,
    onMessage: UdpReceive,
    onError: (e: Error) => void,
  ): Promise<UdpSocketHandle>;
}

/** A bind failure in node:dgram's words ("bind EADDRINUSE 10.96.0.10:53"), whatever the runtime said. */
export function udpBindError(e: unknown, host: string, port: number): Error {
  const code = (e as { code?: string }).code ?? "failed";
  return new Error(`bind ${code} ${joinHostPort(host, port)}`, { cause: e });
}
