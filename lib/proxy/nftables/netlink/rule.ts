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
  readonly family: "ip" | "ip6";
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

/** Header fields: offset and size in the network header. */
const ADDRESS_FIELDS = {
  ip: { saddr: 12, daddr: 16, size: 4 },
  ip6: { saddr: 8, daddr: 24, size: 16 },
} as const;

/** A field loaded into registers: its size in bytes and the expression loading it. */
interface Field {
  readonly size: number;
  load(w: NlWriter, dreg: number): void;
}

/** Splits rule text into tokens; braces and commas are tokens of their own. */
export function tokenize(text: string): string[] {
  return text.replace(/([{},])/g, " $1 ").split(/\s+/).filter((t) => t !== "");
}

/**
 * Writes rule `text` (without its comment) into `out` as NFTA_LIST_ELEMs, in order. The anonymous sets
 * it needs go to `ctx`, which writes their messages elsewhere (they precede the rule's).
 */
export function encodeRule(out: NlWriter, text: string, ctx: RuleContext, statement = text): void {
  const tokens = tokenize(text);
  let i = 0;
  const fail = (what: string): never => {
    throw new NftNetlinkUnsupported(statement, what);
  };
  const peek = (k = 0): string | undefined => tokens[i + k];
  const next = (): string => {
    const t = tokens[i++];
    if (t === undefined) fail("end of rule");
    return t!;
  };
  const expect = (t: string) => {
    if (next() !== t) fail(`token ${JSON.stringify(tokens[i - 1])} (expected ${t})`);
  };

  /** A field named at the cursor (ip saddr, meta l4proto, th dport), or null. */
  const field = (): Field | null => {
    const t = peek();
    if ((t === "ip" || t === "ip6") && (peek(1) === "saddr" || peek(1) === "daddr")) {
      if (t !== ctx.family) fail(`${t} match in an ${ctx.family} table`);
      const f = ADDRESS_FIELDS[ctx.family];
      const offset = peek(1) === "saddr" ? f.saddr : f.daddr;
      i += 2;
      return { size: f.size, load: (w, d) => payload(w, d, PAYLOAD_NETWORK, offset, f.size) };
    }
    if (t === "meta" && peek(1) === "l4proto") {
      i += 2;
      return { size: 1, load: (w, d) => metaLoad(w, META_L4PROTO, d) };
    }
    if (t === "th" && peek(1) === "dport") {
      i += 2;
      return { size: 2, load: (w, d) => payload(w, d, PAYLOAD_TRANSPORT, 2, 2) };
    }
    return null;
  };

  /** A set reference "@name": the lookup's set and batch id. */
  const setRef = (): { name: string; id: number | null } => {
    const t = next();
    if (!t.startsWith("@")) fail(`token ${JSON.stringify(t)} (expected @set)`);
    const name = t.slice(1);
    return { name, id: ctx.setId(name) };
  };

  /** The verdict at the cursor, or null. */
  const verdict = (): Verdict | null => {
    const t = peek();
    if (t === "jump" || t === "goto") {
      i++;
      return { code: VERDICT[t], chain: next() };
    }
    if (t === "drop" || t === "accept" || t === "return") {
      i++;
      return { code: VERDICT[t] };
    }
    return null;
  };

  /** An address match on a loaded field: "[!=] addr|prefix|{ one }". */
  const addressMatch = (size: number, offset: number) => {
    let op = CMP_EQ;
    if (peek() === "!=") {
      op = CMP_NEQ;
      i++;
    }
    let text = next();
    if (text === "{") {
      const items: string[] = [];
      for (;;) {
        const t = next();
        if (t === "}") break;
        if (t !== ",") items.push(t);
      }
      if (items.length === 0) fail("empty anonymous set");
      if (items.length > 1) {
        // An anonymous interval set, looked up (inverted for "!=").
        const ranges = items.map((x) => {
          const p = parsePrefix(x, size);
          if (p === null) fail(`set element ${JSON.stringify(x)}`);
          return prefixRange(p!.bytes, p!.prefix);
        });
        const field = offset === ADDRESS_FIELDS[ctx.family].saddr ? "saddr" : "daddr";
        const set = ctx.anonymousIntervalSet(field, mergeRanges(ranges));
        payload(out, REG_1, PAYLOAD_NETWORK, offset, size);
        lookup(out, REG_1, set.name, set.id, null, op === CMP_NEQ);
        return;
      }
      // nft turns a one-element anonymous set into a plain comparison.
      text = items[0];
    }
    const p = parsePrefix(text, size);
    if (p === null) fail(`value ${JSON.stringify(text)}`);
    const { bytes, prefix } = p!;
    if (prefix % 8 === 0 && prefix > 0) {
      // A byte-aligned prefix: nft loads and compares only its bytes.
      const n = prefix / 8;
      payload(out, REG_1, PAYLOAD_NETWORK, offset, n);
      cmp(out, REG_1, op, bytes.subarray(0, n));
      return;
    }
    if (prefix === 0) fail("zero-length prefix");
    const mask = new Uint8Array(size);
    for (let b = 0; b < size; b++) {
      const bits = prefix - 8 * b;
      mask[b] = bits >= 8 ? 0xff : bits <= 0 ? 0 : (0xff << (8 - bits)) & 0xff;
    }
    payload(out, REG_1, PAYLOAD_NETWORK, offset, size);
    bitwise(out, REG_1, REG_1, mask, new Uint8Array(size));
    cmp(out, REG_1, op, bytes);
  };

  let done = false;
  while (i < tokens.length) {
    if (done) fail(`statement after the verdict: ${tokens.slice(i).join(" ")}`);
    const t = peek()!;
    const v = verdict();
    if (v !== null) {
      immediateVerdict(out, v);
      done = true;
      continue;
    }
    if ((t === "ip" || t === "ip6") && (peek(1) === "saddr" || peek(1) === "daddr") && peek(2) !== ".") {
      if (t !== ctx.family) fail(`${t} match in an ${ctx.family} table`);
      const f = ADDRESS_FIELDS[ctx.family];
      const offset = peek(1) === "saddr" ? f.saddr : f.daddr;
      i += 2;
      if (peek()?.startsWith("@")) {
        const s = setRef();
        payload(out, REG_1, PAYLOAD_NETWORK, offset, f.size);
        lookup(out, REG_1, s.name, s.id, null);
        continue;
      }
      addressMatch(f.size, offset);
      continue;
    }
    if (t === "meta" && peek(1) === "l4proto" && peek(2) !== ".") {
      i += 2;
      const proto = protocolNumber(next());
      if (proto === null) fail(`protocol ${JSON.stringify(tokens[i - 1])}`);
      metaLoad(out, META_L4PROTO, REG_1);
      cmp(out, REG_1, CMP_EQ, Uint8Array.of(proto!));
      continue;
    }
    const first = field();
    if (first !== null) {
      // A concatenation looked up in a verdict map: "a . b . c vmap @map".
      const fields = [first];
      while (peek() === ".") {
        i++;
        const f = field();
        if (f === null) fail(`concatenation part ${JSON.stringify(peek())}`);
        fields.push(f!);
      }
      let word = 0;
      for (const f of fields) {
        f.load(out, reg32(word));
        word += (f.size + 3) >> 2;
      }
      expect("vmap");
      const s = setRef();
      lookup(out, REG_1, s.name, s.id, REG_VERDICT);
      done = true;
      continue;
    }
    if (t === "iifname") {
      i++;
      let op = CMP_EQ;
      if (peek() === "!=") {
        op = CMP_NEQ;
        i++;
      }
      const name = next();
      if (!/^[A-Za-z0-9._@-]{1,15}\*?$/.test(name)) fail(`interface name ${JSON.stringify(name)}`);
      const bytes = new TextEncoder().encode(name.endsWith("*") ? name.slice(0, -1) : name);
      // A wildcard compares only the prefix; an exact name all of IFNAMSIZ, NUL-padded.
      const data = name.endsWith("*") ? bytes : new Uint8Array(IFNAMSIZ);
      if (!name.endsWith("*")) data.set(bytes);
      metaLoad(out, META_IIFNAME, REG_1);
      cmp(out, REG_1, op, data);
      continue;
    }
    if (t === "ct") {
      i++;
      expect("state");
      expect("new");
      // ct state is a host-order bitmask; "new" is IP_CT_NEW's bit, 8.
      ctLoad(out, CT_STATE, REG_1);
      bitwiseU32le(out, REG_1, REG_1, 8, 0);
      cmpU32le(out, REG_1, CMP_NEQ, 0);
      continue;
    }
    if (t === "mark") {
      i++;
      const m = META_MARK;
      if (peek() === "set") {
        i++;
        expect("mark");
        const op = next();
        const value = Number(next());
        if (!Number.isInteger(value)) fail(`mark value ${JSON.stringify(tokens[i - 1])}`);
        if (op === "or") {
          metaLoad(out, m, REG_1);
          bitwiseU32le(out, REG_1, REG_1, ~value, value, true);
        } else if (op === "xor") {
          metaLoad(out, m, REG_1);
          bitwiseU32le(out, REG_1, REG_1, 0xffffffff, value, true);
        } else fail(`mark operator ${JSON.stringify(op)}`);
        metaSet(out, m, REG_1);
        continue;
      }
      expect("and");
      const mask = Number(next());
      expect("==");
      const value = Number(next());
      if (!Number.isInteger(mask) || !Number.isInteger(value)) fail("mark comparison value");
      metaLoad(out, m, REG_1);
      bitwiseU32le(out, REG_1, REG_1, mask, 0, true);
      cmpU32le(out, REG_1, CMP_EQ, value);
      continue;
    }
    if (t === "fib") {
      i++;
      const which = next();
      if (which !== "saddr" && which !== "daddr") fail(`fib ${which}`);
      expect("type");
      expect("local");
      fib(out, which === "saddr" ? FIB_SADDR : FIB_DADDR, FIB_RESULT_ADDRTYPE, REG_1);
      cmpU32le(out, REG_1, CMP_EQ, RTN_LOCAL);
      continue;
    }
    if (t === "numgen") {
      i++;
      expect("random");
      expect("mod");
      const mod = Number(next());
      if (!Number.isInteger(mod) || mod < 1) fail("numgen modulus");
      expect("vmap");
      expect("{");
      const verdicts: Verdict[] = [];
      for (;;) {
        const key = Number(next());
        if (key !== verdicts.length) fail("numgen vmap keys not 0..n-1 in order");
        expect(":");
        const v = verdict();
        if (v === null) fail("numgen vmap value");
        verdicts.push(v!);
        const sep = next();
        if (sep === "}") break;
        if (sep !== ",") fail(`token ${JSON.stringify(sep)} in vmap`);
      }
      const map = ctx.anonymousVerdictMap(verdicts);
      numgenRandom(out, REG_1, mod);
      lookup(out, REG_1, map.name, map.id, REG_VERDICT);
      done = true;
      continue;
    }
    if (t === "reject" && tokens.length === i + 1) {
      i++;
      reject(out, 0, REJECT_PORT_UNREACH[ctx.family]);
      done = true;
      continue;
    }
    if (t === "masquerade") {
      i++;
      expect("fully-random");
      masq(out, NAT_RANDOM_FULLY);
      done = true;
      continue;
    }
    if (t === "dnat") {
      i++;
      expect("to");
      const target = next();
      const m = /^\[?([0-9a-fA-F:.]+)\]?:([0-9]{1,5})$/.exec(target);
      const addr = m === null ? null : parsePrefix(m[1], ADDRESS_FIELDS[ctx.family].size);
      if (m === null || addr === null || addr.prefix !== addr.bytes.length * 8 || Number(m[2]) > 65535) {
        fail(`dnat target ${JSON.stringify(target)}`);
      }
      const port = Number(m![2]);
      immediateValue(out, REG_1, addr!.bytes);
      immediateValue(out, REG_2, Uint8Array.of(port >> 8, port & 0xff));
      dnat(out, NFPROTO[ctx.family], REG_1, REG_2);
      done = true;
      continue;
    }
    if (t === "update") {
      i++;
      const s = setRef();
      expect("{");
      const f = field();
      if (f === null) fail("update key");
      expect("}");
      f!.load(out, REG_1);
      dynsetUpdate(out, REG_1, s.name, s.id);
      continue;
    }
    fail(`statement ${JSON.stringify(t)}`);
  }
}
