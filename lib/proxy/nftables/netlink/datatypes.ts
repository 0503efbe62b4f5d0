/**
 * The nft data types our sets, maps and rules use (nft's datatype ids, sizes and byte orders) and their
 * values as the kernel stores them: addresses and ports in network order, protocol numbers as one byte,
 * each field of a concatenation padded to 4 bytes.
 */
import { parseCIDR, parseIP, parseIPv4At } from "../../../net/ip.ts";

/** One nft data type. */
export interface NftDatatype {
  readonly name: string;
  /** nft's TYPE_* id (concatenations shift ids by 6 bits per field). */
  readonly id: number;
  /** Value size in bytes. */
  readonly size: number;
  /** nft's byte order (BYTEORDER_HOST_ENDIAN 1, BYTEORDER_BIG_ENDIAN 2). */
  readonly byteorder: 1 | 2;
}

/** The types we declare sets and maps of. */
export const NFT_DATATYPES: Readonly<Record<string, NftDatatype>> = {
  ipv4_addr: { name: "ipv4_addr", id: 7, size: 4, byteorder: 2 },
  ipv6_addr: { name: "ipv6_addr", id: 8, size: 16, byteorder: 2 },
  inet_proto: { name: "inet_proto", id: 12, size: 1, byteorder: 1 },
  inet_service: { name: "inet_service", id: 13, size: 2, byteorder: 2 },
};

/** TYPE_INTEGER (numgen keys). */
export const TYPE_INTEGER = 4;
/** NFT_DATA_VERDICT as a set's data type. */
export const NFT_DATA_VERDICT_TYPE = 0xffffff00;
/** Bits per field in a concatenated type id (TYPE_BITS). */
const TYPE_BITS = 6;

/** IP protocol numbers by the names nft accepts for inet_proto. */
const PROTOCOLS: Readonly<Record<string, number>> = { tcp: 6, udp: 17, sctp: 132 };
const PROTOCOL_NAMES = Object.keys(PROTOCOLS);

/** The fields of a key type ("ipv4_addr . inet_proto . inet_service"), or null when one is unknown. */
export function keyFields(type: string): NftDatatype[] | null {
  const out: NftDatatype[] = [];
  for (const name of type.split(" . ")) {
    const t = NFT_DATATYPES[name.trim()];
    if (t === undefined) return null;
    out.push(t);
  }
  return out;
}

/** The id of a (possibly concatenated) key type. */
export function keyTypeId(fields: readonly NftDatatype[]): number {
  let id = 0;
  for (const f of fields) id = (id << TYPE_BITS) | f.id;
  return id >>> 0;
}

/** The key length in bytes: each field padded to 4 bytes when concatenated. */
export function keyLength(fields: readonly NftDatatype[]): number {
  if (fields.length === 1) return fields[0].size;
  return fields.reduce((n, f) => n + ((f.size + 3) & ~3), 0);
}

/** A protocol name as its number (meta l4proto), or null (own names only: not "constructor" and the like). */
export function protocolNumber(name: string): number | null {
  return Object.hasOwn(PROTOCOLS, name) ? PROTOCOLS[name] : null;
}

/**
 * The key of `fields` read in place from `text[from, to)` (parts " . "-separated, one per field) into `out`
 * (room for {@link keyLength} bytes): addresses and ports in network order, each field of a concatenation
 * padded to 4 bytes. Returns its length, or -1 when the parts do not match the fields (a strict IPv4 or
 * IPv6 address, tcp / udp / sctp, a decimal port up to 65535).
 */
export function encodeKeyAt(
  fields: readonly NftDatatype[],
  text: string,
  from: number,
  to: number,
  out: Uint8Array,
): number {
  let off = 0;
  let at = from;
  for (let i = 0; i < fields.length; i++) {
    const sep = separatorWithin(text, at, to);
    const last = i === fields.length - 1;
    // Not the last part: it ends at the next separator. The last: no separator may follow.
    const end = last ? to : sep;
    if (last ? sep >= 0 : sep < 0) return -1;
    const t = fields[i];
    if (!encodeValueAt(t, text, at, end, out, off)) return -1;
    if (fields.length === 1) return t.size;
    const padded = (t.size + 3) & ~3;
    out.fill(0, off + t.size, off + padded);
    off += padded;
    at = end + 3;
  }
  return off;
}

/** The first " . " in `text[from, to)`, or -1 (searched there only: the text may be a long list). */
function separatorWithin(text: string, from: number, to: number): number {
  for (let k = from; k + 3 <= to; k++) {
    if (text.charCodeAt(k) === 32 && text.charCodeAt(k + 1) === 46 && text.charCodeAt(k + 2) === 32) return k;
  }
  return -1;
}

/** One value of type `t` read from `text[from, to)` into `out` at `off`; false when it is not one. */
function encodeValueAt(
  t: NftDatatype,
  text: string,
  from: number,
  to: number,
  out: Uint8Array,
  off: number,
): boolean {
  switch (t.name) {
    case "ipv4_addr":
      return parseIPv4At(text, from, to, out, off);
    case "ipv6_addr": {
      const b = parseIP(text.slice(from, to));
      if (b === null || b.length !== 16) return false;
      out.set(b, off);
      return true;
    }
    case "inet_proto":
      for (const name of PROTOCOL_NAMES) {
        if (to - from === name.length && text.startsWith(name, from)) {
          out[off] = PROTOCOLS[name];
          return true;
        }
      }
      return false;
    case "inet_service": {
      if (to - from < 1 || to - from > 5) return false;
      let n = 0;
      for (let k = from; k < to; k++) {
        const c = text.charCodeAt(k) - 48;
        if (c < 0 || c > 9) return false;
        n = n * 10 + c;
      }
      if (n > 65535) return false;
      out[off] = n >> 8;
      out[off + 1] = n & 0xff;
      return true;
    }
  }
  return false;
}

/** An address ("10.0.0.1") or prefix ("10.0.0.0/8") of the given size, or null. */
export function parsePrefix(text: string, size: number): { bytes: Uint8Array; prefix: number } | null {
  if (text.includes("/")) {
    const c = parseCIDR(text);
    return c !== null && c.bytes.length === size ? { bytes: c.bytes, prefix: c.prefix } : null;
  }
  const b = parseIP(text);
  return b !== null && b.length === size ? { bytes: b, prefix: size * 8 } : null;
}
