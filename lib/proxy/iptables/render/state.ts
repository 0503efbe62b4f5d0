/**
 * What the renderer remembers between syncs, so that a partial sync costs O(changed service ports):
 * per service port (sorted by key) the facts derived at its last render (ServicePortFacts: endpoint
 * categorisation outcome as SharedRuleFlags, chain hashes, rule counts per shared chain and in each of its
 * own chains, no-local-endpoint flags, endpoint count), the aggregates over all of them (RenderTotals), prefix
 * sums of the shared-chain rule counts (positions for `-I`), and the rule text of the fixed chains and
 * the NodePorts jump(s).
 *
 * The shared-chain rules themselves are not kept: they are a pure function of a ServicePortInfo, its
 * flags and one render-wide switch (shared_chains.ts), so a `-D` line is re-rendered from the facts.
 *
 * Contract: a ServicePortInfo or endpoints array handed to the renderer is never mutated afterwards (the
 * change trackers replace changed ones with new objects), because facts are reused when both objects
 * are the same as at their last render, under the same render-wide settings (RenderState.context).
 * A RenderState is never mutated either: every render returns a new one sharing what did not change.
 */
import type { EndpointInfo, IPFamily, ServicePortInfo } from "../../types.ts";
import { EXT_PREFIX, FW_PREFIX, SEP_PREFIX, SVC_PREFIX, SVL_PREFIX } from "../chain_names.ts";
import { SHARED_CHAIN_COUNT } from "./shared_chains.ts";
import type { SharedChainPositions } from "./positions.ts";
import { freshString } from "../../../runtime/fresh_string.ts";

/** The rules of one fixed (not per-service) chain as last written. */
export interface FixedChainRules {
  readonly table: "filter" | "nat";
  readonly chain: string;
  readonly rules: readonly string[];
}

/** Which of a service port's own chains (besides its KUBE-SEP chains) exist: bits of one number. */
export const OwnChain = {
  External: 1,
  Firewall: 2,
  ClusterPolicy: 4,
  LocalPolicy: 8,
} as const;

/** No-local-endpoints bits (sync_proxy_rules_no_local_endpoints_total). */
export const NoLocal = {
  Internal: 1,
  External: 2,
} as const;

/** Length of a chain-name hash. */
export const HASH_LENGTH = 16;

/** What one render derived for one service port. Immutable; shared between successive states. */
export interface ServicePortFacts {
  /** The object it was derived from (identity is what makes the facts reusable). */
  readonly svc: ServicePortInfo;
  /** The endpoints array it was derived from, as found in RenderInput.endpoints (may be undefined). */
  readonly endpoints: readonly EndpointInfo[] | undefined;
  /** Why the service port was skipped (unsafe value), or null. */
  readonly problem: string | null;
  /** SharedRuleFlags. */
  readonly flags: number;
  /** OwnChain bits. */
  readonly ownChains: number;
  /** NoLocal bits. */
  readonly noLocal: number;
  /** portProtoHash ("" when skipped). */
  readonly hash: string;
  /** KUBE-SEP hashes of the reachable endpoints, concatenated (HASH_LENGTH each), in chain order. */
  readonly seps: string;
  /** Endpoints counted for large-cluster mode (all of them, reachable or not). */
  readonly endpointCount: number;
  /** Rules in its own chains (KUBE-SVC/SVL/EXT/FW/SEP). */
  readonly ownRules: number;
  /**
   * Rules in each of its own chains other than the KUBE-SEP ones (2 rules each), by OwnChainRules index
   * (0 for a chain it does not have): what the drift check expects in each chain.
   */
  readonly chainRules: readonly number[];
  /** Rules it writes into each shared chain (index: SharedChain). */
  readonly shared: readonly number[];
}

/**
 * Copies of `facts` (new objects, their hash strings copied too) made in one go, for a render that made
 * them among its garbage. JavaScriptCore never moves objects: facts and hash strings allocated between a
 * full render's temporaries would each keep a mostly-empty heap block alive for as long as the state
 * lives (lib/runtime/fresh_string.ts); copied after the render, they share a few blocks of their own and
 * the originals die with the garbage.
 */
