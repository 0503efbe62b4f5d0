/**
 * Netlink attributes and nfnetlink messages as bytes, written straight into one growable buffer: the TLV
 * layout (u16 length, u16 type, payload padded to 4 bytes), nested attributes (NLA_F_NESTED set, as nft
 * sets it), libnftnl's user data inside an attribute, the nlmsghdr and nfgenmsg of an nf_tables request,
 * and the NFNL batch frame around a transaction's messages. A nest's or message's length is patched when
 * it ends, so encoding allocates nothing per attribute: a first sync's chunks (hundreds of thousands of
 * attributes) used to leave an object, an array and a payload buffer per attribute behind.
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

/** Bytes of a message's nlmsghdr and nfgenmsg. */
const MESSAGE_HEADER_BYTES = 20;
/** Bytes of NFNL_MSG_BATCH_BEGIN / _END. */
export const BATCH_FRAME_BYTES = MESSAGE_HEADER_BYTES;

const ENCODER = new TextEncoder();

/** A writer's buffer above this size is dropped when its last contents used under a quarter of it. */
export const RETAIN_BYTES = 1024 * 1024;

/**
 * One growable byte buffer that netlink messages are written into, attribute by attribute. Reused across
 * batches ({@link reset}): what {@link bytes} returns is valid until the next write.
 */
export class NlWriter {
  #buf: Uint8Array;
  #view: DataView;
  #len = 0;

  readonly #initial: number;

  constructor(initialBytes = 64 * 1024) {
    this.#initial = initialBytes;
    this.#buf = new Uint8Array(initialBytes);
    this.#view = new DataView(this.#buf.buffer);
  }

  /** Bytes written. */
  get length(): number {
    return this.#len;
  }

  /** Bytes the buffer holds before it grows. */
  get capacity(): number {
    return this.#buf.length;
  }

  /**
   * Forgets what was written. The buffer is kept, unless it is over {@link RETAIN_BYTES} and the last
   * contents took less than a quarter of it: a first sync's largest chunk would otherwise stay allocated
   * for the agent's life, while its smaller chunks (and later small changes) reuse whatever fits them.
   */
  reset(): void {
    if (this.#buf.length > RETAIN_BYTES && this.#len < this.#buf.length / 4) {
      this.#buf = new Uint8Array(this.#initial);
      this.#view = new DataView(this.#buf.buffer);
    }
    this.#len = 0;
  }

  /** Forgets what was written and drops a buffer over {@link RETAIN_BYTES} (for a writer left idle). */
  trim(): void {
    if (this.#buf.length > RETAIN_BYTES) {
      this.#buf = new Uint8Array(this.#initial);
      this.#view = new DataView(this.#buf.buffer);
    }
    this.#len = 0;
  }

