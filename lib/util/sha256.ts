/**
 * SHA-256 (FIPS 180-4) for chain-name hashes, written out so that hashing allocates nothing but the
 * result string. A full sync at 10k Services hashes ~75k short strings; node:crypto's createHash costs
 * a native hash object and a digest Buffer per call, which measured ~70 MB of transient memory for those
 * 75k hashes on Bun and Deno, against none here, at a similar speed.
 */

const K = new Int32Array([
  0x428a2f98,
  0x71374491,
  0xb5c0fbcf,
  0xe9b5dba5,
  0x3956c25b,
  0x59f111f1,
  0x923f82a4,
  0xab1c5ed5,
  0xd807aa98,
  0x12835b01,
  0x243185be,
  0x550c7dc3,
  0x72be5d74,
  0x80deb1fe,
  0x9bdc06a7,
  0xc19bf174,
  0xe49b69c1,
  0xefbe4786,
  0x0fc19dc6,
  0x240ca1cc,
  0x2de92c6f,
  0x4a7484aa,
  0x5cb0a9dc,
  0x76f988da,
  0x983e5152,
  0xa831c66d,
  0xb00327c8,
  0xbf597fc7,
  0xc6e00bf3,
  0xd5a79147,
  0x06ca6351,
  0x14292967,
  0x27b70a85,
  0x2e1b2138,
  0x4d2c6dfc,
  0x53380d13,
  0x650a7354,
  0x766a0abb,
  0x81c2c92e,
  0x92722c85,
  0xa2bfe8a1,
  0xa81a664b,
  0xc24b8b70,
  0xc76c51a3,
  0xd192e819,
  0xd6990624,
  0xf40e3585,
  0x106aa070,
  0x19a4c116,
  0x1e376c08,
  0x2748774c,
  0x34b0bcb5,
  0x391c0cb3,
  0x4ed8aa4a,
  0x5b9cca4f,
  0x682e6ff3,
  0x748f82ee,
  0x78a5636f,
  0x84c87814,
  0x8cc70208,
  0x90befffa,
  0xa4506ceb,
  0xbef9a3f7,
  0xc67178f2,
]);

const H0 = new Int32Array([
  0x6a09e667,
  0xbb67ae85,
  0x3c6ef372,
  0xa54ff53a,
  0x510e527f,
  0x9b05688c,
  0x1f83d9ab,
  0x5be0cd19,
]);

/** Scratch space, reused by every call (single-threaded, never re-entered). */
const W = new Int32Array(64);
const H = new Int32Array(8);
let message: Uint8Array = new Uint8Array(256);
const encoder = new TextEncoder();

/** Writes `input` as UTF-8 into `message` (growing it as needed); returns the byte length. */
function encode(input: string): number {
  return encodeAt(input, 0);
}

/** Appends the UTF-8 encoding of `input` to `message` at byte `at`; returns the new length. */
function encodeAt(input: string, at: number): number {
  let n = 0;
  for (; n < input.length; n++) {
    const c = input.charCodeAt(n);
    if (c >= 0x80) break;
    if (at + n + 72 > message.length) message = grow(message, at + n + 72);
    message[at + n] = c;
  }
  if (n === input.length) return at + n;
  // Non-ASCII: at most 3 UTF-8 bytes per UTF-16 unit, plus room for the padding.
  const need = at + n + 3 * (input.length - n) + 72;
  if (need > message.length) message = grow(message, need);
  return at + n + encoder.encodeInto(input.slice(n), message.subarray(at + n)).written;
}

function grow(buf: Uint8Array, min: number): Uint8Array {
  const out = new Uint8Array(Math.max(min, buf.length * 2));
  out.set(buf);
  return out;
}

