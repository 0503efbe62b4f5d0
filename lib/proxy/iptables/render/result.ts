/**
 * What one render gives back (RenderResult): the payload, the RenderState for the next render, and the
 * figures the proxier turns into metrics and logs (rules written and owned, stale chains, warnings, work
 * done). Also the two helpers every render mode finishes with: the owned-rule totals and the result
 * object whose payload string is joined lazily from its chunks.
 */
import type { FixedChainRules, RenderState, RenderTotals } from "./state.ts";
import { SHARED_CHAIN_COUNT, SHARED_CHAIN_TABLE } from "./shared_chains.ts";
import { fixedRuleCount } from "./fixed_chains.ts";
import type { SectionedPayload } from "../restore_content.ts";

/** Rule counts for the filter and nat tables. */
export interface TableRuleCounts {
  readonly filter: number;
  readonly nat: number;
}

/** How a render wrote the shared chains: all of them (full, upstream partial) or as `-D`/`-I` edits. */
export type RenderMode = "full" | "partial" | "incremental";

/** How much per-service-port work a render did (the part that must scale with what changed). */
export interface RenderWork {
  /** Service ports processed (facts derived or reused, shared rules written or diffed). */
  readonly servicePorts: number;
  /** categorizeEndpoints calls. */
  readonly categorized: number;
  /** Chain-name hashes computed (sha256). */
  readonly hashes: number;
  /** Service ports validated (every value and endpoint checked for payload safety). */
  readonly validated: number;
  /**
   * Incremental syncs: service ports compared one by one to find what changed, because changedServices
   * did not account for every key (a new port of a Service named only as "namespace/name", or changed
   * render settings). 0 when changedServices named everything, as the proxier's change trackers do.
   */
  readonly scanned: number;
}

/** What one render produced. */
export interface RenderResult {
  /**
   * `*filter ... COMMIT\n*nat ... COMMIT\n` for iptables-restore --noflush --counters, as one string:
   * payloadChunks joined on first read (which then drops the chunks).
   */
  readonly payload: string;
  /**
   * The payload as flat chunks of whole lines (~10-64 KB each); their concatenation is `payload`. Full and
   * upstream-partial renders render their per-service chains' text only on the first read of this or of
   * `payload` (then keep it); the restore planner streams it from `sections` instead.
   */
  readonly payloadChunks: readonly string[];
  /** Characters of `payload`; reading it renders no text a restore of `sections` already streamed. */
  readonly payloadLength: number;
  /**
   * Full and upstream-partial renders: the payload split into the per-service chains (grouped by service
   * port, their text rendered on demand) and the rest, for the restore planner (restore_plan.ts
   * `planSections`), which then re-reads only the rest. Null for incremental renders.
   */
  readonly sections: SectionedPayload | null;
  /** full: input.full; partial: upstream partial sync (no usable previous state); incremental: edits. */
  readonly mode: RenderMode;
  /**
   * What the kernel's shared and fixed chains hold once this payload is applied: pass it to the next
   * render after a successful restore, drop it after a failed one (the next sync must then be full or
   * upstream-partial).
   */
  readonly state: RenderState;
  /** Incremental mode: service ports whose shared-chain rules were edited (0 otherwise). */
  readonly sharedChainEdits: number;
  /**
   * Every per-service nat chain (SVC/SVL/EXT/FW/SEP) that exists once the payload is applied. Read-only,
   * expanded from the state on first read; pass it back as the next incremental render's
   * existingNatChains.
   */
  readonly activeNatChains: Set<string>;
  /** Stale per-service chains this payload flushes and deletes (sorted). */
  readonly staleChains: string[];
  /** Rules written by this payload (sync_proxy_rules_iptables_last; `-X` lines excluded). */
  readonly rulesWritten: TableRuleCounts;
  /**
   * Rules kube-proxy owns per table once the payload is applied (sync_proxy_rules_iptables_total),
   * counting the unchanged service ports' chains left in place by a partial sync.
   */
  readonly rulesTotal: TableRuleCounts;
  /** Service ports whose Local policy has no local endpoints (sync_proxy_rules_no_local_endpoints_total). */
  readonly noLocalEndpoints: { readonly internal: number; readonly external: number };
  /** True when comments were dropped from endpoint rules (more than 1000 endpoints). */
  readonly largeClusterMode: boolean;
  /** Endpoints counted for large-cluster mode. */
  readonly totalEndpoints: number;
  /** localhost NodePorts as effectively applied (IPv4, loopback covered by nodePortAddresses). */
  readonly localhostNodePorts: boolean;
  /** Keys of service ports left out of the payload because a value was unsafe (see warnings). */
  readonly skippedServices: string[];
  /** One line per problem found in the input (skipped service ports, ignored addresses). */
  readonly warnings: string[];
  /** Per-service-port work done. */
  readonly work: RenderWork;
}

/** Shared-chain and fixed-chain rule totals (sync_proxy_rules_iptables_total). */
export function rulesTotalOf(
  totals: RenderTotals,
  fixedChains: readonly FixedChainRules[],
  nodePortsTail: readonly string[],
): TableRuleCounts {
  let filter = fixedRuleCount(fixedChains, "filter");
  let nat = fixedRuleCount(fixedChains, "nat") + nodePortsTail.length + totals.ownRules;
  for (let c = 0; c < SHARED_CHAIN_COUNT; c++) {
    if (SHARED_CHAIN_TABLE[c] === "filter") filter += totals.shared[c];
    else nat += totals.shared[c];
  }
  return { filter, nat };
}

/** A payload whose chunks are made when first asked for. */
export interface LazyChunks {
  /** Makes the chunks (called at most once). */
  render(): readonly string[];
  /** Characters of the payload, without keeping its chunks. */
  length(): number;
}

/**
 * A RenderResult whose `payload` is joined from its chunks on first read: `chunks`, or what a LazyChunks
 * renders when they are first asked for.
 */
export function resultWithPayload(
  fields: Omit<RenderResult, "payload" | "payloadChunks" | "payloadLength">,
  chunks: readonly string[] | LazyChunks,
): RenderResult {
  let lazy = "render" in chunks ? chunks : null;
  let parts: readonly string[] | null = "render" in chunks ? null : chunks;
  let text: string | null = null;
  const made = (): readonly string[] => {
    if (text !== null) return [text];
    if (parts === null) {
      parts = lazy!.render();
      lazy = null;
    }
    return parts;
  };
  return {
    ...fields,
    get payload(): string {
      if (text === null) {
        text = made().join("");
        parts = null;
      }
      return text;
    },
    get payloadChunks(): readonly string[] {
      return made();
    },
    get payloadLength(): number {
      if (lazy !== null) return lazy.length();
      let n = 0;
      for (const c of made()) n += c.length;
      return n;
    },
  };
}
