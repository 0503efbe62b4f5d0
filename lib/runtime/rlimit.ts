/**
 * The process's open-files limit (RLIMIT_NOFILE) through libc's getrlimit/setrlimit, called in-process:
 * `bun:ffi` under Bun, `Deno.dlopen` under Deno. {@link openFilesLimit} returns null where neither is
 * available (or libc cannot be loaded); callers then leave the limit as it is and say so.
 */

/** Soft and hard limit; `Infinity` for RLIM_INFINITY. */
export interface RLimit {
  readonly soft: number;
  readonly hard: number;
}

/** Reads and sets RLIMIT_NOFILE of this process. */
export interface OpenFilesLimit {
  get(): RLimit;
  /** Sets both limits; null on success, else the OS error ("EPERM", "EINVAL", or "errno N"). */
  set(limit: RLimit): string | null;
}

/** RLIMIT_NOFILE on Linux. */
const RLIMIT_NOFILE = 7;
/** RLIM_INFINITY: all bits set. */
const RLIM_INFINITY = 0xffff_ffff_ffff_ffffn;
const ERRNO_NAMES: Record<number, string> = { 1: "EPERM", 22: "EINVAL" };

/** The libc calls used, whichever FFI provides them. */
interface LibcRlimit {
  getrlimit(resource: number, out: BigUint64Array): number;
  setrlimit(resource: number, value: BigUint64Array): number;
  errno(): number;
}

function toNumber(v: bigint): number {
  return v === RLIM_INFINITY ? Infinity : Number(v);
}

function toRlim(v: number): bigint {
  return v === Infinity ? RLIM_INFINITY : BigInt(Math.floor(v));
}

/** Minimal shape of bun:ffi used here. */
interface BunFfiRlimit {
  dlopen(
    path: string,
    symbols: Record<string, { args: readonly string[]; returns: string }>,
  ): { symbols: Record<string, (...args: unknown[]) => unknown> };
  read: { i32(ptr: unknown, offset?: number): number };
}

/** Minimal shape of Deno's FFI used here. */
interface DenoFfiRlimit {
  dlopen(
    path: string,
    symbols: Record<string, { parameters: readonly string[]; result: string }>,
  ): { symbols: Record<string, (...args: unknown[]) => unknown> };
  UnsafePointerView: new (ptr: unknown) => { getInt32(offset?: number): number };
}

async function bunLibc(): Promise<LibcRlimit | null> {
  // A computed specifier: other runtimes never try to resolve the Bun-only module.
  const specifier = ["bun", "ffi"].join(":");
  const ffi = await import(specifier) as BunFfiRlimit;
  const lib = ffi.dlopen("libc.so.6", {
    getrlimit: { args: ["i32", "ptr"], returns: "i32" },
    setrlimit: { args: ["i32", "ptr"], returns: "i32" },
    __errno_location: { args: [], returns: "ptr" },
  });
  const s = lib.symbols;
  return {
    getrlimit: (r, out) => s.getrlimit(r, out) as number,
    setrlimit: (r, v) => s.setrlimit(r, v) as number,
    errno: () => ffi.read.i32(s.__errno_location()),
  };
}

function denoLibc(deno: { dlopen?: unknown; UnsafePointerView?: unknown }): LibcRlimit {
  const ffi = deno as unknown as DenoFfiRlimit;
  const lib = ffi.dlopen("libc.so.6", {
    getrlimit: { parameters: ["i32", "buffer"], result: "i32" },
    setrlimit: { parameters: ["i32", "buffer"], result: "i32" },
    __errno_location: { parameters: [], result: "pointer" },
  });
  const s = lib.symbols;
  return {
    getrlimit: (r, out) => s.getrlimit(r, out) as number,
    setrlimit: (r, v) => s.setrlimit(r, v) as number,
    errno: () => new ffi.UnsafePointerView(s.__errno_location()).getInt32(),
  };
}

/** RLIMIT_NOFILE through the runtime's FFI, or null when there is none (or no libc.so.6). */
export async function openFilesLimit(): Promise<OpenFilesLimit | null> {
  let libc: LibcRlimit | null = null;
  try {
    const g = globalThis as { Bun?: unknown; Deno?: { dlopen?: unknown; UnsafePointerView?: unknown } };
    if (g.Bun !== undefined) libc = await bunLibc();
    else if (typeof g.Deno?.dlopen === "function") libc = denoLibc(g.Deno);
  } catch {
    return null; // no FFI permission, no libc.so.6
  }
  if (libc === null) return null;
  const c = libc;
  return {
    get(): RLimit {
      const buf = new BigUint64Array(2);
      if (c.getrlimit(RLIMIT_NOFILE, buf) !== 0) {
        throw new Error(`getrlimit(RLIMIT_NOFILE): errno ${c.errno()}`);
      }
      return { soft: toNumber(buf[0]), hard: toNumber(buf[1]) };
    },
    set(limit: RLimit): string | null {
      const buf = new BigUint64Array([toRlim(limit.soft), toRlim(limit.hard)]);
      if (c.setrlimit(RLIMIT_NOFILE, buf) === 0) return null;
      const errno = c.errno();
      return ERRNO_NAMES[errno] ?? `errno ${errno}`;
    },
  };
}
