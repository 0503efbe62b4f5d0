/**
 * Bridges TCP and unix sockets so a process inside a network namespace can reach a server in the test
 * process without any routed address: inside the namespace, `tcp_to_unix.ts` listens on its loopback and
 * forwards to a unix socket file; in the test process, `serveUnixToTcp` forwards that socket to the
 * server's 127.0.0.1 port. All traffic stays on loopback interfaces and a socket file.
 */
import net from "node:net";
import { rm } from "node:fs/promises";

/** A running bridge. */
export interface Bridge {
  close(): Promise<void>;
}

function pipeBoth(a: net.Socket, b: net.Socket): void {
  a.pipe(b);
  b.pipe(a);
  const end = () => {
    a.destroy();
    b.destroy();
  };
  a.on("error", end);
  b.on("error", end);
  a.on("close", end);
  b.on("close", end);
}

/** Listens on the unix socket `path` and forwards each connection to `host:port` over TCP. */
export async function serveUnixToTcp(path: string, host: string, port: number): Promise<Bridge> {
  await rm(path, { force: true });
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    sockets.add(client);
    client.on("close", () => sockets.delete(client));
    const upstream = net.connect({ host, port });
    pipeBoth(client, upstream);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(path, () => resolve());
  });
  return {
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
      await rm(path, { force: true });
    },
  };
}

/** Listens on TCP `host:port` and forwards each connection to the unix socket `path`. */
export async function serveTcpToUnix(
  host: string,
  port: number,
  path: string,
): Promise<Bridge & { port: number }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    sockets.add(client);
    client.on("close", () => sockets.delete(client));
    pipeBoth(client, net.connect({ path }));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen({ host, port }, () => resolve());
  });
  return {
    port: (server.address() as net.AddressInfo).port,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
