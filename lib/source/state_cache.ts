import { createHash, randomBytes } from "node:crypto";
import { Buffer } from "node:buffer";
import { constants as fsc } from "node:fs";
import { type FileHandle, mkdir, open, rename, stat, unlink } from "node:fs/promises";
import { join } from "node:path";
import process from "node:process";
import type { StateSnapshot } from "./state_store.ts";
import { statePayloadChunks } from "./state_payload.ts";

/** File name of the last-known-state cache inside --state-dir. */
export const STATE_FILE = "state.json";
/** Format identifier and version written in the header; any other value is ignored on load. */
export const STATE_FORMAT = "edgeproxy-state";
export const STATE_VERSION = 1;
/** Upper bound of a cache file; a larger state is not written (and a larger file not read). */
export const STATE_MAX_BYTES = 64 * 1024 * 1024;

/**
 * Header line of the cache file. The payload (line 2) is covered by sha256 and its byte length, so a
 * truncated or edited file is detected before anything is programmed from it.
 */
export interface StateHeader {
  format: string;
  version: number;
  nodeName: string;
  writtenAt: string;
  bytes: number;
  sha256: string;
}

/** A loaded cache, or why none could be used. */
export type LoadResult =
  | { ok: true; state: StateSnapshot; header: StateHeader; ageMs: number }
  | { ok: false; reason: string; missing: boolean };

/** Serialises a snapshot into the cache file text: one header line, one payload line. Deterministic. */
export function encodeState(state: StateSnapshot, nodeName: string, writtenAtMs: number): string {
  return Buffer.concat(encodeStateChunks(state, nodeName, writtenAtMs)).toString("utf8");
}

/**
 * The cache file's bytes as chunks (header line, the payload's chunks, final newline): the same bytes
 * {@link writeStateSnapshot} writes.
 */
export function encodeStateChunks(state: StateSnapshot, nodeName: string, writtenAtMs: number): Uint8Array[] {
  const payload = [...statePayloadChunks(state)];
  const hash = createHash("sha256");
  let bytes = 0;
  for (const c of payload) {
    hash.update(c);
    bytes += c.length;
  }
  return [headerLine(nodeName, writtenAtMs, bytes, hash.digest("hex")), ...payload, Buffer.from("\n")];
}

/**
 * The header line, newline included, padded with spaces (which JSON allows after the value) to the length
 * it has for the largest payload allowed: the writer reserves that much at the start of the file, writes
 * the payload after it as it is encoded, and fills in the header once the payload's size and checksum are
 * known. Readers take the line up to its newline and parse it, so the padding changes nothing for them.
 */
function headerLine(nodeName: string, writtenAtMs: number, bytes: number, sha256: string): Buffer {
  const header = (n: number): string =>
    JSON.stringify(
      {
        format: STATE_FORMAT,
        version: STATE_VERSION,
        nodeName,
        writtenAt: new Date(writtenAtMs).toISOString(),
        bytes: n,
        sha256,
      } satisfies StateHeader,
    );
  return Buffer.from(`${header(bytes).padEnd(header(STATE_MAX_BYTES).length)}\n`);
}

/**
 * Parses cache file text. Every way a file can be unusable (foreign format or version, another node's
 * cache, truncation, checksum mismatch, a payload of the wrong shape) gives a reason, never an exception.
 */
export function decodeState(text: string, nodeName: string, nowMs: number): LoadResult {
  const nl = text.indexOf("\n");
  if (nl < 0) return { ok: false, reason: "no header line (truncated?)", missing: false };
  let header: StateHeader;
  try {
    header = JSON.parse(text.slice(0, nl));
  } catch {
    return { ok: false, reason: "header is not JSON", missing: false };
  }
  if (header?.format !== STATE_FORMAT) {
    return {
      ok: false,
      reason: `format ${JSON.stringify(header?.format)} is not ${STATE_FORMAT}`,
      missing: false,
    };
  }
  if (header.version !== STATE_VERSION) {
    return {
      ok: false,
      reason: `version ${JSON.stringify(header.version)} is not ${STATE_VERSION}`,
      missing: false,
    };
  }
  if (header.nodeName !== nodeName) {
    return {
      ok: false,
      reason: `cache belongs to node ${JSON.stringify(header.nodeName)}, this node is ${
        JSON.stringify(nodeName)
      }`,
      missing: false,
    };
  }
  const payload = text.slice(nl + 1).replace(/\n$/, "");
  const bytes = new TextEncoder().encode(payload).length;
  if (bytes !== header.bytes) {
    return {
      ok: false,
      reason: `payload is ${bytes} bytes, header says ${header.bytes} (truncated?)`,
      missing: false,
    };
  }
  if (createHash("sha256").update(payload).digest("hex") !== header.sha256) {
    return { ok: false, reason: "checksum mismatch", missing: false };
  }
  let body: unknown;
  try {
    body = JSON.parse(payload);
  } catch {
    return { ok: false, reason: "payload is not JSON", missing: false };
  }
  const b = body as Partial<StateSnapshot>;
  if (
    !Array.isArray(b.services) || !Array.isArray(b.endpointSlices) ||
    (b.node !== null && typeof b.node !== "object") ||
    (b.serviceCIDRs !== undefined && !Array.isArray(b.serviceCIDRs))
  ) {
    return { ok: false, reason: "payload does not hold services, endpointSlices and node", missing: false };
  }
  const writtenMs = Date.parse(header.writtenAt);
  return {
    ok: true,
    state: {
      services: b.services,
      endpointSlices: b.endpointSlices,
      node: b.node ?? null,
      // Files written before ServiceCIDRs were cached have none.
      ...(b.serviceCIDRs === undefined ? {} : { serviceCIDRs: b.serviceCIDRs }),
    },
    header,
    ageMs: Number.isFinite(writtenMs) ? Math.max(0, nowMs - writtenMs) : 0,
  };
}

