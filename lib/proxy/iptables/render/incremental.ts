/**
 * The incremental partial sync: only the changed service ports are processed; their own chains are
 * rewritten, the shared chains patched with `-D`/`-I` edits (shared_chain_diff.ts) at the positions a
 * full render would use, a fixed chain rewritten only when its rules changed, and stale chains deleted.
 * The payload's size follows what changed, not the number of Services. Falls back (returns null) when a
 * change touches too many per-service chains for one transaction.
 */
import { deleteLine, SharedChainDiff } from "./shared_chain_diff.ts";
import { SHARED_CHAIN_COUNT } from "./shared_chains.ts";
import {
  type FixedChainRules,
  forEachOwnChain,
  type RenderState,
  sameRules,
  type ServicePortFacts,
  TotalsBuilder,
} from "./state.ts";
import { SharedChainPositions } from "./positions.ts";
import { ActiveNatChains, staleChainsByScan } from "./active_chains.ts";
import { concatChunks, PayloadWriter } from "./payload.ts";
import { LARGE_CLUSTER_ENDPOINTS_THRESHOLD, newContext, type Setup } from "./context.ts";
import { isWritten, processServicePort } from "./service_port.ts";
import type { OwnChainsOut } from "./own_chains.ts";
import { renderNodePortsTail } from "./fixed_chains.ts";
import { type RenderResult, resultWithPayload, rulesTotalOf, type TableRuleCounts } from "./result.ts";
import { planByScan, planFromChanges } from "./incremental_plan.ts";
import type { RenderInput } from "./input.ts";

/**
 * An incremental partial sync that would declare or delete more per-service chains than this is written
 * upstream's way instead: the incremental payload's `-D`/`-I` lines keep it in one transaction, while
 * iptables-nft's cost grows quadratically with the chains declared in one transaction and the restore
 * planner (restore_plan.ts) can split an upstream-style payload (measured in a netns with 5000 Services:
 * adding 200 Services 0.3 s incremental vs 1.0 s split; adding 1000 Services 3.6 s vs 2.0 s).
 */
export const INCREMENTAL_MAX_CHAINS = 1000;

/**
 * Incremental partial sync (see the module comment). Returns null when it would declare or delete more
 * per-service chains than incrementalMaxChains (the caller then renders upstream's partial sync).
 */
export function renderIncremental(
  input: RenderInput,
  setup: Setup,
  prev: RenderState,
  sameContext: boolean,
): RenderResult | null {
  const fromChanges = sameContext ? planFromChanges(input, prev) : null;
  const plan = fromChanges ?? planByScan(input, prev, sameContext);
  const { keys, facts, process, old, removed, removedKeys } = plan;

  const totals = new TotalsBuilder(prev.totals);
  for (const f of removed) totals.add(f, -1);
  for (const f of old) if (f !== null) totals.add(f, -1);
  let totalEndpoints = totals.endpoints;
  for (const i of process) totalEndpoints += input.endpoints.get(keys[i])?.length ?? 0;
  const largeClusterMode = totalEndpoints > LARGE_CLUSTER_ENDPOINTS_THRESHOLD;

  const scratch: string[][] = Array.from({ length: SHARED_CHAIN_COUNT }, () => []);
  const ctx = newContext(input, setup, largeClusterMode, (c, line) => {
    scratch[c].push(line);
  });
  if (fromChanges === null) ctx.work.scanned = keys.length;
  const own: OwnChainsOut = { decls: new PayloadWriter(), rules: new PayloadWriter() };
  const positions = plan.membershipChanged
    ? SharedChainPositions.build(keys.length, (i, c) => facts[i]?.shared[c] ?? 0)
    : prev.positions.clone();
  const diff = new SharedChainDiff(prev.localhostNodePortsNfacct, setup.localhostNodePortsNfacct);

  let r = 0;
  for (let x = 0; x < process.length; x++) {
    const i = process[x];
    const key = keys[i];
    while (r < removed.length && removedKeys[r] < key) diff.removed(removed[r++]);
    const svc = input.services.get(key)!;
    const eps = input.endpoints.get(key);
    const o = old[x];
    const reuse = sameContext && o !== null && o.svc === svc && o.endpoints === eps ? o : null;
    for (const l of scratch) l.length = 0;
    const write = (reuse?.problem ?? null) === null && isWritten(input, key, svc);
    const f = processServicePort(ctx, svc, eps, write ? own : null, reuse);
    facts[i] = f;
    totals.add(f);
    for (let c = 0; c < SHARED_CHAIN_COUNT; c++) positions.add(c, i, f.shared[c] - (o?.shared[c] ?? 0));
    diff.servicePort(o, f, scratch, positions, i);
  }
  while (r < removed.length) diff.removed(removed[r++]);
  const allFacts = facts as ServicePortFacts[];

  // Stale chains: with the previous result's own set as `existing`, only changed service ports can
  // have dropped chains (chain names embed the service port, so no two service ports share one).
  let staleChains: string[];
  if (input.existingNatChains !== null && input.existingNatChains === prev.activeNatChains) {
    const now = new Set<string>();
    const addNow = (c: string) => now.add(c);
    for (const i of process) forEachOwnChain(allFacts[i], addNow);
    const stale = new Set<string>();
    const addStale = (c: string) => {
      if (!now.has(c)) stale.add(c);
    };
    for (const f of removed) forEachOwnChain(f, addStale);
    for (const f of old) if (f !== null) forEachOwnChain(f, addStale);
    staleChains = [...stale].sort();
  } else {
    staleChains = staleChainsByScan(input.existingNatChains, allFacts);
  }
  if (own.decls.count + staleChains.length > (input.incrementalMaxChains ?? INCREMENTAL_MAX_CHAINS)) {
    return null;
  }

  // Skipped service ports: the previous list without the processed and removed keys, plus the
  // processed ones that are skipped now.
  const touched = new Set<string>(removedKeys);
  for (const i of process) touched.add(keys[i]);
  const skipped: (readonly [string, string])[] = prev.skipped.filter(([k]) => !touched.has(k));
  for (const i of process) {
    const p = allFacts[i].problem;
    if (p !== null) skipped.push([keys[i], p]);
  }
  skipped.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const warnings = [...setup.warnings];
  for (const [key, problem] of skipped) {
    warnings.push(`service port ${JSON.stringify(key)} skipped: ${problem}`);
  }

  const nodePortsTail = renderNodePortsTail(input, setup.npa, setup.localhostNodePorts, warnings);
  const activeNatChains = new ActiveNatChains(allFacts);
  const doneTotals = totals.done();
  const state: RenderState = {
    family: input.family,
    context: setup.context,
    keys,
    facts: allFacts,
    positions,
    totals: doneTotals,
    skipped,
    localhostNodePortsNfacct: setup.localhostNodePortsNfacct,
    nodePortsTail,
    fixedChains: setup.fixedChains,
    activeNatChains,
  };
  const { chunks, rulesWritten } = incrementalPayload(
    prev,
    diff,
    setup.fixedChains,
    nodePortsTail,
    own,
    staleChains,
  );
  return resultWithPayload({
    mode: "incremental",
    state,
    activeNatChains,
    staleChains,
    noLocalEndpoints: { internal: doneTotals.noLocalInternal, external: doneTotals.noLocalExternal },
    largeClusterMode,
    totalEndpoints,
    localhostNodePorts: setup.localhostNodePorts,
    skippedServices: skipped.map(([k]) => k),
    warnings,
    rulesWritten,
    rulesTotal: rulesTotalOf(doneTotals, setup.fixedChains, nodePortsTail),
    sharedChainEdits: diff.changedServicePorts,
    sections: null,
    work: { ...ctx.work },
  }, chunks);
}

