/** The machine a benchmark ran on: CPUs, memory, kernel, iptables backends, runtime. */
import { readFileSync } from "node:fs";
import { cpus, release, totalmem } from "node:os";
import process from "node:process";
import { run } from "../tests/support/netns.ts";

/** What results.json and the README state about the machine. */
export interface MachineInfo {
  readonly nproc: number;
  readonly cpuModel: string;
  readonly memoryGiB: number;
  readonly kernel: string;
  readonly os: string;
  /** `iptables --version` (the default alternative; names its backend). */
  readonly iptables: string;
  readonly iptablesLegacy: string;
  /** The runtime that ran the harness and the in-process figures. */
  readonly runtime: string;
}

function firstLine(text: string): string {
  return text.split("\n").find((l) => l.trim() !== "")?.trim() ?? "";
}

async function versionOf(argv: string[]): Promise<string> {
  try {
    const r = await run(argv, { timeoutMs: 10_000 });
    return firstLine(r.stdout + r.stderr) || `exit ${r.code}`;
  } catch (e) {
    return `unavailable (${(e as Error).message})`;
  }
}

function osName(): string {
  try {
    const m = /^PRETTY_NAME="?([^"\n]*)"?/m.exec(readFileSync("/etc/os-release", "utf8"));
    return m?.[1] ?? "unknown";
  } catch {
    return "unknown";
  }
}

function cpuModel(): string {
  try {
    const m = /^model name\s*:\s*(.*)$/m.exec(readFileSync("/proc/cpuinfo", "utf8"));
    if (m) return m[1].trim();
  } catch {
    // fall through to node:os
  }
  return cpus()[0]?.model ?? "unknown";
}

function runtimeName(): string {
  const g = globalThis as { Deno?: { version: { deno: string } }; Bun?: { version: string } };
  if (g.Bun) return `bun ${g.Bun.version}`;
  if (g.Deno) return `deno ${g.Deno.version.deno}`;
  return `node ${process.versions.node}`;
}

/** Collects the machine facts (reads /proc and runs `iptables --version`). */
export async function machineInfo(): Promise<MachineInfo> {
  return {
    nproc: cpus().length,
    cpuModel: cpuModel(),
    memoryGiB: Math.round((totalmem() / 2 ** 30) * 10) / 10,
    kernel: release(),
    os: osName(),
    iptables: await versionOf(["/usr/sbin/iptables", "--version"]),
    iptablesLegacy: await versionOf(["/usr/sbin/iptables-legacy", "--version"]),
    runtime: runtimeName(),
  };
}
