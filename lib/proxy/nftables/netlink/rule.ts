/**
 * A rule of our renderer (nft syntax, e.g. "ip daddr . meta l4proto . th dport vmap @service-ips") as
 * the nf_tables expressions nft 1.0.6 generates for it: the same loads, registers, comparisons and
 * verdicts, so `nft list ruleset` prints the rule back as nft would. Only the statement forms kube-proxy
 * writes are known; anything else throws {@link NftNetlinkUnsupported} and the caller falls back to nft.
 */
import {
  bitwise,
  bitwiseU32le,
  cmp,
  CMP_EQ,
  CMP_NEQ,
  cmpU32le,
  CT_STATE,
  ctLoad,
  dnat,
  dynsetUpdate,
  fib,
  FIB_DADDR,
  FIB_RESULT_ADDRTYPE,
  FIB_SADDR,
  immediateValue,
  immediateVerdict,
  lookup,
  masq,
  META_IIFNAME,
  META_L4PROTO,
  META_MARK,
  metaLoad,
  metaSet,
  NAT_RANDOM_FULLY,
  numgenRandom,
  payload,
  PAYLOAD_NETWORK,
  PAYLOAD_TRANSPORT,
  reg32,
  REG_1,
  REG_2,
  REG_VERDICT,
  reject,
  VERDICT,
  type Verdict,
} from "./expressions.ts";
import { parsePrefix, protocolNumber } from "./datatypes.ts";
import { NftNetlinkUnsupported } from "./unsupported.ts";
import type { NlWriter } from "./attrs.ts";

/** What a rule needs from the batch it is encoded into. */
export interface RuleContext {
  /** The batch id of a set or map added earlier in the same batch, else null. */
  setId(name: string): number | null;
  /**
   * Adds an anonymous constant verdict map with integer keys 0..n-1 (numgen) before the rule; returns
   * its name and batch id.
   */
  anonymousVerdictMap(verdicts: readonly Verdict[]): { name: string; id: number };
  /**
   * Adds an anonymous constant interval set of `ranges` (sorted, merged, inclusive [first, last]
   * addresses) for a match on address field `field` before the rule; returns its name and batch id.
   */
  anonymousIntervalSet(
    field: "saddr" | "daddr",
    ranges: readonly (readonly [Uint8Array, Uint8Array])[],
  ): { name: string; id: number };
  /** The line the rule is on, for errors (default: the rule's text). */
  statement?(): string;
}

/** IFNAMSIZ: interface names are compared as 16 bytes, NUL-padded. */
const IFNAMSIZ = 16;

/** The inclusive address range of a prefix. */
function prefixRange(bytes: Uint8Array, prefix: number): [Uint8Array, Uint8Array] {
  const first = bytes.slice();
  const last = bytes.slice();
  for (let b = 0; b < bytes.length; b++) {
    const bits = prefix - 8 * b;
    const keep = bits >= 8 ? 0xff : bits <= 0 ? 0 : (0xff << (8 - bits)) & 0xff;
    first[b] &= keep;
    last[b] = (first[b] | ~keep) & 0xff;
  }
  return [first, last];
}

function compareBytes(a: Uint8Array, b: Uint8Array): number {
  for (let k = 0; k < a.length; k++) if (a[k] !== b[k]) return a[k] - b[k];
  return 0;
}

/** `a` + 1 as an address, or null on overflow past the last address. */
export function nextAddress(a: Uint8Array): Uint8Array | null {
  const out = a.slice();
  for (let k = out.length - 1; k >= 0; k--) {
    if (out[k] !== 0xff) {
      out[k]++;
      return out;
    }
    out[k] = 0;
  }
  return null;
}

/** Ranges sorted by start, with overlapping and adjacent ones merged (nft's auto-merge). */
export function mergeRanges(
  ranges: readonly (readonly [Uint8Array, Uint8Array])[],
): [Uint8Array, Uint8Array][] {
  const sorted = [...ranges].sort((x, y) => compareBytes(x[0], y[0]));
  const out: [Uint8Array, Uint8Array][] = [];
  for (const [first, last] of sorted) {
    const prev = out[out.length - 1];
    if (prev !== undefined) {
      const after = nextAddress(prev[1]);
      if (after === null || compareBytes(first, after) <= 0) {
        if (compareBytes(last, prev[1]) > 0) prev[1] = last;
        continue;
      }
    }
    out.push([first, last]);
  }
  return out;
}

