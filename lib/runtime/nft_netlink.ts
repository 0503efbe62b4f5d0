/**
 * Narrow nftables reads over a NETLINK_NETFILTER socket, in-process through `bun:ffi`:
 *  - the ruleset generation id (NFT_MSG_GETGEN). Every committed nftables transaction in the network
 *    namespace moves it (ours, a firewall's, iptables-nft's), and nothing else does, so "unchanged since
 *    we last looked" proves the ruleset unchanged without reading it. nft 1.0.6 prints the id nowhere
 *    (only `nft monitor` events carry it);
 *  - whether a table or chain exists, the rule count of one chain and the element count of one set or
 *    map: dumps the kernel filters by name, where `nft list chain` first reads every chain of the table
 *    (seconds at 10k Services).
 * Bun only: elsewhere `openNftNetlink` returns null and callers use `nft` instead.
 */
import { type BunFfi, enterNetns, type Pointer } from "./libnftables.ts";

/** nft family names and their NFPROTO numbers. */
export type NftNetlinkFamily = "ip" | "ip6";
const NFPROTO: Record<NftNetlinkFamily, number> = { ip: 2, ip6: 10 };

/** Reads of one network namespace's nftables state. Each throws naming what failed. */
export interface NftNetlinkReader {
  /** The current generation id (a u32 the kernel increments on every nftables commit). */
  read(): number;
  /** Whether table `table` exists in `family`. */
  tableExists(family: NftNetlinkFamily, table: string): boolean;
  /** Whether chain `chain` exists in that table. */
  chainExists(family: NftNetlinkFamily, table: string, chain: string): boolean;
  /** Rules in chain `chain` (0 when the table or chain does not exist). */
  ruleCount(family: NftNetlinkFamily, table: string, chain: string): number;
  /** Elements in set or map `set`, or null when the table or set does not exist. */
  elementCount(family: NftNetlinkFamily, table: string, set: string): number | null;
  /** Closes the socket; later calls throw. */
  close(): void;
}

const AF_NETLINK = 16;
const SOCK_RAW = 3;
const SOCK_CLOEXEC = 0o2000000;
const NETLINK_NETFILTER = 12;
/** (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN; the reply is NFT_MSG_NEWGEN. */
const NFT_GETGEN = (10 << 8) | 16;
const NFT_NEWGEN = (10 << 8) | 15;
const NLMSG_ERROR = 2;
const NLMSG_DONE = 3;
const NLM_F_REQUEST = 1;
const NLM_F_DUMP = 0x300;
const NFTA_GEN_ID = 1;
const NFT_MSG_GETTABLE = 1;
const NFT_MSG_GETCHAIN = 4;
const NFT_MSG_GETRULE = 7;
const NFT_MSG_NEWRULE = 6;
const NFT_MSG_GETSETELEM = 13;
const NFT_MSG_NEWSETELEM = 12;
/** NFTA_TABLE_NAME; NFTA_CHAIN_TABLE, NFTA_CHAIN_NAME; NFTA_RULE_TABLE, NFTA_RULE_CHAIN. */
const NFTA_TABLE_NAME = 1;
const NFTA_CHAIN_TABLE = 1;
const NFTA_CHAIN_NAME = 3;
const NFTA_RULE_TABLE = 1;
const NFTA_RULE_CHAIN = 2;
/** NFTA_SET_ELEM_LIST_TABLE, _SET, _ELEMENTS; NFTA_LIST_ELEM inside the latter. */
const NFTA_SET_ELEM_LIST_TABLE = 1;
const NFTA_SET_ELEM_LIST_SET = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS = 3;
const NFTA_LIST_ELEM = 1;
const ENOENT = 2;
const NLMSG_HDRLEN = 16;
const NFGENMSG_LEN = 4;

