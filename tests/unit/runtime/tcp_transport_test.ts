import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import * as net from "node:net";
import { type RelayConn, type TcpTransport, tcpTransport } from "../../../lib/runtime/tcp_transport.ts";
import { nodeTcpTransport } from "../../../lib/runtime/tcp_transport_node.ts";
import { bunTcpTransport, HAND_OVER_BYTES } from "../../../lib/runtime/tcp_transport_bun.ts";
import { spliceEngine } from "../../../lib/runtime/tcp_splice_bun.ts";

const isBun = typeof (globalThis as { Bun?: unknown }).Bun !== "undefined";
const cleanups: (() => unknown)[] = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

/** A backend that reads slowly, counts the bytes, and after the client's FIN answers the count. */
async function slowCountingServer(): Promise<number> {
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    let n = 0;
    s.on("data", (d) => {
      n += d.length;
      s.pause();
      setTimeout(() => s.resume(), 1); // a slow reader: the proxy must queue and pause, not lose bytes
    });
    s.on("end", () => s.end(`${n}\n`));
    s.on("error", () => {});
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanups.push(() => new Promise((r) => server.close(r)));
  return (server.address() as net.AddressInfo).port;
}

/** A relay on 127.0.0.1 that splices every accepted connection to `target`. */
async function relay(t: TcpTransport, target: number, early = false) {
  const open = new Set<RelayConn>();
  const counted = { in: 0, out: 0 };
  let spliceEnded: () => void = () => {};
  /** Resolves when the splice's onClose ran (its counts are final then). */
  const ended = new Promise<void>((r) => (spliceEnded = r));
  const l = await t.listen("127.0.0.1", 0, async (c) => {
    open.add(c);
    // "early": the client's bytes and FIN are already there when the splice starts.
    if (early) await new Promise((r) => setTimeout(r, 50));
    const up = await t.dial("127.0.0.1", target, 1000);
    assert.ok(up, "dial");
    t.splice(c, up, (d, n) => (counted[d] += n), spliceEnded);
  }, (c) => open.delete(c));
  cleanups.push(() => l.close());
  return { port: l.port, open, counted, ended };
}

/** Sends `bytes` (a pattern) then FIN; resolves with the reply once the relay closes. */
function sendAll(port: number, bytes: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: "127.0.0.1", port, allowHalfOpen: true });
    let reply = "";
    s.on("data", (d) => (reply += d));
    s.on("close", () => resolve(reply));
    s.on("error", reject);
    s.on("connect", () => {
      const chunk = Buffer.alloc(Math.min(256 * 1024, bytes), 7);
      let sent = 0;
      const pump = () => {
        while (sent < bytes) {
          sent += chunk.length;
          if (!s.write(chunk)) return void s.once("drain", pump);
        }
        s.end();
      };
      pump();
    });
  });
}

const transports: [string, TcpTransport | null][] = [
  ["node", nodeTcpTransport],
  ["bun", bunTcpTransport()],
  ["bun-copy", bunTcpTransport({ zeroCopy: false })],
];

/** Pairs the splice worker took so far (0 where there is none). */
function handedOver(): number {
  return isBun ? spliceEngine()?.pairs().taken ?? 0 : 0;
}

/**
 * A backend that does not read until `release()`: the client's writes must stall at the buffers between
 * (the relay reads only what its peer can take). `total`: the bytes it received, at the client's FIN;
 * `closed`: its connection closed.
 */
async function stalledServer() {
  let release: () => void = () => {};
  const released = new Promise<void>((r) => (release = r));
  let received: (n: number) => void = () => {};
  const total = new Promise<number>((r) => (received = r));
  let gone: () => void = () => {};
  const closed = new Promise<void>((r) => (gone = r));
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    let n = 0;
    s.pause();
    void released.then(() => s.resume());
    s.on("data", (d) => (n += d.length));
    s.on("end", () => {
      received(n);
      s.end();
    });
    s.on("error", () => {});
    s.on("close", gone);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanups.push(() => new Promise((r) => server.close(r)));
  return { port: (server.address() as net.AddressInfo).port, release, total, closed };
}

