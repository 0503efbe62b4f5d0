/**
 * A small HTTP/1.1 server for handlers that answer at once with a short body: the health-check node ports
 * of eTP=Local LoadBalancer Services, of which a node may have hundreds. On Bun it sits on `Bun.listen`
 * (raw TCP), which holds about half the memory of a `Bun.serve` while no one probes the port (measured by
 * bench/listener_memory.ts: ~14 against ~26 KiB per listener; ~26 against ~28 once each has served a
 * connection). Elsewhere (Deno) it sits on node:net with the same reading and
 * writing code (lib/net/http1_request.ts, http1_response.ts).
 *
 * Behaviour: requests on a connection are answered in order (pipelined ones too); keep-alive as Go decides
 * it; a malformed request gets Go's 400/431/505 and the connection closes; a connection idle for
 * {@link IDLE_TIMEOUT_S} seconds is closed (Bun.serve's default), and one that keeps sending requests
 * without reading the answers is dropped once {@link MAX_UNSENT_BYTES} wait, or once more than
 * {@link MAX_PIPELINED} requests wait for their answers. Bind errors are the same
 * {@link ListenError}s as serveApp's.
 */
import net from "node:net";
import { joinHostPort } from "../net/go_net.ts";
import { type Http1Request, Http1RequestReader } from "../net/http1_request.ts";
import { encodeHttp1Error, encodeHttp1Response } from "../net/http1_response.ts";
import { type FetchApp, type FetchHandler, internalError, type ServedApp, toListenError } from "./serve.ts";

/** Seconds a connection may sit without a byte before it is closed. */
export const IDLE_TIMEOUT_S = 10;

/** Answer bytes a connection may leave unread before it is dropped. */
export const MAX_UNSENT_BYTES = 256 * 1024;

/** Requests a connection may have read and not yet had answered (pipelined) before it is dropped. */
export const MAX_PIPELINED = 128;

/** What a connection driver needs of a socket. */
interface ConnIO {
  write(bytes: Uint8Array): void;
  /** Closes once everything written is sent. */
  end(): void;
  /** Closes now. */
  destroy(): void;
  /** Bytes written and not yet sent. */
  unsent(): number;
}

/** Answers the requests of one connection, in order. */
class Connection {
  readonly #reader = new Http1RequestReader();
  #queue: Promise<void> = Promise.resolve();
  /** Requests read and not yet answered. */
  #waiting = 0;
  #ended = false;

  constructor(
    private readonly io: ConnIO,
    private readonly handler: FetchHandler,
    private readonly origin: string,
  ) {}

