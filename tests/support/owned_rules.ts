/**
 * A test oracle for the drift check: what the kernel holds in the chains we own, per table (chain → rule
 * count), derived from the restore payloads applied (a declared chain is flushed and refilled by the
 * payload's `-A` lines, `-X` deletes it, undeclared chains keep their rules under --noflush), so tests can
 * drive drift checks with hand-written payloads and compare the agent's expectation, which it derives
 * from its render state (lib/proxy/iptables/drift.ts expectationFromState), with an independent one.
 */
import { isServiceChainName } from "../../lib/proxy/iptables/chain_names.ts";
import { DEFAULT_ENSURED_JUMP_RULES } from "../../lib/proxy/iptables/jump_rules.ts";
import type { JumpRule } from "../../lib/proxy/iptables/jump_rules_table.ts";
import {
  checkDrift,
  type DriftCheckOptions,
  type DriftExpectation,
  type DriftReport,
  type ServiceChainCounts,
} from "../../lib/proxy/iptables/drift.ts";
import type { IptablesRunner } from "../../lib/proxy/iptables/runner.ts";

/** Chain → number of rules, per table. */
export type OwnedRules = Map<string, Map<string, number>>;

/**
 * Applies a restore payload to `owned` (mutates it). The payload is one string or chunks of whole lines
 * (no line spans two chunks, as RenderResult.payloadChunks), read without joining them. Single pass over
 * the text, no per-line regex.
 */
export function applyPayloadToOwnedRules(owned: OwnedRules, payload: string | readonly string[]): void {
  let table: Map<string, number> | null = null;
  for (const chunk of typeof payload === "string" ? [payload] : payload) {
    table = applyChunk(owned, chunk, table);
  }
}

/** One chunk; returns the table the chunk ended in (a "*table" section may span chunks). */
function applyChunk(
  owned: OwnedRules,
  payload: string,
  current: Map<string, number> | null,
): Map<string, number> | null {
  let table = current;
  let start = 0;
  const len = payload.length;
  while (start < len) {
    let end = payload.indexOf("\n", start);
    if (end < 0) end = len;
    const c = payload.charCodeAt(start);
    if (c === 42 /* * */) {
      const name = payload.slice(start + 1, end).trim();
      table = owned.get(name) ?? new Map();
      owned.set(name, table);
    } else if (table !== null) {
      if (c === 58 /* : */) {
        const sp = payload.indexOf(" ", start);
        table.set(payload.slice(start + 1, sp < 0 || sp > end ? end : sp), 0);
      } else if (c === 45 /* - */ && payload.charCodeAt(start + 2) === 32) {
        const op = payload.charCodeAt(start + 1);
        const sp = payload.indexOf(" ", start + 3);
        const chain = payload.slice(start + 3, sp < 0 || sp > end ? end : sp);
        if (op === 65 /* A */ || op === 73 /* I */) table.set(chain, (table.get(chain) ?? 0) + 1);
        else if (op === 68 /* D */) table.set(chain, Math.max(0, (table.get(chain) ?? 1) - 1));
        else if (op === 88 /* X */) table.delete(chain);
        else if (op === 70 /* F */) table.set(chain, 0);
      }
    }
    start = end + 1;
  }
  return table;
}

/**
 * Splits an OwnedRules into a drift check's expectation; the per-service chains are a view that follows
 * it (a payload applied later shows), sampled in chain-name order.
 */
export function expectationFromOwned(
  owned: OwnedRules,
  jumpRules: readonly JumpRule[] = DEFAULT_ENSURED_JUMP_RULES,
): DriftExpectation {
  const fixedChains = new Map<string, Map<string, number>>();
  for (const [table, chains] of owned) {
    const fixed = new Map<string, number>();
    for (const [chain, n] of chains) {
      if (table !== "nat" || !isServiceChainName(chain)) fixed.set(chain, n);
    }
    fixedChains.set(table, fixed);
  }
  return { fixedChains, serviceChains: new OwnedServiceChains(owned), jumpRules };
}

/** The nat per-service chains of an OwnedRules, as a read-only view that follows it. */
class OwnedServiceChains implements ServiceChainCounts {
  constructor(private readonly owned: OwnedRules) {}

  *[Symbol.iterator](): Generator<readonly [string, number]> {
    for (const e of this.owned.get("nat") ?? []) if (isServiceChainName(e[0])) yield e;
  }

  get size(): number {
    return [...this].length;
  }

  sample(cursor: number, n: number): { chains: (readonly [string, number])[]; cursor: number } {
    const all = [...this].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    const want = Math.min(all.length, Math.max(0, n));
    const chains: (readonly [string, number])[] = [];
    for (let i = 0; i < want; i++) chains.push(all[(cursor + i) % all.length]);
    return { chains, cursor: all.length === 0 ? 0 : (cursor + want) % all.length };
  }
}

/**
 * Keeps an expectation from restore payloads and runs rotating checks. Call `recordRestore` after each
 * successful restore (full syncs replace what was known, partial syncs apply on top), and `reset` after a
 * failed one.
 */
export class DriftTracker {
  #owned: OwnedRules = new Map();
  #known = false;
  #cursor = 0;

  constructor(private readonly jumpRules: readonly JumpRule[] = DEFAULT_ENSURED_JUMP_RULES) {}

  /** Learns from a payload (text or whole-line chunks) that iptables-restore just applied successfully. */
  recordRestore(payload: string | readonly string[], fullSync: boolean): void {
    if (fullSync) this.#owned = new Map();
    applyPayloadToOwnedRules(this.#owned, payload);
    if (fullSync) this.#known = true;
  }

  /** Forgets everything until the next full sync (after a failed restore). */
  reset(): void {
    this.#owned = new Map();
    this.#known = false;
  }

  /** The current expectation, or null before the first full sync is recorded. */
  expectation(): DriftExpectation | null {
    return this.#known ? expectationFromOwned(this.#owned, this.jumpRules) : null;
  }

  /** Runs a check (see `checkDrift`); null when there is nothing to compare yet. */
  async check(runner: IptablesRunner, opts: DriftCheckOptions = {}): Promise<DriftReport | null> {
    const exp = this.expectation();
    if (exp === null) return null;
    const { report, cursor } = await checkDrift(runner, exp, this.#cursor, opts);
    this.#cursor = cursor;
    return report;
  }
}
