/**
 * Giving back the executable's file pages that only start-up needed. The compiled agent is one ~110 MiB
 * file (the runtime's code and our bundle); flag parsing, config loading, the first LIST and the first
 * full sync map ~50 MiB of it into the process, of which a steady agent keeps using well under half, and
 * mapped pages count in the agent's RSS for as long as it runs. Once the lists are stored, and again once the
 * first sync is done (lib/app/agent.ts), `madvise(MADV_PAGEOUT)` over the executable's own read-only mappings unmaps them (clean file pages:
 * nothing is written anywhere). Measured on kernel 6.18 they stay in the page cache, unmapped, where the
 * kernel reclaims them first when memory runs short and a restart finds them; what the agent still runs
 * maps back in on first use. Pages another process maps stay mapped.
 *
 * Bun only (the shipped binary), through `bun:ffi`; elsewhere {@link pageOutExecutable} returns null.
 */
import { readFileSync, readlinkSync } from "node:fs";

/** madvise(2) advice: reclaim the range's pages now (Linux ≥ 5.4). */
const MADV_PAGEOUT = 21;

/** One mapping of the executable: start address and length in bytes. */
export interface MappedRange {
  readonly start: number;
  readonly length: number;
}

/**
 * The mappings of `path` in a /proc/<pid>/maps text, in address order. Writable mappings are left out
 * (their touched pages are private copies, not file pages).
 */
export function executableMappings(maps: string, path: string): MappedRange[] {
  const out: MappedRange[] = [];
  for (const line of maps.split("\n")) {
    // "00200000-01a39000 r--p 00000000 fe:00 5314062   /usr/bin/edgeproxy"
    const m = /^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ \S+\s+(.*)$/.exec(line);
    if (m === null || m[4] !== path || m[3][1] === "w") continue;
    const start = parseInt(m[1], 16);
    const end = parseInt(m[2], 16);
    if (end > start) out.push({ start, length: end - start });
  }
  return out;
}

/** What {@link pageOutExecutable} did. */
export interface PageOutResult {
  /** Bytes of mappings advised. */
  readonly advisedBytes: number;
  /** Resident file-backed KiB of the process before and after (RssFile of /proc/self/status). */
  readonly rssFileKiBBefore: number;
  readonly rssFileKiBAfter: number;
  /** The first madvise error ("errno N"), if any mapping was refused. */
  readonly error?: string;
}

/** Minimal shape of bun:ffi used here. */
interface BunFfiMadvise {
  dlopen(
    path: string,
    symbols: Record<string, { args: readonly string[]; returns: string }>,
  ): { symbols: Record<string, (...args: unknown[]) => unknown> };
  read: { i32(ptr: unknown, offset?: number): number };
}

/** RssFile of /proc/self/status in KiB (0 where it cannot be read). */
function rssFileKiB(): number {
  const m = /^RssFile:\s+(\d+) kB/m.exec(readFileSync("/proc/self/status", "utf8"));
  return m === null ? 0 : Number(m[1]);
}

/**
 * Advises MADV_PAGEOUT over the executable's read-only mappings. Null where there is no `bun:ffi` (Deno,
 * Node) or no glibc; throws only on what should not happen (an unreadable /proc/self).
 */
export async function pageOutExecutable(): Promise<PageOutResult | null> {
  if ((globalThis as { Bun?: unknown }).Bun === undefined) return null;
  let madvise: (start: number, length: number) => number;
  let errno: () => number;
  try {
    // A computed specifier: other runtimes never try to resolve the Bun-only module.
    const ffi = await import(["bun", "ffi"].join(":")) as BunFfiMadvise;
    const lib = ffi.dlopen("libc.so.6", {
      madvise: { args: ["u64", "u64", "i32"], returns: "i32" },
      __errno_location: { args: [], returns: "ptr" },
    });
    const s = lib.symbols;
    madvise = (start, length) => s.madvise(start, length, MADV_PAGEOUT) as number;
    errno = () => ffi.read.i32(s.__errno_location());
  } catch {
    return null; // no libc.so.6 (musl)
  }
  const ranges = executableMappings(readFileSync("/proc/self/maps", "utf8"), readlinkSync("/proc/self/exe"));
  const before = rssFileKiB();
  let advisedBytes = 0;
  let error: string | undefined;
  for (const r of ranges) {
    if (madvise(r.start, r.length) === 0) advisedBytes += r.length;
    else error ??= `errno ${errno()}`;
  }
  return { advisedBytes, rssFileKiBBefore: before, rssFileKiBAfter: rssFileKiB(), error };
}
