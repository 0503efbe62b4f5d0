/**
 * The item-by-item LIST decoder (lib/k8s/list_scanner.ts, lib/k8s/list_decode.ts): whatever the chunking
 * (a cut at every byte, unicode split mid-character, byte by byte), the result equals JSON.parse of the
 * whole body with each item mapped; items are handed out as soon as their separator arrives; strings with
 * escapes, brackets, braces and quotes do not fool it; `items` null / [] / missing, a repeated or escaped
 * "items" key, a non-object body come out as JSON.parse gives them; trailing garbage, every truncation,
 * empty elements and mismatched brackets are errors.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { LIST_COLLECT_EVERY, ListDecodeError, ListDecoder } from "../../../lib/k8s/list_decode.ts";
import { ListScanner } from "../../../lib/k8s/list_scanner.ts";

const enc = new TextEncoder();
const identity = (raw: unknown) => raw;

function decode(chunks: Uint8Array[], item: (raw: unknown) => unknown = identity): unknown {
  const d = new ListDecoder(item);
  for (const c of chunks) d.push(c);
  return d.finish();
}

/** `bytes` cut at the given offsets. */
function cut(bytes: Uint8Array, ...at: number[]): Uint8Array[] {
  const out: Uint8Array[] = [];
  let prev = 0;
  for (const a of [...at, bytes.length]) {
    out.push(bytes.slice(prev, a));
    prev = a;
  }
  return out;
}

/** A small list whose items hold everything a byte scanner can trip on. */
const TRICKY =
  `{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"42","continue":"c,]}",` +
  `"remainingItemCount":3,"items":["not", "these"]},"items": [ ` +
  `{"metadata":{"name":"a\\"],}{[","namespace":"ns"},"spec":{"ports":[{"port":80},[[],{}]]}},\n` +
  `{"s":"back\\\\","t":"\\\\\\"","u":"\\u005d\\u007d\\"","v":"\\/\\b\\f\\n\\r\\t"} ,` +
  `"caf\u00e9 \u65e5\u672c \ud83d\ude80 \\ud83d\\ude80", [1, [2, [3]], {"a": [{}]}], -1.5e3, 0, true, false, null,` +
  `{"nested":{"items":[9,8]},"q":"\\"items\\":[7]"}\t] ,"trailer":{"x":[1,"]"]}}\n`;