/**
 * Why `dir` must not hold the cache, or null when it may: it must be a directory owned by the agent's
 * user and writable by nobody else. Anyone who can write there could swap state.json (and so the rules
 * this node programs offline) or race the writer with planted files.
 */
export async function stateDirProblem(dir: string): Promise<string | null> {
  const st = await stat(dir);
  const mode = (st.mode & 0o7777).toString(8).padStart(4, "0");
  if (!st.isDirectory()) return `state dir ${dir} is not a directory`;
  if ((st.mode & 0o022) !== 0) {
    return `state dir ${dir} has mode ${mode} (group/world-writable): not using it; make it writable by its owner only (chmod go-w)`;
  }
  const uid = typeof process.getuid === "function" ? process.getuid() : null;
  if (uid !== null && st.uid !== uid) {
    return `state dir ${dir} (mode ${mode}) is owned by uid ${st.uid}, not by this agent's uid ${uid}: not using it`;
  }
  return null;
}

/** The kind of a non-regular file, for messages. */
function fileKind(
  st: {
    isFIFO(): boolean;
    isCharacterDevice(): boolean;
    isBlockDevice(): boolean;
    isSocket(): boolean;
    isDirectory(): boolean;
  },
): string {
  if (st.isFIFO()) return "a FIFO";
  if (st.isCharacterDevice() || st.isBlockDevice()) return "a device";
  if (st.isSocket()) return "a socket";
  if (st.isDirectory()) return "a directory";
  return "not a regular file";
}

/**
 * Reads a regular file of at most `maxBytes`. Opens without following a symlink and without blocking
 * (a FIFO would block a plain open until a writer appears), checks the opened file itself (fstat, so it
 * cannot be swapped in between), and counts the bytes actually read: files in /proc and friends report
 * size 0 whatever they hold.
 */
export async function readRegularFile(path: string, maxBytes: number): Promise<Buffer> {
  let fh: FileHandle;
  try {
    fh = await open(path, fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ELOOP") {
      throw Object.assign(new Error("is a symbolic link; only a regular file is read"), { code: "ELOOP" });
    }
    throw e;
  }
  try {
    const st = await fh.stat();
    if (!st.isFile()) throw new Error(`is ${fileKind(st)}; only a regular file is read`);
    if (st.size > maxBytes) throw new Error(`is ${st.size} bytes, over the ${maxBytes} limit`);
    const chunks: Buffer[] = [];
    let total = 0;
    // One read of the stated size (plus one byte to see EOF) in the usual case; 1 MiB steps when stat lies.
    let want = st.size > 0 ? st.size + 1 : 1 << 20;
    for (;;) {
      const buf = Buffer.allocUnsafe(Math.min(want, maxBytes + 1 - total));
      const { bytesRead } = await fh.read(buf, 0, buf.length, null);
      if (bytesRead === 0) break;
      total += bytesRead;
      if (total > maxBytes) throw new Error(`holds more than the ${maxBytes} byte limit`);
      chunks.push(buf.subarray(0, bytesRead));
      want = 1 << 20;
    }
    return chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, total);
  } finally {
    await fh.close();
  }
}

/** Options of {@link loadStateCache}. */
export interface LoadStateCacheOptions {
  /** Largest file read; default STATE_MAX_BYTES. */
  maxBytes?: number;
}

/**
 * Reads and validates the cache in `dir`. A dir others could write to is refused (see
 * {@link stateDirProblem}), and so is anything but a regular file.
 */
export async function loadStateCache(
  dir: string,
  nodeName: string,
  nowMs: number,
  opts: LoadStateCacheOptions = {},
): Promise<LoadResult> {
  const path = join(dir, STATE_FILE);
  try {
    const problem = await stateDirProblem(dir);
    if (problem !== null) return { ok: false, reason: problem, missing: false };
    const text = new TextDecoder().decode(await readRegularFile(path, opts.maxBytes ?? STATE_MAX_BYTES));
    const r = decodeState(text, nodeName, nowMs);
    return r.ok ? r : { ...r, reason: `${path}: ${r.reason}` };
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return { ok: false, reason: `${path} does not exist`, missing: true };
    return { ok: false, reason: `${path}: ${(e as Error).message}`, missing: false };
  }
}

