/**
 * The iptables rule renderer: upstream kube-proxy's syncProxyRules (pkg/proxy/iptables/proxier.go) as a
 * pure function. Plain service-port and endpoint data in, one iptables-restore payload (filter, then nat)
 * out, with the same chains, rule text and argument order as upstream. No I/O, no clock; the same input
 * gives the same bytes (service ports are processed in sorted key order, not map order).
 *
 * Partial syncs come in two kinds:
 *  - upstream's (no previous RenderState): the filter table and the nat chains KUBE-SERVICES,
 *    KUBE-NODEPORTS, KUBE-POSTROUTING and KUBE-MARK-MASQ are rewritten; a service port's
 *    KUBE-SVC/SVL/EXT/FW/SEP chains only when it changed. iptables-restore --noflush keeps the rest.
 *  - incremental (given the RenderState of the last applied sync): the per-service chains exactly as
 *    above, but no shared or fixed chain is re-declared. Shared chains are patched with `-D`/`-I` lines
 *    for the service ports whose rules there changed, at the positions a full render would use, so each
 *    shared chain ends up equal, in order, to a full sync's (see shared_chain_diff.ts); a fixed chain is
 *    rewritten only when its rules changed. The payload size then depends on what changed, not on the
 *    number of Services.
 * Full syncs write everything, byte for byte as before, and every render returns a fresh RenderState
 * for the next one (the caller keeps it only once the payload was applied).
 *
 * Cost. The state keeps what was derived per service port (state.ts), so an incremental sync
 * categorises endpoints, hashes chain names and counts rules only for the service ports named in
 * changedServices; totals, `-I` positions (prefix sums, positions.ts) and stale chains are
 * updated from those alone. What remains O(all service ports) is copying two arrays of references and
 * integers. Full and upstream-partial syncs given a state of the same family reuse its hashes and facts
 * for the service ports whose objects did not change. The payload is built in flat chunks
 * (payload.ts), never as one array of every line; a full or upstream-partial render's per-service chains
 * are rendered from the facts only when read (full.ts), so a planned restore streams them.
 *
 * Where things are: this file is the entry point and the renderer's public API; input.ts and result.ts
 * are what goes in and out; context.ts the render-wide settings; service_port.ts derives one service
 * port's facts and its shared-chain rules (shared_chains.ts), own_chains.ts writes its KUBE-SVC/SVL/EXT/FW/SEP
 * chains; fixed_chains.ts the chains with a fixed rule set and the NodePorts jump; full.ts the full and
 * upstream-partial render, incremental.ts (planned by incremental_plan.ts) the incremental one, whose
 * shared-chain edits shared_chain_diff.ts computes.
 */
import type { RenderState } from "./state.ts";
import type { RenderInput } from "./input.ts";
import type { RenderResult } from "./result.ts";
import { renderSetup } from "./context.ts";
import { renderAll } from "./full.ts";
import { renderIncremental } from "./incremental.ts";

export type { RenderState };
export type { RenderFeatures, RenderInput } from "./input.ts";
export type { RenderMode, RenderResult, RenderWork, TableRuleCounts } from "./result.ts";
export { LARGE_CLUSTER_ENDPOINTS_THRESHOLD, masqueradeMark, totalEndpointCount } from "./context.ts";
export { INCREMENTAL_MAX_CHAINS } from "./incremental.ts";
export { NFACCT_CT_STATE_INVALID_DROPPED } from "./fixed_chains.ts";
export { NFACCT_LOCALHOST_NODEPORTS_ACCEPTED } from "./shared_chains.ts";

/**
 * Renders one sync's iptables-restore payload. Pure: reads only `input` and `previous`.
 *
 * `previous` is the `state` of the last render whose payload iptables-restore applied successfully (null
 * when there is none, e.g. after a failure). A partial sync (`input.full` false) with a previous state of
 * the same family is incremental, unless it would touch more than INCREMENTAL_MAX_CHAINS per-service
 * chains; otherwise it is upstream's partial sync. Full syncs write everything whatever `previous` is,
 * but reuse what it derived for unchanged service ports (hashes, endpoint categorisation), so pass it.
 */
export function renderIptablesRules(input: RenderInput, previous: RenderState | null = null): RenderResult {
  const setup = renderSetup(input);
  const sameFamily = previous !== null && previous.family === input.family;
  const reusable = sameFamily && previous.context === setup.context ? previous : null;
  if (!input.full && sameFamily) {
    const result = renderIncremental(input, setup, previous, reusable !== null);
    if (result !== null) return result;
  }
  return renderAll(input, setup, input.full ? "full" : "partial", reusable);
}
