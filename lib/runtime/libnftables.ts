/**
 * libnftables (the library behind the `nft` command) called in-process through `bun:ffi`: a transaction
 * costs no process start, only nft's parse, its cache read and the kernel's commit. Each call runs in a
 * fresh context (created right after the previous call, in the same network namespace): nft 1.0.6 reads
 * its cache again for every transaction anyway, and a kept context would hold the last one's. Bun only: elsewhere (Deno, or without libnftables.so.1)
 * `openLibNftables` returns null and callers run `nft -f -` instead.
 *
 * A call blocks the JavaScript thread for the duration of the commit (nft_run_cmd_from_buffer is
 * synchronous), so callers keep large transactions off this path.
 */
import { closeSync, openSync } from "node:fs";

/** Outcome of one call: nft's exit status and what it wrote to its error and output streams. */
export interface LibNftablesResult {
  readonly ok: boolean;
  /** nft's error text ("" on success): "Error: ..." lines with the failing command and a caret line. */
  readonly error: string;
  /** nft's output (listings; "" for add/delete commands). */
  readonly output: string;
}

/** A libnftables handle (a fresh context per call). */
export interface LibNftablesContext {
  /** Runs `commands` (nft syntax, newline-separated) as one atomic transaction. */
  run(commands: string): LibNftablesResult;
  /** Frees the context; later `run` calls throw. */
  close(): void;
}

/** Where and how to open the context. */
export interface LibNftablesOptions {
  /** Library file name or path (default "libnftables.so.1"). */
  readonly library?: string;
  /**
   * A network namespace file (e.g. "/var/run/netns/<name>") to open the context's netlink socket in;
   * the calling thread enters it only while the context is created. Default: the caller's namespace.
   */
  readonly netnsPath?: string;
}

/** An address as bun:ffi passes it. */
export type Pointer = number & { readonly __pointer?: unique symbol };
/** Minimal shape of the bun:ffi API used by the runtime adapters (the module is only loaded under Bun). */
export interface BunFfi {
  dlopen(
    path: string,
    symbols: Record<string, { args: readonly number[]; returns: number }>,
  ): { symbols: Record<string, (...args: unknown[]) => unknown>; close(): void };
  FFIType: Record<"u32" | "i32" | "u64" | "i64" | "ptr" | "void", number>;
  CString: new (ptr: Pointer) => { toString(): string };
}

/** CLONE_NEWNET: setns() may only join a network namespace. */
const CLONE_NEWNET = 0x40000000;

/**
 * Opens libnftables (a first context, checked at once), or returns null when `bun:ffi` is not available (not Bun)
 * or the library cannot be loaded. Throws when the context cannot be created or the namespace cannot
 * be entered or left (the thread's namespace would otherwise be wrong).
 */
export async function openLibNftables(opts: LibNftablesOptions = {}): Promise<LibNftablesContext | null> {
  if (typeof (globalThis as { Bun?: unknown }).Bun === "undefined") return null;
  // A computed specifier: other runtimes never try to resolve the Bun-only module.
  const specifier = ["bun", "ffi"].join(":");
  const ffi = await import(specifier) as BunFfi;
  const { FFIType: T } = ffi;
  let lib: ReturnType<BunFfi["dlopen"]>;
  try {
    lib = ffi.dlopen(opts.library ?? "libnftables.so.1", {
      nft_ctx_new: { args: [T.u32], returns: T.ptr },
      nft_ctx_free: { args: [T.ptr], returns: T.void },
      nft_ctx_buffer_output: { args: [T.ptr], returns: T.i32 },
      nft_ctx_buffer_error: { args: [T.ptr], returns: T.i32 },
      nft_ctx_get_output_buffer: { args: [T.ptr], returns: T.ptr },
      nft_ctx_get_error_buffer: { args: [T.ptr], returns: T.ptr },
      nft_run_cmd_from_buffer: { args: [T.ptr, T.ptr], returns: T.i32 },
    });
  } catch {
    return null;
  }
  const s = lib.symbols;
  const trim = mallocTrim(ffi);
  const create = (): Pointer => {
    const c = opts.netnsPath === undefined
      ? s.nft_ctx_new(0) as Pointer | null
      : enterNetns(ffi, opts.netnsPath, () => s.nft_ctx_new(0) as Pointer | null);
    if (c === null || c === 0) throw new Error("libnftables: nft_ctx_new failed");
    s.nft_ctx_buffer_output(c);
    s.nft_ctx_buffer_error(c);
    return c;
  };
  let ctx: Pointer;
  try {
    ctx = create();
  } catch (e) {
    lib.close();
    throw e;
  }
  const text = (
    p: unknown,
  ): string => (p === null || p === 0 ? "" : new ffi.CString(p as Pointer).toString());
  let open = true;
  return {
    run(commands: string): LibNftablesResult {
      if (!open) throw new Error("libnftables: context is closed");
      const rc = s.nft_run_cmd_from_buffer(ctx, new TextEncoder().encode(commands + "\0")) as number;
      // Reading a buffer also empties it, so each call reports only its own text.
      const error = text(s.nft_ctx_get_error_buffer(ctx));
      const output = text(s.nft_ctx_get_output_buffer(ctx));
      // nft keeps the command's cache (every chain and set it read: tens of MB at 5k Services) in the
      // context until the next command, which reads it again anyway: a fresh context (15 µs) lets it go.
      s.nft_ctx_free(ctx);
      trim?.();
      ctx = create();
      return { ok: rc === 0, error, output };
    },
    close(): void {
      if (!open) return;
      open = false;
      s.nft_ctx_free(ctx);
      lib.close();
    },
  };
}

/** glibc's malloc_trim(0) (returns freed heap pages to the OS), or null where there is none (musl). */
function mallocTrim(ffi: BunFfi): (() => void) | null {
  try {
    const libc = ffi.dlopen("libc.so.6", {
      malloc_trim: { args: [ffi.FFIType.u64], returns: ffi.FFIType.i32 },
    });
    return () => void libc.symbols.malloc_trim(0);
  } catch {
    return null;
  }
}

/**
 * Runs `fn` with the calling thread in the network namespace at `path`, then returns it to its own (a
 * netlink socket or context created by `fn` stays bound to that namespace).
 */
export function enterNetns<R>(ffi: BunFfi, path: string, fn: () => R): R {
  const libc = ffi.dlopen("libc.so.6", {
    setns: { args: [ffi.FFIType.i32, ffi.FFIType.i32], returns: ffi.FFIType.i32 },
  });
  const own = openSync("/proc/thread-self/ns/net", "r");
  try {
    const target = openSync(path, "r");
    try {
      if (libc.symbols.setns(target, CLONE_NEWNET) !== 0) {
        throw new Error(`libnftables: cannot enter ${path}`);
      }
    } finally {
      closeSync(target);
    }
    let result: R;
    try {
      result = fn();
    } catch (e) {
      libc.symbols.setns(own, CLONE_NEWNET);
      throw e;
    }
    if (libc.symbols.setns(own, CLONE_NEWNET) !== 0) {
      throw new Error("libnftables: cannot return to the original network namespace");
    }
    return result;
  } finally {
    closeSync(own);
    libc.close();
  }
}
