import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Hono } from "hono";
import { ListenError, serveApp, type ServeFn } from "../../../lib/runtime/serve.ts";
import { joinHostPort } from "../../../lib/net/go_net.ts";
import { isWildcard, listen, parseBindAddress } from "../../../lib/server/listen.ts";

describe("serveApp (real sockets on loopback)", () => {
  it("serves a Hono app on an ephemeral port and closes", async () => {
    const app = new Hono();
    app.get("/x", (c) => c.text("hello"));
    const s = await serveApp(app, { hostname: "127.0.0.1", port: 0 });
    assert.ok(s.port > 0);
    assert.equal(s.hostname, "127.0.0.1");
    const r = await fetch(`http://127.0.0.1:${s.port}/x`);
    assert.equal(await r.text(), "hello");
    await s.close();
    await s.close(); // idempotent
    await assert.rejects(fetch(`http://127.0.0.1:${s.port}/x`), "closed listener refuses connections");
  });

  it("serves a plain fetch handler on IPv6 loopback", async () => {
    const s = await serveApp((req) => new Response(new URL(req.url).pathname), { hostname: "::1", port: 0 });
    try {
      const r = await fetch(`http://[::1]:${s.port}/v6`);
      assert.equal(await r.text(), "/v6");
    } finally {
      await s.close();
    }
  });

  it("a port in use is a clear ListenError with the code", async () => {
    const a = await serveApp(() => new Response("a"), { hostname: "127.0.0.1", port: 0 });
    try {
      const err = await serveApp(() => new Response("b"), { hostname: "127.0.0.1", port: a.port }).then(
        () => null,
        (e) => e,
      );
      assert.ok(err instanceof ListenError, String(err));
      assert.equal(err.code, "EADDRINUSE");
      assert.equal(err.message, `cannot listen on 127.0.0.1:${a.port}: address already in use (EADDRINUSE)`);
      // The first server still works.
      assert.equal(await (await fetch(`http://127.0.0.1:${a.port}/`)).text(), "a");
    } finally {
      await a.close();
    }
  });

  it("an address the host does not have is EADDRNOTAVAIL, IPv6 bracketed in the message", async () => {
    // 192.0.2.0/24 (TEST-NET-1) and 2001:db8::/32 are documentation ranges: no local interface has them.
    const e4 = await serveApp(() => new Response(), { hostname: "192.0.2.77", port: 0 }).catch((e) => e);
    assert.ok(e4 instanceof ListenError);
    assert.equal(e4.code, "EADDRNOTAVAIL");
    assert.match(
      e4.message,
      /^cannot listen on 192\.0\.2\.77:0: cannot assign requested address \(EADDRNOTAVAIL\)$/,
    );
    const e6 = await serveApp(() => new Response(), { hostname: "2001:db8::7", port: 0 }).catch((e) => e);
    assert.ok(e6 instanceof ListenError);
    assert.match(e6.message, /^cannot listen on \[2001:db8::7\]:0: /);
  });

  it("a throwing handler answers 500 and the server keeps serving", async () => {
    let n = 0;
    const s = await serveApp(() => {
      if (n++ === 0) throw new Error("boom");
      return new Response("fine");
    }, { hostname: "127.0.0.1", port: 0 });
    try {
      const r1 = await fetch(`http://127.0.0.1:${s.port}/`);
      assert.equal(r1.status, 500);
      await r1.body?.cancel();
      assert.equal(await (await fetch(`http://127.0.0.1:${s.port}/`)).text(), "fine");
    } finally {
      await s.close();
    }
  });
});

describe("bind addresses and Go-style wildcard listening", () => {
  it("parses host:port, [v6]:port, :port and bare IPs", () => {
    assert.deepEqual(parseBindAddress("0.0.0.0:10256", 1), { host: "0.0.0.0", port: 10256 });
    assert.deepEqual(parseBindAddress("[::]:10256", 1), { host: "::", port: 10256 });
    assert.deepEqual(parseBindAddress("[fd00::1]:80", 1), { host: "fd00::1", port: 80 });
    assert.deepEqual(parseBindAddress(":10249", 1), { host: "", port: 10249 });
    assert.deepEqual(parseBindAddress("10.0.0.1", 10256), { host: "10.0.0.1", port: 10256 });
    assert.deepEqual(parseBindAddress("::1", 10249), { host: "::1", port: 10249 });
  });

  it("rejects malformed addresses with one line naming them", () => {
    assert.throws(
      () => parseBindAddress("localhost:80", 1),
      /bind address "localhost:80": host "localhost" is not an IP/,
    );
    assert.throws(() => parseBindAddress("1.2.3.4:99999", 1), /port "99999" is not a number in 0\.\.65535/);
    assert.throws(() => parseBindAddress("[zz]:80", 1), /expected \[IPv6\]:port/);
    assert.throws(() => parseBindAddress("fd00::1:80x", 1), /bind address/);
    assert.throws(() => parseBindAddress("", 1), /empty/);
  });

  it("knows the wildcards", () => {
    for (const w of ["", "0.0.0.0", "::", "0:0:0:0:0:0:0:0"]) assert.equal(isWildcard(w), true, w);
    for (const h of ["127.0.0.1", "::1", "10.0.0.1"]) assert.equal(isWildcard(h), false, h);
  });

  /** A fake ServeFn that records hostnames and fails as told. */
  function fakeServe(fail: Record<string, string>) {
    const asked: string[] = [];
    const serve: ServeFn = (_app, { hostname, port }) => {
      asked.push(hostname);
      const code = fail[hostname];
      if (code) return Promise.reject(new ListenError(hostname, port, code, `failed ${code}`));
      return Promise.resolve({ hostname, port: port || 4242, close: () => Promise.resolve() });
    };
    return { asked, serve };
  }

  it("a wildcard listens dual-stack on '::', as Go does for 0.0.0.0", async () => {
    const f = fakeServe({});
    const s = await listen(() => new Response(), "0.0.0.0", 10256, f.serve);
    assert.deepEqual(f.asked, ["::"]);
    assert.equal(s.hostname, "::");
  });

  it("falls back to 0.0.0.0 when the kernel has no IPv6", async () => {
    const f = fakeServe({ "::": "EAFNOSUPPORT" });
    const s = await listen(() => new Response(), "", 10256, f.serve);
    assert.deepEqual(f.asked, ["::", "0.0.0.0"]);
    assert.equal(s.hostname, "0.0.0.0");
  });

  it("a port conflict on the wildcard is reported with the configured address, no fallback", async () => {
    const f = fakeServe({ "::": "EADDRINUSE" });
    const e = await listen(() => new Response(), "0.0.0.0", 10256, f.serve).catch((x) => x);
    assert.deepEqual(f.asked, ["::"]);
    assert.ok(e instanceof ListenError);
    assert.equal(e.message, "cannot listen on 0.0.0.0:10256: failed EADDRINUSE (EADDRINUSE)");
  });

  it("a specific address is used as given", async () => {
    const f = fakeServe({});
    await listen(() => new Response(), "127.0.0.1", 1, f.serve);
    await listen(() => new Response(), "::1", 1, f.serve);
    assert.deepEqual(f.asked, ["127.0.0.1", "::1"]);
  });

  it("joinHostPort brackets IPv6", () => {
    assert.equal(joinHostPort("::", 1), "[::]:1");
    assert.equal(joinHostPort("127.0.0.1", 2), "127.0.0.1:2");
  });
});
