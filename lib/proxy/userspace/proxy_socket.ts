/**
 * The userspace mode's sockets (upstream pkg/proxy/userspace/proxysocket.go): one listener per service port
 * address, TCP or UDP, that hands each connection or datagram to an endpoint its {@link EndpointPicker}
 * chooses. TCP: dial with upstream's retry across endpoints (250 ms, 500 ms, 1 s, 2 s, each on the next
 * endpoint), then copy both directions with backpressure and half-close. UDP: one session per client
 * address, closed after an idle timeout; replies leave through the listener socket, so they come from the
 * address the client sent to.
 *
 * TCP goes through the runtime's {@link TcpTransport} (Bun's native sockets in the shipped binary,
 * node:net elsewhere); UDP uses node:dgram, which Deno and Bun both provide.
 */
import * as dgram from "node:dgram";
import type { EndpointInfo } from "../types.ts";
import { type RelayConn, stripMapped, type TcpTransport, tcpTransport } from "../../runtime/tcp_transport.ts";

/** Upstream's EndpointDialTimeouts: one dial per entry, each on the next endpoint. */
export const ENDPOINT_DIAL_TIMEOUTS_MS: readonly number[] = [250, 500, 1000, 2000];

/** Upstream's default UDP session idle timeout (--udp-timeout). */
export const DEFAULT_UDP_IDLE_TIMEOUT_MS = 250;

/** Chooses endpoints and records dial outcomes; the load balancer behind one listener. */
export interface EndpointPicker {
  /** Next endpoint for `clientIP`, or null when the service port has none. */
  next(clientIP: string, resetAffinity: boolean): EndpointInfo | null;
  /** Whether a client may use this listener at all (loadBalancerSourceRanges); absent: everyone. */
  admit?: (clientIP: string) => boolean;
  dialFailed(ep: EndpointInfo): void;
  dialSucceeded(ep: EndpointInfo): void;
}

/** Counters one listener reports (metrics per service port). */
export interface ProxySocketStats {
  connection(): void;
  bytes(direction: "in" | "out", n: number): void;
  dialError(): void;
  /** A connection or datagram arrived while the service port had no endpoint. */
  noEndpoints(): void;
}

/** One listening socket. */
export interface ProxySocket {
  /** The bound port (differs from the requested one when 0 was asked for). */
  readonly port: number;
  /** Open client connections or UDP sessions. */
  activeCount(): number;
  /** Stops accepting; closes established TCP connections after `graceMs` (0: at once), UDP sessions at once. */
  close(graceMs: number): Promise<void>;
}

/** Where and what to listen on. */
export interface ProxySocketOptions {
  readonly protocol: "TCP" | "UDP";
  readonly address: string;
  /** 0 for a port the kernel chooses. */
  readonly port: number;
  readonly picker: EndpointPicker;
  readonly stats: ProxySocketStats;
  readonly udpIdleTimeoutMs?: number;
  readonly dialTimeoutsMs?: readonly number[];
  /** TCP sockets; default: the running runtime's ({@link tcpTransport}). */
  readonly transport?: TcpTransport;
  readonly log: { warn(msg: string): void; debug(msg: string): void };
}

/** Opens a listener; rejects with the address in the message when it cannot bind. */
export function openProxySocket(o: ProxySocketOptions): Promise<ProxySocket> {
  return o.protocol === "TCP" ? openTCP(o) : openUDP(o);
}

function hostPort(address: string, port: number): string {
  return address.includes(":") ? `[${address}]:${port}` : `${address}:${port}`;
}

async function openTCP(o: ProxySocketOptions): Promise<ProxySocket> {
  const transport = o.transport ?? tcpTransport();
  const clients = new Set<RelayConn>();
  const timeouts = o.dialTimeoutsMs ?? ENDPOINT_DIAL_TIMEOUTS_MS;
  const listener = await transport.listen(
    o.address,
    o.port,
    (client) => {
      clients.add(client);
      o.stats.connection();
      void dialAndSplice(transport, client, o, timeouts);
    },
    (client) => clients.delete(client),
  );
  let closed = false;
  return {
    port: listener.port,
    activeCount: () => clients.size,
    async close(graceMs: number): Promise<void> {
      if (closed) return;
      closed = true;
      // node:net's close resolves only after the last connection: start it, then end the connections.
      const done = listener.close();
      if (clients.size > 0) {
        if (graceMs > 0) await waitDrained(clients, graceMs);
        for (const c of clients) c.destroy(); // each takes its upstream connection with it
      }
      await done;
    },
  };
}

/** Resolves when `conns` is empty or `ms` passed. */
function waitDrained(conns: Set<RelayConn>, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const deadline = Date.now() + ms;
    const tick = () => {
      if (conns.size === 0 || Date.now() >= deadline) resolve();
      else setTimeout(tick, Math.min(100, deadline - Date.now()));
    };
    tick();
  });
}

