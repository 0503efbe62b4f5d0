/**
 * One service port, upstream syncProxyRules' loop body: validate it, categorise its endpoints, hash its
 * chain names, decide which of its own chains exist, write its rules into the shared chains (through the
 * context's sink) and its own chains (own_chains.ts), and return what was derived as ServicePortFacts,
 * so that a later render can reuse them while the service port's objects stay the same.
 */
import type { EndpointInfo, ServicePortInfo } from "../../types.ts";
import { externallyAccessible, servicePortNameString } from "../../types.ts";
import { namespacedName } from "../../../k8s/objects.ts";
import { categorizeEndpoints, usesClusterEndpoints, usesLocalEndpoints } from "../../topology.ts";
import { compareEndpoints } from "../../endpoints.ts";
import { chainsForHash, endpointHashes, portProtoHash } from "../chain_names.ts";
import { checkEndpoint, checkServicePort } from "./validate.ts";
import { SHARED_CHAIN_COUNT, SharedRuleFlags, writeSharedRules } from "./shared_chains.ts";
import { HASH_LENGTH, NoLocal, OWN_CHAIN_RULES_LENGTH, OwnChain, type ServicePortFacts } from "./state.ts";
import type { Context } from "./context.ts";
import {
  countOwnChains,
  ownChainRules,
  type OwnChainsOut,
  type OwnChainsPlan,
  writeOwnChains,
} from "./own_chains.ts";
import type { RenderInput } from "./input.ts";

const EMPTY_ENDPOINTS: readonly EndpointInfo[] = Object.freeze([]);

/** `eps` sorted by "ip:port" (the same array when it already is). */
function sortedByEndpoint(eps: readonly EndpointInfo[]): readonly EndpointInfo[] {
  for (let i = 1; i < eps.length; i++) {
    if (compareEndpoints(eps[i - 1], eps[i]) > 0) return [...eps].sort(compareEndpoints);
  }
  return eps;
}

/**
 * Interned rule-count vectors (shared chains, own chains; one table per vector length): most service
 * ports share one of a handful (e.g. one KUBE-SERVICES jump, one KUBE-SVC with 6 rules), so the state
 * holds a few arrays instead of one per service port. Bounded; the values are immutable.
 */
const COUNTS_INTERN_LIMIT = 4096;
const internedShared = new Map<number, readonly number[]>();
const internedOwn = new Map<number, readonly number[]>();

function internCounts(table: Map<number, readonly number[]>, counts: readonly number[]): readonly number[] {
  let key = 0;
  for (const n of counts) {
    if (n >= 64) return Object.freeze([...counts]);
    key = key * 64 + n;
  }
  let v = table.get(key);
  if (v === undefined) {
    v = Object.freeze([...counts]);
    if (table.size < COUNTS_INTERN_LIMIT) table.set(key, v);
  }
  return v;
}

const ZERO_COUNTS = internCounts(internedShared, new Array<number>(SHARED_CHAIN_COUNT).fill(0));
const ZERO_OWN_RULES = internCounts(internedOwn, new Array<number>(OWN_CHAIN_RULES_LENGTH).fill(0));

/** Facts of a service port left out of the payload because of `problem`. */
function skippedFacts(
  svc: ServicePortInfo,
  endpoints: readonly EndpointInfo[] | undefined,
  problem: string,
): ServicePortFacts {
  return {
    svc,
    endpoints,
    problem,
    flags: SharedRuleFlags.Skipped,
    ownChains: 0,
    noLocal: 0,
    hash: "",
    seps: "",
    endpointCount: endpoints?.length ?? 0,
    ownRules: 0,
    chainRules: ZERO_OWN_RULES,
    shared: ZERO_COUNTS,
  };
}

/**
 * Processes one service port: derives its facts (or takes `reuse`, its previous facts when its objects
 * and the render context are unchanged), writes its shared-chain rules into ctx.sink, and its own chains
 * into `own` (when null they are only counted: a partial sync leaves them in the kernel).
 */
