import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import * as dgram from "node:dgram";
import { type UdpTransport, udpTransport } from "../../../lib/runtime/udp_transport.ts";
import { nodeUdpTransport } from "../../../lib/runtime/udp_transport_node.ts";
import { bunUdpTransport } from "../../../lib/runtime/udp_transport_bun.ts";
import { openProxySocket, type ProxySocket } from "../../../lib/proxy/userspace/proxy_socket.ts";
import { newEndpointInfo } from "../../../lib/proxy/endpoints.ts";

const isBun = typeof (globalThis as { Bun?: unknown }).Bun !== "undefined";
const cleanups: (() => unknown)[] = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

/** An echo server on 127.0.0.1 answering "echo:<datagram>". */
async function echoServer(): Promise<number> {
  const echo = dgram.createSocket("udp4");
  await new Promise<void>((r) => echo.bind(0, "127.0.0.1", r));
  echo.on("message", (m, r) => echo.send(Buffer.concat([Buffer.from("echo:"), m]), r.port, r.address));
  cleanups.push(() => new Promise<void>((r) => echo.close(() => r())));
  return echo.address().port;
}

/** A client socket collecting what it receives, with the sender's address. */
async function client() {
  const s = dgram.createSocket("udp4");
  await new Promise<void>((r) => s.bind(0, "127.0.0.1", r));
  cleanups.push(() => new Promise<void>((r) => s.close(() => r())));
  const got: string[] = [];
  const waiters: (() => void)[] = [];
  s.on("message", (m, r) => {
    got.push(`${m}@${r.address}:${r.port}`);
    waiters.splice(0).forEach((w) => w());
  });
  const until = async (n: number) => {
    const deadline = Date.now() + 2000;
    while (got.length < n && Date.now() < deadline) {
      await new Promise<void>((r) => (waiters.push(r), setTimeout(r, 50)));
    }
    return got;
  };
  return { s, got, until };
}

const transports: [string, UdpTransport | null][] = [["node", nodeUdpTransport], ["bun", bunUdpTransport()]];

describe("UdpTransport", () => {
  it("is Bun's native UDP sockets under Bun, node:dgram elsewhere", () => {
    assert.equal(udpTransport().name, isBun ? "bun" : "node");
    assert.equal(bunUdpTransport() === null, !isBun);
  });

  for (const [name, t] of transports) {
    if (t === null) continue;

    it(`${name}: binds, receives with the sender's address, sends; a taken port is a bind error`, async () => {
      const seen: string[] = [];
      const sock = await t.bind("udp4", "127.0.0.1", 0, (d, port, address) => {
        seen.push(`${new TextDecoder().decode(d)}@${address}:${port}`);
        sock.send(new TextEncoder().encode("pong"), port, address);
      }, () => {});
      cleanups.push(() => sock.close());
      assert.ok(sock.port > 0);
      const c = await client();
      c.s.send("ping", sock.port, "127.0.0.1");
      assert.deepEqual(await c.until(1), [`pong@127.0.0.1:${sock.port}`]);
      assert.deepEqual(seen, [`ping@127.0.0.1:${c.s.address().port}`]);
      await assert.rejects(
        t.bind("udp4", "127.0.0.1", sock.port, () => {}, () => {}),
        { message: `bind EADDRINUSE 127.0.0.1:${sock.port}` },
      );
      await sock.close();
      // The port is free again once close resolves.
      const again = await t.bind("udp4", "127.0.0.1", sock.port, () => {}, () => {});
      await again.close();
    });

    it(`${name}: a wildcard socket on a port the kernel chooses (a session's upstream socket)`, async () => {
      const echo = await echoServer();
      let reply = "";
      const got = new Promise<void>((resolve) => {
        void t.bind("udp4", null, 0, (d) => {
          reply = new TextDecoder().decode(d);
          resolve();
        }, () => {}).then((s) => {
          cleanups.push(() => s.close());
          s.send(new TextEncoder().encode("x"), echo, "127.0.0.1");
        });
      });
      await got;
      assert.equal(reply, "echo:x");
    });

    it(`${name}: the proxy's UDP listener: a burst before the session socket is bound is all forwarded, replies come from the listener, the session ends when idle`, async () => {
      const echo = await echoServer();
      const ep = newEndpointInfo(
        {
          ip: "127.0.0.1",
          ready: true,
          serving: true,
          terminating: false,
          zoneHints: null,
          nodeHints: null,
          nodeName: "n",
          zone: "",
        },
        echo,
        false,
      );
      const bytes = { in: 0, out: 0 };
      const ps: ProxySocket = await openProxySocket({
        protocol: "UDP",
        address: "127.0.0.1",
        port: 0,
        picker: { next: () => ep, dialFailed: () => {}, dialSucceeded: () => {} },
        stats: {
          connection: () => {},
          bytes: (d, n) => (bytes[d] += n),
          dialError: () => {},
          noEndpoints: () => {},
        },
        udpIdleTimeoutMs: 300,
        udpTransport: t,
        log: { warn: () => {}, debug: () => {} },
      });
      cleanups.push(() => ps.close(0));
      const c = await client();
      for (let i = 0; i < 10; i++) c.s.send(`d${i}`, ps.port, "127.0.0.1"); // one tick: the session is new
      const got = await c.until(10);
      assert.deepEqual(
        [...got].sort(),
        Array.from({ length: 10 }, (_, i) => `echo:d${i}@127.0.0.1:${ps.port}`).sort(),
      );
      assert.deepEqual(bytes, { in: 20, out: 70 });
      assert.equal(ps.activeCount(), 1);
      // A datagram near the 64 KiB limit passes whole both ways (upstream's 4 KiB buffer truncated it).
      const big = await new Promise<number>((resolve) => {
        c.s.once("message", (m) => resolve(m.length));
        c.s.send(Buffer.alloc(65000, 1), ps.port, "127.0.0.1");
      });
      assert.equal(big, 65005);
      await new Promise((r) => setTimeout(r, 600));
      assert.equal(ps.activeCount(), 0, "the idle session ended");
    });
  }
});
