/**
 * decodeResponse: a gzip body is decoded as it streams (the first event line is readable before the
 * stream ends), exactly once (a body the fetch already decoded is passed through, and each runtime's
 * fetch says truly whether it decodes), with the wire and decoded bytes counted; an abort ends the body at
 * once; an unknown encoding is refused with one line.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { gzipSync } from "node:zlib";
import { decodeResponse } from "../../../lib/k8s/content_encoding.ts";
import { createTlsFetch, runtimeName } from "../../../lib/runtime/fetch_tls.ts";
import { startTestApiserver } from "../../support/apiserver.ts";

const enc = new TextEncoder();

/** A stream whose chunks are pushed by the test; `end()` closes it. */
function pushStream() {
  let ctl!: ReadableStreamDefaultController<Uint8Array>;
  const stream = new ReadableStream<Uint8Array>({ start: (c) => void (ctl = c) });
  return { stream, push: (b: Uint8Array) => ctl.enqueue(b), end: () => ctl.close() };
}

/** gzip output of `lines`, flushed after each line (as a streaming compressor sends them). */
async function gzipChunks(lines: string[]): Promise<Uint8Array[]> {
  const cs = new CompressionStream("gzip");
  const w = cs.writable.getWriter();
  const out: Uint8Array[] = [];
  const reading = (async () => {
    const r = cs.readable.getReader();
    for (;;) {
      const { value, done } = await r.read();
      if (done) return;
      out.push(value);
    }
  })();
  for (const l of lines) await w.write(enc.encode(l));
  await w.close();
  await reading;
  return out;
}

describe("decodeResponse", () => {
  it("decodes a gzip body once, counting wire and decoded bytes", async () => {
    const text = JSON.stringify({ items: Array.from({ length: 200 }, (_, i) => ({ name: `svc-${i}` })) });
    const gz = gzipSync(enc.encode(text));
    let wire = 0;
    let decoded = 0;
    const res = decodeResponse(
      new Response(gz, { headers: { "Content-Encoding": "gzip", "Content-Length": String(gz.length) } }),
      { fetchDecodes: false, count: (w, d) => ((wire += w), (decoded += d)), what: "GET services (list)" },
    );
    assert.equal(await res.text(), text);
    assert.equal(wire, gz.length);
    assert.equal(decoded, enc.encode(text).length);
    assert.equal(res.headers.get("content-encoding"), null, "the body handed on is not encoded any more");
  });

  it("a body the fetch already decoded is not decoded again; the wire size is its Content-Length", async () => {
    const text = '{"kind":"ServiceList","items":[]}';
    let wire = 0;
    let decoded = 0;
    const res = decodeResponse(
      new Response(text, { headers: { "Content-Encoding": "gzip", "Content-Length": "21" } }),
      { fetchDecodes: true, count: (w, d) => ((wire += w), (decoded += d)), what: "GET services (list)" },
    );
    assert.equal(await res.text(), text);
    assert.deepEqual([wire, decoded], [21, text.length]);
  });

  it("decodes a compressed watch stream as it arrives, before it ends", async () => {
    const chunks = await gzipChunks(['{"type":"ADDED"}\n', '{"type":"BOOKMARK"}\n']);
    const src = pushStream();
    const res = decodeResponse(new Response(src.stream, { headers: { "Content-Encoding": "gzip" } }), {
      fetchDecodes: false,
      count: () => {},
      what: "GET services (watch)",
    });
    const reader = res.body!.getReader();
    // All but the gzip trailer: the first line must come out without the end of the stream.
    const all = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
    let off = 0;
    for (const c of chunks) (all.set(c, off), (off += c.length));
    src.push(all.subarray(0, all.length - 8));
    let got = "";
    while (!got.includes("\n")) got += new TextDecoder().decode((await reader.read()).value);
    assert.ok(got.startsWith('{"type":"ADDED"}\n'), got);
    src.push(all.subarray(all.length - 8));
    src.end();
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      got += new TextDecoder().decode(value);
    }
    assert.equal(got, '{"type":"ADDED"}\n{"type":"BOOKMARK"}\n');
  });

  it("an abort ends a pending read at once with its reason", async () => {
    const src = pushStream();
    const ctl = new AbortController();
    const res = decodeResponse(new Response(src.stream), {
      fetchDecodes: false,
      count: () => {},
      what: "GET services (watch)",
      signal: ctl.signal,
    });
    const pending = res.body!.getReader().read();
    ctl.abort(new DOMException("watch silent", "TimeoutError"));
    await assert.rejects(pending, /watch silent/);
  });

  it("refuses an encoding it cannot decode, naming the request and the encoding", () => {
    assert.throws(
      () =>
        decodeResponse(new Response("x", { headers: { "Content-Encoding": "br" } }), {
          fetchDecodes: false,
          count: () => {},
          what: "GET services (list)",
        }),
      { message: 'GET services (list): response has Content-Encoding "br"; only gzip is accepted' },
    );
  });

  it(`each fetch of ${runtimeName} says truly whether it decodes (so a body is decoded exactly once)`, async () => {
    const srv = await startTestApiserver({ bookmarkIntervalMs: 0 });
    try {
      const pad = "p".repeat(300);
      for (let i = 0; i < 600; i++) {
        srv.create("services", { metadata: { name: `s${i}`, namespace: "d", annotations: { pad } } });
      }
      for (const tls of [{ caPem: srv.caPem }, { insecureSkipVerify: true }]) {
        const f = createTlsFetch(tls);
        try {
          const res = await f(`${srv.url}/api/v1/services`, {
            headers: { Authorization: `Bearer ${srv.token}`, "Accept-Encoding": "gzip" },
          });
          assert.equal(res.headers.get("content-encoding"), "gzip", "the test apiserver compressed the list");
          const first = new Uint8Array(await res.arrayBuffer())[0];
          assert.equal(
            first === 0x1f ? "compressed" : "decoded",
            f.decodesContent ? "decoded" : "compressed",
            `${f.implementation}: decodesContent=${f.decodesContent}, first byte ${first}`,
          );
        } finally {
          f.close();
        }
      }
    } finally {
      await srv.close();
    }
  });
});