/**
 * The incremental payload, make-before-break within each table's transaction: changed fixed chains and
 * the changed service ports' own chains are declared and filled first, then the shared chains are edited
 * (`-D`, then `-I`, then the NodePorts jump appended when it changed), then stale chains are deleted.
 */
function incrementalPayload(
  previous: RenderState,
  diff: SharedChainDiff,
  fixedChains: readonly FixedChainRules[],
  nodePortsTail: readonly string[],
  own: OwnChainsOut,
  staleChains: readonly string[],
): { chunks: string[]; rulesWritten: TableRuleCounts } {
  // A fixed chain that is no longer rendered (KUBE-FIREWALL without localhost NodePorts) is left alone,
  // as a full sync leaves it.
  const changedFixed = fixedChains.filter((f) => {
    const old = previous.fixedChains.find((o) => o.table === f.table && o.chain === f.chain);
    return old === undefined || !sameRules(old.rules, f.rules);
  });
  const tailChanged = !sameRules(previous.nodePortsTail, nodePortsTail);
  const written = { filter: diff.inserted.filter, nat: diff.inserted.nat + own.rules.count };

  const head = new PayloadWriter();
  head.line("*filter");
  for (const f of changedFixed) if (f.table === "filter") head.line(`:${f.chain} - [0:0]`);
  for (const f of changedFixed) {
    if (f.table === "filter") {
      head.lines(f.rules);
      written.filter += f.rules.length;
    }
  }
  head.lines(diff.filter.deletes);
  head.lines(diff.filter.inserts);
  head.line("COMMIT");
  head.line("*nat");
  for (const f of changedFixed) if (f.table === "nat") head.line(`:${f.chain} - [0:0]`);
  const mid = new PayloadWriter();
  for (const c of staleChains) mid.line(`:${c} - [0:0]`);
  for (const f of changedFixed) {
    if (f.table === "nat") {
      mid.lines(f.rules);
      written.nat += f.rules.length;
    }
  }
  const tail = new PayloadWriter();
  tail.lines(diff.nat.deletes);
  if (tailChanged) { for (const l of previous.nodePortsTail) tail.line(deleteLine(l)); }
  tail.lines(diff.nat.inserts);
  if (tailChanged) {
    tail.lines(nodePortsTail);
    written.nat += nodePortsTail.length;
  }
  for (const c of staleChains) tail.line(`-X ${c}`);
  tail.line("COMMIT");
  return { chunks: concatChunks([head, own.decls, mid, own.rules, tail]), rulesWritten: written };
}
