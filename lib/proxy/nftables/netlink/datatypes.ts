/**
 * The nft data types our sets, maps and rules use (nft's datatype ids, sizes and byte orders) and their
 * values as the kernel stores them: addresses and ports in network order, protocol numbers as one byte,
 * each field of a concatenation padded to 4 bytes.
 */
import { parseCIDR, parseIP } from "../../../net/ip.ts";

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

/** One value of type `t`, or null when `text` is not one. */
export function encodeValue(t: NftDatatype, text: string): Uint8Array | null {
  switch (t.name) {
    case "ipv4_addr":
    case "ipv6_addr": {
      const b = parseIP(text);
      return b !== null && b.length === t.size ? b : null;
    }
    case "inet_proto": {
      const n = PROTOCOLS[text];
      return n === undefined ? null : Uint8Array.of(n);
    }
    case "inet_service": {
      if (!/^[0-9]{1,5}$/.test(text) || Number(text) > 65535) return null;
      const n = Number(text);
      return Uint8Array.of(n >> 8, n & 0xff);
    }
  }
  return null;
}

/** A protocol name as its number (meta l4proto), or null. */
export function protocolNumber(name: string): number | null {
  return PROTOCOLS[name] ?? null;
}

/** A key of `fields` from its parts (as the transaction writes them), or null when a part is invalid. */
export function encodeKey(fields: readonly NftDatatype[], parts: readonly string[]): Uint8Array | null {
  if (parts.length !== fields.length) return null;
  if (fields.length === 1) return encodeValue(fields[0], parts[0]);
  const out = new Uint8Array(keyLength(fields));
  let off = 0;
  for (let i = 0; i < fields.length; i++) {
    const v = encodeValue(fields[i], parts[i]);
    if (v === null) return null;
    out.set(v, off);
    off += (fields[i].size + 3) & ~3;
  }
  return out;
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
