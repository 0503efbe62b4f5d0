/**
 * The batch encoder's reused buffer (NftBatchEncoder, attrs.ts NlWriter): a batch written after a larger
 * one is byte for byte what a fresh encoder writes, long element lists split as the 16-bit attribute length
 * requires, every message keeps its line, and the writer gives back a large buffer it no longer needs.
 * batch_test.ts compares the bytes themselves with nft 1.0.6's. Pure: runs anywhere.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  anonymousSetNamer,
  encodeTransaction,
  frameBatch,
  NftBatchEncoder,
} from "../../../../../lib/proxy/nftables/netlink/batch.ts";
import { NlWriter, RETAIN_BYTES } from "../../../../../lib/proxy/nftables/netlink/attrs.ts";
import { NftNetlinkUnsupported } from "../../../../../lib/proxy/nftables/netlink/unsupported.ts";
import {
  knownContainer,
  writeElement,
  writePlainElement,
} from "../../../../../lib/proxy/nftables/netlink/element.ts";
import type { BatchLine, Verb } from "../../../../../lib/proxy/nftables/netlink/message.ts";

/** The messages of a framed batch: [type, flags, seq, length] after BATCH_BEGIN, before BATCH_END. */
function messages(bytes: Uint8Array): [number, number, number, number][] {
  const v = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out: [number, number, number, number][] = [];
  for (let off = 0; off < bytes.length;) {
    const len = v.getUint32(off, true);
    out.push([v.getUint16(off + 4, true), v.getUint16(off + 6, true), v.getUint32(off + 8, true), len]);
    off += len;
  }
  return out.slice(1, -1);
}

const SMALL = [
  'add table ip kube-proxy { comment "rules for kube-proxy" ; }',
  "add chain ip kube-proxy svc-a",
  "add rule ip kube-proxy svc-a ip daddr 172.30.0.41 ip saddr != 10.0.0.0/8 jump mark-for-masquerade",
  "add rule ip kube-proxy svc-a numgen random mod 2 vmap { 0 : goto ep0 , 1 : goto ep1 }",
].join("\n") + "\n";

/** A larger transaction with names of other lengths (so stale bytes and padding would show). */
function large(n: number): string {
  const lines = ["add table ip kube-proxy"];
  for (let k = 0; k < n; k++) {
    lines.push(`add chain ip kube-proxy endpoint-${"x".repeat(k % 7)}-${k}`);
    lines.push(
      `add rule ip kube-proxy endpoint-${"x".repeat(k % 7)}-${k} meta l4proto tcp dnat to 10.1.${k >> 8}.${
        k & 255
      }:80`,
    );
  }
  return lines.join("\n") + "\n";
}

test("a batch after a larger one is the same bytes as a fresh encoder's", () => {
  const enc = new NftBatchEncoder();
  const opts = () => ({ anonymousSetName: anonymousSetNamer("kt"), elementsById: true });
  const bigFirst = enc.encode(large(3000), 1, opts());
  assert.ok(bigFirst.bytes.length > 64 * 1024, "the first batch grew the buffer");
  const again = enc.encode(SMALL, 40, opts());
  const fresh = new NftBatchEncoder().encode(SMALL, 40, opts());
  assert.deepEqual(again.bytes, fresh.bytes);
  assert.deepEqual(again.bytes, frameBatch(encodeTransaction(SMALL, opts()), 40).bytes);
  // BATCH_BEGIN, table, chain, rule, anonymous map and its elements, rule, BATCH_END; ack on the last only.
  const m = messages(again.bytes);
  assert.equal(m.length, 6);
  assert.deepEqual(m.map(([, flags]) => (flags & 0x4) !== 0), [false, false, false, false, false, true]);
  assert.deepEqual(m.map(([, , seq]) => seq), [41, 42, 43, 44, 45, 46]);
  assert.equal(again.lastSeq, 46);
});

test("every message of a line names that line, also for a rule's anonymous map", () => {
  const b = new NftBatchEncoder().encode(SMALL, 0);
  const lines = SMALL.split("\n");
  assert.deepEqual(
    [1, 2, 3, 4, 5, 6].map((seq) => b.statementOf(seq)),
    [lines[0], lines[1], lines[2], lines[3], lines[3], lines[3]],
  );
  assert.equal(b.statementOf(0), undefined);
  assert.equal(b.statementOf(7), undefined);
});