describe("ListDecoder", () => {
  it("equals JSON.parse of the whole body, cut at every byte position", () => {
    const bytes = enc.encode(TRICKY);
    const want = JSON.parse(TRICKY);
    assert.equal(want.items.length, 10);
    for (let i = 0; i <= bytes.length; i++) {
      assert.deepEqual(decode(cut(bytes, i)), want, `cut at byte ${i}`);
    }
    // two cuts: every element and the skeleton spread over three chunks somewhere
    for (let i = 0; i < bytes.length; i += 7) {
      for (let j = i; j <= bytes.length; j += 11) {
        assert.deepEqual(decode(cut(bytes, i, j)), want, `cuts at ${i} and ${j}`);
      }
    }
    const oneByOne = Array.from(bytes, (b) => Uint8Array.of(b));
    assert.deepEqual(decode(oneByOne), want, "byte by byte");
  });

  it("splits multi-byte characters across chunks without damage", () => {
    const text =
      '{"items":["\u00e9","\u65e5\u672c","\ud83d\ude80x\ud83d\ude80"],"metadata":{"resourceVersion":"1"}}';
    const bytes = enc.encode(text);
    for (let i = 0; i <= bytes.length; i++) {
      const got = decode(cut(bytes, i)) as { items: string[] };
      assert.deepEqual(got.items, ["\u00e9", "\u65e5\u672c", "\ud83d\ude80x\ud83d\ude80"], `cut at ${i}`);
    }
  });

  it("maps each item as soon as its separator arrives, in order, once", () => {
    const seen: unknown[] = [];
    const d = new ListDecoder((raw) => {
      seen.push(raw);
      return { mapped: raw };
    });
    d.push(enc.encode('{"metadata":{"resourceVersion":"5"},"items":[{"n":1},{"n"'));
    assert.deepEqual(seen, [{ n: 1 }], "the first item is decoded before the body is complete");
    d.push(enc.encode(":2}"));
    assert.equal(seen.length, 1, "an item is complete only at its separator");
    d.push(enc.encode("]}"));
    assert.deepEqual(seen, [{ n: 1 }, { n: 2 }]);
    assert.deepEqual(d.finish(), {
      metadata: { resourceVersion: "5" },
      items: [{ mapped: { n: 1 } }, { mapped: { n: 2 } }],
    });
  });

  it("calls collect each time the decoded items pass a multiple of collectEvery (LIST_COLLECT_EVERY by default)", () => {
    const items = Array.from({ length: 6001 }, (_, n) => ({ n, pad: "x".repeat(n % 7) }));
    const body = enc.encode(JSON.stringify({ metadata: { resourceVersion: "9" }, items }));
    const run = (size: number, every: number | undefined) => {
      const chunks: Uint8Array[] = [];
      for (let i = 0; i < body.length; i += size) chunks.push(body.slice(i, i + size));
      const at: number[] = [];
      let decoded = 0;
      const d = new ListDecoder((raw) => {
        decoded++;
        return raw;
      }, { collect: () => at.push(decoded), collectEvery: every });
      for (const c of chunks) d.push(c);
      assert.deepEqual(d.finish(), { metadata: { resourceVersion: "9" }, items });
      return at;
    };
    // Chunks of fewer items than the interval: once per multiple, right after the chunk that passed it.
    for (const size of [4096, 37]) {
      for (const every of [undefined, 1000]) {
        const step = every ?? LIST_COLLECT_EVERY;
        const at = run(size, every);
        assert.equal(at.length, Math.floor(6001 / step), `every ${step}, chunks of ${size}`);
        assert.ok(at.every((n, i) => Math.floor(n / step) === i + 1 && n % step < 300), String(at));
      }
    }
    // The whole body in one chunk is one batch: one collection after it, not one per multiple.
    assert.deepEqual(run(body.length, 1000), [6001]);
    // Without `collect` nothing is asked, and the result is the same.
    assert.deepEqual(decode([body]), { metadata: { resourceVersion: "9" }, items });
  });

  it("gives items null, [], missing, non-object bodies and Status objects as JSON.parse does", () => {
    const bodies = [
      '{"kind":"ServiceList","items":null,"metadata":{"resourceVersion":"3"}}',
      '{"kind":"ServiceList","items":[],"metadata":{"resourceVersion":"3"}}',
      '{"kind":"ServiceList","items":[ \n\t ],"metadata":{"resourceVersion":"3"}}',
      '{"kind":"ServiceList","metadata":{"resourceVersion":"3"}}',
      '{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old","reason":"Expired","code":410}',
      '{"items":"[1,2]"}',
      '{"items":{"a":[1]}}',
      '{"\\u0069tems":[1,{"x":2}]}',
      '{"items":[1],"items":[2,3]}',
      '{"items":[1],"items":[]}',
      '{"items":[1],"items":null}',
      '{"items":null,"items":[4]}',
      "[1,2,3]",
      '"a string"',
      "null",
      "17",
      "{}",
      '  {"items" : [ 1 , 2 ] }  \n',
      '\ufeff{"items":[1,2]}',
    ];
    for (const b of bodies) {
      const want = JSON.parse(b.replace(/^\ufeff/, ""));
      const bytes = enc.encode(b);
      for (let i = 0; i <= bytes.length; i++) {
        assert.deepEqual(decode(cut(bytes, i)), want, `${b} cut at ${i}`);
      }
    }
    // the mapping reaches items that the scanner could not split (a body starting with a byte-order mark)
    assert.deepEqual(decode([enc.encode('\ufeff{"items":[1,2]}')], (x) => (x as number) * 10), {
      items: [10, 20],
    });
    assert.deepEqual(decode([enc.encode('{"\\u0069tems":[1,2]}')], (x) => (x as number) * 10), {
      items: [10, 20],
    });
  });

  it("refuses what JSON.parse refuses: garbage, truncation, empty elements, mismatched brackets", () => {
    const bad = [
      '{"items":[1,2]}x',
      '{"items":[1,2]}}',
      '{"items":[1,2]}]',
      '{"items":[1,,2]}',
      '{"items":[,1]}',
      '{"items":[1,]}',
      '{"items":[,]}',
      '{"items":[1 2]}',
      '{"items":[{"a":1} {"b":2}]}',
      '{"items":[{]}',
      '{"items":[{"a":1]]}',
      '{"items":[1}',
      '{"items":[1]]}',
      '{"items":["a\\"]}',
      '{"items":[tru]}',
      '{"items":[1],}',
      '{"items" [1]}',
      "{items:[1]}",
      "",
      "   ",
    ];
    for (const b of bad) {
      assert.throws(() => JSON.parse(b), `${b} is invalid JSON`);
      const bytes = enc.encode(b);
      for (let i = 0; i <= bytes.length; i++) {
        assert.throws(() => decode(cut(bytes, i)), ListDecodeError, `${JSON.stringify(b)} cut at ${i}`);
      }
    }
    // every proper prefix of a valid list is an error (a body cut short)
    const bytes = enc.encode(TRICKY.trimEnd());
    for (let len = 0; len < bytes.length; len++) {
      assert.throws(() => decode([bytes.slice(0, len)]), ListDecodeError, `prefix of ${len} bytes`);
    }
  });

  it("names the failing item, and the truncation", () => {
    // after a run taken at once (items 1 and 2), the count goes on
    assert.throws(
      () =>
        decode([enc.encode('{"items":[{"metadata":{}},{"metadata":{}},{"metadata":{}},{"metadata":bad}]}')]),
      (e: unknown) => e instanceof ListDecodeError && /^items\[3\]: /.test(e.message),
    );
    assert.throws(
      () => decode([enc.encode('{"items":[{"a":1},{"b":oops},{"c":3}]}')]),
      (e: unknown) =>
        e instanceof ListDecodeError && /^items\[1\]: /.test(e.message) && e.text === '{"b":oops}',
    );
    assert.throws(
      () => decode([enc.encode('{"items":[{"a":1},{"b":')]),
      (e: unknown) =>
        e instanceof ListDecodeError &&
        /ended inside the items array \(after 1 items, \d+ bytes\): truncated/.test(e.message),
    );
  });

  it("agrees with JSON.parse on random lists cut at random places", () => {
    let seed = 12345;
    const rnd = (n: number) => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed % n;
    };
    const alphabet = [
      '"',
      "\\",
      "[",
      "]",
      "{",
      "}",
      ",",
      ":",
      " ",
      "a",
      "\u00e9",
      "\ud83d\ude80",
      "\n",
      "\u0001",
    ];
    const str = () => Array.from({ length: rnd(6) }, () => alphabet[rnd(alphabet.length)]).join("");
    const value = (depth: number): unknown => {
      const k = rnd(depth > 3 ? 4 : 6);
      if (k === 0) return str();
      if (k === 1) return rnd(1000) - 500;
      if (k === 2) return [true, false, null][rnd(3)];
      if (k === 3) return rnd(2) ? str() : 1.25;
      if (k === 4) return Array.from({ length: rnd(4) }, () => value(depth + 1));
      return Object.fromEntries(Array.from({ length: rnd(4) }, () => [str(), value(depth + 1)]));
    };
    for (let round = 0; round < 500; round++) {
      const list = {
        kind: str(),
        metadata: { resourceVersion: String(round), x: value(2) },
        // objects that begin with "metadata" (as an apiserver's items) let runs of items be taken at once
        items: Array.from({ length: rnd(12) }, () => rnd(2) ? value(1) : { metadata: value(2), x: value(2) }),
      };
      const text = JSON.stringify(list, null, rnd(2) ? 1 : undefined);
      const bytes = enc.encode(text);
      const cuts = Array.from({ length: rnd(5) }, () => rnd(bytes.length + 1)).sort((a, b) => a - b);
      assert.deepEqual(decode(cut(bytes, ...cuts)), list, `round ${round}: ${text} cut at ${cuts}`);
    }
  });
});

