/**
 * The netlink encoder byte for byte against nft 1.0.6: nft_1.0.6_messages.json holds, per statement, the
 * nf_tables messages `nft -f` sent for it (captured with strace from a namespace holding the table, chains
 * and sets the statements refer to): message type, flags and body. Every statement form our renderer
 * writes is there; the encoder must produce the same messages. The batch-local set ids are left out of
 * the comparison: nft numbers every set of its cache (and names existing sets by id too), ours number only
 * the sets of the batch; the kernel finds an existing set by name. Pure: runs anywhere.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import {
  anonymousSetNamer,
  encodeTransaction,
  frameBatch,
} from "../../../../../lib/proxy/nftables/netlink/batch.ts";
import { NftNetlinkUnsupported } from "../../../../../lib/proxy/nftables/netlink/unsupported.ts";

const golden = JSON.parse(
  readFileSync(new URL("./nft_1.0.6_messages.json", import.meta.url), "utf8"),
) as Record<string, string[]>;

function hex(b: Uint8Array): string {
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

function bytes(h: string): Uint8Array {
  return Uint8Array.from(h.match(/../g) ?? [], (x) => parseInt(x, 16));
}

/** A message body's attributes as text, nests expanded, without set ids (see above). */
function canonical(msg: number, body: Uint8Array): string {
  const walk = (b: Uint8Array, path: string, expr: string): string[] => {
    const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
    const out: string[] = [];
    for (let off = 0; off + 4 <= b.length;) {
      const len = v.getUint16(off, true);
      const raw = v.getUint16(off + 2, true);
      const payload = b.subarray(off + 4, off + len);
      const here = `${path}/${raw & 0x3fff}`;
      const isSetId = (msg === 9 && here === "/10") || (msg === 12 && here === "/4") ||
        (expr === "lookup" && here.endsWith("/2/4")) || (expr === "dynset" && here.endsWith("/2/2"));
      if (isSetId) {
        // left out
      } else if (raw & 0x8000) {
        // An expression (NFTA_LIST_ELEM of a rule's NFTA_RULE_EXPRESSIONS): note its name for its data.
        let name = expr;
        if (msg === 6 && path === "/4") name = new TextDecoder().decode(payload.subarray(4, payload[0] - 1));
        out.push(`${here} {`, ...walk(payload, here, name), "}");
      } else out.push(`${here}=${hex(payload)}`);
      off += (len + 3) & ~3;
    }
    return out;
  };
  return [`msg ${msg}`, hex(body.subarray(0, 4)), ...walk(body.subarray(4), "", "")].join("\n");
}

for (const [statement, expected] of Object.entries(golden)) {
  test(`encodes as nft 1.0.6 does: ${statement.slice(0, 90)}`, () => {
    const mine = encodeTransaction(statement + "\n").map((m) =>
      `0x${m.flags.toString(16)} ${canonical(m.msg, Uint8Array.of(m.family, 0, 0, 0, ...m.body))}`
    );
    const theirs = expected.map((e) => {
      const [msg, flags, body] = e.split(" ");
      return `${flags} ${canonical(Number(msg), bytes(body))}`;
    });
    assert.deepEqual(mine, theirs);
  });
}

/** "name" + NUL as canonical() prints a name attribute. */
function nameHex(name: string): string {
  return hex(new TextEncoder().encode(name + "\0"));
}