  /**
   * Makes the buffer hold at least `bytes` (what was written is kept): one allocation of the size a batch
   * needs instead of doubling up to it, which left every smaller buffer behind as garbage.
   */
  reserve(bytes: number): void {
    if (bytes <= this.#buf.length) return;
    const buf = new Uint8Array(bytes);
    buf.set(this.#buf.subarray(0, this.#len));
    this.#buf = buf;
    this.#view = new DataView(buf.buffer);
  }

  /** Drops what was written after `length` (an earlier {@link length}). */
  truncate(length: number): void {
    if (length > this.#len) throw new RangeError(`truncate to ${length} of ${this.#len} bytes`);
    this.#len = length;
  }

  /** The bytes written, as a view of the buffer (valid until the next write or reset). */
  bytes(from = 0, to = this.#len): Uint8Array {
    return this.#buf.subarray(from, to);
  }

  /**
   * Makes room for `n` more bytes; returns the offset they start at. It may replace #buf and #view: read
   * them after calling it, never in the same expression.
   */
  #grow(n: number): number {
    const at = this.#len;
    const need = at + n;
    if (need > this.#buf.length) {
      let size = this.#buf.length * 2;
      while (size < need) size *= 2;
      const buf = new Uint8Array(size);
      buf.set(this.#buf.subarray(0, at));
      this.#buf = buf;
      this.#view = new DataView(buf.buffer);
    }
    this.#len = need;
    return at;
  }

  /** Zero bytes up to the next 4-byte boundary (the buffer is reused: padding must be written). */
  #pad(): void {
    const n = ((this.#len + 3) & ~3) - this.#len;
    if (n === 0) return;
    const at = this.#grow(n);
    this.#buf.fill(0, at, at + n);
  }

  /** Starts an attribute of `type` whose payload follows; {@link end} sets its length. */
  begin(type: number): number {
    const at = this.#grow(4);
    this.#view.setUint16(at + 2, type, true);
    return at;
  }

  /** Starts a nested attribute of `type`; {@link end} closes it. */
  beginNest(type: number): number {
    return this.begin(type | NLA_F_NESTED);
  }

  /** Ends the attribute begun at `at`: its length (padding excluded), then the padding. */
  end(at: number): void {
    const n = this.#len - at;
    if (n > 0xffff) throw new RangeError(`netlink attribute of ${n} bytes (at most 65535)`);
    this.#view.setUint16(at, n, true);
    this.#pad();
  }

  /** The offset after the (ended) attribute at `at`, its padding included. */
  after(at: number): number {
    return at + ((this.#view.getUint16(at, true) + 3) & ~3);
  }

  /** Raw bytes at the end (no attribute header, no padding). */
  raw(bytes: Uint8Array): void {
    const at = this.#grow(bytes.length);
    this.#buf.set(bytes, at);
  }

  /** One attribute holding `payload`. */
  attr(type: number, payload: Uint8Array): void {
    const at = this.begin(type);
    this.raw(payload);
    this.end(at);
  }

  /** A one-byte attribute. */
  u8(type: number, value: number): void {
    const at = this.begin(type);
    const v = this.#grow(1);
    this.#buf[v] = value;
    this.end(at);
  }

  /** A big-endian u32 attribute (nf_tables' NLA_U32 values are in network order). */
  u32be(type: number, value: number): void {
    const at = this.begin(type);
    const v = this.#grow(4);
    this.#view.setUint32(v, value >>> 0, false);
    this.end(at);
  }

  /** A host-order (little-endian) u32 attribute: marks, ct state, fib results and numgen keys as data. */
  u32le(type: number, value: number): void {
    const at = this.begin(type);
    const v = this.#grow(4);
    this.#view.setUint32(v, value >>> 0, true);
    this.end(at);
  }

  /** A big-endian u64 attribute (timeouts in milliseconds). */
  u64be(type: number, value: number): void {
    const at = this.begin(type);
    const v = this.#grow(8);
    this.#view.setBigUint64(v, BigInt(value), false);
    this.end(at);
  }

  /** A NUL-terminated string attribute. */
  str(type: number, value: string): void {
    const at = this.begin(type);
    this.#text(value);
    const nul = this.#grow(1);
    this.#buf[nul] = 0;
    this.end(at);
  }

  /** `s` as UTF-8 bytes (names are ASCII: written char by char, without an encoder's buffer). */
  #text(s: string): void {
    let ascii = true;
    for (let k = 0; k < s.length; k++) {
      if (s.charCodeAt(k) > 0x7f) {
        ascii = false;
        break;
      }
    }
    if (!ascii) {
      this.raw(ENCODER.encode(s));
      return;
    }
    const at = this.#grow(s.length);
    for (let k = 0; k < s.length; k++) this.#buf[at + k] = s.charCodeAt(k);
  }

  /**
   * libnftnl user data inside an attribute: TLVs of one-byte type and one-byte length. Starts one entry
   * of `type` whose value follows; {@link udEnd} sets its length.
   */
  udBegin(type: number): number {
    const at = this.#grow(2);
    this.#buf[at] = type;
    return at;
  }

  /** Ends the user-data entry begun at `at`. */
  udEnd(at: number): void {
    const n = this.#len - at - 2;
    if (n > 255) throw new RangeError(`user data entry ${this.#buf[at]} longer than 255 bytes`);
    this.#buf[at + 1] = n;
  }

  /** A user-data u32 in host (little-endian) order. */
  udU32(type: number, value: number): void {
    const at = this.udBegin(type);
    const v = this.#grow(4);
    this.#view.setUint32(v, value >>> 0, true);
    this.udEnd(at);
  }

  /** A user-data string (NUL-terminated, as nft stores comments). */
  udString(type: number, value: string): void {
    const at = this.udBegin(type);
    this.#text(value);
    const nul = this.#grow(1);
    this.#buf[nul] = 0;
    this.udEnd(at);
  }

  /** A user-data entry of raw bytes. */
  udBytes(type: number, value: Uint8Array): void {
    const at = this.udBegin(type);
    this.raw(value);
    this.udEnd(at);
  }

  /**
   * Starts a message: nlmsghdr (`type`, `flags`, `seq`; its length set by {@link endMessage}) and nfgenmsg
   * (`family`, NFNETLINK_V0, `resId`). Its attributes follow.
   */
  beginMessage(type: number, flags: number, seq: number, family: number, resId = 0): number {
    const at = this.#grow(MESSAGE_HEADER_BYTES);
    const v = this.#view;
    v.setUint16(at + 4, type, true);
    v.setUint16(at + 6, flags, true);
    v.setUint32(at + 8, seq >>> 0, true);
    v.setUint32(at + 12, 0, true);
    this.#buf[at + 16] = family;
    this.#buf[at + 17] = 0;
    v.setUint16(at + 18, resId, false);
    return at;
  }

  /** Ends the message begun at `at` (its nlmsg_len). */
  endMessage(at: number): void {
    this.#view.setUint32(at, this.#len - at, true);
  }

  /** Adds `flags` to the message begun at `at`. */
  addMessageFlags(at: number, flags: number): void {
    this.#view.setUint16(at + 6, this.#view.getUint16(at + 6, true) | flags, true);
  }
}

/** Type of an nf_tables message: NFNL_SUBSYS_NFTABLES << 8 | `msg`. */
export function nftMessageType(msg: number): number {
  return (NFNL_SUBSYS_NFTABLES << 8) | msg;
}

/** Writes NFNL_MSG_BATCH_BEGIN for the nf_tables subsystem. */
export function writeBatchBegin(w: NlWriter, seq: number): void {
  w.endMessage(w.beginMessage(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, seq, 0, NFNL_SUBSYS_NFTABLES));
}

/** Writes NFNL_MSG_BATCH_END. */
export function writeBatchEnd(w: NlWriter, seq: number): void {
  w.endMessage(w.beginMessage(NFNL_MSG_BATCH_END, NLM_F_REQUEST, seq, 0, NFNL_SUBSYS_NFTABLES));
}
