/**
 * The userspace proxy's TCP over `node:net` (Deno, and Bun when its native sockets are not used): a
 * paused accept, a dial with a timeout, and `pipe()` both ways (backpressure; `allowHalfOpen`, so a FIN
 * from one side ends only the other's write half).
 */
import * as net from "node:net";
import { type RelayConn, stripMapped, type TcpTransport } from "./tcp_relay.ts";

class NodeConn implements RelayConn {
  readonly remoteAddress: string;
  constructor(readonly socket: net.Socket) {
    this.remoteAddress = stripMapped(socket.remoteAddress);
  }
  get destroyed(): boolean {
    return this.socket.destroyed;
  }
  destroy(): void {
    this.socket.destroy();
  }
}

/** node:net sockets. */
export const nodeTcpTransport: TcpTransport = {
  name: "node",

  async listen(host, port, onAccept, onClose) {
    const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true }, (s) => {
      const c = new NodeConn(s);
      s.on("error", () => s.destroy());
      s.once("close", () => onClose(c));
      onAccept(c);
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen({ host, port, exclusive: true }, () => {
        server.off("error", reject);
        resolve();
      });
    });
    // Accept errors (EMFILE, ...) do not close the listener; they are not worth a crash.
    server.on("error", () => {});
    return {
      port: (server.address() as net.AddressInfo).port,
      close: () => new Promise<void>((resolve) => server.close(() => resolve())),
    };
  },

  dial(host, port, timeoutMs) {
    return new Promise((resolve) => {
      const s = net.connect({ host, port, allowHalfOpen: true, noDelay: true });
      const timer = setTimeout(() => {
        s.destroy();
        resolve(null);
      }, timeoutMs);
      s.once("connect", () => {
        clearTimeout(timer);
        s.removeAllListeners("error");
        s.on("error", () => s.destroy());
        resolve(new NodeConn(s));
      });
      s.once("error", () => {
        clearTimeout(timer);
        s.destroy();
        resolve(null);
      });
    });
  },

  splice(clientConn, upstreamConn, count, onClose) {
    const client = (clientConn as NodeConn).socket;
    const up = (upstreamConn as NodeConn).socket;
    let open = 2;
    const closed = () => {
      if (--open === 0) onClose();
    };
    client.once("close", () => {
      if (!up.writableEnded || !up.readableEnded) up.destroy();
      closed();
    });
    up.once("close", () => {
      if (!client.writableEnded || !client.readableEnded) client.destroy();
      closed();
    });
    client.on("data", (b: Uint8Array) => count("in", b.length));
    up.on("data", (b: Uint8Array) => count("out", b.length));
    // pipe: backpressure both ways; a FIN from one side ends the other's write half (half-close).
    client.pipe(up);
    up.pipe(client);
    client.resume();
  },
};
