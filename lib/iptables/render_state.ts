/**
 * What the renderer remembers between syncs for incremental partial syncs: enough to re-render, byte for
 * byte, every rule the last applied payload left in the shared chains (filter KUBE-SERVICES,
 * KUBE-EXTERNAL-SERVICES, KUBE-NODEPORTS, KUBE-PROXY-FIREWALL; nat KUBE-SERVICES, KUBE-NODEPORTS) and the
 * fixed chains (KUBE-FORWARD, KUBE-FIREWALL, KUBE-POSTROUTING, KUBE-MARK-MASQ).
 *
 * Compact on purpose (10k service ports must stay far below the RSS budget): per service port it keeps
 * the key, a reference to the immutable ServicePortInfo it was rendered from and one flag byte, in three
 * parallel arrays sorted by key, instead of the rule text. Key strings and ServicePortInfo objects are
 * shared with the caller's maps, so the state itself costs about 17 bytes per service port. Rule text is
 * kept only for the handful of fixed rules and the NodePorts jump(s).
 *
 * Contract: a ServicePortInfo handed to the renderer is never mutated afterwards (the service change
 * tracker replaces changed ones with new objects), because an unchanged reference with unchanged flags
 * is taken to mean unchanged shared rules.
 */
import type { IPFamily, ServicePortInfo } from "../model/types.ts";

/** The rules of one fixed (not per-service) chain as last written. */
export interface FixedChainRules {
  readonly table: "filter" | "nat";
  readonly chain: string;
  readonly rules: readonly string[];
}

/** The renderer's memory of the last successfully applied sync of one IP family. */
export interface RenderState {
  readonly family: IPFamily;
  /** Service-port keys, sorted (the renderer's processing order). */
  readonly keys: readonly string[];
  /** The ServicePortInfo each key was rendered from (same index); null when it was skipped. */
  readonly services: readonly (ServicePortInfo | null)[];
  /** SharedRuleFlags per key (same index). */
  readonly flags: Uint8Array;
  /** Localhost NodePort rules (with their nfacct counter) were written. */
  readonly localhostNodePortsNfacct: boolean;
  /** The nat KUBE-SERVICES rule(s) after every service port's: the jump(s) to KUBE-NODEPORTS. */
  readonly nodePortsTail: readonly string[];
  /** Fixed chains present in the last payload, with their rules. */
  readonly fixedChains: readonly FixedChainRules[];
}

/** Sizes of a RenderState, for logs and the memory benchmark. */
export interface RenderStateSize {
  readonly servicePorts: number;
  /**
   * Bytes the state holds on its own: array slots, flag bytes and the fixed rule text (UTF-16, 2 bytes a
   * character). Keys and ServicePortInfo objects are shared with the caller and not counted.
   */
  readonly ownBytes: number;
}

/** Measures a RenderState (see RenderStateSize). */
export function renderStateSize(state: RenderState): RenderStateSize {
  let text = 0;
  for (const l of state.nodePortsTail) text += l.length;
  for (const c of state.fixedChains) for (const r of c.rules) text += r.length;
  const n = state.keys.length;
  return { servicePorts: n, ownBytes: n * 8 * 2 + state.flags.byteLength + 2 * text };
}

/** True when two rule lists are equal line by line. */
export function sameRules(a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
