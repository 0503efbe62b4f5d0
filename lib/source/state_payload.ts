/**
 * The state cache's payload (the JSON of a StateSnapshot) as UTF-8 chunks, made object by object. At 10k
 * Services the payload is ~12 MB: encoding it in one JSON.stringify made the text, its byte copy and the
 * stringifier's growing buffer at once (+30 MiB RSS for every write, right after a full sync's peak).
 * Chunk by chunk, a write holds one chunk and one object's text.
 */
import { Buffer } from "node:buffer";
import type { StateSnapshot } from "./state_store.ts";

/** Bytes per chunk (a chunk is cut at the first object boundary past this). */
export const STATE_CHUNK_BYTES = 256 * 1024;

/**
 * Yields the bytes of `JSON.stringify({services, endpointSlices, node, serviceCIDRs?})` (serviceCIDRs only
 * when present, as JSON.stringify omits an undefined property) in chunks of about `chunkBytes`. The
 * snapshot's objects must not change while the generator runs (the store replaces objects, never edits
 * them). With `reuse`, every chunk is a view of one buffer, valid until the next one is pulled (a writer
 * that finishes with each chunk before asking for the next); without, each chunk is its own.
 */
export function* statePayloadChunks(
  state: StateSnapshot,
  opts: { chunkBytes?: number; reuse?: boolean } = {},
): Generator<Uint8Array> {
  const out = new ChunkBuffer(opts.chunkBytes ?? STATE_CHUNK_BYTES, opts.reuse ?? false);
  const array = function* (key: string, items: readonly unknown[], first: boolean) {
    out.text(`${first ? "{" : ","}${JSON.stringify(key)}:[`);
    for (let i = 0; i < items.length; i++) {
      // JSON.stringify writes "null" for an array element it cannot represent.
      if (i !== 0) out.text(",");
      out.text(JSON.stringify(items[i]) ?? "null");
      if (out.full) yield out.take();
    }
    out.text("]");
  };
  yield* array("services", state.services, true);
  yield* array("endpointSlices", state.endpointSlices, false);
  const node = JSON.stringify(state.node);
  if (node !== undefined) out.text(`,"node":${node}`);
  if (state.serviceCIDRs !== undefined) yield* array("serviceCIDRs", state.serviceCIDRs, false);
  out.text("}");
  yield out.take();
}

/** UTF-8 bytes appended to a buffer that is handed out once it holds `limit` bytes. */
class ChunkBuffer {
  #buf: Buffer;
  #len = 0;

  constructor(private readonly limit: number, private readonly reuse: boolean) {
    this.#buf = Buffer.allocUnsafe(limit);
  }

  get full(): boolean {
    return this.#len >= this.limit;
  }

  text(s: string): void {
    const need = this.#len + Buffer.byteLength(s, "utf8");
    if (need > this.#buf.length) {
      const next = Buffer.allocUnsafe(Math.max(need, this.#buf.length * 2));
      this.#buf.copy(next, 0, 0, this.#len);
      this.#buf = next;
    }
    this.#len += this.#buf.write(s, this.#len, "utf8");
  }

  /** The bytes so far; the next ones go to the start of the same buffer (reuse) or to a new one. */
  take(): Uint8Array {
    const chunk = this.#buf.subarray(0, this.#len);
    if (!this.reuse) this.#buf = Buffer.allocUnsafe(this.limit);
    this.#len = 0;
    return chunk;
  }
}
