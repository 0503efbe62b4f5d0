/**
 * The shared-chain edits of incremental partial syncs (incremental.ts): instead of re-declaring the
 * shared chains (upstream rewrites nat KUBE-SERVICES, KUBE-NODEPORTS and the whole filter table on every
 * partial sync, megabytes at 10k Services), patch them with `-D CHAIN <rule>` for the rules that went
 * away and `-I CHAIN <n> <rule>` for the new ones, under iptables-restore --noflush.
 *
 * Order. Rules of different service ports can overlap: an externalIP may equal another Service's cluster
 * IP, externalIP or LB IP on the same port (upstream does not forbid it; the first rule wins, and
 * upstream's order is Go map order), an externalIP may equal the same Service's LB IP (the externalIP
 * rule bypasses KUBE-FW), filter REJECT/DROP rules of two Services may cover one destination, and the
 * NodePorts jump must stay last in nat KUBE-SERVICES. Rather than argue case by case, every insert goes
 * to the exact position a full render would give it: the renderer walks service ports in sorted key
 * order, and rule n of a service port's block in a chain lands at 1 + (rules of earlier keys in that
 * chain) + n. So after the payload each shared chain equals, rule for rule and in order, what a full sync
 * writes. All `-D` lines come first (a delete by rule text does not need a position), then the `-I`
 * lines in key order, which keeps every computed position valid (earlier keys are final by then). The
 * rule counts of earlier keys come from prefix sums kept in the state (positions.ts), so only the
 * changed service ports are visited.
 *
 * A `-D` line is the `-A` line of the previous sync re-rendered from the same ServicePortInfo and flags
 * (shared_chains.ts), so it is byte-identical to what was added. If the kernel lacks the rule,
 * iptables-restore fails the whole transaction and the caller falls back to a full sync.
 *
 * Known limit: the health-check node port ACCEPT rule does not name the protocol, so two ports of one
 * Service with the same port name (rejected by API validation) could write identical lines; a `-D` then
 * removes the first copy, which leaves the right rules in a possibly different order in filter
 * KUBE-NODEPORTS (all of them ACCEPT, so order is irrelevant there).
 */
import { servicePortNameString } from "../../types.ts";
import { chainsForHash } from "../chain_names.ts";
import { sameRules, type ServicePortFacts } from "./state.ts";
import type { SharedChainPositions } from "./positions.ts";
import {
  SHARED_CHAIN_COUNT,
  SHARED_CHAIN_NAME,
  SHARED_CHAIN_TABLE,
  type SharedChain,
  writeSharedRules,
} from "./shared_chains.ts";

/** `-D` and `-I` lines for one table, in the order they must be applied. */
export interface TableEdits {
  readonly deletes: string[];
  readonly inserts: string[];
}

/** "-A CHAIN spec" → "-D CHAIN spec". */
export function deleteLine(line: string): string {
  if (!line.startsWith("-A ")) throw new Error(`not an -A rule: ${line}`);
  return "-D" + line.slice(2);
}

/** "-A CHAIN spec" → "-I CHAIN position spec" (position 1-based). */
export function insertLine(chain: string, position: number, line: string): string {
  if (!line.startsWith(`-A ${chain} `)) throw new Error(`not an -A ${chain} rule: ${line}`);
  return `-I ${chain} ${position}` + line.slice(3 + chain.length);
}

/**
 * Lines of `before` that stay in place when the block becomes `after`: the rules present in both, when
 * they keep their relative order and neither list repeats a line; otherwise none (the block is replaced
 * as a whole).
 */
function retainedLines(before: readonly string[], after: readonly string[]): Set<string> | null {
  if (before.length === 0 || after.length === 0) return null;
  const inBefore = new Set(before);
  const inAfter = new Set(after);
  if (inBefore.size !== before.length || inAfter.size !== after.length) return null;
  const keptBefore = before.filter((l) => inAfter.has(l));
  const keptAfter = after.filter((l) => inBefore.has(l));
  if (keptBefore.length === 0 || !sameRules(keptBefore, keptAfter)) return null;
  return new Set(keptBefore);
}

/**
 * Edits one service port's block in one chain from `before` to `after` ("-A CHAIN …" lines). The block
 * starts after `start` rules of earlier service ports. Appends to `edits`; returns the number of rules
 * inserted.
 */