test("a statement the encoder does not know is named by its own line, wherever it is", () => {
  const tx = SMALL + "add rule ip kube-proxy svc-a counter\nadd chain ip kube-proxy after\n";
  assert.throws(() => new NftBatchEncoder().encode(tx, 0), (e: unknown) => {
    assert.ok(e instanceof NftNetlinkUnsupported, String(e));
    assert.equal(e.statement, "add rule ip kube-proxy svc-a counter");
    assert.match(e.what, /counter/);
    return true;
  });
  // The encoder stays usable after a refusal.
  const enc = new NftBatchEncoder();
  assert.throws(() => enc.encode("add chain ip kube-proxy a b c\n", 0), NftNetlinkUnsupported);
  assert.deepEqual(enc.encode(SMALL, 0).bytes, new NftBatchEncoder().encode(SMALL, 0).bytes);
});

test("a long element list becomes several messages of at most 60000 bytes of elements, numbered on", () => {
  const n = 4000;
  const elems = Array.from({ length: n }, (_, k) => `10.${k >> 16}.${(k >> 8) & 255}.${k & 255}`).join(", ");
  const line = `add element ip kube-proxy cluster-ips { ${elems} }`;
  const b = new NftBatchEncoder().encode(line + "\n", 0);
  const v = new DataView(b.bytes.buffer, b.bytes.byteOffset, b.bytes.byteLength);
  let off = 20;
  const types: number[] = [];
  const listSizes: number[] = [];
  for (let seq = 1; seq <= b.lastSeq; seq++) {
    const len = v.getUint32(off, true);
    assert.equal(v.getUint16(off + 4, true), (10 << 8) | 12, "NEWSETELEM");
    assert.equal(b.statementOf(seq), line);
    // Attributes after the nfgenmsg: table, set name, then the element list (nest 3).
    let a = off + 20;
    while (a < off + len) {
      const alen = v.getUint16(a, true);
      if ((v.getUint16(a + 2, true) & 0x3fff) === 3) {
        listSizes.push(alen - 4);
        for (let e = a + 4; e < a + alen; e += (v.getUint16(e, true) + 3) & ~3) {
          types.push(v.getUint16(e + 2, true) & 0x3fff);
        }
      }
      a += (alen + 3) & ~3;
    }
    off += len;
  }
  assert.ok(listSizes.length > 1, `${listSizes.length} messages`);
  for (const s of listSizes) assert.ok(s <= 60_000, `element list of ${s} bytes`);
  // Every element but the last message's would have fitted only by going over the bound.
  const element = 16; // nest header, NFTA_SET_ELEM_KEY nest, NFTA_DATA_VALUE of 4 bytes
  for (const s of listSizes.slice(0, -1)) assert.ok(s + element > 60_000, `a message left room: ${s}`);
  assert.deepEqual(types, Array.from({ length: n }, (_, k) => k + 1));
});

test("the writer gives back a large buffer its last contents used a quarter of, and keeps one it used", () => {
  const w = new NlWriter(1024);
  const fill = (n: number) => {
    w.reset();
    const at = w.beginMessage(0, 0, 0, 0);
    for (let k = 0; k < n / 8; k++) w.u32be(1, k);
    w.endMessage(at);
  };
  fill(3 * RETAIN_BYTES);
  const big = w.capacity;
  assert.ok(big > RETAIN_BYTES);
  fill(big / 2);
  w.reset();
  assert.equal(w.capacity, big, "half used: kept");
  fill(512);
  w.reset();
  assert.equal(w.capacity, 1024, "a quarter or less used: back to the initial size");
  // Padding is written, not left from earlier contents.
  fill(3 * RETAIN_BYTES);
  w.reset();
  w.str(1, "abc");
  assert.deepEqual(w.bytes(), Uint8Array.of(8, 0, 1, 0, 0x61, 0x62, 0x63, 0));
  w.reset();
  w.u8(2, 7);
  assert.deepEqual(w.bytes(), Uint8Array.of(5, 0, 2, 0, 7, 0, 0, 0));
});