/** NFPROTO numbers. */
const NFPROTO = { ip: 2, ip6: 10 } as const;
/** RTN_LOCAL: `fib ... type local`. */
const RTN_LOCAL = 2;
/** ICMP(v6) port unreachable: what a bare `reject` sends in the ip / ip6 family. */
const REJECT_PORT_UNREACH = { ip: 3, ip6: 4 } as const;

/** A field loaded into registers: its size in bytes and how it is loaded (payload or meta). */
interface Field {
  readonly size: number;
  /** Payload base and offset, or null for meta l4proto. */
  readonly base: number | null;
  readonly offset: number;
}

/** The fields a rule names, per family (constants: a rule's parse allocates none). */
const FIELDS = {
  ip: { saddr: netField(12, 4), daddr: netField(16, 4) },
  ip6: { saddr: netField(8, 16), daddr: netField(24, 16) },
} as const;
const L4PROTO_FIELD: Field = { size: 1, base: null, offset: 0 };
const DPORT_FIELD: Field = { size: 2, base: PAYLOAD_TRANSPORT, offset: 2 };

function netField(offset: number, size: number): Field {
  return { size, base: PAYLOAD_NETWORK, offset };
}

/** Writes the expression loading `f` into `dreg`. */
function loadField(w: NlWriter, f: Field, dreg: number): void {
  if (f.base === null) metaLoad(w, META_L4PROTO, dreg);
  else payload(w, dreg, f.base, f.offset, f.size);
}

/** Splits rule text into tokens; braces and commas are tokens of their own. */
export function tokenize(text: string): string[] {
  const out: string[] = [];
  out.length = tokenizeInto(text, 0, text.length, out);
  return out;
}

/**
 * Writes the tokens of `text` from `from` to `to` into `out` from index 0 (a reused array); returns how
 * many.
 */
function tokenizeInto(text: string, from: number, to: number, out: string[]): number {
  let n = 0;
  let start = -1;
  for (let k = from; k <= to; k++) {
    const c = k < to ? text.charCodeAt(k) : 32;
    const brace = c === 0x7b || c === 0x7d || c === 0x2c; // { } ,
    if (c === 32 || c === 9 || c === 10 || brace) {
      if (start >= 0) out[n++] = text.slice(start, k);
      start = -1;
      if (brace) out[n++] = c === 0x7b ? "{" : c === 0x7d ? "}" : ",";
    } else if (start < 0) start = k;
  }
  return n;
}

/**
 * Writes rules (nft syntax, without their comment) as NFTA_LIST_ELEMs. One per batch encoder: the parse
 * state lives in its fields and its token array is reused, so a first sync's ~150k rules leave behind
 * their tokens only.
 */
export class RuleEncoder {
  readonly #tokens: string[] = [];
  #n = 0;
  #i = 0;
  #ctx: RuleContext | null = null;
  #text = "";
  #from = 0;
  #to = 0;
  /** The batch id of the last {@link setRef}'s set, or null. */
  #setId: number | null = null;

  /**
   * Writes the rule in `text` from `from` to `to` (of a `family` table) into `out`, in order. The anonymous sets it needs go to
   * `ctx`, which writes their messages elsewhere (they precede the rule's).
   */
  encode(
    out: NlWriter,
    family: "ip" | "ip6",
    ctx: RuleContext,
    text: string,
    from = 0,
    to = text.length,
  ): void {
    this.#n = tokenizeInto(text, from, to, this.#tokens);
    this.#i = 0;
    this.#ctx = ctx;
    this.#text = text;
    this.#from = from;
    this.#to = to;
    try {
      this.#rule(out, family, ctx);
    } finally {
      // The transaction's text is not kept past the call.
      this.#ctx = null;
      this.#text = "";
    }
  }

  /** Drops the last rule's tokens: substrings of a transaction, which they would keep alive. */
  clear(): void {
    this.#tokens.length = 0;
  }

