/**
 * lib/runtime/serve_small.ts and lib/net/http1_response.ts over real sockets: Go's response bytes for the
 * health-check handler, keep-alive and pipelining, HEAD, Go's answers to malformed requests, a handler that
 * throws, bind errors, the dual-stack wildcard, and close() ending open connections.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { encodeHttp1Response } from "../../../lib/net/http1_response.ts";
import { ListenError, type ServedApp } from "../../../lib/runtime/serve.ts";
import { MAX_PIPELINED, serveSmall } from "../../../lib/runtime/serve_small.ts";

const dec = new TextDecoder();

/** Upstream's health-check answer as Go's net/http writes it (headers sorted, then Date, Content-Length). */
const GO_BYTES = "HTTP/1.1 503 Service Unavailable\r\n" +
  "Content-Type: application/json\r\n" +
  "X-Content-Type-Options: nosniff\r\n" +
  "X-Load-Balancing-Endpoint-Weight: 0\r\n" +
  "Date: Sun, 29 Nov 2026 02:00:00 GMT\r\n" +
  "Content-Length: 2\r\n" +
  "\r\n{}";

/** Sends `text` on a new connection and collects everything until the server closes it (or `ms` pass). */
function exchange(
  port: number,
  text: string,
  host = "127.0.0.1",
  ms = 3000,
): Promise<{ got: string; closed: boolean }> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host, port }, () => s.write(text));
    let got = "";
    const timer = setTimeout(() => {
      s.destroy();
      resolve({ got, closed: false });
    }, ms);
    s.on("data", (b: Uint8Array) => (got += dec.decode(b)));
    s.on("error", (e) => {
      clearTimeout(timer);
      // a reset is the server dropping the connection
      if ((e as NodeJS.ErrnoException).code === "ECONNRESET") resolve({ got, closed: true });
      else reject(e);
    });
    s.on("close", () => {
      clearTimeout(timer);
      resolve({ got, closed: true });
    });
  });
}

/** Status lines in `got`, in order. */
const statuses = (got: string) => [...got.matchAll(/HTTP\/1\.1 (\d+)/g)].map((m) => Number(m[1]));

async function withServer(
  handler: (r: Request) => Response | Promise<Response>,
  f: (s: ServedApp) => Promise<void>,
  hostname = "127.0.0.1",
): Promise<void> {
  const s = await serveSmall(handler, { hostname, port: 0 });
  try {
    await f(s);
  } finally {
    await s.close();
  }
}

const health = () =>
  new Response("{}", {
    status: 503,
    headers: {
      "content-type": "application/json",
      "X-Content-Type-Options": "nosniff",
      "x-load-balancing-endpoint-weight": "0",
    },
  });

describe("HTTP/1.1 response bytes", () => {
  it("are Go's for the health-check handler: canonical sorted headers, then Date and Content-Length", async () => {
    const r = health();
    const bytes = encodeHttp1Response({
      status: r.status,
      headers: r.headers,
      body: new Uint8Array(await r.arrayBuffer()),
      date: new Date("2026-11-29T02:00:00Z"),
    });
    assert.equal(dec.decode(bytes), GO_BYTES);
  });

  it("HEAD keeps Content-Length and drops the body; a closing response says so", () => {
    const bytes = encodeHttp1Response({
      status: 200,
      headers: [],
      body: new Uint8Array(5),
      head: true,
      close: true,
      date: new Date(0),
    });
    assert.equal(
      dec.decode(bytes),
      "HTTP/1.1 200 OK\r\nDate: Thu, 01 Jan 1970 00:00:00 GMT\r\nContent-Length: 5\r\nConnection: close\r\n\r\n",
    );
  });
});