describe("ListScanner", () => {
  it("hands out each element's exact bytes and keeps the rest as the skeleton", () => {
    const items: string[] = [];
    const s = new ListScanner((b) => void items.push(new TextDecoder().decode(b)), { batch: false });
    for (const c of cut(enc.encode('{"a":[1],"items":[ {"x":"]"} ,2,"s"],"b":{}}'), 5, 21, 30)) s.push(c);
    assert.deepEqual(items, [' {"x":"]"} ', "2", '"s"']);
    assert.equal(new TextDecoder().decode(s.finish()), '{"a":[1],"items":[],"b":{}}');
    assert.equal(s.foundItems, true);
    assert.equal(s.itemCount, 3);
  });

  it("by default hands out the elements that begin and end in one chunk together", () => {
    const calls: Array<[string, number, number]> = [];
    const s = new ListScanner((b, first, count) =>
      void calls.push([new TextDecoder().decode(b), first, count])
    );
    for (const c of cut(enc.encode('{"items":[1, {"a":[2]} ,"3",[4],5]}'), 14, 25)) s.push(c);
    // chunks: `{"items":[1, {` | `"a":[2]} ,"` | `3",[4],5]}`
    assert.deepEqual(calls, [
      ["1", 0, 1],
      [' {"a":[2]} ', 1, 1],
      ['"3"', 2, 1],
      ["[4],5", 3, 2],
    ]);
  });

  it('takes runs of whole items at once where each begins with {"metadata":, only when they parse', () => {
    const items = [
      { metadata: { name: "x" } },
      // a nested `},{"metadata":` that is no item boundary, and the pattern inside strings
      { metadata: { name: "a" }, spec: { x: [{ a: 1 }, { metadata: { n: 2 } }], s: '},{"metadata":' } },
      ...Array.from({ length: 5 }, (_, i) => ({ metadata: { name: `y${i}` }, v: [{ w: "},{" }] })),
    ];
    const text = JSON.stringify({ kind: "ServiceList", metadata: { resourceVersion: "8" }, items });
    const bytes = enc.encode(text);
    const nested = text.indexOf('{"metadata":{"n":2}') + 14;
    const tries: Array<[number, number | undefined]> = [];
    const got: unknown[] = [];
    const s = new ListScanner((b) => void got.push(...JSON.parse(`[${new TextDecoder().decode(b)}]`)), {
      tryItems: (b, first) => {
        let parsed: unknown[] | undefined;
        try {
          parsed = JSON.parse(`[${new TextDecoder().decode(b)}]`);
        } catch { /* not whole items */ }
        tries.push([first, parsed?.length]);
        if (parsed) got.push(...parsed);
        return parsed?.length;
      },
    });
    for (const c of cut(bytes, nested)) s.push(c);
    assert.equal(
      new TextDecoder().decode(s.finish()),
      '{"kind":"ServiceList","metadata":{"resourceVersion":"8"},"items":[]}',
    );
    assert.deepEqual(got, items);
    // chunk 1: after x, a try up to the nested candidate fails; chunk 2: after a, y0…y3 in one piece
    assert.deepEqual(tries, [[1, undefined], [2, 4]]);
    // and whatever the cut, the decoder gives what JSON.parse gives
    for (let i = 0; i <= bytes.length; i++) {
      assert.deepEqual(decode(cut(bytes, i)), JSON.parse(text), `cut at ${i}`);
    }
  });

  it("recognises the items key spelled with escapes, and only at the top level", () => {
    const split = (text: string) => {
      const got: string[] = [];
      const s = new ListScanner((b) => void got.push(new TextDecoder().decode(b)), { batch: false });
      s.push(enc.encode(text));
      return { items: got, skeleton: new TextDecoder().decode(s.finish()) };
    };
    assert.deepEqual(split('{"\\u0069tems":[1,2]}'), { items: ["1", "2"], skeleton: '{"\\u0069tems":[]}' });
    assert.deepEqual(split('{"itemz":[1],"m":{"items":[2]}}'), {
      items: [],
      skeleton: '{"itemz":[1],"m":{"items":[2]}}',
    });
  });
});
