/**
 * The userspace proxy's UDP over Bun's native UDP sockets (`Bun.udpSocket`): one handler object per
 * socket, datagrams handed over as they are read, sends straight to the kernel.
 */
import { udpBindError, type UdpTransport } from "./udp_socket.ts";

/** The part of Bun's UDP socket used here. */
interface BunUdpSocket {
  readonly port: number;
  send(data: Uint8Array, port: number, address: string): boolean;
  close(): void;
}

interface BunUdpApi {
  udpSocket(o: {
    hostname: string;
    port: number;
    socket: {
      data(s: BunUdpSocket, data: Uint8Array, port: number, address: string): void;
      error?(s: BunUdpSocket, e: Error): void;
    };
  }): Promise<BunUdpSocket>;
}

/** Bun's UDP sockets, or null when not running on Bun (or a Bun without them). */
export function bunUdpTransport(): UdpTransport | null {
  const bun = (globalThis as { Bun?: BunUdpApi }).Bun;
  if (bun === undefined || typeof bun.udpSocket !== "function") return null;
  return {
    name: "bun",

    async bind(family, host, port, onMessage, onError) {
      const hostname = host ?? (family === "udp6" ? "::" : "0.0.0.0");
      let s: BunUdpSocket;
      try {
        s = await bun.udpSocket({
          hostname,
          port,
          socket: {
            data: (_s, data, fromPort, fromAddress) => onMessage(data, fromPort, fromAddress),
            // Bun's handler is called with the error alone or after the socket, by version.
            error: (a: BunUdpSocket | Error, b?: Error) => onError(b ?? (a as Error)),
          },
        });
      } catch (e) {
        throw udpBindError(e, hostname, port);
      }
      let closed = false;
      return {
        port: s.port,
        send(data, toPort, toAddress) {
          if (!closed) s.send(data, toPort, toAddress);
        },
        close() {
          if (!closed) {
            closed = true;
            s.close(); // close(2) at once
          }
          return Promise.resolve();
        },
      };
    },
  };
}