describe("TcpTransport", () => {
  it("is Bun's native sockets under Bun, node:net elsewhere", () => {
    assert.equal(tcpTransport().name, isBun ? "bun" : "node");
    assert.equal(bunTcpTransport({ zeroCopy: false })?.name, isBun ? "bun-copy" : undefined);
    assert.equal(bunTcpTransport() === null, !isBun);
  });

  for (const [name, t] of transports) {
    if (t === null) continue;
    it(`${name}: 32 MiB to a slow reader arrive whole; the FIN passes, the answer comes back (half-close)`, async () => {
      const r = await relay(t, await slowCountingServer());
      const total = 32 << 20;
      const before = handedOver();
      assert.equal((await sendAll(r.port, total)).trim(), String(total));
      await r.ended;
      // Bun's zero-copy transport hands a bulk connection to the splice worker; the others never do.
      assert.equal(handedOver() - before, name === "bun" && spliceEngine() !== null ? 1 : 0);
      assert.equal(r.counted.in, total);
      assert.equal(r.counted.out, `${total}\n`.length);
      await new Promise((res) => setTimeout(res, 20));
      assert.equal(r.open.size, 0, "the accepted connection is closed at the end");
    });

    it(`${name}: a reader that stops reading stalls the writer (backpressure); nothing is lost`, async () => {
      const backend = await stalledServer();
      const r = await relay(t, backend.port);
      const s = net.connect({ host: "127.0.0.1", port: r.port, allowHalfOpen: true });
      s.on("error", () => {});
      await new Promise((res) => s.once("connect", res));
      // Write until the socket stays full for 300 ms; a relay without backpressure would take it all.
      const chunk = Buffer.alloc(1 << 20, 7);
      const limit = 512 << 20;
      let sent = 0;
      while (sent < limit) {
        sent += chunk.length;
        if (s.write(chunk)) continue;
        const drained = await new Promise<boolean>((res) => {
          const timer = setTimeout(() => res(false), 300);
          s.once("drain", () => (clearTimeout(timer), res(true)));
        });
        if (!drained) break;
      }
      assert.ok(sent < 128 << 20, `${sent >> 20} MiB went in while the reader read nothing`);
      const before = handedOver();
      backend.release();
      s.end();
      assert.equal(await backend.total, sent);
      await r.ended;
      assert.equal(r.counted.in, sent);
      assert.ok(handedOver() - before <= 1);
      s.destroy();
    });

    it(`${name}: destroying the client while bulk flows tears both connections down`, async () => {
      const backend = await stalledServer();
      const r = await relay(t, backend.port);
      const s = net.connect({ host: "127.0.0.1", port: r.port });
      let clientClosed: () => void = () => {};
      const closed = new Promise<void>((res) => (clientClosed = res));
      s.on("error", () => {});
      s.on("close", clientClosed);
      const before = handedOver();
      s.write(Buffer.alloc(4 << 20, 7)); // past the hand-over threshold: Bun's relay is on the worker now
      await new Promise((res) => setTimeout(res, 100));
      if (name === "bun" && spliceEngine() !== null) assert.equal(handedOver() - before, 1);
      for (const conn of r.open) conn.destroy();
      await r.ended;
      await closed;
      backend.release(); // a paused socket notices nothing
      await backend.closed; // the upstream connection is gone too
      await new Promise((res) => setTimeout(res, 20));
      assert.equal(r.open.size, 0);
    });

    it(`${name}: a short connection stays off the splice worker`, async () => {
      const r = await relay(t, await slowCountingServer());
      const before = handedOver();
      const bytes = HAND_OVER_BYTES / 4;
      assert.equal((await sendAll(r.port, bytes)).trim(), String(bytes));
      await r.ended;
      assert.equal(handedOver(), before);
      assert.equal(r.counted.in, bytes);
    });

    it(`${name}: bytes and FIN sent before the splice are not lost`, async () => {
      const r = await relay(t, await slowCountingServer(), true);
      assert.equal((await sendAll(r.port, 1 << 20)).trim(), String(1 << 20));
    });

    it(`${name}: destroying the client tears the upstream connection down`, async () => {
      let upstreamClosed: () => void = () => {};
      const closed = new Promise<void>((r) => (upstreamClosed = r));
      const server = net.createServer((s) => {
        s.on("close", upstreamClosed);
        s.on("error", () => {});
      });
      await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
      cleanups.push(() => new Promise((r) => server.close(r)));
      const r = await relay(t, (server.address() as net.AddressInfo).port);
      const c = net.connect({ host: "127.0.0.1", port: r.port });
      c.on("error", () => {});
      await new Promise((res) => setTimeout(res, 50));
      for (const conn of r.open) conn.destroy();
      await closed;
      c.destroy();
    });

    it(`${name}: a refused dial and a bind error are reported`, async () => {
      const l = await t.listen("127.0.0.1", 0, () => {}, () => {});
      cleanups.push(() => l.close());
      await assert.rejects(
        t.listen("127.0.0.1", l.port, () => {}, () => {}),
        { message: `listen EADDRINUSE: address already in use 127.0.0.1:${l.port}` },
      );
      const free = await new Promise<number>((r) => {
        const s = net.createServer().listen(0, "127.0.0.1", () => {
          const p = (s.address() as net.AddressInfo).port;
          s.close(() => r(p));
        });
      });
      assert.equal(await t.dial("127.0.0.1", free, 1000), null);
    });
  }
});
