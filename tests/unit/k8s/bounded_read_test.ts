/**
 * The bounded readers of apiserver responses: the watch line splitter scans every byte once (counted, not
 * timed), keeps lines intact across chunk boundaries, refuses a line over the limit as soon as the limit
 * is passed; readBounded refuses (or truncates) a body over its limit.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  formatLimit,
  LineSplitter,
  MAX_API_MESSAGE_BYTES,
  MessageTooLargeError,
  readBounded,
} from "../../../lib/k8s/bounded_read.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
const MiB = 1024 * 1024;

describe("LineSplitter", () => {
  it("splits a 64 MiB line fed in 16 KiB chunks scanning each byte exactly once", () => {
    const chunk = new Uint8Array(16 * 1024).fill(0x78); // "x"
    const s = new LineSplitter(MAX_API_MESSAGE_BYTES, "watch services");
    let fed = 0;
    for (let i = 0; i < MAX_API_MESSAGE_BYTES / chunk.length; i++) {
      assert.deepEqual(s.push(chunk), []);
      fed += chunk.length;
      // a quadratic splitter re-scans what it holds: the count would grow with the square of the line
      assert.equal(s.scannedBytes, fed);
    }
    assert.equal(s.heldBytes, 64 * MiB);
    const lines = s.push(enc.encode("\n{}\n"));
    fed += 4;
    assert.equal(s.scannedBytes, fed);
    assert.equal(lines.length, 2);
    assert.equal(lines[0].length, MAX_API_MESSAGE_BYTES);
    assert.ok(lines[0].every((b) => b === 0x78));
    assert.equal(dec.decode(lines[1]), "{}");
    assert.equal(s.heldBytes, 0);
  });

  it("keeps lines (and multi-byte characters) intact across any chunk boundary", () => {
    const text = '{"a":"ü€😀"}\n{"b":2}\n\n{"c":"end"}\n{"partial":';
    const bytes = enc.encode(text);
    for (const size of [1, 2, 3, 5, 7, 64]) {
      const s = new LineSplitter(1024, "watch x");
      const out: string[] = [];
      for (let i = 0; i < bytes.length; i += size) {
        for (const l of s.push(bytes.subarray(i, i + size))) out.push(dec.decode(l));
      }
      assert.deepEqual(out, ['{"a":"ü€😀"}', '{"b":2}', "", '{"c":"end"}'], `chunks of ${size}`);
      assert.equal(dec.decode(s.finish()!), '{"partial":');
      assert.equal(s.finish(), null);
      assert.equal(s.scannedBytes, bytes.length);
    }
  });

  it("refuses a line over the limit as soon as the limit is passed, naming the stream and the limit", () => {
    const s = new LineSplitter(MiB, "watch services");
    const chunk = new Uint8Array(64 * 1024).fill(0x78);
    for (let i = 0; i < 16; i++) s.push(chunk); // exactly 1 MiB: still allowed
    assert.equal(s.heldBytes, MiB);
    assert.throws(() => s.push(new Uint8Array([0x78])), (e: unknown) => {
      assert.ok(e instanceof MessageTooLargeError);
      assert.equal(e.limit, MiB);
      assert.equal(
        e.message,
        "watch services: one event line is larger than the limit of 1 MiB; dropped the stream",
      );
      return true;
    });
    assert.equal(s.heldBytes, 0, "nothing is kept after the refusal");
    // a line of exactly the limit followed by its newline is fine
    const ok = new LineSplitter(4, "w");
    assert.deepEqual(ok.push(enc.encode("abcd\n")).map((l) => dec.decode(l)), ["abcd"]);
    assert.throws(() => new LineSplitter(4, "w").push(enc.encode("abcde\n")), MessageTooLargeError);
  });
});

describe("readBounded", () => {
  const streamOf = (chunks: Uint8Array[], headers: Record<string, string> = {}) =>
    new Response(
      new ReadableStream<Uint8Array>({
        start(c) {
          for (const x of chunks) c.enqueue(x);
          c.close();
        },
      }),
      { headers },
    );

  it("reads a body up to the limit and refuses one byte more", async () => {
    const piece = new Uint8Array(1000).fill(0x61);
    assert.equal(
      (await readBounded(streamOf([piece, piece]), { limit: 2000, what: "GET x (list)" })).length,
      2000,
    );
    await assert.rejects(
      readBounded(streamOf([piece, piece, new Uint8Array([0x61])]), { limit: 2000, what: "GET x (list)" }),
      (e: unknown) =>
        e instanceof MessageTooLargeError &&
        e.message === "GET x (list): response body is larger than the limit of 2000 bytes; dropped it",
    );
  });

  it("refuses a Content-Length over the limit before reading, and truncates when asked", async () => {
    let pulled = 0;
    const res = new Response(
      new ReadableStream<Uint8Array>({
        pull(c) {
          pulled++;
          c.enqueue(new Uint8Array(10));
        },
      }),
      { headers: { "content-length": String(3 * MiB) } },
    );
    await assert.rejects(readBounded(res, { limit: 2 * MiB, what: "GET x (list)" }), /2 MiB/);
    assert.ok(pulled <= 1, `pulled ${pulled} chunks`);
    const t = await readBounded(streamOf([enc.encode("hello "), enc.encode("world")]), {
      limit: 8,
      what: "x",
      truncate: true,
    });
    assert.equal(t, "hello wo");
  });

  it("formats limits for messages", () => {
    assert.equal(formatLimit(MAX_API_MESSAGE_BYTES), "64 MiB");
    assert.equal(formatLimit(1500), "1500 bytes");
  });
});