  data(bytes: Uint8Array): void {
    if (this.#ended) return;
    for (const r of this.#reader.push(bytes)) {
      // Go reads the next request only after answering this one; here reading goes on, so bound the backlog.
      if (++this.#waiting > MAX_PIPELINED) {
        this.#ended = true;
        this.io.destroy();
        return;
      }
      if ("error" in r) {
        const { status } = r.error;
        this.#queue = this.#queue.then(() => this.#finish(encodeHttp1Error(status)));
      } else {
        const req = r.request;
        this.#queue = this.#queue.then(() => this.#answer(req)).finally(() => this.#waiting--);
      }
    }
  }

  /** The peer is gone: answers still queued are not written. */
  closed(): void {
    this.#ended = true;
  }

  #finish(bytes: Uint8Array): void {
    if (this.#ended) return;
    this.#ended = true;
    this.io.write(bytes);
    this.io.end();
  }

  async #answer(req: Http1Request): Promise<void> {
    if (this.#ended) return;
    let request: Request;
    try {
      const path = req.target.startsWith("/") ? req.target : "/";
      request = new Request(this.origin + path, {
        method: req.method,
        headers: req.headers as [string, string][],
      });
    } catch {
      this.#finish(encodeHttp1Error(400));
      return;
    }
    let res: Response;
    let body: Uint8Array;
    try {
      res = await this.handler(request);
      body = new Uint8Array(await res.arrayBuffer());
    } catch (e) {
      res = internalError(e);
      body = new Uint8Array(await res.arrayBuffer());
    }
    if (this.#ended) return;
    const bytes = encodeHttp1Response({
      status: res.status,
      headers: res.headers,
      body,
      head: req.method === "HEAD",
      close: req.close,
    });
    if (req.close) {
      this.#finish(bytes);
      return;
    }
    this.io.write(bytes);
    if (this.io.unsent() > MAX_UNSENT_BYTES) {
      this.#ended = true;
      this.io.destroy();
    }
  }
}

/** Bun's raw TCP listener, the part of its API used here. */
interface BunSocket {
  data: { conn?: Connection; unsent: Uint8Array[]; unsentBytes: number; ending: boolean };
  write(b: Uint8Array): number;
  end(): void;
  terminate(): void;
  timeout(seconds: number): void;
}
interface BunLike {
  listen(opts: {
    hostname: string;
    port: number;
    data?: unknown;
    socket: {
      open(s: BunSocket): void;
      data(s: BunSocket, b: Uint8Array): void;
      drain(s: BunSocket): void;
      close(s: BunSocket): void;
      error(s: BunSocket, e: Error): void;
      timeout(s: BunSocket): void;
    };
  }): { port: number; stop(closeActive?: boolean): void };
}

/** Writes what the kernel takes now and keeps the rest for `drain`. */
function bunFlush(s: BunSocket): void {
  const d = s.data;
  while (d.unsent.length > 0) {
    const head = d.unsent[0];
    const n = s.write(head);
    if (n < 0) {
      d.unsent = [];
      d.unsentBytes = 0;
      return;
    }
    d.unsentBytes -= n;
    if (n < head.length) {
      d.unsent[0] = head.subarray(n);
      return;
    }
    d.unsent.shift();
  }
  if (d.ending) s.end();
}

function serveOnBun(
  bun: BunLike,
  handler: FetchHandler,
  hostname: string,
  port: number,
  idle: number,
): ServedApp {
  let origin = "";
  const listener = bun.listen({
    hostname,
    port,
    socket: {
      open(s) {
        s.data = { unsent: [], unsentBytes: 0, ending: false };
        s.timeout(idle);
        s.data.conn = new Connection(
          {
            write(b) {
              s.data.unsent.push(b);
              s.data.unsentBytes += b.length;
              bunFlush(s);
            },
            end() {
              s.data.ending = true;
              bunFlush(s);
            },
            destroy: () => s.terminate(),
            unsent: () => s.data.unsentBytes,
          },
          handler,
          origin,
        );
      },
      data(s, b) {
        s.timeout(idle); // Bun's timeout is not reset by traffic: re-arm it
        s.data.conn?.data(b);
      },
      drain: (s) => bunFlush(s),
      close: (s) => s.data.conn?.closed(),
      error: (s) => s.data.conn?.closed(),
      timeout: (s) => s.end(),
    },
  });
  origin = `http://${joinHostPort(hostname, listener.port)}`;
  let closing: Promise<void> | null = null;
  return {
    hostname,
    port: listener.port,
    close: () => (closing ??= Promise.resolve().then(() => listener.stop(true))),
  };
}

function serveOnNodeNet(
  handler: FetchHandler,
  hostname: string,
  port: number,
  idle: number,
): Promise<ServedApp> {
  const sockets = new Set<net.Socket>();
  let origin = "";
  const server = net.createServer((sock) => {
    sockets.add(sock);
    sock.setTimeout(idle * 1000, () => sock.end());
    const conn = new Connection(
      {
        write: (b) => void sock.write(b),
        end: () => void sock.end(),
        destroy: () => void sock.destroy(),
        unsent: () => sock.writableLength,
      },
      handler,
      origin,
    );
    sock.on("data", (b: Uint8Array) => conn.data(b));
    sock.on("error", () => conn.closed());
    sock.on("close", () => {
      sockets.delete(sock);
      conn.closed();
    });
  });
  return new Promise((resolve, reject) => {
    server.once("error", (e) => reject(toListenError(hostname, port, e)));
    server.listen({ host: hostname, port, exclusive: true }, () => {
      const bound = (server.address() as net.AddressInfo).port;
      origin = `http://${joinHostPort(hostname, bound)}`;
      let closing: Promise<void> | null = null;
      resolve({
        hostname,
        port: bound,
        close: () => (closing ??= new Promise<void>((done) => {
          server.close(() => done());
          for (const s of sockets) s.destroy();
        })),
      });
    });
  });
}

/** Where and how {@link serveSmall} listens. */
export interface SmallServeOptions {
  readonly hostname: string;
  /** 0 picks a free port. */
  readonly port: number;
  /** Seconds without a byte before a connection is closed; {@link IDLE_TIMEOUT_S} when absent. */
  readonly idleTimeoutSeconds?: number;
}

/**
 * Serves `app` on `hostname:port` with the small server (see the module comment); rejects with a
 * {@link ListenError} when the bind fails. A {@link ServeFn}, like serveApp.
 */
export function serveSmall(app: FetchApp | FetchHandler, opts: SmallServeOptions): Promise<ServedApp> {
  const handler: FetchHandler = typeof app === "function" ? (r) => app(r) : (r) => app.fetch(r);
  const idle = opts.idleTimeoutSeconds ?? IDLE_TIMEOUT_S;
  const bun = (globalThis as { Bun?: BunLike }).Bun;
  if (bun === undefined) return serveOnNodeNet(handler, opts.hostname, opts.port, idle);
  try {
    return Promise.resolve(serveOnBun(bun, handler, opts.hostname, opts.port, idle));
  } catch (e) {
    return Promise.reject(toListenError(opts.hostname, opts.port, e));
  }
}