export function diffBlock(
  chain: string,
  before: readonly string[],
  after: readonly string[],
  start: number,
  edits: TableEdits,
): number {
  if (sameRules(before, after)) return 0;
  const kept = retainedLines(before, after);
  for (const l of before) if (kept === null || !kept.has(l)) edits.deletes.push(deleteLine(l));
  let inserted = 0;
  for (let i = 0; i < after.length; i++) {
    if (kept !== null && kept.has(after[i])) continue;
    edits.inserts.push(insertLine(chain, start + i + 1, after[i]));
    inserted++;
  }
  return inserted;
}

/**
 * Collects the shared-chain edits of one incremental sync. The caller reports, in key order, every
 * previous service port that is gone (`removed`) and every current one it processed (`servicePort`);
 * service ports it did not process keep their rules and positions.
 */
export class SharedChainDiff {
  /** Edits of the filter table's shared chains. */
  readonly filter: TableEdits = { deletes: [], inserts: [] };
  /** Edits of the nat table's shared chains. */
  readonly nat: TableEdits = { deletes: [], inserts: [] };
  /** Rules inserted per table. */
  readonly inserted = { filter: 0, nat: 0 };
  /** Service ports whose shared rules changed (added, removed or edited). */
  changedServicePorts = 0;

  readonly #prevNfacct: boolean;
  readonly #sameNfacct: boolean;
  readonly #old: string[][] = Array.from({ length: SHARED_CHAIN_COUNT }, () => []);
  readonly #none: string[][] = Array.from({ length: SHARED_CHAIN_COUNT }, () => []);
  readonly #sinkOld = (c: SharedChain, line: string) => {
    this.#old[c].push(line);
  };

  /** `previous` localhost NodePort counters switch of the last sync, `current` of this one. */
  constructor(previousNfacct: boolean, currentNfacct: boolean) {
    this.#prevNfacct = previousNfacct;
    this.#sameNfacct = previousNfacct === currentNfacct;
  }

  /** A previous service port that no longer exists: its rules are deleted. */
  removed(old: ServicePortFacts): void {
    const lines = this.#render(old);
    let any = false;
    for (let c = 0; c < SHARED_CHAIN_COUNT; c++) {
      const edits = SHARED_CHAIN_TABLE[c] === "filter" ? this.filter : this.nat;
      for (const l of lines[c]) {
        edits.deletes.push(deleteLine(l));
        any = true;
      }
    }
    if (any) this.changedServicePorts++;
  }

  /**
   * A current service port processed this sync: `old` its previous facts (null when new), `now` its
   * facts, `after` its rules per shared chain; its blocks start after `positions.before(c, index)` rules.
   */
  servicePort(
    old: ServicePortFacts | null,
    now: ServicePortFacts,
    after: readonly (readonly string[])[],
    positions: SharedChainPositions,
    index: number,
  ): void {
    // The rules are a function of the ServicePortInfo, the flags and the nfacct switch.
    if (old !== null && old.svc === now.svc && old.flags === now.flags && this.#sameNfacct) return;
    const before = old === null ? this.#none : this.#render(old);
    let changed = false;
    for (let c = 0; c < SHARED_CHAIN_COUNT; c++) {
      const table = SHARED_CHAIN_TABLE[c];
      const edits = table === "filter" ? this.filter : this.nat;
      const d = edits.deletes.length;
      if (before[c].length === 0 && after[c].length === 0) continue;
      const n = diffBlock(SHARED_CHAIN_NAME[c], before[c], after[c], positions.before(c, index), edits);
      this.inserted[table] += n;
      if (n > 0 || edits.deletes.length > d) changed = true;
    }
    if (changed) this.changedServicePorts++;
  }

  /** Re-renders a previous service port's shared rules into the scratch lists. */
  #render(f: ServicePortFacts): string[][] {
    for (const l of this.#old) l.length = 0;
    if (f.problem !== null) return this.#old;
    writeSharedRules(
      this.#sinkOld,
      f.svc,
      servicePortNameString(f.svc.name),
      f.svc.protocol.toLowerCase(),
      chainsForHash(f.hash),
      f.flags,
      this.#prevNfacct,
    );
    return this.#old;
  }
}