/** Runs SHA-256 over message[0, length) into H. */
function digest(length: number): void {
  // Padding: 0x80, zeros, then the bit length as a 64-bit big-endian number.
  const total = (((length + 8) >>> 6) + 1) << 6;
  message[length] = 0x80;
  message.fill(0, length + 1, total - 4);
  const bits = length * 8;
  message[total - 4] = bits >>> 24;
  message[total - 3] = bits >>> 16;
  message[total - 2] = bits >>> 8;
  message[total - 1] = bits;
  H.set(H0);
  for (let off = 0; off < total; off += 64) {
    for (let t = 0; t < 16; t++) {
      const i = off + 4 * t;
      W[t] = (message[i] << 24) | (message[i + 1] << 16) | (message[i + 2] << 8) | message[i + 3];
    }
    for (let t = 16; t < 64; t++) {
      const w15 = W[t - 15];
      const w2 = W[t - 2];
      const s0 = ((w15 >>> 7) | (w15 << 25)) ^ ((w15 >>> 18) | (w15 << 14)) ^ (w15 >>> 3);
      const s1 = ((w2 >>> 17) | (w2 << 15)) ^ ((w2 >>> 19) | (w2 << 13)) ^ (w2 >>> 10);
      W[t] = (W[t - 16] + s0 + W[t - 7] + s1) | 0;
    }
    let a = H[0], b = H[1], c = H[2], d = H[3], e = H[4], f = H[5], g = H[6], h = H[7];
    for (let t = 0; t < 64; t++) {
      const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      const ch = (e & f) ^ (~e & g);
      const t1 = (h + S1 + ch + K[t] + W[t]) | 0;
      const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      const maj = (a & b) ^ (a & c) ^ (b & c);
      const t2 = (S0 + maj) | 0;
      h = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + t2) | 0;
    }
    H[0] = (H[0] + a) | 0;
    H[1] = (H[1] + b) | 0;
    H[2] = (H[2] + c) | 0;
    H[3] = (H[3] + d) | 0;
    H[4] = (H[4] + e) | 0;
    H[5] = (H[5] + f) | 0;
    H[6] = (H[6] + g) | 0;
    H[7] = (H[7] + h) | 0;
  }
}

/** SHA-256 of the UTF-8 encoding of `input`, as 32 bytes (for tests and callers that need it all). */
export function sha256(input: string): Uint8Array {
  digest(encode(input));
  const out = new Uint8Array(32);
  for (let i = 0; i < 8; i++) {
    out[4 * i] = H[i] >>> 24;
    out[4 * i + 1] = H[i] >>> 16;
    out[4 * i + 2] = H[i] >>> 8;
    out[4 * i + 3] = H[i];
  }
  return out;
}

/** RFC 4648 base32 alphabet, as character codes. */
const B32 = Array.from("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", (c) => c.charCodeAt(0));

/**
 * base32(sha256(UTF-8 of `input`))[:16]: the first 80 bits of the digest (bytes 0–9) in 5-bit groups,
 * upstream kube-proxy's chain-name hash. One flat 16-character string.
 */
export function sha256Base32Prefix16(input: string): string {
  digest(encode(input));
  // Bytes 0-9 of the digest: H[0] (4), H[1] (4), top half of H[2] (2).
  const x = H[0], y = H[1], z = H[2] >>> 16;
  return String.fromCharCode(
    B32[x >>> 27],
    B32[(x >>> 22) & 31],
    B32[(x >>> 17) & 31],
    B32[(x >>> 12) & 31],
    B32[(x >>> 7) & 31],
    B32[(x >>> 2) & 31],
    B32[((x & 3) << 3) | (y >>> 29)],
    B32[(y >>> 24) & 31],
    B32[(y >>> 19) & 31],
    B32[(y >>> 14) & 31],
    B32[(y >>> 9) & 31],
    B32[(y >>> 4) & 31],
    B32[((y & 15) << 1) | (z >>> 15)],
    B32[(z >>> 10) & 31],
    B32[(z >>> 5) & 31],
    B32[z & 31],
  );
}

/**
 * sha256Base32Prefix16(a + b + c) as 16 character codes written into `out` at `at`, without making the
 * joined input or the result string: a full sync hashes every endpoint (~65k at 10k Services) and keeps
 * only each service port's hashes side by side.
 */
export function sha256Base32Prefix16Into(a: string, b: string, c: string, out: Uint8Array, at: number): void {
  digest(encodeAt(c, encodeAt(b, encodeAt(a, 0))));
  const x = H[0], y = H[1], z = H[2] >>> 16;
  out[at] = B32[x >>> 27];
  out[at + 1] = B32[(x >>> 22) & 31];
  out[at + 2] = B32[(x >>> 17) & 31];
  out[at + 3] = B32[(x >>> 12) & 31];
  out[at + 4] = B32[(x >>> 7) & 31];
  out[at + 5] = B32[(x >>> 2) & 31];
  out[at + 6] = B32[((x & 3) << 3) | (y >>> 29)];
  out[at + 7] = B32[(y >>> 24) & 31];
  out[at + 8] = B32[(y >>> 19) & 31];
  out[at + 9] = B32[(y >>> 14) & 31];
  out[at + 10] = B32[(y >>> 9) & 31];
  out[at + 11] = B32[(y >>> 4) & 31];
  out[at + 12] = B32[((y & 15) << 1) | (z >>> 15)];
  out[at + 13] = B32[(z >>> 10) & 31];
  out[at + 14] = B32[(z >>> 5) & 31];
  out[at + 15] = B32[z & 31];
}
