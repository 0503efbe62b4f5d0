/** The allocation-free SHA-256 behind chain names equals node:crypto's, byte for byte. */
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { sha256, sha256Base32Prefix16 } from "../../../lib/util/sha256.ts";
import { base32Encode } from "../../../lib/proxy/iptables/chain_names.ts";

const hex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

test("FIPS 180-4 test vectors", () => {
  assert.equal(hex(sha256("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  assert.equal(hex(sha256("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  assert.equal(
    hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
  );
  assert.equal(
    hex(sha256("a".repeat(1000))),
    createHash("sha256").update("a".repeat(1000)).digest("hex"),
  );
});

test("random strings of every length around the block boundaries, ASCII and not", () => {
  let seed = 12345;
  const rnd = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  for (let len = 0; len < 200; len++) {
    for (const unicode of [false, true]) {
      let s = "";
      for (let i = 0; i < len; i++) {
        s += String.fromCharCode(
          unicode && rnd() < 0.2 ? 0x80 + Math.floor(rnd() * 0xff00) : 32 + Math.floor(rnd() * 95),
        );
      }
      const want = createHash("sha256").update(s, "utf8").digest();
      assert.equal(hex(sha256(s)), want.toString("hex"), `length ${len} ${JSON.stringify(s)}`);
      assert.equal(
        sha256Base32Prefix16(s),
        base32Encode(new Uint8Array(want.buffer, want.byteOffset, 20)).slice(0, 16),
        `base32 prefix, length ${len}`,
      );
    }
  }
});
