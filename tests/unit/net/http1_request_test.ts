/**
 * lib/net/http1_request.ts: requests read from bytes however they are cut, bodies skipped, keep-alive as Go
 * decides it, and Go's answer to what is malformed.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  type Http1ReadResult,
  Http1RequestReader,
  MAX_HEADER_BYTES,
} from "../../../lib/net/http1_request.ts";

const enc = new TextEncoder();

/** Reads `text` in pieces of `size` bytes; every result in order. */
function read(text: string, size = Infinity): Http1ReadResult[] {
  const bytes = enc.encode(text);
  const r = new Http1RequestReader();
  const out: Http1ReadResult[] = [];
  const step = Math.min(size, bytes.length || 1);
  for (let i = 0; i < bytes.length; i += step) out.push(...r.push(bytes.subarray(i, i + step)));
  return out;
}

/** Summary of each result: "GET / 1 keep" / "error 400". */
function summary(rs: Http1ReadResult[]): string[] {
  return rs.map((r) =>
    "error" in r
      ? `error ${r.error.status}`
      : `${r.request.method} ${r.request.target} ${r.request.minor} ${r.request.close ? "close" : "keep"}`
  );
}

describe("Http1RequestReader", () => {
  it("reads a request with headers, names and values as sent (values trimmed)", () => {
    const [r] = read(
      "GET /healthz?x=1 HTTP/1.1\r\nHost: 10.0.0.1:32000\r\nUser-Agent:  kube-probe/1.34 \r\n\r\n",
    );
    assert.ok("request" in r);
    assert.deepEqual(r.request, {
      method: "GET",
      target: "/healthz?x=1",
      minor: 1,
      headers: [["Host", "10.0.0.1:32000"], ["User-Agent", "kube-probe/1.34"]],
      close: false,
    });
  });

  it("gives the same requests however the bytes are cut (every size down to one byte)", () => {
    const text = "\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n" +
      "POST /b HTTP/1.1\r\nContent-Length: 11\r\n\r\nhello world" +
      "GET /c HTTP/1.1\nHost: y\n\n" +
      "HEAD /d HTTP/1.0\r\nConnection: keep-alive\r\n\r\n" +
      "GET /e HTTP/1.1\r\nConnection: close\r\n\r\n" +
      "GET /never HTTP/1.1\r\n\r\n";
    const whole = summary(read(text));
    assert.deepEqual(whole, [
      "GET /a 1 keep",
      "POST /b 1 keep",
      "GET /c 1 keep",
      "HEAD /d 0 keep",
      "GET /e 1 close",
    ]);
    for (const size of [1, 2, 3, 5, 7, 16, 64]) {
      assert.deepEqual(summary(read(text, size)), whole, `size ${size}`);
    }
  });

  it("keep-alive as Go decides it", () => {
    assert.deepEqual(summary(read("GET / HTTP/1.0\r\n\r\n")), ["GET / 0 close"]);
    assert.deepEqual(summary(read("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n")), ["GET / 0 keep"]);
    assert.deepEqual(summary(read("GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n")), [
      "GET / 1 close",
    ]);
    assert.deepEqual(summary(read("GET / HTTP/1.1\r\nConnection: upgrade\r\n\r\n")), ["GET / 1 keep"]);
  });

  it("a chunked body is not read: the request is answered and the connection closed", () => {
    const rs = read(
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n",
    );
    assert.deepEqual(summary(rs), ["POST / 1 close"]);
  });

  it("a body by Content-Length is skipped, not read as the next request", () => {
    const rs = read("PUT / HTTP/1.1\r\nContent-Length: 26\r\n\r\nGET /smuggled HTTP/1.1\r\n\r\n");
    assert.deepEqual(summary(rs), ["PUT / 1 keep"]);
  });

  it("malformed requests: 400 and nothing more is read", () => {
    for (
      const text of [
        "GET /\r\n\r\n",
        "GET  / HTTP/1.1\r\n\r\n",
        "G(T / HTTP/1.1\r\n\r\n",
        "GET / HTTP/1.1\r\nno colon\r\n\r\n",
        "GET / HTTP/1.1\r\nHost : x\r\n\r\n",
        "GET / HTTP/1.1\r\n folded: x\r\n\r\n",
        "GET / HTTP/1.1\r\nX: a\rb\r\n\r\n",
        "GET / HTTP/1.1\r\nX: a\0b\r\n\r\n",
        "GET / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        "GET / HTTP/1.1\r\nContent-Length: 1, 2\r\n\r\n",
        "GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
      ]
    ) {
      const rs = read(text + "GET / HTTP/1.1\r\n\r\n");
      assert.deepEqual(summary(rs), ["error 400"], JSON.stringify(text));
    }
  });

  it("a version other than 1.x: 505", () => {
    assert.deepEqual(summary(read("GET / HTTP/2.0\r\n\r\n")), ["error 505"]);
  });

  it("headers over the limit: 431, in one piece or streamed, and no more than the limit is held", () => {
    const big = `GET / HTTP/1.1\r\nX: ${"a".repeat(MAX_HEADER_BYTES)}\r\n\r\n`;
    assert.deepEqual(summary(read(big)), ["error 431"]);
    assert.deepEqual(summary(read(big, 1000)), ["error 431"]);
    // never a blank line: the limit still ends it
    const r = new Http1RequestReader();
    const chunk = enc.encode("a".repeat(4096));
    let out: Http1ReadResult[] = [];
    for (let i = 0; i < MAX_HEADER_BYTES / 4096 + 2 && out.length === 0; i++) out = r.push(chunk);
    assert.deepEqual(summary(out), ["error 431"]);
    assert.ok(r.done);
  });

  it("headers just under the limit are read", () => {
    const line = "GET / HTTP/1.1\r\nX: ";
    const pad = MAX_HEADER_BYTES - line.length - 2;
    assert.deepEqual(summary(read(`${line}${"a".repeat(pad)}\r\n\r\n`, 1000)), ["GET / 1 keep"]);
  });

  it("bytes with the high bit set in a value are kept as latin1 (as Go keeps bytes)", () => {
    const r = new Http1RequestReader();
    const head = enc.encode("GET / HTTP/1.1\r\nX: ");
    const rs = r.push(new Uint8Array([...head, 0xe9, 0x0d, 0x0a, 0x0d, 0x0a]));
    assert.ok("request" in rs[0]);
    assert.deepEqual(rs[0].request.headers, [["X", "\u00e9"]]);
  });
});