test("with our own anonymous set names and elements by id: nft's messages but for the name, NLM_F_EXCL and the element list's set name", () => {
  const vmap = "add rule ip kube-proxy svc numgen random mod 2 vmap { 0 : goto ep0 , 1 : goto ep1 }";
  const interval = "add rule ip kube-proxy c ip saddr != { 203.0.113.0/25 , 192.168.0.2 , 1.2.3.4 } drop";
  const name = anonymousSetNamer("ktest");
  const opts = { anonymousSetName: name, elementsById: true };
  for (
    const [statement, ours, nfts] of [[vmap, "__mapktest_0", "__map%d"], [
      interval,
      "__setktest_1",
      "__set%d",
    ]]
  ) {
    const mine = encodeTransaction(statement + "\n", opts).map((m) =>
      `0x${m.flags.toString(16)} ${canonical(m.msg, Uint8Array.of(m.family, 0, 0, 0, ...m.body))}`
    );
    // nft's messages with our name, and without the set name of the element list (NEWSETELEM's attribute 2).
    const theirs = golden[statement].map((e) => {
      const [msg, flags, body] = e.split(" ");
      // Our anonymous set is created with NLM_F_EXCL (0x200): a name that exists is refused, not taken.
      const f = msg === "9" ? `0x${(Number(flags) | 0x200).toString(16)}` : flags;
      let c = `${f} ${canonical(Number(msg), bytes(body))}`.replaceAll(nameHex(nfts), nameHex(ours));
      if (msg === "12") c = c.split("\n").filter((l) => !l.startsWith("/2=")).join("\n");
      return c;
    });
    assert.deepEqual(mine, theirs, statement);
  }
  // The set and its element list are tied by the batch id alone: the same one.
  const msgs = encodeTransaction(vmap + "\n", opts);
  const id = (m: (typeof msgs)[number], at: number) =>
    new DataView(m.body.buffer, m.body.byteOffset).getUint32(at);
  const setIdAt = (m: (typeof msgs)[number], type: number): number => {
    const v = new DataView(m.body.buffer, m.body.byteOffset, m.body.byteLength);
    for (let off = 0; off + 4 <= m.body.length; off += (v.getUint16(off, true) + 3) & ~3) {
      if ((v.getUint16(off + 2, true) & 0x3fff) === type) return id(m, off + 4);
    }
    return -1;
  };
  assert.equal(msgs[0].msg, 9);
  assert.equal(msgs[1].msg, 12);
  assert.notEqual(setIdAt(msgs[0], 10), -1);
  assert.equal(setIdAt(msgs[1], 4), setIdAt(msgs[0], 10));
});

test("anonymous set names of one namer never repeat, across transactions; tokens apart never meet", () => {
  const a = anonymousSetNamer("kab1");
  const b = anonymousSetNamer("kab2");
  const seen = new Set<string>();
  for (let i = 0; i < 1000; i++) {
    for (const n of [a("map"), a("set"), b("map"), b("set")]) {
      assert.ok(!seen.has(n), n);
      seen.add(n);
      // The kernel numbers nft's own "__map%d" / "__set%d" by parsing every set's name: ours never parse.
      assert.doesNotMatch(n, /^__(map|set)\d/);
    }
  }
  // Across transactions of one session: a second transaction's anonymous map is named anew.
  const opts = { anonymousSetName: anonymousSetNamer("kx"), elementsById: true };
  const tx = "add rule ip kube-proxy svc numgen random mod 2 vmap { 0 : goto ep0 , 1 : goto ep1 }\n";
  const names = [encodeTransaction(tx, opts), encodeTransaction(tx, opts)].map((m) =>
    new TextDecoder().decode(m[0].body).match(/__mapkx_\d+/)?.[0]
  );
  assert.deepEqual(names, ["__mapkx_0", "__mapkx_1"]);
  for (const bad of ["", "1abc", "a_b", "A"]) {
    assert.throws(() => anonymousSetNamer(bad), /anonymous set name token/);
  }
});

test("every message keeps its statement; the batch frame acks the last message only", () => {
  const tx = "add table ip kube-proxy\nadd chain ip kube-proxy c\n";
  const msgs = encodeTransaction(tx);
  assert.deepEqual(msgs.map((m) => m.statement), ["add table ip kube-proxy", "add chain ip kube-proxy c"]);
  const b = frameBatch(msgs, 7);
  const v = new DataView(b.bytes.buffer);
  // BATCH_BEGIN (seq 7), table (8), chain (9, NLM_F_ACK), BATCH_END (10).
  assert.equal(v.getUint16(4, true), 0x10);
  assert.equal(b.lastSeq, 9);
  assert.equal(b.statementOf(9), "add chain ip kube-proxy c");
  let off = 0;
  const flags: number[] = [];
  while (off < b.bytes.length) {
    flags.push(v.getUint16(off + 6, true));
    off += v.getUint32(off, true);
  }
  assert.deepEqual(flags.map((f) => (f & 0x4) !== 0), [false, false, true, false]);
});

test("statements the encoder does not know throw NftNetlinkUnsupported naming them", () => {
  for (
    const [tx, what] of [
      ["add rule ip kube-proxy c oifname eth0 drop\n", /oifname/],
      ["add rule ip kube-proxy c counter\n", /counter/],
      ["add set ip kube-proxy s { type ether_addr ; }\n", /ether_addr/],
      ["insert rule ip kube-proxy c drop\n", /command/],
      ["add element ip kube-proxy foreign-set { 1.2.3.4 }\n", /foreign-set/],
    ] as const
  ) {
    assert.throws(() => encodeTransaction(tx), (e: unknown) => {
      assert.ok(e instanceof NftNetlinkUnsupported, String(e));
      assert.match(e.message, what);
      assert.equal(e.statement, tx.trim());
      return true;
    });
  }
});