/** The 20-byte GETGEN request: nlmsghdr then nfgenmsg (AF_UNSPEC, NFNETLINK_V0, res_id 0). */
export function getGenRequest(seq: number): Uint8Array {
  const buf = new Uint8Array(NLMSG_HDRLEN + NFGENMSG_LEN);
  const v = new DataView(buf.buffer);
  v.setUint32(0, buf.length, true);
  v.setUint16(4, NFT_GETGEN, true);
  v.setUint16(6, NLM_F_REQUEST, true);
  v.setUint32(8, seq >>> 0, true);
  return buf;
}

/**
 * An nftables request: nlmsghdr, nfgenmsg for `family`, then each attribute as a NUL-terminated string
 * (names are all these requests carry).
 */
export function nftRequest(
  msg: number,
  flags: number,
  seq: number,
  family: number,
  attrs: readonly (readonly [number, string])[],
): Uint8Array {
  const enc = new TextEncoder();
  const bodies = attrs.map(([type, value]) => [type, enc.encode(value + "\0")] as const);
  const len = NLMSG_HDRLEN + NFGENMSG_LEN + bodies.reduce((n, [, b]) => n + align4(4 + b.length), 0);
  const buf = new Uint8Array(len);
  const v = new DataView(buf.buffer);
  v.setUint32(0, len, true);
  v.setUint16(4, (10 << 8) | msg, true);
  v.setUint16(6, NLM_F_REQUEST | flags, true);
  v.setUint32(8, seq >>> 0, true);
  buf[16] = family;
  let off = NLMSG_HDRLEN + NFGENMSG_LEN;
  for (const [type, b] of bodies) {
    v.setUint16(off, 4 + b.length, true);
    v.setUint16(off + 2, type, true);
    buf.set(b, off + 4);
    off += align4(4 + b.length);
  }
  return buf;
}

function align4(n: number): number {
  return (n + 3) & ~3;
}

/** One netlink message in a receive buffer: its type and payload (after the nlmsghdr). */
export interface NetlinkMessage {
  readonly type: number;
  readonly payload: Uint8Array;
}

/** The messages in one receive buffer. */
export function netlinkMessages(buf: Uint8Array): NetlinkMessage[] {
  const v = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const out: NetlinkMessage[] = [];
  for (let off = 0; off + NLMSG_HDRLEN <= buf.length;) {
    const len = v.getUint32(off, true);
    if (len < NLMSG_HDRLEN || off + len > buf.length) break;
    out.push({ type: v.getUint16(off + 4, true), payload: buf.subarray(off + NLMSG_HDRLEN, off + len) });
    off += align4(len);
  }
  return out;
}

/** The errno of an NLMSG_ERROR payload (0 for an acknowledgement). */
function errnoOf(payload: Uint8Array): number {
  return payload.length >= 4 ? -new DataView(payload.buffer, payload.byteOffset).getInt32(0, true) : 0;
}

/** Calls `fn` for each attribute (type without flags, payload) of `buf`. */
function eachAttr(buf: Uint8Array, fn: (type: number, payload: Uint8Array) => void): void {
  const v = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  for (let off = 0; off + 4 <= buf.length;) {
    const alen = v.getUint16(off, true);
    if (alen < 4 || off + alen > buf.length) break;
    fn(v.getUint16(off + 2, true) & 0x3fff, buf.subarray(off + 4, off + alen));
    off += align4(alen);
  }
}

/** Elements in one NEWSETELEM message's payload (its NFTA_LIST_ELEMs). */
export function setElementsIn(payload: Uint8Array): number {
  let n = 0;
  eachAttr(payload.subarray(NFGENMSG_LEN), (type, list) => {
    if (type !== NFTA_SET_ELEM_LIST_ELEMENTS) return;
    eachAttr(list, (t) => {
      if (t === NFTA_LIST_ELEM) n++;
    });
  });
  return n;
}

/**
 * The generation id in a NEWGEN reply (attribute NFTA_GEN_ID, network byte order). Throws naming what
 * the kernel sent instead (an error message, a short or foreign reply).
 */
