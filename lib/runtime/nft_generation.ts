/**
 * The kernel's nftables ruleset generation id (NFT_MSG_GETGEN over a NETLINK_NETFILTER socket), read
 * in-process through `bun:ffi`. Every committed nftables transaction in the network namespace moves it
 * (ours, a firewall's, iptables-nft's), and nothing else does, so "unchanged since we last looked" proves
 * the ruleset unchanged without reading it. nft 1.0.6 prints the id nowhere (only `nft monitor` events
 * carry it), hence the socket. Bun only: elsewhere `openNftGeneration` returns null and callers read
 * the ruleset instead.
 */
import { type BunFfi, enterNetns, type Pointer } from "./libnftables.ts";

/** A reader of the generation id of one network namespace. */
export interface NftGenerationReader {
  /** The current generation id (a u32 the kernel increments on every nftables commit). */
  read(): number;
  /** Closes the socket; later `read` calls throw. */
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
const NLM_F_REQUEST = 1;
const NFTA_GEN_ID = 1;
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

/**
 * Opens a reader on a netlink socket created in `netnsPath` (default: ours), or returns null when
 * `bun:ffi` or libc is not available. Throws when the socket cannot be created.
 */
export async function openNftGeneration(
  opts: { readonly netnsPath?: string } = {},
): Promise<NftGenerationReader | null> {
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
    throw new Error("nftables generation: cannot open a NETLINK_NETFILTER socket");
  }
  const reply = new Uint8Array(8192);
  let seq = 0;
  let closed = false;
  return {
    read(): number {
      if (closed) throw new Error("nftables generation: reader is closed");
      const req = getGenRequest(++seq);
      if (Number(s.send(fd, req as unknown as Pointer, req.length, 0)) !== req.length) {
        throw new Error("nftables generation: send failed");
      }
      // The kernel answers a GETGEN request synchronously with one message.
      const n = Number(s.recv(fd, reply as unknown as Pointer, reply.length, 0));
      if (n <= 0) throw new Error("nftables generation: recv failed");
      return parseNewGen(reply.subarray(0, n));
    },
    close(): void {
      if (closed) return;
      closed = true;
      s.close(fd);
      libc.close();
    },
  };
}