export function compactFacts(facts: readonly ServicePortFacts[]): ServicePortFacts[] {
  const out = new Array<ServicePortFacts>(facts.length);
  for (let i = 0; i < facts.length; i++) {
    const f = facts[i];
    out[i] = {
      svc: f.svc,
      endpoints: f.endpoints,
      problem: f.problem === null ? null : freshString(f.problem),
      flags: f.flags,
      ownChains: f.ownChains,
      noLocal: f.noLocal,
      hash: freshString(f.hash),
      seps: freshString(f.seps),
      endpointCount: f.endpointCount,
      ownRules: f.ownRules,
      chainRules: f.chainRules,
      shared: f.shared,
    };
  }
  return out;
}

/** Sums over every service port's facts. */
export interface RenderTotals {
  /** Rules per shared chain (index: SharedChain). */
  readonly shared: readonly number[];
  readonly ownRules: number;
  readonly endpoints: number;
  readonly noLocalInternal: number;
  readonly noLocalExternal: number;
}

/** The renderer's memory of the last successfully applied sync of one IP family. */
export interface RenderState {
  readonly family: IPFamily;
  /**
   * The render-wide settings the facts depend on (node name and zone, feature gate, masquerading,
   * local detection, primary node IP, localhost NodePort counters); facts are reused only under equal
   * contexts.
   */
  readonly context: string;
  /** Service-port keys, sorted (the renderer's processing order). */
  readonly keys: readonly string[];
  /** Facts per key (same index). */
  readonly facts: readonly ServicePortFacts[];
  /** Prefix sums of facts[].shared, for the `-I` positions. */
  readonly positions: SharedChainPositions;
  readonly totals: RenderTotals;
  /** Skipped keys (sorted) with the reason. */
  readonly skipped: readonly (readonly [key: string, problem: string])[];
  /** Localhost NodePort rules (with their nfacct counter) were written. */
  readonly localhostNodePortsNfacct: boolean;
  /** The nat KUBE-SERVICES rule(s) after every service port's: the jump(s) to KUBE-NODEPORTS. */
  readonly nodePortsTail: readonly string[];
  /** Fixed chains present in the last payload, with their rules. */
  readonly fixedChains: readonly FixedChainRules[];
  /**
   * The render's RenderResult.activeNatChains. Passing this very object as the next render's
   * existingNatChains lets it find stale chains from the changed service ports alone.
   */
  readonly activeNatChains: Set<string>;
}

/** Index of each of a service port's own chains (except KUBE-SEP) in ServicePortFacts.chainRules. */
export const OwnChainRules = {
  External: 0,
  Firewall: 1,
  ClusterPolicy: 2,
  LocalPolicy: 3,
} as const;

/** Length of ServicePortFacts.chainRules. */
export const OWN_CHAIN_RULES_LENGTH = 4;

/** Rules in every KUBE-SEP chain (hairpin masquerade, DNAT). */
export const SEP_CHAIN_RULES = 2;

/** Number of a service port's own nat chains. */
export function ownChainCount(f: ServicePortFacts): number {
  if (f.problem !== null) return 0;
  let n = f.seps.length / HASH_LENGTH;
  for (let b = f.ownChains; b !== 0; b >>= 1) n += b & 1;
  return n;
}

/**
 * Calls `fn` with each of a service port's own nat chains, in declaration order, and the number of
 * rules it holds.
 */
export function forEachOwnChain(f: ServicePortFacts, fn: (chain: string, rules: number) => void): void {
  if (f.problem !== null) return;
  const bits = f.ownChains;
  const r = f.chainRules;
  if ((bits & OwnChain.External) !== 0) fn(EXT_PREFIX + f.hash, r[OwnChainRules.External]);
  if ((bits & OwnChain.Firewall) !== 0) fn(FW_PREFIX + f.hash, r[OwnChainRules.Firewall]);
  if ((bits & OwnChain.ClusterPolicy) !== 0) fn(SVC_PREFIX + f.hash, r[OwnChainRules.ClusterPolicy]);
  if ((bits & OwnChain.LocalPolicy) !== 0) fn(SVL_PREFIX + f.hash, r[OwnChainRules.LocalPolicy]);
  for (let i = 0; i < f.seps.length; i += HASH_LENGTH) {
    fn(SEP_PREFIX + f.seps.slice(i, i + HASH_LENGTH), SEP_CHAIN_RULES);
  }
}