/**
 * Writes the cache atomically and safely: refuses a dir others could write to, creates a temp file with
 * an unpredictable name in the same directory (O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600, so a planted file or
 * symlink is never opened), fsyncs it, renames it over the old file and fsyncs the directory. A crash at
 * any point leaves either the old file or the new one; on any failure (ENOSPC included) the temp file is
 * removed.
 */
export async function writeStateCache(dir: string, content: string | readonly Uint8Array[]): Promise<void> {
  const chunks = typeof content === "string" ? [new TextEncoder().encode(content)] : content;
  const size = chunks.reduce((n, c) => n + c.length, 0);
  if (size > STATE_MAX_BYTES) throw overLimit(`${size} bytes`);
  await writeAtomically(dir, async (fh) => {
    let at = 0;
    for (const c of chunks) at += await writeAt(fh, c, at);
  });
}

/**
 * Payload bytes between two `collect` calls of {@link writeStateSnapshot}. Each object is encoded as a
 * string of its own, garbage once copied into the chunk, and the runtime does not collect during the
 * write: at 10k Services an 11.5 MiB payload left ~20 MiB of them at once (~10 with a collection asked
 * for every MiB), on top of a first sync's own peak (bench/README.md).
 */
export const STATE_COLLECT_EVERY_BYTES = 1024 * 1024;

/** How {@link writeStateSnapshot} writes. */
export interface StateWriteOptions {
  /** Called every {@link STATE_COLLECT_EVERY_BYTES} of payload (the agent: a collection). */
  readonly collect?: () => void;
}

/**
 * Writes `state` as the cache file ({@link writeStateCache}'s safety and atomicity) as it is encoded: the
 * payload chunk by chunk after the header's reserved room, then the header. Memory: one chunk, whatever
 * the state's size, and the encoded objects since the last `collect`. Returns the file's size.
 */
export async function writeStateSnapshot(
  dir: string,
  state: StateSnapshot,
  nodeName: string,
  writtenAtMs: number,
  opts: StateWriteOptions = {},
): Promise<number> {
  const room = headerLine(nodeName, writtenAtMs, 0, "0".repeat(64)).length;
  return await writeAtomically(dir, async (fh) => {
    const hash = createHash("sha256");
    let bytes = 0;
    let collectAt = STATE_COLLECT_EVERY_BYTES;
    for (const chunk of statePayloadChunks(state, { reuse: true })) {
      bytes += chunk.length;
      if (room + bytes + 1 > STATE_MAX_BYTES) throw overLimit(`over ${STATE_MAX_BYTES} bytes`);
      hash.update(chunk);
      await writeAt(fh, chunk, room + bytes - chunk.length);
      if (bytes >= collectAt && opts.collect !== undefined) {
        collectAt = bytes + STATE_COLLECT_EVERY_BYTES;
        opts.collect();
      }
    }
    await writeAt(fh, Buffer.from("\n"), room + bytes);
    const header = headerLine(nodeName, writtenAtMs, bytes, hash.digest("hex"));
    if (header.length !== room) throw new Error(`state cache header is ${header.length} bytes, not ${room}`);
    await writeAt(fh, header, 0);
    return room + bytes + 1;
  });
}

function overLimit(size: string): Error {
  return new Error(`state cache would be ${size}, over the ${STATE_MAX_BYTES} limit; not written`);
}

/** Writes all of `bytes` at `position`; returns its length. */
async function writeAt(fh: FileHandle, bytes: Uint8Array, position: number): Promise<number> {
  for (let done = 0; done < bytes.length;) {
    const { bytesWritten } = await fh.write(bytes, done, bytes.length - done, position + done);
    done += bytesWritten;
  }
  return bytes.length;
}

/** The temp file, fsync, rename and directory fsync of {@link writeStateCache}, around `fill`. */
async function writeAtomically<T>(dir: string, fill: (fh: FileHandle) => Promise<T>): Promise<T> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const problem = await stateDirProblem(dir);
  if (problem !== null) throw new Error(problem);
  const final = join(dir, STATE_FILE);
  const tmp = join(dir, `.${STATE_FILE}.${randomBytes(12).toString("hex")}.tmp`);
  const fh = await open(tmp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o600);
  let result: T;
  try {
    try {
      result = await fill(fh);
      await fh.sync();
    } finally {
      await fh.close();
    }
    await rename(tmp, final);
  } catch (e) {
    await unlink(tmp).catch(() => {});
    throw e;
  }
  try {
    const d = await open(dir, fsc.O_RDONLY | fsc.O_DIRECTORY);
    try {
      await d.sync();
    } finally {
      await d.close();
    }
  } catch {
    // Directory fsync is not supported everywhere (e.g. some overlay filesystems); the rename is still atomic.
  }
  return result;
}