export function parseNewGen(reply: Uint8Array): number {
  const v = new DataView(reply.buffer, reply.byteOffset, reply.byteLength);
  if (reply.length < NLMSG_HDRLEN) {
    throw new Error(`nftables generation: short reply (${reply.length} bytes)`);
  }
  const len = v.getUint32(0, true);
  const type = v.getUint16(4, true);
  if (type === NLMSG_ERROR) {
    const errno = reply.length >= 20 ? -v.getInt32(16, true) : 0;
    throw new Error(`nftables generation: the kernel answered errno ${errno}`);
  }
  if (type !== NFT_NEWGEN) throw new Error(`nftables generation: unexpected reply type ${type}`);
  let off = NLMSG_HDRLEN + NFGENMSG_LEN;
  const end = Math.min(len, reply.length);
  while (off + 4 <= end) {
    const alen = v.getUint16(off, true);
    const atype = v.getUint16(off + 2, true) & 0x3fff;
    if (alen < 4) break;
    if (atype === NFTA_GEN_ID && alen >= 8) return v.getUint32(off + 4, false);
    off += (alen + 3) & ~3;
  }
  throw new Error("nftables generation: reply carries no NFTA_GEN_ID");
}

/** A NETLINK_NETFILTER socket through libc (the one netlink implementation of the nftables adapters). */
export interface NetfilterSocket {
  /** Sends `buf` as one datagram; the number of bytes sent (negative on error). */
  send(buf: Uint8Array): number;
  /** Receives into `buf`; the number of bytes (≤ 0 on error or, with `dontWait`, when nothing is queued). */
  recv(buf: Uint8Array, dontWait?: boolean): number;
  /** Sets a SOL_SOCKET option to a 32-bit value; 0 on success. */
  setSocketOption(option: number, value: number): number;
  /** Closes the socket and the library handle. */
  close(): void;
}

/** SOL_SOCKET options the adapters set (root may exceed the sysctl maxima with the FORCE forms). */
export const SO_SNDBUFFORCE = 32;
export const SO_RCVBUFFORCE = 33;
const SOL_SOCKET = 1;
const MSG_DONTWAIT = 0x40;

/**
 * Opens a NETLINK_NETFILTER socket in `netnsPath` (default: ours), or returns null when `bun:ffi` or libc
 * is not available. Throws when the socket cannot be created.
 */
export async function openNetfilterSocket(
  opts: { readonly netnsPath?: string } = {},
): Promise<NetfilterSocket | null> {
  if (typeof (globalThis as { Bun?: unknown }).Bun === "undefined") return null;
  const specifier = ["bun", "ffi"].join(":");
  const ffi = await import(specifier) as BunFfi;
  const T = ffi.FFIType;
  let libc: ReturnType<BunFfi["dlopen"]>;
  try {
    libc = ffi.dlopen("libc.so.6", {
      socket: { args: [T.i32, T.i32, T.i32], returns: T.i32 },
      send: { args: [T.i32, T.ptr, T.u64, T.i32], returns: T.i64 },
      recv: { args: [T.i32, T.ptr, T.u64, T.i32], returns: T.i64 },
      setsockopt: { args: [T.i32, T.i32, T.i32, T.ptr, T.u32], returns: T.i32 },
      close: { args: [T.i32], returns: T.i32 },
    });
  } catch {
    return null;
  }
  const s = libc.symbols;
  const open = () => s.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER) as number;
  const fd = opts.netnsPath === undefined ? open() : enterNetns(ffi, opts.netnsPath, open);
  if (fd < 0) {
    libc.close();
    throw new Error("nftables netlink: cannot open a NETLINK_NETFILTER socket");
  }
  return {
    send: (buf) => Number(s.send(fd, buf as unknown as Pointer, buf.length, 0)),
    recv: (buf, dontWait = false) =>
      Number(s.recv(fd, buf as unknown as Pointer, buf.length, dontWait ? MSG_DONTWAIT : 0)),
    setSocketOption: (option, value) =>
      s.setsockopt(fd, SOL_SOCKET, option, new Int32Array([value]) as unknown as Pointer, 4) as number,
    close: () => {
      s.close(fd);
      libc.close();
    },
  };
}

