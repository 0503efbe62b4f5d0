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
/** Fail if the object exists (EEXIST) rather than take it. */
export const NLM_F_EXCL = 0x200;
export const NLM_F_APPEND = 0x800;

const ENCODER = new TextEncoder();

function align4(n: number): number {
  return (n + 3) & ~3;
}

/**
 * An attribute not yet laid out: a leaf (type and payload) or a nest (type and children). Messages are
 * written once into their final buffer from these, so encoding a large transaction copies each payload
 * once instead of once per nesting level.
 */
export class NlAttr {
  /** Bytes it takes, padding included. */
  readonly size: number;
  constructor(
    readonly type: number,
    readonly payload: Uint8Array | null,
    readonly children: readonly NlAttr[] | null,
  ) {
    let n = 4;
    if (payload !== null) n += payload.length;
    if (children !== null) { for (const c of children) n += c.size; }
    this.#length = n;
    this.size = align4(n);
  }
  readonly #length: number;

  /** Writes the attribute at `off` of `out`; returns the offset after it. */
  write(out: Uint8Array, view: DataView, off: number): number {
    view.setUint16(off, this.#length, true);
    view.setUint16(off + 2, this.type, true);
    let at = off + 4;
    if (this.payload !== null) {
      out.set(this.payload, at);
      at += this.payload.length;
    }
    if (this.children !== null) { for (const c of this.children) at = c.write(out, view, at); }
    return off + this.size;
  }
}

/** One attribute: its type and payload. */
export function attr(type: number, payload: Uint8Array): NlAttr {
  return new NlAttr(type, payload, null);
}

/** A nested attribute holding `children`. */
export function nest(type: number, children: readonly NlAttr[]): NlAttr {
  return new NlAttr(type | NLA_F_NESTED, null, children);
}

/** A NUL-terminated string attribute. */
export function strAttr(type: number, value: string): NlAttr {
  return attr(type, ENCODER.encode(value + "\0"));
}

/** A big-endian u32 attribute (nf_tables' NLA_U32 values are in network order). */
export function be32Attr(type: number, value: number): NlAttr {
  return attr(type, Uint8Array.of(value >>> 24, (value >>> 16) & 0xff, (value >>> 8) & 0xff, value & 0xff));
}

/** A big-endian u64 attribute (timeouts in milliseconds). */
export function be64Attr(type: number, value: number): NlAttr {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, BigInt(value), false);
  return attr(type, b);
}

/** `attrs` laid out one after the other (a message body after its nfgenmsg). */
export function encodeAttrs(attrs: readonly NlAttr[]): Uint8Array {
  let n = 0;
  for (const a of attrs) n += a.size;
  const out = new Uint8Array(n);
  const view = new DataView(out.buffer);
  let off = 0;
  for (const a of attrs) off = a.write(out, view, off);
  return out;
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

/** Bytes of an nf_tables message whose attributes take `bodyBytes` (nlmsghdr, nfgenmsg, attributes). */
export function nftMessageSize(bodyBytes: number): number {
  return 20 + bodyBytes;
}

/**
 * Writes an nf_tables message at `off` of `out`: nlmsghdr (type NFNL_SUBSYS_NFTABLES << 8 | `msg`,
 * `flags`, `seq`), nfgenmsg (`family`, NFNETLINK_V0, res_id 0), then `attrs`. Returns the offset after it.
 */
export function writeNftMessage(
  out: Uint8Array,
  view: DataView,
  off: number,
  m: { msg: number; flags: number; seq: number; family: number; body: Uint8Array },
): number {
  return writeFrame(
    out,
    view,
    off,
    (NFNL_SUBSYS_NFTABLES << 8) | m.msg,
    m.flags,
    m.seq,
    m.family,
    0,
    m.body,
  );
}

function writeFrame(
  out: Uint8Array,
  view: DataView,
  off: number,
  type: number,
  flags: number,
  seq: number,
  family: number,
  resId: number,
  body: Uint8Array | null,
): number {
  const n = nftMessageSize(body === null ? 0 : body.length);
  view.setUint32(off, n, true);
  view.setUint16(off + 4, type, true);
  view.setUint16(off + 6, flags, true);
  view.setUint32(off + 8, seq >>> 0, true);
  view.setUint32(off + 12, 0, true);
  out[off + 16] = family;
  out[off + 17] = 0;
  view.setUint16(off + 18, resId, false);
  if (body !== null) out.set(body, off + 20);
  return off + n;
}

/** Bytes of NFNL_MSG_BATCH_BEGIN / _END. */
export const BATCH_FRAME_BYTES = 20;

/** Writes NFNL_MSG_BATCH_BEGIN for the nf_tables subsystem at `off`. */
export function writeBatchBegin(out: Uint8Array, view: DataView, off: number, seq: number): number {
  return writeFrame(out, view, off, NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, seq, 0, NFNL_SUBSYS_NFTABLES, null);
}

/** Writes NFNL_MSG_BATCH_END at `off`. */
export function writeBatchEnd(out: Uint8Array, view: DataView, off: number, seq: number): number {
  return writeFrame(out, view, off, NFNL_MSG_BATCH_END, NLM_F_REQUEST, seq, 0, NFNL_SUBSYS_NFTABLES, null);
}
