/**
 * Bench only (not product code): IPVS over generic netlink in-process (`bun:ffi`, socket/send/recv as
 * lib/runtime/nft_netlink.ts does), to time it against `ipvsadm` for the same kernel state:
 *  - the read-back: every virtual server (IPVS_CMD_GET_SERVICE dump), then each one's real servers
 *    (IPVS_CMD_GET_DEST dump), as `ipvsadm -Sn` reads them;
 *  - the write: IPVS_CMD_NEW_SERVICE / NEW_DEST messages, many per send (the kernel handles each message
 *    of a buffer in turn and acknowledges each), as `ipvsadm -R` writes one line at a time.
 * The "IPVS" family id is resolved once (CTRL_CMD_GETFAMILY). bench/ipvs_uml_sync.ts calls it in the guest.
 * Bun only: elsewhere `openIpvsNetlink` returns null.
 */
import type { KernelVirtualServer } from "../lib/proxy/ipvs/ipvsadm.ts";
import { splitHostPort } from "../lib/net/go_net.ts";
import { type BunFfi, enterNetns, type Pointer } from "../lib/runtime/libnftables.ts";
import { netlinkMessages } from "../lib/runtime/nft_netlink.ts";

const AF_NETLINK = 16;
const SOCK_RAW = 3;
const SOCK_CLOEXEC = 0o2000000;
const NETLINK_GENERIC = 16;
const GENL_ID_CTRL = 0x10;
const CTRL_CMD_GETFAMILY = 3;
const CTRL_ATTR_FAMILY_ID = 1;
const CTRL_ATTR_FAMILY_NAME = 2;
const NLMSG_ERROR = 2;
const NLMSG_DONE = 3;
const NLM_F_REQUEST = 1;
const NLM_F_DUMP = 0x300;
const NLA_F_NESTED = 0x8000;
const IPVS_GENL_VERSION = 1;
const IPVS_CMD_GET_SERVICE = 4;
const IPVS_CMD_GET_DEST = 8;
const IPVS_CMD_ATTR_SERVICE = 1;
const IPVS_CMD_ATTR_DEST = 2;
/** IPVS_SVC_ATTR_AF, _PROTOCOL, _ADDR, _PORT, _FWMARK: what identifies a virtual server. */
const SVC_KEY_ATTRS = new Set([1, 2, 3, 4, 5]);
const IPVS_DEST_ATTR_WEIGHT = 4;
const NLM_F_ACK = 4;
const NLM_F_CREATE_EXCL = 0x400 | 0x200;
const IPVS_CMD_NEW_SERVICE = 1;
const IPVS_CMD_NEW_DEST = 5;
const IPPROTO: Record<string, number> = { TCP: 6, UDP: 17, SCTP: 132 };
/** IP_VS_SVC_F_PERSISTENT. */
const SVC_F_PERSISTENT = 1;
/** Messages packed into one send. With 256 the guest's recv failed (ENOBUFS, presumably: each acknowledgement
 * holds ~1 KiB of the default 208 KiB receive buffer); 64 leaves room. */
const BATCH = 64;

/** A virtual server's identifying attributes as the kernel sent them, and its real servers' weights. */
export interface NetlinkVirtualServer {
  readonly key: Uint8Array;
  readonly realServerWeights: number[];
}

/** Reads of the IPVS table over one generic netlink socket. */
export interface IpvsNetlink {
  /** Every virtual server with its real servers (one GET_SERVICE dump, one GET_DEST dump each). */
  dump(): NetlinkVirtualServer[];
  /** Creates these virtual servers and their real servers (masquerading), BATCH messages per send. */
  write(vss: Iterable<KernelVirtualServer>): void;
  close(): void;
}

function align4(n: number): number {
  return (n + 3) & ~3;
}

/** One attribute: header then payload, padded. */
function attr(type: number, payload: Uint8Array): Uint8Array {
  const buf = new Uint8Array(align4(4 + payload.length));
  const v = new DataView(buf.buffer);
  v.setUint16(0, 4 + payload.length, true);
  v.setUint16(2, type, true);
  buf.set(payload, 4);
  return buf;
}

function concat(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let off = 0;
  for (const p of parts) {
    out.set(p, off);
    off += p.length;
  }
  return out;
}