/**
 * Opens a reader on a netlink socket created in `netnsPath` (default: ours), or returns null when
 * `bun:ffi` or libc is not available. Throws when the socket cannot be created.
 */
export async function openNftNetlink(
  opts: { readonly netnsPath?: string } = {},
): Promise<NftNetlinkReader | null> {
  const sock = await openNetfilterSocket(opts);
  if (sock === null) return null;
  // Large enough for one dump batch of the kernel (it fills up to ~32 KiB per receive).
  const reply = new Uint8Array(256 * 1024);
  let seq = 0;
  let closed = false;
  const send = (req: Uint8Array, what: string) => {
    if (closed) throw new Error("nftables netlink: reader is closed");
    if (sock.send(req) !== req.length) {
      throw new Error(`nftables netlink: ${what}: send failed`);
    }
  };
  const receive = (what: string): Uint8Array => {
    const n = sock.recv(reply);
    if (n <= 0) throw new Error(`nftables netlink: ${what}: recv failed`);
    return reply.subarray(0, n);
  };
  /** A non-dump GET: true when the object exists, false on ENOENT. */
  const exists = (msg: number, family: NftNetlinkFamily, attrs: [number, string][], what: string) => {
    send(nftRequest(msg, 0, ++seq, NFPROTO[family], attrs), what);
    for (const m of netlinkMessages(receive(what))) {
      if (m.type !== NLMSG_ERROR) return true;
      const errno = errnoOf(m.payload);
      if (errno === ENOENT) return false;
      throw new Error(`nftables netlink: ${what}: errno ${errno}`);
    }
    return true;
  };
  /** A filtered dump: calls `each` per message of type `type` until NLMSG_DONE; false on ENOENT. */
  const dump = (
    msg: number,
    type: number,
    family: NftNetlinkFamily,
    attrs: [number, string][],
    what: string,
    each: (payload: Uint8Array) => void,
  ): boolean => {
    send(nftRequest(msg, NLM_F_DUMP, ++seq, NFPROTO[family], attrs), what);
    for (;;) {
      for (const m of netlinkMessages(receive(what))) {
        if (m.type === NLMSG_DONE) return true;
        if (m.type === NLMSG_ERROR) {
          const errno = errnoOf(m.payload);
          if (errno === 0) continue;
          // A dump that cannot start answers with this one message.
          if (errno === ENOENT) return false;
          throw new Error(`nftables netlink: ${what}: errno ${errno}`);
        }
        if (m.type === ((10 << 8) | type)) each(m.payload);
      }
    }
  };
  return {
    read(): number {
      send(getGenRequest(++seq), "generation");
      // The kernel answers a GETGEN request synchronously with one message.
      return parseNewGen(receive("generation"));
    },
    tableExists(family, table) {
      return exists(NFT_MSG_GETTABLE, family, [[NFTA_TABLE_NAME, table]], `table ${family} ${table}`);
    },
    chainExists(family, table, chain) {
      return exists(
        NFT_MSG_GETCHAIN,
        family,
        [[NFTA_CHAIN_TABLE, table], [NFTA_CHAIN_NAME, chain]],
        `chain ${family} ${table} ${chain}`,
      );
    },
    ruleCount(family, table, chain) {
      let n = 0;
      dump(
        NFT_MSG_GETRULE,
        NFT_MSG_NEWRULE,
        family,
        [[NFTA_RULE_TABLE, table], [NFTA_RULE_CHAIN, chain]],
        `rules of ${family} ${table} ${chain}`,
        () => n++,
      );
      return n;
    },
    elementCount(family, table, set) {
      let n = 0;
      const found = dump(
        NFT_MSG_GETSETELEM,
        NFT_MSG_NEWSETELEM,
        family,
        [[NFTA_SET_ELEM_LIST_TABLE, table], [NFTA_SET_ELEM_LIST_SET, set]],
        `elements of ${family} ${table} ${set}`,
        (p) => (n += setElementsIn(p)),
      );
      return found ? n : null;
    },
    close(): void {
      if (closed) return;
      closed = true;
      sock.close();
    },
  };
}
