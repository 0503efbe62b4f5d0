/**
 * Checking an installed systemd unit inside a scratch root (a DESTDIR-like directory that stands for a
 * node's file system): which paths a unit names, and `systemd-analyze verify --root=<scratch>`, which
 * resolves the unit's commands inside that root, so a binary installed to the wrong place fails it.
 */
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { type CmdResult, run } from "./netns.ts";

/** Whether `name` is a command on PATH. */
export function haveCommand(name: string): boolean {
  try {
    execFileSync("sh", ["-c", 'command -v "$1"', "sh", name], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

/** Values of `key=` lines of a unit file, in order (repeated keys kept). */
export function unitValues(unit: string, key: string): string[] {
  return unit.split("\n").filter((l) => l.startsWith(`${key}=`)).map((l) => l.slice(key.length + 1));
}

/** A path of a directive value without systemd's prefixes (`-` optional, `+!@:` command flags). */
export function unitPath(value: string): string {
  return value.replace(/^[-+!@:]+/, "");
}

/** The executable of each Exec*= line of `key`. */
export function unitCommands(unit: string, key: string): string[] {
  return unitValues(unit, key).map((v) => unitPath(v.trim().split(/\s+/)[0]));
}

/**
 * Makes a scratch root usable for `systemd-analyze verify --root`: the host's unit directory (for
 * sysinit.target and the other units every service depends on; nothing already in the root is replaced)
 * and the host's copies of `hostTools`, the base-system commands a unit runs besides its own binary
 * (e.g. ExecStartPre's /usr/bin/touch), when the root has none.
 */
export function prepareVerifyRoot(root: string, hostTools: readonly string[]): void {
  mkdirSync(join(root, "lib/systemd/system"), { recursive: true });
  execFileSync("cp", ["-an", "/lib/systemd/system/.", join(root, "lib/systemd/system/")]);
  for (const tool of hostTools) {
    const inRoot = join(root, tool);
    if (existsSync(inRoot)) continue;
    mkdirSync(dirname(inRoot), { recursive: true });
    copyFileSync(tool, inRoot);
    execFileSync("chmod", ["0755", inRoot]);
  }
}

/** `systemd-analyze verify --root=<root> <root>/<unitInRoot>`; never rejects for a non-zero exit. */
export function verifyInRoot(root: string, unitInRoot: string): Promise<CmdResult> {
  return run(["systemd-analyze", "verify", `--root=${root}`, join(root, unitInRoot)], { timeoutMs: 60_000 });
}

/** The "Overall exposure level" of `systemd-analyze security --offline=true <unitFile>`, as printed. */
export async function offlineExposure(unitFile: string): Promise<string> {
  const r = await run(["systemd-analyze", "security", "--offline=true", unitFile], { timeoutMs: 60_000 });
  const m = /Overall exposure level for [^:]+: ([0-9.]+)/.exec(r.stdout + r.stderr);
  if (!m) throw new Error(`systemd-analyze security printed no exposure level: ${r.stdout}${r.stderr}`);
  return m[1];
}
