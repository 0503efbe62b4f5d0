import { createHash } from "node:crypto";
import { mkdir, open, readFile, rename, stat, unlink } from "node:fs/promises";
import { join } from "node:path";
import type { StateSnapshot } from "./state_store.ts";

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
  const payload = JSON.stringify({
    services: state.services,
    endpointSlices: state.endpointSlices,
    node: state.node,
  });
  const bytes = new TextEncoder().encode(payload).length;
  const header: StateHeader = {
    format: STATE_FORMAT,
    version: STATE_VERSION,
    nodeName,
    writtenAt: new Date(writtenAtMs).toISOString(),
    bytes,
    sha256: createHash("sha256").update(payload).digest("hex"),
  };
  return `${JSON.stringify(header)}\n${payload}\n`;
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
    (b.node !== null && typeof b.node !== "object")
  ) {
    return { ok: false, reason: "payload does not hold services, endpointSlices and node", missing: false };
  }
  const writtenMs = Date.parse(header.writtenAt);
  return {
    ok: true,
    state: { services: b.services, endpointSlices: b.endpointSlices, node: b.node ?? null },
    header,
    ageMs: Number.isFinite(writtenMs) ? Math.max(0, nowMs - writtenMs) : 0,
  };
}

/** Reads and validates the cache in `dir`. */
export async function loadStateCache(dir: string, nodeName: string, nowMs: number): Promise<LoadResult> {
  const path = join(dir, STATE_FILE);
  try {
    const st = await stat(path);
    if (st.size > STATE_MAX_BYTES) {
      return {
        ok: false,
        reason: `${path} is ${st.size} bytes, over the ${STATE_MAX_BYTES} limit`,
        missing: false,
      };
    }
    const text = await readFile(path, "utf8");
    const r = decodeState(text, nodeName, nowMs);
    return r.ok ? r : { ...r, reason: `${path}: ${r.reason}` };
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return { ok: false, reason: `${path} does not exist`, missing: true };
    return { ok: false, reason: `${path}: ${(e as Error).message}`, missing: false };
  }
}

/**
 * Writes the cache atomically: a temp file in the same directory (mode 0600), fsync, rename over the old
 * file, fsync of the directory. A crash at any point leaves either the old file or the new one.
 */
export async function writeStateCache(dir: string, text: string): Promise<void> {
  const size = new TextEncoder().encode(text).length;
  if (size > STATE_MAX_BYTES) {
    throw new Error(`state cache would be ${size} bytes, over the ${STATE_MAX_BYTES} limit; not written`);
  }
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const final = join(dir, STATE_FILE);
  const tmp = join(dir, `.${STATE_FILE}.${process.pid}.tmp`);
  const fh = await open(tmp, "w", 0o600);
  try {
    await fh.writeFile(text);
    await fh.sync();
  } finally {
    await fh.close();
  }
  try {
    await rename(tmp, final);
  } catch (e) {
    await unlink(tmp).catch(() => {});
    throw e;
  }
  try {
    const d = await open(dir, "r");
    try {
      await d.sync();
    } finally {
      await d.close();
    }
  } catch {
    // Directory fsync is not supported everywhere (e.g. some overlay filesystems); the rename is still atomic.
  }
}