async function dialAndSplice(
  transport: TcpTransport,
  client: RelayConn,
  o: ProxySocketOptions,
  timeouts: readonly number[],
): Promise<void> {
  const clientIP = client.remoteAddress;
  if (o.picker.admit && !o.picker.admit(clientIP)) {
    client.destroy(); // outside loadBalancerSourceRanges
    return;
  }
  let upstream: RelayConn | null = null;
  for (let attempt = 0; attempt < timeouts.length && upstream === null; attempt++) {
    if (client.destroyed) return;
    const ep = o.picker.next(clientIP, attempt > 0);
    if (ep === null) {
      // No endpoint: close at once (there is no kernel REJECT in this mode).
      o.stats.noEndpoints();
      client.destroy();
      return;
    }
    upstream = await transport.dial(ep.ip, ep.port, timeouts[attempt]);
    if (upstream === null) {
      o.stats.dialError();
      o.picker.dialFailed(ep);
      o.log.debug(`userspace: dial ${ep.endpoint} failed (attempt ${attempt + 1})`);
    } else {
      o.picker.dialSucceeded(ep);
    }
  }
  if (upstream === null) {
    o.log.warn(`userspace: no endpoint of ${hostPort(o.address, o.port)} accepted a connection; closing it`);
    client.destroy();
    return;
  }
  if (client.destroyed) {
    upstream.destroy();
    return;
  }
  transport.splice(client, upstream, (d, n) => o.stats.bytes(d, n), () => {});
}

interface UDPSession {
  socket: dgram.Socket;
  endpoint: EndpointInfo;
  timer: ReturnType<typeof setTimeout>;
}

async function openUDP(o: ProxySocketOptions): Promise<ProxySocket> {
  const v6 = o.address.includes(":");
  const type = v6 ? "udp6" : "udp4";
  const idleMs = o.udpIdleTimeoutMs ?? DEFAULT_UDP_IDLE_TIMEOUT_MS;
  const listener = dgram.createSocket({ type, reuseAddr: false });
  const sessions = new Map<string, UDPSession>();
  await new Promise<void>((resolve, reject) => {
    listener.once("error", reject);
    listener.bind({ address: o.address, port: o.port, exclusive: true }, () => {
      listener.off("error", reject);
      resolve();
    });
  });
  listener.on(
    "error",
    (e) => o.log.warn(`userspace listener ${hostPort(o.address, o.port)}/UDP: ${e.message}`),
  );
  let closed = false;

  const endSession = (key: string) => {
    const s = sessions.get(key);
    if (!s) return;
    sessions.delete(key);
    clearTimeout(s.timer);
    try {
      s.socket.close();
    } catch { /* already closed */ }
  };

  listener.on("message", (msg: Uint8Array, rinfo: dgram.RemoteInfo) => {
    if (closed) return;
    const key = hostPort(rinfo.address, rinfo.port);
    let s = sessions.get(key);
    if (!s) {
      if (o.picker.admit && !o.picker.admit(stripMapped(rinfo.address))) return;
      const ep = o.picker.next(stripMapped(rinfo.address), false);
      if (ep === null) {
        o.stats.noEndpoints();
        return;
      }
      o.stats.connection();
      const sock = dgram.createSocket(type);
      const session: UDPSession = {
        socket: sock,
        endpoint: ep,
        timer: setTimeout(() => endSession(key), idleMs),
      };
      sock.on("message", (reply: Uint8Array, from: dgram.RemoteInfo) => {
        if (from.port !== ep.port || stripMapped(from.address) !== ep.ip) return; // not our endpoint
        o.stats.bytes("out", reply.length);
        clearTimeout(session.timer);
        session.timer = setTimeout(() => endSession(key), idleMs);
        if (!closed) listener.send(reply, rinfo.port, rinfo.address);
      });
      sock.on("error", () => {
        o.stats.dialError();
        o.picker.dialFailed(ep);
        endSession(key);
      });
      sessions.set(key, session);
      s = session;
    }
    o.stats.bytes("in", msg.length);
    clearTimeout(s.timer);
    s.timer = setTimeout(() => endSession(key), idleMs);
    s.socket.send(msg, s.endpoint.port, s.endpoint.ip);
  });

  const addr = listener.address();
  return {
    port: addr.port,
    activeCount: () => sessions.size,
    // UDP sessions end with the listener, whatever the grace (upstream: closing the socket breaks them):
    // their replies leave through the listener, so without it they could not reach the client anyway.
    async close(_graceMs: number): Promise<void> {
      if (closed) return;
      closed = true;
      for (const key of [...sessions.keys()]) endSession(key);
      await new Promise<void>((resolve) => listener.close(() => resolve()));
    },
  };
}
