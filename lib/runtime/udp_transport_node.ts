/** The userspace proxy's UDP over `node:dgram` (Deno, and Bun when its native sockets are not used). */
import * as dgram from "node:dgram";
import { udpBindError, type UdpTransport } from "./udp_socket.ts";

/** node:dgram sockets. */
export const nodeUdpTransport: UdpTransport = {
  name: "node",

  async bind(family, host, port, onMessage, onError) {
    const s = dgram.createSocket({ type: family, reuseAddr: false });
    await new Promise<void>((resolve, reject) => {
      s.once("error", (e) => reject(udpBindError(e, host ?? (family === "udp6" ? "::" : "0.0.0.0"), port)));
      s.bind({ address: host ?? undefined, port, exclusive: true }, () => {
        s.removeAllListeners("error");
        resolve();
      });
    });
    s.on("error", onError);
    s.on("message", (msg: Uint8Array, r: dgram.RemoteInfo) => onMessage(msg, r.port, r.address));
    let closed = false;
    return {
      port: s.address().port,
      send(data, toPort, toAddress) {
        if (!closed) s.send(data, toPort, toAddress);
      },
      close() {
        if (closed) return Promise.resolve();
        closed = true;
        return new Promise<void>((resolve) => s.close(() => resolve()));
      },
    };
  },
};
