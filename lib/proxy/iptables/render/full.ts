/**
 * The render that writes every shared and fixed chain: a full sync (every service port's own chains too)
 * or upstream's partial sync (own chains only for the changed service ports; iptables-restore --noflush
 * keeps the rest). The payload's layout and order are upstream's byte for byte.
 *
 * The per-service chains, ~90 % of a full payload (23.5 MB at 10k Services), are not rendered here: the
 * render derives every service port's facts and shared-chain rules, and hands the own chains as
 * segments of service ports whose text is rendered from those facts when read (SectionedPayload). The
 * restore planner streams them into iptables-restore as it writes them, so a first sync never holds
 * them whole, nor the garbage of rendering them all at once (the agent's peak RSS).
 */
import { KUBE_FIREWALL, KUBE_FORWARD } from "../chain_names.ts";
import { SHARED_CHAIN_TABLE } from "./shared_chains.ts";
import { compactFacts, type RenderState, type ServicePortFacts, TotalsBuilder } from "./state.ts";
import { SharedChainPositions } from "./positions.ts";
import { ActiveNatChains, staleChainsByScan } from "./active_chains.ts";
import { concatChunks, PayloadWriter } from "./payload.ts";
import {
  type Context,
  LARGE_CLUSTER_ENDPOINTS_THRESHOLD,
  newContext,
  type Setup,
  totalEndpointCount,
} from "./context.ts";
import { isWritten, ownChainCount, processServicePort, writeOwnChainsOf } from "./service_port.ts";
import type { OwnChainsOut } from "./own_chains.ts";
import { DECLARED_CHAINS, renderNodePortsTail } from "./fixed_chains.ts";
import { type RenderResult, resultWithPayload, rulesTotalOf } from "./result.ts";
import type { RenderInput } from "./input.ts";
import type { SectionedPayload, SegmentText, ServiceChainSegment } from "../restore_content.ts";

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

  let facts: ServicePortFacts[] = new Array(keys.length);
  /** Indices of the service ports whose own chains this payload writes, in order. */
  const written: number[] = [];
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
    // Own chains are only counted here (own: null); the segments render them from the facts.
    // A skipped service port writes nothing; its name may be unusable, so it is not looked up.
    const write = mode === "full" || ((reuse?.problem ?? null) === null && isWritten(input, key, svc));
    const f = processServicePort(ctx, svc, eps, null, reuse);
    if (write && f.problem === null) written.push(i);
    facts[i] = f;
    totals.add(f);
    if (f.problem !== null) {
      warnings.push(`service port ${JSON.stringify(key)} skipped: ${f.problem}`);
      skippedServices.push(key);
      skipped.push([key, f.problem]);
    }
  }
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

  const segments = ownChainSegments(ownChainsContext(ctx), facts, written);
  let ownRules = 0;
  for (const i of written) ownRules += facts[i].ownRules;

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
  const sections: SectionedPayload = {
    shared: concatChunks([head, filterRules, natHead, staleDecls, natRules, tail]),
    segments,
  };
  const before = concatChunks([head, filterRules, natHead]);
  const middle = concatChunks([staleDecls, natRules]);
  const after = tail.chunks();
  const sharedLength = sections.shared.reduce((n, c) => n + c.length, 0);
  // The whole payload, upstream's order: own chains declared before the nat rules, their rules after.
  const render = (): string[] => {
    const texts = segments.map((g) => g.text());
    return [...before, ...texts.map((t) => t.decls), ...middle, ...texts.map((t) => t.rules), ...after];
  };
  const length = () => {
    let n = sharedLength;
    for (const g of segments) n += g.length();
    return n;
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
      nat: natRules.count + ownRules + nodePortsTail.length,
    },
    rulesTotal: rulesTotalOf(doneTotals, setup.fixedChains, nodePortsTail),
    sharedChainEdits: 0,
    sections,
    work: { ...ctx.work },
  }, { render, length });
}

/** A segment that also tells its text's length (rendering it only when it was never rendered). */
interface LazySegment extends ServiceChainSegment {
  length(): number;
}

/**
 * The context own chains are rendered in after the render returned: its settings, no shared-rule sink
 * (nothing goes to the shared chains any more), and a copy of the node labels (the caller may update its
 * object in place before the text is read).
 */
function ownChainsContext(ctx: Context): Context {
  return {
    ...ctx,
    nodeLabels: { ...ctx.nodeLabels },
    sink: () => {
      throw new Error("own chains write no shared-chain rule");
    },
  };
}

/**
 * The own chains of the `written` service ports as segments rendered from their facts on demand, cut as
 * whole service ports once a segment has SEGMENT_CHAINS declarations or SEGMENT_RULES rules, so that
 * several fit one restore transaction and the planner packs them without reading the text back.
 */
function ownChainSegments(
  ctx: Context,
  facts: readonly ServicePortFacts[],
  written: readonly number[],
): LazySegment[] {
  // One pair of writers renders every segment in turn (synchronously; `take` keeps nothing).
  const out: OwnChainsOut = { decls: new PayloadWriter(Infinity), rules: new PayloadWriter(Infinity) };
  const segments: LazySegment[] = [];
  let from = 0;
  let chains = 0;
  let ruleLines = 0;
  const cut = (to: number) => {
    if (chains === 0 && ruleLines === 0) return;
    segments.push(ownChainSegment(ctx, facts, written.slice(from, to), chains, ruleLines, out));
    from = to;
    chains = 0;
    ruleLines = 0;
  };
  for (let k = 0; k < written.length; k++) {
    const f = facts[written[k]];
    chains += ownChainCount(f);
    ruleLines += f.ownRules;
    if (chains >= SEGMENT_CHAINS || ruleLines >= SEGMENT_RULES) cut(k + 1);
  }
  cut(written.length);
  return segments;
}

/** A segment of the service ports `indices` (into `facts`), its text rendered into `out` on each read. */
function ownChainSegment(
  ctx: Context,
  facts: readonly ServicePortFacts[],
  indices: readonly number[],
  chains: number,
  ruleLines: number,
  out: OwnChainsOut,
): LazySegment {
  let length = -1;
  const text = (): SegmentText => {
    for (const i of indices) writeOwnChainsOf(ctx, facts[i], out);
    const t = { decls: out.decls.take(), rules: out.rules.take() };
    length = t.decls.length + t.rules.length;
    return t;
  };
  return {
    chains,
    ruleLines,
    text,
    length(): number {
      if (length < 0) text();
      return length;
    },
  };
}
