/**
 * The render that writes every shared and fixed chain: a full sync (every service port's own chains too)
 * or upstream's partial sync (own chains only for the changed service ports; iptables-restore --noflush
 * keeps the rest). The payload's layout and order are upstream's byte for byte.
 */
import { KUBE_FIREWALL, KUBE_FORWARD } from "../chain_names.ts";
import { SHARED_CHAIN_TABLE } from "./shared_chains.ts";
import { compactFacts, type RenderState, type ServicePortFacts, TotalsBuilder } from "./state.ts";
import { SharedChainPositions } from "./positions.ts";
import { ActiveNatChains, staleChainsByScan } from "./active_chains.ts";
import { concatChunks, PayloadWriter } from "./payload.ts";
import { LARGE_CLUSTER_ENDPOINTS_THRESHOLD, newContext, type Setup, totalEndpointCount } from "./context.ts";
import { isWritten, processServicePort } from "./service_port.ts";
import type { OwnChainsOut } from "./own_chains.ts";
import { DECLARED_CHAINS, renderNodePortsTail } from "./fixed_chains.ts";
import { type RenderResult, resultWithPayload, rulesTotalOf } from "./result.ts";
import type { RenderInput } from "./input.ts";
import type { SectionedPayload, ServiceChainSegment } from "../restore_content.ts";

/**
 * A segment of own chains is cut after the service port that brings it to this many declarations or
 * rule lines (~8 KB / ~40 KB of text): several fit one restore transaction (restore_plan.ts).
 */
const SEGMENT_CHAINS = 256;
const SEGMENT_RULES = 512;

/** Full sync, or upstream's partial sync: every shared and fixed chain is rewritten. */
export function renderAll(
  input: RenderInput,
  setup: Setup,
  mode: "full" | "partial",
  reusable: RenderState | null,
): RenderResult {
  const warnings = [...setup.warnings];
  const skippedServices: string[] = [];
  const skipped: (readonly [string, string])[] = [];
  const keys = [...input.services.keys()].sort();
  const totalEndpoints = totalEndpointCount(input.services, input.endpoints);
  const largeClusterMode = totalEndpoints > LARGE_CLUSTER_ENDPOINTS_THRESHOLD;

  // Filter rules between KUBE-FIREWALL's and KUBE-FORWARD's, as upstream.
  const filterRules = new PayloadWriter();
  const natRules = new PayloadWriter();
  for (const f of setup.fixedChains) {
    if (f.chain === KUBE_FIREWALL || f.table === "nat") {
      (f.table === "filter" ? filterRules : natRules).lines(f.rules);
    }
  }
  const ctx = newContext(input, setup, largeClusterMode, (c, line) => {
    (SHARED_CHAIN_TABLE[c] === "filter" ? filterRules : natRules).line(line);
  });
  // The own chains' chunks are cut only between service ports (segments), so the restore planner can
  // pack them as they are, without reading the text back line by line.
  const own: OwnChainsOut = { decls: new PayloadWriter(Infinity), rules: new PayloadWriter(Infinity) };
  const segments: ServiceChainSegment[] = [];
  let segDecls = 0;
  let segRules = 0;
  const cutSegment = () => {
    const chains = own.decls.count - segDecls;
    const ruleLines = own.rules.count - segRules;
    if (chains === 0 && ruleLines === 0) return;
    segments.push({ decls: own.decls.cut(), rules: own.rules.cut(), chains, ruleLines });
    segDecls = own.decls.count;
    segRules = own.rules.count;
  };

  let facts: ServicePortFacts[] = new Array(keys.length);
  const totals = new TotalsBuilder();
  const prevKeys = reusable?.keys ?? [];
  let pi = 0;
  for (let i = 0; i < keys.length; i++) {
    const key = keys[i];
    const svc = input.services.get(key)!;
    const eps = input.endpoints.get(key);
    let reuse: ServicePortFacts | null = null;
    if (reusable !== null) {
      while (pi < prevKeys.length && prevKeys[pi] < key) pi++;
      if (pi < prevKeys.length && prevKeys[pi] === key) {
        const f = reusable.facts[pi];
        if (f.svc === svc && f.endpoints === eps) reuse = f;
      }
    }
    // A skipped service port writes nothing; its name may be unusable, so it is not looked up.
    const write = mode === "full" || ((reuse?.problem ?? null) === null && isWritten(input, key, svc));
    const f = processServicePort(ctx, svc, eps, write ? own : null, reuse);
    if (own.decls.pendingLines >= SEGMENT_CHAINS || own.rules.pendingLines >= SEGMENT_RULES) cutSegment();
    facts[i] = f;
    totals.add(f);
    if (f.problem !== null) {
      warnings.push(`service port ${JSON.stringify(key)} skipped: ${f.problem}`);
      skippedServices.push(key);
      skipped.push([key, f.problem]);
    }
  }
  cutSegment();
  // The state outlives this render's garbage: its facts go in blocks of their own (compactFacts).
  facts = compactFacts(facts);
  for (const f of setup.fixedChains) if (f.chain === KUBE_FORWARD) filterRules.lines(f.rules);

  const staleChains = staleChainsByScan(input.existingNatChains, facts);
  const nodePortsTail = renderNodePortsTail(input, setup.npa, setup.localhostNodePorts, warnings);
  const activeNatChains = new ActiveNatChains(facts);
  const doneTotals = totals.done();
  const state: RenderState = {
    family: input.family,
    context: setup.context,
    keys,
    facts,
    positions: SharedChainPositions.build(keys.length, (i, c) => facts[i].shared[c]),
    totals: doneTotals,
    skipped,
    localhostNodePortsNfacct: setup.localhostNodePortsNfacct,
    nodePortsTail,
    fixedChains: setup.fixedChains,
    activeNatChains,
  };

  const head = new PayloadWriter();
  head.line("*filter");
  for (const c of DECLARED_CHAINS.filter) {
    if (c !== KUBE_FIREWALL || setup.localhostNodePorts) head.line(`:${c} - [0:0]`);
  }
  const natHead = new PayloadWriter();
  natHead.line("COMMIT");
  natHead.line("*nat");
  for (const c of DECLARED_CHAINS.nat) natHead.line(`:${c} - [0:0]`);
  const staleDecls = new PayloadWriter();
  for (const c of staleChains) staleDecls.line(`:${c} - [0:0]`);
  const tail = new PayloadWriter();
  for (const c of staleChains) tail.line(`-X ${c}`);
  tail.lines(nodePortsTail);
  tail.line("COMMIT");
  const chunks = concatChunks([head, filterRules, natHead, own.decls, staleDecls, natRules, own.rules, tail]);
  const sections: SectionedPayload = {
    shared: concatChunks([head, filterRules, natHead, staleDecls, natRules, tail]),
    segments,
  };

  return resultWithPayload({
    mode,
    state,
    activeNatChains,
    staleChains,
    noLocalEndpoints: { internal: doneTotals.noLocalInternal, external: doneTotals.noLocalExternal },
    largeClusterMode,
    totalEndpoints,
    localhostNodePorts: setup.localhostNodePorts,
    skippedServices,
    warnings,
    rulesWritten: {
      filter: filterRules.count,
      nat: natRules.count + own.rules.count + nodePortsTail.length,
    },
    rulesTotal: rulesTotalOf(doneTotals, setup.fixedChains, nodePortsTail),
    sharedChainEdits: 0,
    sections,
    work: { ...ctx.work },
  }, chunks);
}
