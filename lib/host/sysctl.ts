/**
 * Kernel sysctls under /proc/sys, addressed by slash-separated names as upstream's sysctl helper does
 * ("net/netfilter/nf_conntrack_max", "net/ipv4/conf/all/route_localnet"). The root directory is a
 * parameter so tests can point it at a temporary tree.
 */
import { constants as fsConstants } from "node:fs";
import { open, readFile } from "node:fs/promises";
import { join } from "node:path";

/** Reads and writes kernel sysctls. */
export interface Sysctl {
  /** The current value, whitespace-trimmed. Throws SysctlError when it cannot be read. */
  get(name: string): Promise<string>;
  /** Writes a value. Throws SysctlError when it cannot be written (never creates a missing entry). */
  set(name: string, value: string | number): Promise<void>;
}

/** A sysctl read or write that failed; `code` is the errno name (EROFS, EACCES, ENOENT, ...). */
export class SysctlError extends Error {
  /** Builds "sysctl <op> <name> (<path>) failed: <code>: <detail>". */
  constructor(
    readonly op: "get" | "set",
    readonly sysctlName: string,
    readonly path: string,
    readonly code: string,
    readonly detail: string,
  ) {
    super(`sysctl ${op} ${sysctlName} (${path}) failed: ${code}: ${detail}`);
    this.name = "SysctlError";
  }
}

/**
 * True for the errors a read-only or partial /proc/sys gives: a read-only mount (EROFS, common in
 * containers), no permission (EACCES, EPERM), or a missing entry (ENOENT: module not loaded, or the
 * setting does not exist in this network namespace).
 */
export function isUnavailableError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === "EROFS" || code === "EACCES" || code === "EPERM" || code === "ENOENT";
}

const NAME_RE = /^[A-Za-z0-9_][A-Za-z0-9_.\-]*(\/[A-Za-z0-9_][A-Za-z0-9_.\-]*)*$/;

/** Sysctl on a /proc/sys-like directory tree. */
export class ProcSysctl implements Sysctl {
  /** `root` defaults to /proc/sys. */
  constructor(readonly root: string = "/proc/sys") {}

  /** Reads `<root>/<name>`. */
  async get(name: string): Promise<string> {
    const path = this.#path(name, "get");
    try {
      return (await readFile(path, "utf8")).trim();
    } catch (err) {
      throw toSysctlError("get", name, path, err);
    }
  }

  /** Writes `<root>/<name>` without creating it (like /proc/sys, where entries cannot be created). */
  async set(name: string, value: string | number): Promise<void> {
    const path = this.#path(name, "set");
    const text = String(value);
    if (/[\n\0]/.test(text)) {
      throw new SysctlError("set", name, path, "EINVAL", `value ${JSON.stringify(text)} is not one line`);
    }
    try {
      const fh = await open(path, fsConstants.O_WRONLY | fsConstants.O_TRUNC);
      try {
        await fh.writeFile(text);
      } finally {
        await fh.close();
      }
    } catch (err) {
      throw toSysctlError("set", name, path, err);
    }
  }

  #path(name: string, op: "get" | "set"): string {
    if (!NAME_RE.test(name) || name.split("/").some((part) => part === ".." || part === ".")) {
      throw new SysctlError(op, name, this.root, "EINVAL", "not a slash-separated sysctl name");
    }
    return join(this.root, name);
  }
}

function toSysctlError(op: "get" | "set", name: string, path: string, err: unknown): SysctlError {
  const e = err as { code?: unknown; message?: unknown };
  const code = typeof e?.code === "string" ? e.code : "EUNKNOWN";
  let detail = typeof e?.message === "string" ? e.message : String(err);
  // Node-style "EROFS: read-only file system, open '/path'": keep only the description.
  const m = /^[A-Z]+: ([^,]+), \w+ '.*'$/.exec(detail);
  if (m !== null) detail = m[1];
  return new SysctlError(op, name, path, code, detail);
}

/** Outcome of ensureSysctl. */
export type EnsureResult = "unchanged" | "changed";

/**
 * Sets an integer sysctl unless it already has that value (upstream EnsureSysctl / setIntSysCtl). A value
 * that cannot be read is treated as different, so the write is still attempted. Write errors propagate.
 */
export async function ensureSysctl(sysctl: Sysctl, name: string, value: number): Promise<EnsureResult> {
  let current: number | null = null;
  try {
    const text = await sysctl.get(name);
    current = /^-?\d+$/.test(text) ? Number(text) : null;
  } catch {
    current = null; // unreadable: try the write, which reports the real problem
  }
  if (current === value) return "unchanged";
  await sysctl.set(name, value);
  return "changed";
}