export function processServicePort(
  ctx: Context,
  svc: ServicePortInfo,
  endpoints: readonly EndpointInfo[] | undefined,
  own: OwnChainsOut | null,
  reuse: ServicePortFacts | null,
): ServicePortFacts {
  ctx.work.servicePorts++;
  ctx.counts.fill(0);
  if (reuse !== null && (own === null || reuse.problem !== null)) {
    if (reuse.problem === null) {
      writeSharedRules(
        ctx.sink,
        svc,
        servicePortNameString(svc.name),
        svc.protocol.toLowerCase(),
        chainsForHash(reuse.hash),
        reuse.flags,
        ctx.localhostNodePortsNfacct,
      );
    }
    return reuse;
  }
  if (reuse === null) {
    ctx.work.validated++;
    const problem = servicePortProblem(svc, endpoints ?? EMPTY_ENDPOINTS, ctx.ipv6);
    if (problem !== null) return skippedFacts(svc, endpoints, problem);
  }

  const eps = sortedByEndpoint(endpoints ?? EMPTY_ENDPOINTS);
  const protocol = svc.protocol.toLowerCase();
  const spn = servicePortNameString(svc.name);
  let hash = reuse?.hash;
  if (hash === undefined) {
    hash = portProtoHash(spn, protocol);
    ctx.work.hashes++;
  }
  const names = chainsForHash(hash);
  ctx.work.categorized++;
  const cat = categorize(ctx, svc, eps);
  const hasEndpoints = cat.hasAnyEndpoints;
  const usesClusterPolicyChain = cat.clusterEndpoints.length > 0 && usesClusterEndpoints(svc);
  const usesLocalPolicyChain = cat.localEndpoints.length > 0 && usesLocalEndpoints(svc);
  let hasInternalEndpoints = hasEndpoints;
  if (svc.internalPolicyLocal && cat.localEndpoints.length === 0) hasInternalEndpoints = false;
  let hasExternalEndpoints = hasEndpoints;
  if (svc.externalPolicyLocal && cat.localEndpoints.length === 0) hasExternalEndpoints = false;
  // Based on hasEndpoints, not hasExternalEndpoints: the short-circuit rules are needed even when
  // no endpoint can take external traffic.
  const usesExternalTrafficChain = hasEndpoints && externallyAccessible(svc);
  const usesFWChain = hasEndpoints && svc.loadBalancerVIPs.length > 0 &&
    svc.loadBalancerSourceRanges.length > 0;

  let noLocal = 0;
  if (hasEndpoints) {
    if (!hasInternalEndpoints) noLocal |= NoLocal.Internal;
    if (!hasExternalEndpoints) noLocal |= NoLocal.External;
  }
  const flags = (hasEndpoints ? SharedRuleFlags.HasEndpoints : 0) |
    (hasInternalEndpoints ? SharedRuleFlags.HasInternalEndpoints : 0) |
    (hasExternalEndpoints ? SharedRuleFlags.HasExternalEndpoints : 0);
  writeSharedRules(ctx.sink, svc, spn, protocol, names, flags, ctx.localhostNodePortsNfacct);

  const reachable = cat.allReachableEndpoints;
  let seps = reuse?.seps;
  if (seps === undefined) {
    seps = endpointHashes(spn, protocol, reachable);
    ctx.work.hashes += reachable.length;
  }
  const ownChains = (usesExternalTrafficChain ? OwnChain.External : 0) |
    (usesFWChain ? OwnChain.Firewall : 0) |
    (usesClusterPolicyChain ? OwnChain.ClusterPolicy : 0) |
    (usesLocalPolicyChain ? OwnChain.LocalPolicy : 0);
  const plan: OwnChainsPlan = {
    hasInternalEndpoints,
    hasExternalEndpoints,
    ownChains,
    clusterEndpoints: cat.clusterEndpoints,
    localEndpoints: cat.localEndpoints,
    reachable,
    seps,
  };
  const chainRules = internCounts(internedOwn, ownChainRules(ctx, svc, plan));
  const ownRules = own === null
    ? countOwnChains(chainRules, plan)
    : writeOwnChains(ctx, own, svc, spn, protocol, names, plan);
  return {
    svc,
    endpoints,
    problem: null,
    flags,
    ownChains,
    noLocal,
    hash,
    seps,
    endpointCount: endpoints?.length ?? 0,
    ownRules,
    chainRules,
    shared: internCounts(internedShared, ctx.counts),
  };
}

/**
 * Writes the own chains of a service port from the facts a render derived for it (`f.problem` null) into
 * `own`: the same text processServicePort writes when given `own`. Its endpoint categories are derived
 * again (the facts keep only their outcome: flags, own chains, KUBE-SEP hashes); counts no work. Returns
 * the number of rules written (f.ownRules).
 */
export function writeOwnChainsOf(ctx: Context, f: ServicePortFacts, own: OwnChainsOut): number {
  const svc = f.svc;
  const cat = categorize(ctx, svc, sortedByEndpoint(f.endpoints ?? EMPTY_ENDPOINTS));
  return writeOwnChains(
    ctx,
    own,
    svc,
    servicePortNameString(svc.name),
    svc.protocol.toLowerCase(),
    chainsForHash(f.hash),
    {
      hasInternalEndpoints: (f.flags & SharedRuleFlags.HasInternalEndpoints) !== 0,
      hasExternalEndpoints: (f.flags & SharedRuleFlags.HasExternalEndpoints) !== 0,
      ownChains: f.ownChains,
      clusterEndpoints: cat.clusterEndpoints,
      localEndpoints: cat.localEndpoints,
      reachable: cat.allReachableEndpoints,
      seps: f.seps,
    },
  );
}

/** Own chains (KUBE-SVC/SVL/EXT/FW, one KUBE-SEP per reachable endpoint) that `f` declares. */
export function ownChainCount(f: ServicePortFacts): number {
  let n = f.seps.length / HASH_LENGTH;
  for (let bits = f.ownChains; bits !== 0; bits &= bits - 1) n++;
  return n;
}

/** `eps` (sorted) categorised for `svc` under the render's node and topology settings. */
function categorize(ctx: Context, svc: ServicePortInfo, eps: readonly EndpointInfo[]) {
  return categorizeEndpoints(eps, svc, ctx.nodeName, ctx.nodeLabels, {
    preferSameTrafficDistribution: ctx.preferSameTrafficDistribution,
  });
}

/** Why a service port cannot be written safely (its own fields, then its endpoints), or null. */
function servicePortProblem(
  svc: ServicePortInfo,
  eps: readonly EndpointInfo[],
  ipv6: boolean,
): string | null {
  const problem = checkServicePort(svc, ipv6);
  if (problem !== null) return problem;
  for (const ep of eps) {
    const epProblem = checkEndpoint(ep, ipv6);
    if (epProblem !== null) return epProblem;
  }
  return null;
}

/** True when a partial sync writes this service port's own chains (it, or its Service, changed). */
export function isWritten(input: RenderInput, key: string, svc: ServicePortInfo): boolean {
  if (input.full || input.changedServices.has(key)) return true;
  const n = svc.name;
  return n !== undefined && n !== null && input.changedServices.has(namespacedName(n.namespace, n.name));
}