/** A generic netlink request: nlmsghdr, genlmsghdr (cmd, version), attributes. */
function genlRequest(
  type: number,
  cmd: number,
  version: number,
  flags: number,
  seq: number,
  attrs: Uint8Array,
) {
  const buf = new Uint8Array(16 + 4 + attrs.length);
  const v = new DataView(buf.buffer);
  v.setUint32(0, buf.length, true);
  v.setUint16(4, type, true);
  v.setUint16(6, NLM_F_REQUEST | flags, true);
  v.setUint32(8, seq >>> 0, true);
  buf[16] = cmd;
  buf[17] = version;
  buf.set(attrs, 20);
  return buf;
}

function eachAttr(buf: Uint8Array, fn: (type: number, payload: Uint8Array) => void): void {
  const v = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  for (let off = 0; off + 4 <= buf.length;) {
    const alen = v.getUint16(off, true);
    if (alen < 4 || off + alen > buf.length) break;
    fn(v.getUint16(off + 2, true) & 0x3fff, buf.subarray(off + 4, off + alen));
    off += align4(alen);
  }
}

const u16 = (n: number, be = false) => {
  const b = new Uint8Array(2);
  new DataView(b.buffer).setUint16(0, n, !be);
  return b;
};
const u32 = (n: number) => {
  const b = new Uint8Array(4);
  new DataView(b.buffer).setUint32(0, n >>> 0, true);
  return b;
};
/** An IPv4 address as union nf_inet_addr (16 bytes). IPv6 is not needed by the bench. */
function inetAddr(a: string): Uint8Array {
  const b = new Uint8Array(16);
  a.split(".").forEach((o, i) => b[i] = Number(o));
  return b;
}

/** The attributes that identify `vs` (AF, protocol, address, port). */
function serviceKey(vs: KernelVirtualServer): Uint8Array {
  return concat([
    attr(1, u16(2)),
    attr(2, u16(IPPROTO[vs.protocol])),
    attr(3, inetAddr(vs.address)),
    attr(4, u16(vs.port, true)),
  ]);
}