describe("serveSmall", () => {
  it("answers with the handler's response; fetch reads it", async () => {
    await withServer(health, async (s) => {
      const r = await fetch(`http://127.0.0.1:${s.port}/healthz`);
      assert.equal(r.status, 503);
      assert.equal(r.headers.get("x-load-balancing-endpoint-weight"), "0");
      assert.equal(r.headers.get("content-length"), "2");
      assert.equal(await r.text(), "{}");
    });
  });

  it("hands the handler the method, path and headers", async () => {
    let seen = "";
    await withServer((r) => {
      seen = `${r.method} ${new URL(r.url).pathname}${new URL(r.url).search} ${r.headers.get("x-probe")}`;
      return new Response("ok");
    }, async (s) => {
      await exchange(s.port, "GET /a/b?c=d HTTP/1.1\r\nX-Probe: lb-7\r\nConnection: close\r\n\r\n");
      assert.equal(seen, "GET /a/b?c=d lb-7");
    });
  });

  it("keeps the connection alive and answers pipelined requests in order; closes after Connection: close", async () => {
    let n = 0;
    await withServer(async () => {
      const i = n++;
      // the first answer takes longest: order must still hold
      await new Promise((r) => setTimeout(r, i === 0 ? 50 : 0));
      return new Response(`r${i}`);
    }, async (s) => {
      const { got, closed } = await exchange(
        s.port,
        "GET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nConnection: close\r\n\r\nGET /late HTTP/1.1\r\n\r\n",
      );
      assert.ok(closed, "closed after the request that asked for it");
      assert.deepEqual(statuses(got), [200, 200, 200]);
      assert.deepEqual([...got.matchAll(/\r\n\r\n(r\d)/g)].map((m) => m[1]), ["r0", "r1", "r2"]);
      assert.equal((got.match(/Connection: close/g) ?? []).length, 1);
    });
  });

  it("HTTP/1.0 closes after the answer; HEAD gets no body", async () => {
    await withServer(() => new Response("body!"), async (s) => {
      const a = await exchange(s.port, "GET / HTTP/1.0\r\n\r\n");
      assert.ok(a.closed);
      assert.match(a.got, /Content-Length: 5\r\nConnection: close\r\n\r\nbody!$/);
      const b = await exchange(s.port, "HEAD / HTTP/1.1\r\nConnection: close\r\n\r\n");
      assert.match(b.got, /Content-Length: 5\r\nConnection: close\r\n\r\n$/);
    });
  });

  it("malformed requests get Go's plain-text answer and the connection closes", async () => {
    await withServer(() => new Response("ok"), async (s) => {
      for (
        const [text, status] of [
          ["BAD\r\n\r\n", 400],
          ["GET / HTTP/3.0\r\n\r\n", 505],
          [`GET / HTTP/1.1\r\nX: ${"a".repeat(70_000)}\r\n\r\n`, 431],
        ] as const
      ) {
        const { got, closed } = await exchange(s.port, text);
        assert.ok(closed, String(status));
        assert.equal(got.split("\r\n")[0], `HTTP/1.1 ${status} ${got.split("\r\n")[0].slice(13)}`);
        assert.deepEqual(statuses(got), [status]);
        assert.match(got, /Content-Type: text\/plain; charset=utf-8\r\nConnection: close\r\n\r\n\d{3} /);
      }
      // a request before the bad one is still answered
      const { got } = await exchange(s.port, "GET / HTTP/1.1\r\n\r\nnonsense\r\n\r\n");
      assert.deepEqual(statuses(got), [200, 400]);
    });
  });

  it("a handler that throws answers 500 and the listener serves on", async () => {
    let fail = true;
    await withServer(() => {
      if (fail) throw new Error("boom");
      return new Response("fine");
    }, async (s) => {
      assert.equal((await fetch(`http://127.0.0.1:${s.port}/`)).status, 500);
      fail = false;
      const r = await fetch(`http://127.0.0.1:${s.port}/`);
      assert.equal(await r.text(), "fine");
    });
  });

  it("a port in use is a ListenError with the code; the first listener is untouched", async () => {
    await withServer(() => new Response("first"), async (s) => {
      await assert.rejects(
        serveSmall(() => new Response("x"), { hostname: "127.0.0.1", port: s.port }),
        (e) => {
          assert.ok(e instanceof ListenError);
          assert.equal(e.code, "EADDRINUSE");
          assert.equal(
            e.message,
            `cannot listen on 127.0.0.1:${s.port}: address already in use (EADDRINUSE)`,
          );
          return true;
        },
      );
      assert.equal(await (await fetch(`http://127.0.0.1:${s.port}/`)).text(), "first");
    });
  });

  it('"::" answers IPv4 and IPv6 clients', async () => {
    await withServer(() => new Response("both"), async (s) => {
      assert.equal(await (await fetch(`http://127.0.0.1:${s.port}/`)).text(), "both");
      assert.equal(await (await fetch(`http://[::1]:${s.port}/`)).text(), "both");
    }, "::");
  });

  it("a client that sends requests without reading the answers is dropped, not buffered for", async () => {
    const body = "x".repeat(64 * 1024);
    await withServer(() => new Response(body), async (s) => {
      const n = 400; // 25.6 MiB of answers: more than loopback's socket buffers hold
      const got = await new Promise<{ answers: number; closed: boolean }>((resolve, reject) => {
        const c = net.connect({ host: "127.0.0.1", port: s.port }, () => {
          c.pause();
          c.write("GET / HTTP/1.1\r\n\r\n".repeat(n));
          // read only after the server had time to fill every buffer
          setTimeout(() => c.resume(), 1500);
        });
        c.setEncoding("latin1");
        let answers = 0;
        let tail = "";
        c.on("data", (d: string) => {
          const seen = tail + d;
          answers += (seen.match(/HTTP\/1\.1 200 OK/g) ?? []).length;
          tail = seen.slice(-20);
        });
        c.on("error", (e) => (e as NodeJS.ErrnoException).code === "ECONNRESET" ? undefined : reject(e));
        c.on("close", () => resolve({ answers, closed: true }));
        setTimeout(() => {
          c.destroy();
          resolve({ answers, closed: false });
        }, 10_000);
      });
      assert.ok(got.closed, "the server dropped the connection");
      assert.ok(got.answers < n, `${got.answers} of ${n} answers sent`);
    });
  });

  it("a client that pipelines more requests than the backlog allows is dropped", async () => {
    let served = 0;
    await withServer(async () => {
      served++;
      await new Promise((r) => setTimeout(r, 5));
      return new Response("x");
    }, async (s) => {
      const n = 1000; // 5 s of answers one after the other
      const t0 = Date.now();
      const { got, closed } = await exchange(s.port, "GET / HTTP/1.1\r\n\r\n".repeat(n), "127.0.0.1", 8000);
      assert.ok(closed, "the server dropped the connection");
      assert.ok(Date.now() - t0 < 4000, `dropped at once (after ${Date.now() - t0} ms)`);
      assert.ok(statuses(got).length < n, `${statuses(got).length} of ${n} answered`);
      assert.ok(served <= MAX_PIPELINED + 1, `${served} requests handled`);
    });
  });

  it("closes a connection idle for the timeout; traffic keeps one open", async () => {
    // 5 s: Bun counts socket timeouts in 4 s ticks, so an idle connection closes 4–8 s after its last byte
    const s = await serveSmall(() => new Response("x"), {
      hostname: "127.0.0.1",
      port: 0,
      idleTimeoutSeconds: 5,
    });
    try {
      const t0 = Date.now();
      const conn = (every: number) =>
        new Promise<number>((resolve) => {
          const c = net.connect({ host: "127.0.0.1", port: s.port }, () => c.write("GET / HTTP/1.1\r\n\r\n"));
          const timer = every ? setInterval(() => c.write("GET / HTTP/1.1\r\n\r\n"), every) : undefined;
          c.on("data", () => {});
          c.on("error", () => {});
          c.on("close", () => {
            clearInterval(timer);
            resolve(Date.now() - t0);
          });
          setTimeout(() => c.destroy(), 9500);
        });
      const [idle, busy] = await Promise.all([conn(0), conn(300)]);
      assert.ok(idle < 9000, `the idle connection was closed by the server (after ${idle} ms)`);
      assert.ok(busy >= 9500, `the busy connection stayed open (closed after ${busy} ms)`);
    } finally {
      await s.close();
    }
  });

  it("close() ends open connections and the port is free again", async () => {
    const s = await serveSmall(() => new Response("x"), { hostname: "127.0.0.1", port: 0 });
    const open = exchange(s.port, "GET / HTTP/1.1\r\n\r\n", "127.0.0.1", 5000);
    await new Promise((r) => setTimeout(r, 100));
    await s.close();
    const { got, closed } = await open;
    assert.ok(closed, "the idle keep-alive connection was closed by close()");
    assert.deepEqual(statuses(got), [200]);
    const again = await serveSmall(() => new Response("y"), { hostname: "127.0.0.1", port: s.port });
    await again.close();
  });
});
