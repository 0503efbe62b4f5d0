/**
 * A TCP relay (node:net) that counts what crosses it: put between a client and a server, it counts the bytes
 * each side receives (TLS handshakes, records, HTTP headers and bodies: everything on the wire above TCP)
 * and the connections opened. Used by the WAN bench and by tests that check connection reuse.
 */
import net from "node:net";

/** Byte and connection counts of a {@link CountingRelay}. */
export interface RelayCounts {
  /** Bytes the server sent towards clients (what a node's link receives). */
  toClient: number;
  /** Bytes clients sent towards the server. */
  toServer: number;
  /** TCP connections accepted so far. */
  connections: number;
}

/** A running relay. */
export interface CountingRelay {
  /** Port the relay listens on (127.0.0.1). */
  readonly port: number;
  /** A snapshot of the counts. */
  counts(): RelayCounts;
  /**
   * From now on drops every byte in both directions on open connections, which stay open: a middlebox that
   * silently lost them. New connections are relayed as before.
   */
  blackhole(): void;
  /** Stops listening and destroys every relayed connection. */
  close(): Promise<void>;
}

/** Starts a relay on 127.0.0.1 (ephemeral port) towards `target` (127.0.0.1:targetPort). */
export async function startCountingRelay(
  targetPort: number,
  targetHost = "127.0.0.1",
): Promise<CountingRelay> {
  const c: RelayCounts = { toClient: 0, toServer: 0, connections: 0 };
  const sockets = new Set<net.Socket>();
  const dead = new WeakSet<net.Socket>();
  const server = net.createServer((client) => {
    c.connections++;
    const upstream = net.connect(targetPort, targetHost);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => {});
    }
    client.on("data", (d: Uint8Array) => {
      if (dead.has(client)) return;
      c.toServer += d.length;
      upstream.write(d);
    });
    upstream.on("data", (d: Uint8Array) => {
      if (dead.has(client)) return;
      c.toClient += d.length;
      client.write(d);
    });
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const port = (server.address() as net.AddressInfo).port;
  return {
    port,
    counts: () => ({ ...c }),
    blackhole: () => {
      for (const s of sockets) dead.add(s);
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await Promise.race([
        new Promise<void>((r) => server.close(() => r())),
        new Promise((r) => setTimeout(r, 200)),
      ]);
    },
  };
}