/** Opens a generic netlink socket (in `netnsPath`, default: ours) and resolves the IPVS family; null without `bun:ffi`. */
export async function openIpvsNetlink(
  opts: { readonly netnsPath?: string } = {},
): Promise<IpvsNetlink | null> {
  if (typeof (globalThis as { Bun?: unknown }).Bun === "undefined") return null;
  const ffi = await import(["bun", "ffi"].join(":")) as BunFfi;
  const T = ffi.FFIType;
  const libc = ffi.dlopen("libc.so.6", {
    socket: { args: [T.i32, T.i32, T.i32], returns: T.i32 },
    send: { args: [T.i32, T.ptr, T.u64, T.i32], returns: T.i64 },
    recv: { args: [T.i32, T.ptr, T.u64, T.i32], returns: T.i64 },
    close: { args: [T.i32], returns: T.i32 },
  });
  const s = libc.symbols;
  const open = () => s.socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_GENERIC) as number;
  const fd = opts.netnsPath === undefined ? open() : enterNetns(ffi, opts.netnsPath, open);
  if (fd < 0) throw new Error("ipvs netlink: cannot open a NETLINK_GENERIC socket");
  const reply = new Uint8Array(256 * 1024);
  let seq = 0;
  const send = (req: Uint8Array, what: string) => {
    if (Number(s.send(fd, req as unknown as Pointer, req.length, 0)) !== req.length) {
      throw new Error(`ipvs netlink: ${what}: send failed`);
    }
  };
  /** Sends `req` and calls `each` with every reply message's attributes (after genlmsghdr). */
  const request = (req: Uint8Array, dump: boolean, what: string, each: (attrs: Uint8Array) => void) => {
    send(req, what);
    for (;;) {
      const n = Number(s.recv(fd, reply as unknown as Pointer, reply.length, 0));
      if (n <= 0) throw new Error(`ipvs netlink: ${what}: recv failed`);
      for (const m of netlinkMessages(reply.subarray(0, n))) {
        if (m.type === NLMSG_DONE) return;
        if (m.type === NLMSG_ERROR) {
          const errno = -new DataView(m.payload.buffer, m.payload.byteOffset).getInt32(0, true);
          if (errno !== 0) throw new Error(`ipvs netlink: ${what}: errno ${errno}`);
          return;
        }
        each(m.payload.subarray(4));
        if (!dump) return;
      }
    }
  };
  let family = -1;
  request(
    genlRequest(
      GENL_ID_CTRL,
      CTRL_CMD_GETFAMILY,
      1,
      0,
      ++seq,
      attr(CTRL_ATTR_FAMILY_NAME, new TextEncoder().encode("IPVS\0")),
    ),
    false,
    "resolve family IPVS",
    (attrs) =>
      eachAttr(attrs, (t, p) => {
        if (t === CTRL_ATTR_FAMILY_ID) family = new DataView(p.buffer, p.byteOffset).getUint16(0, true);
      }),
  );
  if (family < 0) throw new Error("ipvs netlink: the kernel has no IPVS generic netlink family");
  return {
    dump() {
      const services: Uint8Array[] = [];
      request(
        genlRequest(family, IPVS_CMD_GET_SERVICE, IPVS_GENL_VERSION, NLM_F_DUMP, ++seq, new Uint8Array()),
        true,
        "dump services",
        (attrs) =>
          eachAttr(attrs, (t, svc) => {
            if (t !== IPVS_CMD_ATTR_SERVICE) return;
            const key: Uint8Array[] = [];
            eachAttr(svc, (st, p) => {
              if (SVC_KEY_ATTRS.has(st)) key.push(attr(st, p.slice()));
            });
            services.push(concat(key));
          }),
      );
      return services.map((key) => {
        const weights: number[] = [];
        request(
          genlRequest(
            family,
            IPVS_CMD_GET_DEST,
            IPVS_GENL_VERSION,
            NLM_F_DUMP,
            ++seq,
            attr(IPVS_CMD_ATTR_SERVICE | NLA_F_NESTED, key),
          ),
          true,
          "dump real servers",
          (attrs) =>
            eachAttr(attrs, (t, dest) => {
              if (t !== IPVS_CMD_ATTR_DEST) return;
              eachAttr(dest, (dt, p) => {
                if (dt === IPVS_DEST_ATTR_WEIGHT) {
                  weights.push(new DataView(p.buffer, p.byteOffset).getUint32(0, true));
                }
              });
            }),
        );
        return { key, realServerWeights: weights };
      });
    },
    write(vss) {
      const pending: Uint8Array[] = [];
      const flush = () => {
        if (pending.length === 0) return;
        const n = pending.length;
        send(concat(pending), "write");
        pending.length = 0;
        let acked = 0;
        while (acked < n) {
          const got = Number(s.recv(fd, reply as unknown as Pointer, reply.length, 0));
          if (got <= 0) throw new Error("ipvs netlink: write: recv failed");
          for (const m of netlinkMessages(reply.subarray(0, got))) {
            if (m.type !== NLMSG_ERROR) continue;
            const errno = -new DataView(m.payload.buffer, m.payload.byteOffset).getInt32(0, true);
            if (errno !== 0) throw new Error(`ipvs netlink: write: errno ${errno}`);
            acked++;
          }
        }
      };
      const push = (cmd: number, attrs: Uint8Array) => {
        pending.push(
          genlRequest(family, cmd, IPVS_GENL_VERSION, NLM_F_ACK | NLM_F_CREATE_EXCL, ++seq, attrs),
        );
        if (pending.length >= BATCH) flush();
      };
      for (const vs of vss) {
        const key = serviceKey(vs);
        const persistent = vs.persistentTimeout > 0 ? SVC_F_PERSISTENT : 0;
        push(
          IPVS_CMD_NEW_SERVICE,
          attr(
            IPVS_CMD_ATTR_SERVICE | NLA_F_NESTED,
            concat([
              key,
              attr(6, new TextEncoder().encode(vs.scheduler + "\0")),
              attr(7, concat([u32(persistent), u32(0xffffffff)])),
              attr(8, u32(vs.persistentTimeout)),
              attr(9, u32(0xffffffff)),
            ]),
          ),
        );
        for (const [rs, weight] of vs.realServers) {
          const hp = splitHostPort(rs);
          if (hp === null) throw new Error(`ipvs netlink: write: bad real server ${rs}`);
          const { host, port } = hp;
          push(
            IPVS_CMD_NEW_DEST,
            concat([
              attr(IPVS_CMD_ATTR_SERVICE | NLA_F_NESTED, key),
              attr(
                IPVS_CMD_ATTR_DEST | NLA_F_NESTED,
                concat([
                  attr(1, inetAddr(host)),
                  attr(2, u16(Number(port), true)),
                  attr(3, u32(0)), // IP_VS_CONN_F_MASQ
                  attr(IPVS_DEST_ATTR_WEIGHT, u32(weight)),
                  attr(5, u32(0)),
                  attr(6, u32(0)),
                  attr(11, u16(2)),
                ]),
              ),
            ]),
          );
        }
      }
      flush();
    },
    close() {
      s.close(fd);
      libc.close();
    },
  };
}
