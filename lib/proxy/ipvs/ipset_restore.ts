/**
 * ipsets through `ipset restore`: the sets read back from `ipset save`, and one restore transaction that
 * creates missing sets and adds and deletes entries so each set holds exactly what the model wants
 * (upstream syncIPSetEntries, set by set; here one process for all). Pure.
 */
import type { IPFamily } from "../types.ts";
import { IPSET_INFO, ipsetName } from "./ipsets.ts";

/** A set as the kernel has it. */
export interface KernelIPSet {
  readonly type: string;
  readonly entries: Set<string>;
}

/** Parses `ipset save` (entries without their per-entry comment). */
export function parseIpsetSave(text: string): Map<string, KernelIPSet> {
  const out = new Map<string, KernelIPSet>();
  for (const line of text.split("\n")) {
    const f = line.trim().split(/\s+/);
    if (f[0] === "create" && f.length >= 3) out.set(f[1], { type: f[2], entries: new Set() });
    else if (f[0] === "add" && f.length >= 3) out.get(f[1])?.entries.add(f[2]);
  }
  return out;
}

/** The create line of one of our sets (upstream CreateSet: hash sets with family, bitmap:port with range). */
export function ipsetCreateLine(name: string, type: string, family: IPFamily): string {
  if (type === "bitmap:port") return `create ${name} ${type} range 0-65535`;
  return `create ${name} ${type} family ${family === "IPv6" ? "inet6" : "inet"} hashsize 1024 maxelem 65536`;
}

/**
 * The `ipset -exist restore` input turning `current` into `desired` (by IPv4 set name; kernel names are
 * derived for `family`); "" when nothing differs. Adds come before deletes so a moved entry never leaves
 * a gap.
 */
export function planIpsetRestore(
  desired: ReadonlyMap<string, readonly string[]>,
  current: ReadonlyMap<string, KernelIPSet>,
  family: IPFamily,
): string {
  const creates: string[] = [];
  const adds: string[] = [];
  const dels: string[] = [];
  for (const info of IPSET_INFO) {
    const name = ipsetName(info.name, family);
    const have = current.get(name);
    if (!have) creates.push(ipsetCreateLine(name, info.type, family));
    const want = desired.get(info.name) ?? [];
    const wantSet = new Set(want);
    for (const e of want) if (!have?.entries.has(e)) adds.push(`add ${name} ${e}`);
    if (have) { for (const e of have.entries) if (!wantSet.has(e)) dels.push(`del ${name} ${e}`); }
  }
  const lines = [...creates, ...adds, ...dels];
  return lines.length === 0 ? "" : lines.join("\n") + "\n";
}

/** The kernel names of all our sets in `family` (for `ipset save` filtering and cleanup). */
export function ourIpsetNames(family: IPFamily): string[] {
  return IPSET_INFO.map((s) => ipsetName(s.name, family));
}