test("a transaction given as chunks of whole lines is the batch of its joined text, every message naming its line", () => {
  const opts = () => ({ anonymousSetName: anonymousSetNamer("kt"), elementsById: true });
  const text = SMALL + large(40);
  const whole = new NftBatchEncoder().encode(text, 7, opts());
  const lines = text.slice(0, -1).split("\n");
  for (const per of [1, 3, 17, lines.length]) {
    for (const newline of [false, true]) {
      const chunks: string[] = [];
      for (let i = 0; i < lines.length; i += per) {
        chunks.push(lines.slice(i, i + per).join("\n") + (newline ? "\n" : ""));
      }
      // An empty chunk changes nothing.
      chunks.splice(1, 0, "");
      const b = new NftBatchEncoder().encode(chunks, 7, opts());
      assert.deepEqual(b.bytes, whole.bytes, `${per} per chunk`);
      for (let seq = 8; seq <= whole.lastSeq; seq++) assert.equal(b.statementOf(seq), whole.statementOf(seq));
    }
  }
});

test("an element read in place encodes as the general reading does; other forms are left to it", () => {
  const lineOf = (w: NlWriter, family: "ip" | "ip6"): BatchLine => ({
    w,
    table: "kube-proxy",
    family,
    begin: () => 0,
    fail: (what: string) => {
      throw new Error(what);
    },
  });
  const cases: [family: "ip" | "ip6", container: string, element: string][] = [
    ["ip", "cluster-ips", "172.30.0.41"],
    ["ip", "nodeport-ips", "0.0.0.0"],
    ["ip", "service-ips", "172.30.0.41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80"],
    ["ip", "service-ips", "255.255.255.255 . udp . 65535 : jump external-X-ns/a/udp/dns"],
    ["ip", "service-ips", "10.0.0.1 . sctp . 0 : goto c"],
    ["ip", "no-endpoint-services", "172.30.0.42 . tcp . 80 : drop"],
    ["ip", "no-endpoint-services", "172.30.0.42 . tcp . 080 : accept"],
    ["ip", "firewall-ips", "5.6.7.8 . tcp . 443 : return"],
    ["ip", "service-nodeports", "tcp . 30080 : goto external-ABC-ns/b/tcp/p80"],
    ["ip", "no-endpoint-nodeports", "udp . 3001 : goto reject-chain"],
    ["ip6", "cluster-ips", "fd00:10:96::1"],
    ["ip6", "service-ips", "fd00:10:96::1 . tcp . 80 : goto service-Q-ns/c/tcp/p80"],
    ["ip6", "service-ips", "::ffff:1.2.3.4 . udp . 53 : goto c"],
  ];
  for (const [family, container, element] of cases) {
    const decl = knownContainer(container, family)!;
    for (const verb of ["add", "delete"] as Verb[]) {
      const plain = new NlWriter(256);
      assert.ok(
        writePlainElement(lineOf(plain, family), verb, decl, `{ ${element} }`, 2, element.length + 2),
      );
      const general = new NlWriter(256);
      writeElement(lineOf(general, family), verb, decl, element);
      assert.deepEqual(plain.bytes(), general.bytes(), `${verb} ${container} { ${element} }`);
    }
  }
  // Not read in place (nothing written): a comment, a value or key in another spelling, a bad key or
  // value (the general reading words the error).
  const declined: [container: string, element: string, error: string | null][] = [
    ["no-endpoint-nodeports", 'tcp . 3004 comment "ns4/empty:p80" : goto reject-chain', null],
    ["service-ips", "172.30.0.41 . tcp . 80 : goto  svc", 'element value "goto  svc"'],
    ["service-ips", "172.30.0.41 . tcp . 80 : continue", 'element value "continue"'],
    ["service-ips", "172.30.0.41 . tcp . 80 : goto sv\u00e9", null],
    ["service-ips", "172.30.0.041 . tcp . 80 : goto svc", 'element key "172.30.0.041 . tcp . 80"'],
    ["service-ips", "172.30.0.41 . icmp . 80 : goto svc", 'element key "172.30.0.41 . icmp . 80"'],
    ["service-ips", "172.30.0.41 . tcp . 65536 : goto svc", 'element key "172.30.0.41 . tcp . 65536"'],
    ["service-ips", "172.30.0.41 . tcp : goto svc", 'element key "172.30.0.41 . tcp"'],
    ["service-ips", "172.30.0.41 . tcp . 80 . 1 : goto svc", 'element key "172.30.0.41 . tcp . 80 . 1"'],
    ["cluster-ips", "", "element"],
    ["cluster-ips", "fd00::1", 'element key "fd00::1"'],
  ];
  for (const [container, element, error] of declined) {
    const decl = knownContainer(container, "ip")!;
    const w = new NlWriter(256);
    assert.equal(
      writePlainElement(lineOf(w, "ip"), "add", decl, `{ ${element} }`, 2, element.length + 2),
      false,
      element,
    );
    assert.equal(w.length, 0, element);
    if (error === null) continue;
    assert.throws(() => writeElement(lineOf(new NlWriter(256), "ip"), "add", decl, element), {
      message: error,
    });
  }
  // A map element without a value, a set element with one: refused either way, with the same words.
  const svcIps = knownContainer("service-ips", "ip")!;
  const cips = knownContainer("cluster-ips", "ip")!;
  for (
    const [decl, element] of [[svcIps, "172.30.0.41 . tcp . 80"], [cips, "172.30.0.41 : goto x"]] as const
  ) {
    const text = `{ ${element} }`;
    assert.throws(
      () => writePlainElement(lineOf(new NlWriter(256), "ip"), "add", decl, text, 2, element.length + 2),
      { message: "element value" },
    );
    assert.throws(() => writeElement(lineOf(new NlWriter(256), "ip"), "add", decl, element), {
      message: "element value",
    });
  }
});