/** Mutable totals while a render adds and removes facts. */
export class TotalsBuilder {
  readonly shared: number[];
  ownRules: number;
  endpoints: number;
  noLocalInternal: number;
  noLocalExternal: number;

  constructor(from: RenderTotals | null = null) {
    this.shared = from === null ? new Array<number>(SHARED_CHAIN_COUNT).fill(0) : [...from.shared];
    this.ownRules = from?.ownRules ?? 0;
    this.endpoints = from?.endpoints ?? 0;
    this.noLocalInternal = from?.noLocalInternal ?? 0;
    this.noLocalExternal = from?.noLocalExternal ?? 0;
  }

  /** Adds (sign 1) or removes (sign -1) one service port's facts. */
  add(f: ServicePortFacts, sign: 1 | -1 = 1): void {
    for (let c = 0; c < SHARED_CHAIN_COUNT; c++) this.shared[c] += sign * f.shared[c];
    this.ownRules += sign * f.ownRules;
    this.endpoints += sign * f.endpointCount;
    if ((f.noLocal & NoLocal.Internal) !== 0) this.noLocalInternal += sign;
    if ((f.noLocal & NoLocal.External) !== 0) this.noLocalExternal += sign;
  }

  /** An immutable copy. */
  done(): RenderTotals {
    return {
      shared: Object.freeze([...this.shared]),
      ownRules: this.ownRules,
      endpoints: this.endpoints,
      noLocalInternal: this.noLocalInternal,
      noLocalExternal: this.noLocalExternal,
    };
  }
}

/** Sizes of a RenderState, for logs and the memory benchmark. */
export interface RenderStateSize {
  readonly servicePorts: number;
  /**
   * Bytes the state holds on its own, estimated: array slots, the facts objects, hash strings, prefix
   * sums and the fixed rule text. Keys, ServicePortInfo objects and endpoint arrays are shared with the
   * caller and not counted.
   */
  readonly ownBytes: number;
}

/** Estimated V8/JSC object sizes (header plus 8-byte slots), for renderStateSize. */
const FACTS_OBJECT_BYTES = 16 + 12 * 8;
const SMALL_ARRAY_BYTES = 32 + SHARED_CHAIN_COUNT * 8;
const OWN_RULES_ARRAY_BYTES = 32 + OWN_CHAIN_RULES_LENGTH * 8;
const STRING_HEADER_BYTES = 16;

/** Measures a RenderState (see RenderStateSize). */
export function renderStateSize(state: RenderState): RenderStateSize {
  let bytes = state.keys.length * 8 + state.facts.length * 8 + state.positions.byteLength;
  const seenShared = new Set<readonly number[]>();
  const seenOwn = new Set<readonly number[]>();
  for (const f of state.facts) {
    bytes += FACTS_OBJECT_BYTES + STRING_HEADER_BYTES * 2 + f.hash.length + f.seps.length;
    if (!seenShared.has(f.shared)) {
      seenShared.add(f.shared);
      bytes += SMALL_ARRAY_BYTES;
    }
    if (!seenOwn.has(f.chainRules)) {
      seenOwn.add(f.chainRules);
      bytes += OWN_RULES_ARRAY_BYTES;
    }
  }
  let text = 0;
  for (const l of state.nodePortsTail) text += l.length;
  for (const c of state.fixedChains) for (const r of c.rules) text += r.length;
  return { servicePorts: state.keys.length, ownBytes: bytes + text };
}

/** True when two rule lists are equal line by line. */
export function sameRules(a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