  #fail(what: string): never {
    const statement = this.#ctx?.statement?.() ?? this.#text.slice(this.#from, this.#to);
    throw new NftNetlinkUnsupported(statement, what);
  }

  #peek(k = 0): string | undefined {
    return this.#i + k < this.#n ? this.#tokens[this.#i + k] : undefined;
  }

  #next(): string {
    if (this.#i >= this.#n) this.#fail("end of rule");
    return this.#tokens[this.#i++];
  }

  #expect(t: string): void {
    if (this.#next() !== t) this.#fail(`token ${JSON.stringify(this.#tokens[this.#i - 1])} (expected ${t})`);
  }

  /** A field named at the cursor (ip saddr, meta l4proto, th dport), or null. */
  #field(family: "ip" | "ip6"): Field | null {
    const t = this.#peek();
    const u = this.#peek(1);
    if ((t === "ip" || t === "ip6") && (u === "saddr" || u === "daddr")) {
      if (t !== family) this.#fail(`${t} match in an ${family} table`);
      this.#i += 2;
      return FIELDS[family][u];
    }
    if (t === "meta" && u === "l4proto") {
      this.#i += 2;
      return L4PROTO_FIELD;
    }
    if (t === "th" && u === "dport") {
      this.#i += 2;
      return DPORT_FIELD;
    }
    return null;
  }

  /** A set reference "@name": the lookup's set (its batch id in #setId). */
  #setRef(ctx: RuleContext): string {
    const t = this.#next();
    if (!t.startsWith("@")) this.#fail(`token ${JSON.stringify(t)} (expected @set)`);
    const name = t.slice(1);
    this.#setId = ctx.setId(name);
    return name;
  }

  /** The verdict at the cursor (its code; a jump's or goto's chain is the token before the cursor), or null. */
  #verdict(): number | null {
    const t = this.#peek();
    if (t === "jump" || t === "goto") {
      this.#i++;
      this.#next();
      return VERDICT[t];
    }
    if (t === "drop" || t === "accept" || t === "return") {
      this.#i++;
      return VERDICT[t];
    }
    return null;
  }

  /** The chain of the verdict just read, when it takes one. */
  #verdictChain(code: number): string | undefined {
    return code === VERDICT.jump || code === VERDICT.goto ? this.#tokens[this.#i - 1] : undefined;
  }

  /** An address match on field `f` (at `offset`): "[!=] addr|prefix|{ one }". */
  #addressMatch(out: NlWriter, ctx: RuleContext, f: Field, field: "saddr" | "daddr"): void {
    const { size, offset } = f;
    let op = CMP_EQ;
    if (this.#peek() === "!=") {
      op = CMP_NEQ;
      this.#i++;
    }
    let text = this.#next();
    if (text === "{") {
      const items: string[] = [];
      for (;;) {
        const t = this.#next();
        if (t === "}") break;
        if (t !== ",") items.push(t);
      }
      if (items.length === 0) this.#fail("empty anonymous set");
      if (items.length > 1) {
        // An anonymous interval set, looked up (inverted for "!=").
        const ranges = items.map((x) => {
          const p = parsePrefix(x, size);
          if (p === null) this.#fail(`set element ${JSON.stringify(x)}`);
          return prefixRange(p.bytes, p.prefix);
        });
        const set = ctx.anonymousIntervalSet(field, mergeRanges(ranges));
        payload(out, REG_1, PAYLOAD_NETWORK, offset, size);
        lookup(out, REG_1, set.name, set.id, null, op === CMP_NEQ);
        return;
      }
      // nft turns a one-element anonymous set into a plain comparison.
      text = items[0];
    }
    const p = parsePrefix(text, size);
    if (p === null) this.#fail(`value ${JSON.stringify(text)}`);
    const { bytes, prefix } = p;
    if (prefix % 8 === 0 && prefix > 0) {
      // A byte-aligned prefix: nft loads and compares only its bytes.
      const n = prefix / 8;
      payload(out, REG_1, PAYLOAD_NETWORK, offset, n);
      cmp(out, REG_1, op, bytes.subarray(0, n));
      return;
    }
    if (prefix === 0) this.#fail("zero-length prefix");
    const mask = new Uint8Array(size);
    for (let b = 0; b < size; b++) {
      const bits = prefix - 8 * b;
      mask[b] = bits >= 8 ? 0xff : bits <= 0 ? 0 : (0xff << (8 - bits)) & 0xff;
    }
    payload(out, REG_1, PAYLOAD_NETWORK, offset, size);
    bitwise(out, REG_1, REG_1, mask, new Uint8Array(size));
    cmp(out, REG_1, op, bytes);
  }

  #rule(out: NlWriter, family: "ip" | "ip6", ctx: RuleContext): void {
    let done = false;
    while (this.#i < this.#n) {
      if (done) {
        this.#fail(`statement after the verdict: ${this.#tokens.slice(this.#i, this.#n).join(" ")}`);
      }
      const t = this.#peek()!;
      const u = this.#peek(1);
      const code = this.#verdict();
      if (code !== null) {
        immediateVerdict(out, code, this.#verdictChain(code));
        done = true;
        continue;
      }
      if ((t === "ip" || t === "ip6") && (u === "saddr" || u === "daddr") && this.#peek(2) !== ".") {
        if (t !== family) this.#fail(`${t} match in an ${family} table`);
        const f = FIELDS[family][u];
        this.#i += 2;
        if (this.#peek()?.startsWith("@")) {
          const set = this.#setRef(ctx);
          payload(out, REG_1, PAYLOAD_NETWORK, f.offset, f.size);
          lookup(out, REG_1, set, this.#setId, null);
          continue;
        }
        this.#addressMatch(out, ctx, f, u);
        continue;
      }
      if (t === "meta" && u === "l4proto" && this.#peek(2) !== ".") {
        this.#i += 2;
        const proto = protocolNumber(this.#next());
        if (proto === null) this.#fail(`protocol ${JSON.stringify(this.#tokens[this.#i - 1])}`);
        metaLoad(out, META_L4PROTO, REG_1);
        cmp(out, REG_1, CMP_EQ, Uint8Array.of(proto));
        continue;
      }
      const first = this.#field(family);
      if (first !== null) {
        // A concatenation looked up in a verdict map: "a . b . c vmap @map".
        loadField(out, first, reg32(0));
        let word = (first.size + 3) >> 2;
        while (this.#peek() === ".") {
          this.#i++;
          const f = this.#field(family);
          if (f === null) this.#fail(`concatenation part ${JSON.stringify(this.#peek())}`);
          loadField(out, f, reg32(word));
          word += (f.size + 3) >> 2;
        }
        this.#expect("vmap");
        const set = this.#setRef(ctx);
        lookup(out, REG_1, set, this.#setId, REG_VERDICT);
        done = true;
        continue;
      }
      if (t === "iifname") {
        this.#i++;
        let op = CMP_EQ;
        if (this.#peek() === "!=") {
          op = CMP_NEQ;
          this.#i++;
        }
        const name = this.#next();
        if (!/^[A-Za-z0-9._@-]{1,15}\*?$/.test(name)) this.#fail(`interface name ${JSON.stringify(name)}`);
        const bytes = new TextEncoder().encode(name.endsWith("*") ? name.slice(0, -1) : name);
        // A wildcard compares only the prefix; an exact name all of IFNAMSIZ, NUL-padded.
        const data = name.endsWith("*") ? bytes : new Uint8Array(IFNAMSIZ);
        if (!name.endsWith("*")) data.set(bytes);
        metaLoad(out, META_IIFNAME, REG_1);
        cmp(out, REG_1, op, data);
        continue;
      }
      if (t === "ct") {
        this.#i++;
        this.#expect("state");
        this.#expect("new");
        // ct state is a host-order bitmask; "new" is IP_CT_NEW's bit, 8.
        ctLoad(out, CT_STATE, REG_1);
        bitwiseU32le(out, REG_1, REG_1, 8, 0);
        cmpU32le(out, REG_1, CMP_NEQ, 0);
        continue;
      }
      if (t === "mark") {
        this.#i++;
        const m = META_MARK;
        if (this.#peek() === "set") {
          this.#i++;
          this.#expect("mark");
          const op = this.#next();
          const value = Number(this.#next());
          if (!Number.isInteger(value)) this.#fail(`mark value ${JSON.stringify(this.#tokens[this.#i - 1])}`);
          if (op === "or") {
            metaLoad(out, m, REG_1);
            bitwiseU32le(out, REG_1, REG_1, ~value, value, true);
          } else if (op === "xor") {
            metaLoad(out, m, REG_1);
            bitwiseU32le(out, REG_1, REG_1, 0xffffffff, value, true);
          } else this.#fail(`mark operator ${JSON.stringify(op)}`);
          metaSet(out, m, REG_1);
          continue;
        }
        this.#expect("and");
        const mask = Number(this.#next());
        this.#expect("==");
        const value = Number(this.#next());
        if (!Number.isInteger(mask) || !Number.isInteger(value)) this.#fail("mark comparison value");
        metaLoad(out, m, REG_1);
        bitwiseU32le(out, REG_1, REG_1, mask, 0, true);
        cmpU32le(out, REG_1, CMP_EQ, value);
        continue;
      }
      if (t === "fib") {
        this.#i++;
        const which = this.#next();
        if (which !== "saddr" && which !== "daddr") this.#fail(`fib ${which}`);
        this.#expect("type");
        this.#expect("local");
        fib(out, which === "saddr" ? FIB_SADDR : FIB_DADDR, FIB_RESULT_ADDRTYPE, REG_1);
        cmpU32le(out, REG_1, CMP_EQ, RTN_LOCAL);
        continue;
      }
      if (t === "numgen") {
        this.#i++;
        this.#expect("random");
        this.#expect("mod");
        const mod = Number(this.#next());
        if (!Number.isInteger(mod) || mod < 1) this.#fail("numgen modulus");
        this.#expect("vmap");
        this.#expect("{");
        const verdicts: Verdict[] = [];
        for (;;) {
          const key = Number(this.#next());
          if (key !== verdicts.length) this.#fail("numgen vmap keys not 0..n-1 in order");
          this.#expect(":");
          const code = this.#verdict();
          if (code === null) this.#fail("numgen vmap value");
          verdicts.push({ code, chain: this.#verdictChain(code) });
          const sep = this.#next();
          if (sep === "}") break;
          if (sep !== ",") this.#fail(`token ${JSON.stringify(sep)} in vmap`);
        }
        const map = ctx.anonymousVerdictMap(verdicts);
        numgenRandom(out, REG_1, mod);
        lookup(out, REG_1, map.name, map.id, REG_VERDICT);
        done = true;
        continue;
      }
      if (t === "reject" && this.#n === this.#i + 1) {
        this.#i++;
        reject(out, 0, REJECT_PORT_UNREACH[family]);
        done = true;
        continue;
      }
      if (t === "masquerade") {
        this.#i++;
        this.#expect("fully-random");
        masq(out, NAT_RANDOM_FULLY);
        done = true;
        continue;
      }
      if (t === "dnat") {
        this.#i++;
        this.#expect("to");
        const target = this.#next();
        const m = /^\[?([0-9a-fA-F:.]+)\]?:([0-9]{1,5})$/.exec(target);
        const addr = m === null ? null : parsePrefix(m[1], FIELDS[family].saddr.size);
        if (m === null || addr === null || addr.prefix !== addr.bytes.length * 8 || Number(m[2]) > 65535) {
          this.#fail(`dnat target ${JSON.stringify(target)}`);
        }
        const port = Number(m[2]);
        immediateValue(out, REG_1, addr.bytes);
        immediateValue(out, REG_2, Uint8Array.of(port >> 8, port & 0xff));
        dnat(out, NFPROTO[family], REG_1, REG_2);
        done = true;
        continue;
      }
      if (t === "update") {
        this.#i++;
        const set = this.#setRef(ctx);
        const id = this.#setId;
        this.#expect("{");
        const f = this.#field(family);
        if (f === null) this.#fail("update key");
        this.#expect("}");
        loadField(out, f, REG_1);
        dynsetUpdate(out, REG_1, set, id);
        continue;
      }
      this.#fail(`statement ${JSON.stringify(t)}`);
    }
  }
}