test("a protocol is one of nft's own names, not any property name of an object", () => {
  for (
    const statement of [
      "add element ip kube-proxy service-ips { 172.30.0.41 . constructor . 80 : goto svc }",
      "add element ip kube-proxy service-ips { 172.30.0.41 . toString . 80 : goto svc }",
      'add element ip kube-proxy service-ips { 172.30.0.41 . __proto__ . 80 comment "c" : goto svc }',
      "add rule ip kube-proxy svc-a meta l4proto constructor accept",
    ]
  ) {
    assert.throws(
      () => new NftBatchEncoder().encode(SMALL + statement + "\n", 0),
      NftNetlinkUnsupported,
      statement,
    );
  }
  assert.ok(
    new NftBatchEncoder().encode(SMALL + "add rule ip kube-proxy svc-a meta l4proto udp accept\n", 0),
  );
});

test("once a batch is encoded the encoder holds no name read from its transaction", () => {
  const enc = new NftBatchEncoder();
  const tx = "add table ip kube-proxy\n" +
    "add map ip kube-proxy no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; }\n" +
    "add set ip kube-proxy affinity-x { type ipv4_addr ; flags dynamic,timeout ; timeout 10800s ; }\n" +
    "add element ip kube-proxy no-endpoint-services { 10.0.0.1 . tcp . 80 : goto reject-chain }\n" +
    "add chain ip kube-proxy svc-a\n" +
    "add rule ip kube-proxy svc-a numgen random mod 2 vmap { 0 : goto ep0 , 1 : goto ep1 }\n";
  // Each name is a substring of the transaction, which it would keep alive until the next batch: at 10k
  // Services the first sync's switch-over (~1.3 MB of text) for as long as the node saw no change.
  assert.ok(
    enc.encode(tx, 1, { anonymousSetName: anonymousSetNamer("kt"), elementsById: true }).messages > 0,
  );
  assert.equal(enc.retainedNames, 0);
  // Also after a batch the kernel would refuse to encode (the encoder fails half-way).
  assert.throws(() => enc.encode(tx + "add frobnicate ip kube-proxy x\n", 1), NftNetlinkUnsupported);
  assert.equal(enc.retainedNames, 0);
});
