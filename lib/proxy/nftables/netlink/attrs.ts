/**
 * Netlink attributes and nfnetlink messages as bytes (pure): the TLV layout (u16 length, u16 type,
 * payload padded to 4 bytes), nested attributes (NLA_F_NESTED set, as nft sets it), the nlmsghdr and the
 * nfgenmsg of an nf_tables request, and the NFNL batch frame around a transaction's messages.
 */

/** NLA_F_NESTED: nft marks every nest with it. */
const NLA_F_NESTED = 0x8000;
/** NFNL_SUBSYS_NFTABLES, the high byte of an nf_tables message type. */
export const NFNL_SUBSYS_NFTABLES = 10;
/** NFNL_MSG_BATCH_BEGIN / _END (subsystem 0). */
const NFNL_MSG_BATCH_BEGIN = 0x10;
const NFNL_MSG_BATCH_END = 0x11;
/** nlmsghdr flags. */
export const NLM_F_REQUEST = 0x1;
export const NLM_F_ACK = 0x4;
export const NLM_F_CREATE = 0x400;
export const NLM_F_APPEND = 0x800;

const ENCODER = new TextEncoder();

function align4(n: number): number {
  return (n + 3) & ~3;
}

/** One attribute: its type and payload. */
export function attr(type: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(align4(4 + payload.length));
  const v = new DataView(out.buffer);
  v.setUint16(0, 4 + payload.length, true);
  v.setUint16(2, type, true);
  out.set(payload, 4);
  return out;
}

/** A nested attribute holding `children` (already encoded attributes). */
export function nest(type: number, children: readonly Uint8Array[]): Uint8Array {
  return attr(type | NLA_F_NESTED, concat(children));
}

/** A NUL-terminated string attribute. */
export function strAttr(type: number, value: string): Uint8Array {
  return attr(type, ENCODER.encode(value + "\0"));
}

/** A big-endian u32 attribute (nf_tables' NLA_U32 values are in network order). */
export function be32Attr(type: number, value: number): Uint8Array {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, value >>> 0, false);
  return attr(type, b);
}

/** A big-endian u64 attribute (timeouts in milliseconds). */
export function be64Attr(type: number, value: number): Uint8Array {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, BigInt(value), false);
  return attr(type, b);
}

/** The bytes of `parts`, one after the other. */
export function concat(parts: readonly Uint8Array[]): Uint8Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

/** libnftnl user data: TLVs of one-byte type and one-byte length. */
export function udata(entries: readonly (readonly [number, Uint8Array])[]): Uint8Array {
  const parts: Uint8Array[] = [];
  for (const [type, value] of entries) {
    if (value.length > 255) throw new RangeError(`user data entry ${type} longer than 255 bytes`);
    parts.push(Uint8Array.of(type, value.length), value);
  }
  return concat(parts);
}

/** A user-data string value (NUL-terminated, as nft stores comments). */
export function udataString(s: string): Uint8Array {
  return ENCODER.encode(s + "\0");
}

/** A user-data u32 in host (little-endian) order. */
export function udataU32(n: number): Uint8Array {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, n >>> 0, true);
  return b;
}

/**
 * An nf_tables message: nlmsghdr (type NFNL_SUBSYS_NFTABLES << 8 | `msg`, `flags`, `seq`), nfgenmsg
 * (`family`, NFNETLINK_V0, res_id 0), then `attrs`.
 */
export function nftMessage(
  msg: number,
  flags: number,
  seq: number,
  family: number,
  attrs: readonly Uint8Array[],
): Uint8Array {
  return frame((NFNL_SUBSYS_NFTABLES << 8) | msg, flags, seq, family, 0, attrs);
}

function frame(
  type: number,
  flags: number,
  seq: number,
  family: number,
  resId: number,
  attrs: readonly Uint8Array[],
): Uint8Array {
  let n = 20;
  for (const a of attrs) n += a.length;
  const out = new Uint8Array(n);
  const v = new DataView(out.buffer);
  v.setUint32(0, n, true);
  v.setUint16(4, type, true);
  v.setUint16(6, flags, true);
  v.setUint32(8, seq >>> 0, true);
  out[16] = family;
  v.setUint16(18, resId, false);
  let off = 20;
  for (const a of attrs) {
    out.set(a, off);
    off += a.length;
  }
  return out;
}

/** NFNL_MSG_BATCH_BEGIN for the nf_tables subsystem. */
export function batchBegin(seq: number): Uint8Array {
  return frame(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, seq, 0, NFNL_SUBSYS_NFTABLES, []);
}

/** NFNL_MSG_BATCH_END. */
export function batchEnd(seq: number): Uint8Array {
  return frame(NFNL_MSG_BATCH_END, NLM_F_REQUEST, seq, 0, NFNL_SUBSYS_NFTABLES, []);
}
