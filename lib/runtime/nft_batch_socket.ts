/**
 * Commits nf_tables batches on a NETLINK_NETFILTER socket of our own, in-process through `bun:ffi`:
 * the bytes of one NFNL batch (BATCH_BEGIN, the messages, BATCH_END) go out in one send, which the
 * kernel processes before the call returns; the acknowledgement of the last message and an error
 * message for every refused one are then already queued on the socket. Nothing is read before the
 * commit (nft 1.0.6 reads every chain and set of the table first: most of a small change's cost at 10k
 * Services). Bun only: elsewhere `openNftBatchSocket` returns null and callers use nft.
 */
import { netlinkMessages, openNetfilterSocket, SO_RCVBUFFORCE, SO_SNDBUFFORCE } from "./nft_netlink.ts";

/** What the kernel answered for one batch: the errno of every refused message, by sequence number. */
export interface NftBatchOutcome {
  readonly errors: readonly { readonly seq: number; readonly errno: number }[];
  /** Whether the acknowledgement of the last message arrived (false: the batch was cut short). */
  readonly acknowledged: boolean;
}

/** A socket that commits batches. */
export interface NftBatchSocket {
  /**
   * Sends `batch` (framed messages; the last one before BATCH_END carries NLM_F_ACK with sequence
   * number `lastSeq`) and collects the answers. Throws when the send itself fails.
   */
  commit(batch: Uint8Array, lastSeq: number): NftBatchOutcome;
  /** Closes the socket; later commits throw. */
  close(): void;
}

const NLMSG_ERROR = 2;
/** Receive buffer: error messages echo the refused message, so a failing full sync answers a lot. */
const RCVBUF_BYTES = 16 * 1024 * 1024;

/**
 * Opens a batch socket in `netnsPath` (default: ours), or returns null without `bun:ffi` or libc.
 * Throws when the socket cannot be created.
 */
export async function openNftBatchSocket(
  opts: { readonly netnsPath?: string } = {},
): Promise<NftBatchSocket | null> {
  const sock = await openNetfilterSocket(opts);
  if (sock === null) return null;
  sock.setSocketOption(SO_RCVBUFFORCE, RCVBUF_BYTES);
  let sndbuf = 0;
  const reply = new Uint8Array(256 * 1024);
  let closed = false;
  return {
    commit(batch, lastSeq) {
      if (closed) throw new Error("nftables batch socket is closed");
      // One batch is one datagram: the send buffer must hold it (root may raise it past wmem_max).
      if (batch.length + 4096 > sndbuf) {
        sndbuf = Math.max(batch.length * 2, 1024 * 1024);
        if (sock.setSocketOption(SO_SNDBUFFORCE, sndbuf) !== 0) {
          throw new Error(`nftables batch socket: cannot raise the send buffer to ${sndbuf} bytes`);
        }
      }
      const sent = sock.send(batch);
      if (sent !== batch.length) {
        throw new Error(`nftables batch socket: send of ${batch.length} bytes failed`);
      }
      const errors: { seq: number; errno: number }[] = [];
      let acknowledged = false;
      // The kernel answered during send: read what is queued without waiting.
      for (;;) {
        const n = sock.recv(reply, true);
        if (n <= 0) break;
        for (const m of netlinkMessages(reply.subarray(0, n))) {
          if (m.type !== NLMSG_ERROR || m.payload.length < 20) continue;
          const v = new DataView(m.payload.buffer, m.payload.byteOffset, m.payload.byteLength);
          const errno = -v.getInt32(0, true);
          // The echoed request header follows the errno: its sequence number names the message.
          const seq = v.getUint32(4 + 8, true);
          if (errno === 0) {
            if (seq === lastSeq) acknowledged = true;
          } else errors.push({ seq, errno });
        }
        if (acknowledged) break;
      }
      return { errors, acknowledged };
    },
    close() {
      if (closed) return;
      closed = true;
      sock.close();
    },
  };
}
