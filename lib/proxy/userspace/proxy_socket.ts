/**
 * The userspace mode's sockets (upstream pkg/proxy/userspace/proxysocket.go): one listener per service port
 * address, TCP or UDP, that hands each connection or datagram to an endpoint its {@link EndpointPicker}
 * chooses. TCP: dial with upstream's retry across endpoints (250 ms, 500 ms, 1 s, 2 s, each on the next
 * endpoint), then copy both directions with backpressure and half-close. UDP: one session per client
 * address, closed after an idle timeout; replies leave through the listener socket, so they come from the
 * address the client sent to.
 *
 * TCP and UDP go through the runtime's {@link TcpTransport} and {@link UdpTransport} (Bun's native
 * sockets in the shipped binary, node:net and node:dgram elsewhere).
 */
import type { EndpointInfo } from "../types.ts";
import { type RelayConn, stripMapped, type TcpTransport, tcpTransport } from "../../runtime/tcp_transport.ts";
import { type UdpSocketHandle, type UdpTransport, udpTransport } from "../../runtime/udp_transport.ts";

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
  /** UDP sockets; default: the running runtime's ({@link udpTransport}). */
  readonly udpTransport?: UdpTransport;
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
  /** Null until the session's socket is bound; datagrams wait in `waiting` until then. */
  socket: UdpSocketHandle | null;
  waiting: Uint8Array[];
  endpoint: EndpointInfo;
  timer: ReturnType<typeof setTimeout>;
  /** Date.now() of the last datagram either way; the timer re-arms itself until idleMs passed since. */
  last: number;
  ended: boolean;
}

/** Datagrams a session keeps while its socket is being bound; later ones are dropped, as UDP may. */
const MAX_WAITING_DATAGRAMS = 64;

async function openUDP(o: ProxySocketOptions): Promise<ProxySocket> {
  const transport = o.udpTransport ?? udpTransport();
  const type = o.address.includes(":") ? "udp6" : "udp4";
  const idleMs = o.udpIdleTimeoutMs ?? DEFAULT_UDP_IDLE_TIMEOUT_MS;
  const sessions = new Map<string, UDPSession>();
  let closed = false;

  const endSession = (key: string) => {
    const s = sessions.get(key);
    if (!s) return;
    sessions.delete(key);
    s.ended = true;
    clearTimeout(s.timer);
    void s.socket?.close();
  };
  // One timer per session, not one per datagram: on expiry it ends the session or waits out the rest.
  const expire = (key: string, s: UDPSession) => {
    const left = s.last + idleMs - Date.now();
    if (left > 0) s.timer = setTimeout(() => expire(key, s), left);
    else endSession(key);
  };
  const touch = (s: UDPSession) => {
    s.last = Date.now();
  };

  const onDatagram = (msg: Uint8Array, fromPort: number, fromAddress: string) => {
    if (closed) return;
    const key = hostPort(fromAddress, fromPort);
    let s = sessions.get(key);
    if (!s) {
      const clientIP = stripMapped(fromAddress);
      if (o.picker.admit && !o.picker.admit(clientIP)) return;
      const ep = o.picker.next(clientIP, false);
      if (ep === null) {
        o.stats.noEndpoints();
        return;
      }
      o.stats.connection();
      const session: UDPSession = {
        socket: null,
        waiting: [],
        endpoint: ep,
        timer: setTimeout(() => expire(key, session), idleMs),
        last: Date.now(),
        ended: false,
      };
      sessions.set(key, session);
      s = session;
      const onReply = (reply: Uint8Array, replyPort: number, replyAddress: string) => {
        if (replyPort !== ep.port || stripMapped(replyAddress) !== ep.ip) return; // not our endpoint
        o.stats.bytes("out", reply.length);
        touch(session);
        // From the listener: the reply leaves from the address the client sent to.
        if (!closed) listener.send(reply, fromPort, fromAddress);
      };
      const onError = () => {
        if (session.ended) return;
        o.stats.dialError();
        o.picker.dialFailed(ep);
        endSession(key);
      };
      transport.bind(type, null, 0, onReply, onError).then(
        (sock) => {
          if (session.ended) return void sock.close();
          session.socket = sock;
          for (const d of session.waiting) sock.send(d, ep.port, ep.ip);
          session.waiting = [];
        },
        (e) => {
          o.log.warn(
            `userspace ${hostPort(o.address, o.port)}/UDP: no session socket: ${(e as Error).message}`,
          );
          endSession(key);
        },
      );
    }
    o.stats.bytes("in", msg.length);
    touch(s);
    if (s.socket !== null) s.socket.send(msg, s.endpoint.port, s.endpoint.ip);
    // The datagram's bytes are only valid during this call: a waiting one is copied.
    else if (s.waiting.length < MAX_WAITING_DATAGRAMS) s.waiting.push(msg.slice());
  };

  const listener = await transport.bind(
    type,
    o.address,
    o.port,
    onDatagram,
    (e) => {
      // ECONNREFUSED: a reply's client is gone (ICMP port unreachable); not worth a warning each time.
      const log = (e as { code?: string }).code === "ECONNREFUSED" ? o.log.debug : o.log.warn;
      log(`userspace listener ${hostPort(o.address, o.port)}/UDP: ${e.message}`);
    },
  );

  return {
    port: listener.port,
    activeCount: () => sessions.size,
    // UDP sessions end with the listener, whatever the grace (upstream: closing the socket breaks them):
    // their replies leave through the listener, so without it they could not reach the client anyway.
    close(_graceMs: number): Promise<void> {
      if (closed) return Promise.resolve();
      closed = true;
      for (const key of [...sessions.keys()]) endSession(key);
      return listener.close();
    },
  };
}
