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
 *    shared chain ends up equal, in order, to a full sync's (see incremental.ts); a fixed chain is
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
 * (payload.ts), never as one array of every line.
 */
import type { EndpointInfo, IPFamily, ServicePortInfo } from "../../types.ts";
import { externallyAccessible, servicePortNameString } from "../../types.ts";
import {
  categorizeEndpoints,
  LABEL_TOPOLOGY_ZONE,
  usesClusterEndpoints,
  usesLocalEndpoints,
} from "../../topology.ts";
import {
  chainsForHash,
  endpointHash,
  isServiceChainName,
  KUBE_EXTERNAL_SERVICES,
  KUBE_FIREWALL,
  KUBE_FORWARD,
  KUBE_MARK_MASQ,
  KUBE_NODEPORTS,
  KUBE_POSTROUTING,
  KUBE_PROXY_FIREWALL,
  KUBE_SERVICES,
  portProtoHash,
  SEP_PREFIX,
  type ServicePortChains,
} from "../chain_names.ts";
import { type LocalTrafficDetector, newNoOpLocalDetector } from "../local_detector.ts";
import { newNodePortAddresses } from "../../nodeport_addresses.ts";
import { probability } from "./probability.ts";
import { cidrContains, formatCIDR, isLoopback, parseCIDR, parseIPOfFamily } from "../../../net/ip.ts";
import { checkArgs, checkEndpoint, checkServicePort } from "./validate.ts";
import { deleteLine, SharedChainDiff } from "./incremental.ts";
import {
  NFACCT_LOCALHOST_NODEPORTS_ACCEPTED,
  SHARED_CHAIN_COUNT,
  SHARED_CHAIN_TABLE,
  type SharedChain,
  SharedRuleFlags,
  type SharedRuleSink,
  writeSharedRules,
} from "./shared_chains.ts";
import {
  type FixedChainRules,
  forEachOwnChain,
  HASH_LENGTH,
  NoLocal,
  OwnChain,
  type RenderState,
  type RenderTotals,
  sameRules,
  type ServicePortFacts,
  TotalsBuilder,
} from "./state.ts";
import { SharedChainPositions } from "./positions.ts";
import { ActiveNatChains } from "./active_chains.ts";
import { concatChunks, PayloadWriter } from "./payload.ts";

export { NFACCT_LOCALHOST_NODEPORTS_ACCEPTED };
export type { RenderState };

/** Above this many endpoints in total, comments are dropped from SEP and SVC→SEP rules (upstream). */
export const LARGE_CLUSTER_ENDPOINTS_THRESHOLD = 1000;

/**
 * An incremental partial sync that would declare or delete more per-service chains than this is written
 * upstream's way instead: the incremental payload's `-D`/`-I` lines keep it in one transaction, while
 * iptables-nft's cost grows quadratically with the chains declared in one transaction and the restore
 * planner (restore_plan.ts) can split an upstream-style payload (measured in a netns with 5000 Services:
 * adding 200 Services 0.3 s incremental vs 1.0 s split; adding 1000 Services 3.6 s vs 2.0 s).
 */
export const INCREMENTAL_MAX_CHAINS = 1000;

/** nfacct counter on the KUBE-FORWARD INVALID drop rule. */
export const NFACCT_CT_STATE_INVALID_DROPPED = "ct_state_invalid_dropped_pkts";

/** Kernel/iptables capabilities and behaviour switches probed or configured by the caller. */
export interface RenderFeatures {
  /** iptables supports MASQUERADE --random-fully (>= 1.6.2). */
  readonly randomFully: boolean;
  /** nfacct counters exist (upstream creates them on full syncs; false if that failed). */
  readonly nfacct: boolean;
  /** Write the KUBE-FORWARD conntrack INVALID drop rule (false when nf_conntrack_tcp_be_liberal=1). */
  readonly dropInvalid: boolean;
  /** PreferSameTrafficDistribution feature gate (default true): honour hints.forNodes. */
  readonly preferSameTrafficDistribution?: boolean;
}

/** Everything one sync of one IP family needs. */
export interface RenderInput {
  readonly family: IPFamily;
  /** Service ports of this family, keyed by servicePortKey. */
  readonly services: ReadonlyMap<string, ServicePortInfo>;
  /** Endpoints per service port (same keys), sorted by "ip:port" as the endpoint tracker keeps them. */
  readonly endpoints: ReadonlyMap<string, readonly EndpointInfo[]>;
  /** This node's name (endpoint locality is already in EndpointInfo.isLocal; used for node hints). */
  readonly nodeName: string;
  /** This node's labels (topology zone). */
  readonly nodeLabels: Readonly<Record<string, string>>;
  /**
   * The node's primary IP of this family (upstream proxier.nodeIP), or null. Used for the KUBE-FW rule
   * that admits LB-IP-sourced hairpin traffic when a source range contains the node IP.
   */
  readonly primaryNodeIP: string | null;
  /**
   * All local addresses of this family (upstream: network interface addresses, including loopback);
   * used to expand `nodePortAddresses` into per-IP KUBE-NODEPORTS jumps.
   */
  readonly nodeIPs: readonly string[];
  readonly masqueradeAll: boolean;
  /** 0..31; the mark is 1 << bit, formatted as Go's %#08x (bit 14 → 0x00004000). */
  readonly masqueradeBit: number;
  /**
   * iptables.localhostNodePorts. Effective only for IPv4 and only when nodePortAddresses covers an IPv4
   * loopback address (upstream NewProxier turns it off otherwise).
   */
  readonly localhostNodePorts: boolean;
  /** `--nodeport-addresses` CIDRs (either family; "primary" already resolved). Empty: all addresses. */
  readonly nodePortAddresses: readonly string[];
  readonly localDetector: LocalTrafficDetector;
  readonly features: RenderFeatures;
  /** Full sync: write every service port's chains. */
  readonly full: boolean;
  /**
   * Partial sync: service ports whose chains are written. Holds servicePortKey values and/or
   * "namespace/name" of whole Services (upstream tracks changes per Service). An incremental sync
   * re-derives only these service ports: every service port whose ServicePortInfo or endpoints array
   * is not the object the previous render saw must be named here (the change trackers guarantee it).
   */
  readonly changedServices: ReadonlySet<string>;
  /** Override of INCREMENTAL_MAX_CHAINS (tests, tuning). */
  readonly incrementalMaxChains?: number;
  /**
   * Chains now in the kernel's nat table (from iptables-save), or null to skip stale-chain deletion
   * (upstream skips it in large-cluster mode more often than once per syncPeriod). On an incremental
   * sync, pass the previous result's activeNatChains object itself: stale chains are then found from
   * the changed service ports without reading the whole set.
   */
  readonly existingNatChains: ReadonlySet<string> | null;
}

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
  /** The payload as flat chunks of whole lines (~40 KB each); their concatenation is `payload`. */
  readonly payloadChunks: readonly string[];
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

/** Upstream's masquerade mark: fmt.Sprintf("%#08x", 1<<bit) (Go pads the digits, not the "0x"). */
export function masqueradeMark(bit: number): string {
  if (!Number.isInteger(bit) || bit < 0 || bit > 31) {
    throw new RangeError(`masqueradeBit must be an integer in 0..31, got ${bit}`);
  }
  return "0x" + (2 ** bit).toString(16).padStart(8, "0");
}

/** Total endpoints over the given service ports (upstream's large-cluster measure: all, not only ready). */
export function totalEndpointCount(
  services: ReadonlyMap<string, ServicePortInfo>,
  endpoints: ReadonlyMap<string, readonly EndpointInfo[]>,
): number {
  let n = 0;
  for (const key of services.keys()) n += endpoints.get(key)?.length ?? 0;
  return n;
}

const EMPTY_ENDPOINTS: readonly EndpointInfo[] = Object.freeze([]);

function sortedByEndpoint(eps: readonly EndpointInfo[]): readonly EndpointInfo[] {
  for (let i = 1; i < eps.length; i++) {
    if (eps[i - 1].endpoint > eps[i].endpoint) {
      return [...eps].sort((a, b) => (a.endpoint < b.endpoint ? -1 : a.endpoint > b.endpoint ? 1 : 0));
    }
  }
  return eps;
}

/** Render-wide settings, validated once per render. */
interface Setup {
  readonly ipv6: boolean;
  /** Warnings about the settings (before any service port's). */
  readonly warnings: readonly string[];
  readonly primaryNodeIP: Uint8Array | null;
  readonly detector: LocalTrafficDetector;
  readonly npa: ReturnType<typeof newNodePortAddresses>;
  readonly localhostNodePorts: boolean;
  readonly localhostNodePortsNfacct: boolean;
  readonly preferSameTrafficDistribution: boolean;
  /** RenderState.context of this render. */
  readonly context: string;
  readonly fixedChains: FixedChainRules[];
}

function renderSetup(input: RenderInput): Setup {
  const ipv6 = input.family === "IPv6";
  const mark = masqueradeMark(input.masqueradeBit);
  const warnings: string[] = [];

  let primaryNodeIP: Uint8Array | null = null;
  if (input.primaryNodeIP !== null && input.primaryNodeIP !== "") {
    primaryNodeIP = parseIPOfFamily(input.primaryNodeIP, ipv6);
    if (primaryNodeIP === null) {
      warnings.push(`primaryNodeIP ${JSON.stringify(input.primaryNodeIP)} ignored: not ${input.family}`);
    }
  }

  let detector = input.localDetector;
  const detectorProblem = checkArgs("localDetector", [...detector.ifLocal, ...detector.ifNotLocal]);
  if (detectorProblem !== null) {
    warnings.push(`${detectorProblem}; local traffic detection disabled for this sync`);
    detector = newNoOpLocalDetector();
  }

  const npa = newNodePortAddresses(input.family, input.nodePortAddresses);
  for (const bad of npa.invalid) {
    warnings.push(`nodePortAddresses value ${JSON.stringify(bad)} ignored: not a CIDR`);
  }
  const localhostNodePorts = !ipv6 && input.localhostNodePorts && npa.containsIPv4Loopback;
  const localhostNodePortsNfacct = localhostNodePorts && input.features.nfacct;
  const preferSameTrafficDistribution = input.features.preferSameTrafficDistribution ?? true;
  const labels = input.nodeLabels;
  const zone = Object.hasOwn(labels, LABEL_TOPOLOGY_ZONE) ? labels[LABEL_TOPOLOGY_ZONE] : "";
  // Everything a service port's facts depend on besides its own objects (see ServicePortFacts).
  const context = JSON.stringify([
    input.family,
    input.nodeName,
    zone,
    preferSameTrafficDistribution,
    input.masqueradeAll,
    detector.implemented,
    primaryNodeIP === null ? "" : input.primaryNodeIP,
    localhostNodePortsNfacct,
  ]);
  return {
    ipv6,
    warnings,
    primaryNodeIP,
    detector,
    npa,
    localhostNodePorts,
    localhostNodePortsNfacct,
    preferSameTrafficDistribution,
    context,
    fixedChains: renderFixedChains(input, mark, localhostNodePorts),
  };
}

/** Mutable work counters of one render. */
interface WorkCounters {
  servicePorts: number;
  categorized: number;
  hashes: number;
  validated: number;
  scanned: number;
}

/** Per-render constants shared by every service port, plus the shared-rule sink. */
interface Context {
  readonly ipv6: boolean;
  readonly nodeName: string;
  readonly nodeLabels: Readonly<Record<string, string>>;
  readonly primaryNodeIP: Uint8Array | null;
  readonly masqueradeAll: boolean;
  readonly detector: LocalTrafficDetector;
  readonly ifLocal: string;
  readonly ifNotLocal: string;
  readonly localhostNodePortsNfacct: boolean;
  readonly largeClusterMode: boolean;
  readonly preferSameTrafficDistribution: boolean;
  /** Receives the service ports' shared-chain rules (it must count them in `counts`). */
  readonly sink: SharedRuleSink;
  /** Rules per shared chain of the service port being processed. */
  readonly counts: number[];
  readonly work: WorkCounters;
}

function newContext(
  input: RenderInput,
  setup: Setup,
  largeClusterMode: boolean,
  out: (c: SharedChain, line: string) => void,
): Context {
  const counts = new Array<number>(SHARED_CHAIN_COUNT).fill(0);
  return {
    ipv6: setup.ipv6,
    nodeName: input.nodeName,
    nodeLabels: input.nodeLabels,
    primaryNodeIP: setup.primaryNodeIP,
    masqueradeAll: input.masqueradeAll,
    detector: setup.detector,
    ifLocal: setup.detector.ifLocal.join(" "),
    ifNotLocal: setup.detector.ifNotLocal.join(" "),
    localhostNodePortsNfacct: setup.localhostNodePortsNfacct,
    largeClusterMode,
    preferSameTrafficDistribution: setup.preferSameTrafficDistribution,
    sink: (c: SharedChain, line: string) => {
      counts[c]++;
      out(c, line);
    },
    counts,
    work: { servicePorts: 0, categorized: 0, hashes: 0, validated: 0, scanned: 0 },
  };
}

/** Where a written service port's own chains go. */
interface OwnChainsOut {
  readonly decls: PayloadWriter;
  readonly rules: PayloadWriter;
}

/**
 * Interned rule-count vectors: most service ports share one of a handful (e.g. one KUBE-SERVICES jump),
 * so the state holds a few arrays instead of one per service port. Bounded; the values are immutable.
 */
const COUNTS_INTERN_LIMIT = 4096;
const internedCounts = new Map<number, readonly number[]>();

function internCounts(counts: readonly number[]): readonly number[] {
  let key = 0;
  for (let c = 0; c < SHARED_CHAIN_COUNT; c++) {
    if (counts[c] >= 64) return Object.freeze([...counts]);
    key = key * 64 + counts[c];
  }
  let v = internedCounts.get(key);
  if (v === undefined) {
    v = Object.freeze([...counts]);
    if (internedCounts.size < COUNTS_INTERN_LIMIT) internedCounts.set(key, v);
  }
  return v;
}

const ZERO_COUNTS = internCounts(new Array<number>(SHARED_CHAIN_COUNT).fill(0));

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
    shared: ZERO_COUNTS,
  };
}

/**
 * Processes one service port: derives its facts (or takes `reuse`, its previous facts when its objects
 * and the render context are unchanged), writes its shared-chain rules into ctx.sink, and its own chains
 * into `own` (when null they are only counted: a partial sync leaves them in the kernel).
 */
function processServicePort(
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
  const cat = categorizeEndpoints(eps, svc, ctx.nodeName, ctx.nodeLabels, {
    preferSameTrafficDistribution: ctx.preferSameTrafficDistribution,
  });
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
    const hashes: string[] = [];
    for (const ep of reachable) hashes.push(endpointHash(spn, protocol, ep.endpoint));
    ctx.work.hashes += hashes.length;
    seps = hashes.join("");
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
  const ownRules = own === null
    ? (reuse?.ownRules ?? countOwnChains(ctx, svc, plan))
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
    shared: internCounts(ctx.counts),
  };
}

/** What a service port's own chains consist of (decided in processServicePort). */
interface OwnChainsPlan {
  readonly hasInternalEndpoints: boolean;
  readonly hasExternalEndpoints: boolean;
  /** OwnChain bits. */
  readonly ownChains: number;
  readonly clusterEndpoints: readonly EndpointInfo[];
  readonly localEndpoints: readonly EndpointInfo[];
  /** Endpoints with a KUBE-SEP chain, in order; `seps` holds their hashes. */
  readonly reachable: readonly EndpointInfo[];
  readonly seps: string;
}

/** KUBE-SEP chain names of `subset` (a subset of plan.reachable). */
function endpointChainNames(
  plan: OwnChainsPlan,
  subset: readonly EndpointInfo[],
  spn: string,
  protocol: string,
): string[] {
  const all: string[] = [];
  for (let i = 0; i < plan.seps.length; i += HASH_LENGTH) {
    all.push(SEP_PREFIX + plan.seps.slice(i, i + HASH_LENGTH));
  }
  if (subset === plan.reachable) return all;
  const byEndpoint = new Map<string, string>();
  plan.reachable.forEach((ep, i) => byEndpoint.set(ep.endpoint, all[i]));
  return subset.map((ep) =>
    byEndpoint.get(ep.endpoint) ?? SEP_PREFIX + endpointHash(spn, protocol, ep.endpoint)
  );
}

/** Writes a service port's own chains; returns the number of rules written. */
function writeOwnChains(
  ctx: Context,
  own: OwnChainsOut,
  svc: ServicePortInfo,
  spn: string,
  protocol: string,
  names: ServicePortChains,
  plan: OwnChainsPlan,
): number {
  const { decls, rules } = own;
  const before = rules.count;
  const mp = `-m ${protocol} -p ${protocol}`;
  const clusterPolicyChain = names.clusterPolicy;
  const localPolicyChain = names.localPolicy;
  const internalTrafficChain = svc.internalPolicyLocal ? localPolicyChain : clusterPolicyChain;
  const externalPolicyChain = svc.externalPolicyLocal ? localPolicyChain : clusterPolicyChain;
  const externalTrafficChain = names.external;
  const fwChain = names.firewall;

  if (plan.hasInternalEndpoints) {
    const args = `-m comment --comment "${spn} cluster IP" ${mp} -d ${svc.clusterIP} --dport ${svc.port}`;
    if (ctx.masqueradeAll) {
      rules.line(`-A ${internalTrafficChain} ${args} -j ${KUBE_MARK_MASQ}`);
    } else if (ctx.detector.implemented) {
      // Masquerade off-cluster traffic to the service VIP (it may be bridged in via a static route).
      rules.line(`-A ${internalTrafficChain} ${args} ${ctx.ifNotLocal} -j ${KUBE_MARK_MASQ}`);
    }
  }

  if ((plan.ownChains & OwnChain.External) !== 0) {
    decls.line(`:${externalTrafficChain} - [0:0]`);
    if (!svc.externalPolicyLocal) {
      rules.line(
        `-A ${externalTrafficChain} -m comment --comment "masquerade traffic for ${spn} external destinations" -j ${KUBE_MARK_MASQ}`,
      );
    } else {
      if (ctx.detector.implemented) {
        // Pod → external destination acts as if it went out to the LB and came back: all endpoints.
        rules.line(
          `-A ${externalTrafficChain} -m comment --comment "pod traffic for ${spn} external destinations" ${ctx.ifLocal} -j ${clusterPolicyChain}`,
        );
      }
      rules.line(
        `-A ${externalTrafficChain} -m comment --comment "masquerade LOCAL traffic for ${spn} external destinations" -m addrtype --src-type LOCAL -j ${KUBE_MARK_MASQ}`,
      );
      rules.line(
        `-A ${externalTrafficChain} -m comment --comment "route LOCAL traffic for ${spn} external destinations" -m addrtype --src-type LOCAL -j ${clusterPolicyChain}`,
      );
    }
    if (plan.hasExternalEndpoints) rules.line(`-A ${externalTrafficChain} -j ${externalPolicyChain}`);
  }

  if ((plan.ownChains & OwnChain.Firewall) !== 0) {
    decls.line(`:${fwChain} - [0:0]`);
    const head = `-A ${fwChain} -m comment --comment "${spn} loadbalancer IP"`;
    let allowFromNode = false;
    for (const range of svc.loadBalancerSourceRanges) {
      const cidr = parseCIDR(range)!; // checked by checkServicePort
      rules.line(`${head} -s ${formatCIDR(cidr)} -j ${externalTrafficChain}`);
      if (ctx.primaryNodeIP !== null && cidrContains(cidr, ctx.primaryNodeIP)) allowFromNode = true;
    }
    // A node connecting to a VIP-like LB IP that is also a local address loops back with the LB IP as
    // source; admit that when the node itself is allowed.
    if (allowFromNode) {
      for (const lbip of svc.loadBalancerVIPs) rules.line(`${head} -s ${lbip} -j ${externalTrafficChain}`);
    }
    rules.line(
      `-A ${fwChain} -m comment --comment "other traffic to ${spn} will be dropped by KUBE-PROXY-FIREWALL"`,
    );
  }

  const affinitySeconds = svc.stickyMaxAgeSeconds;
  if ((plan.ownChains & OwnChain.ClusterPolicy) !== 0) {
    decls.line(`:${clusterPolicyChain} - [0:0]`);
    writeServiceToEndpointRules(
      ctx,
      rules,
      spn,
      affinitySeconds,
      clusterPolicyChain,
      plan.clusterEndpoints,
      endpointChainNames(plan, plan.clusterEndpoints, spn, protocol),
    );
  }
  if ((plan.ownChains & OwnChain.LocalPolicy) !== 0) {
    decls.line(`:${localPolicyChain} - [0:0]`);
    writeServiceToEndpointRules(
      ctx,
      rules,
      spn,
      affinitySeconds,
      localPolicyChain,
      plan.localEndpoints,
      endpointChainNames(plan, plan.localEndpoints, spn, protocol),
    );
  }

  // Endpoint chains.
  const comment = ctx.largeClusterMode ? "" : ` -m comment --comment ${spn}`;
  const epChains = endpointChainNames(plan, plan.reachable, spn, protocol);
  for (let i = 0; i < plan.reachable.length; i++) {
    const ep = plan.reachable[i];
    const epChain = epChains[i];
    decls.line(`:${epChain} - [0:0]`);
    // Hairpin: an endpoint reaching itself through the service must be masqueraded.
    rules.line(`-A ${epChain}${comment} -s ${ep.ip} -j ${KUBE_MARK_MASQ}`);
    const recent = affinitySeconds > 0 ? ` -m recent --name ${epChain} --set` : "";
    rules.line(`-A ${epChain}${comment}${recent} ${mp} -j DNAT --to-destination ${ep.endpoint}`);
  }
  return rules.count - before;
}

/**
 * The number of rules writeOwnChains would write, without building the rule text (upstream writes them
 * to a discard buffer for the same purpose). Must mirror writeOwnChains; tests compare both paths.
 */
function countOwnChains(ctx: Context, svc: ServicePortInfo, plan: OwnChainsPlan): number {
  let n = plan.hasInternalEndpoints && (ctx.masqueradeAll || ctx.detector.implemented) ? 1 : 0;
  if ((plan.ownChains & OwnChain.External) !== 0) {
    n += svc.externalPolicyLocal ? (ctx.detector.implemented ? 3 : 2) : 1;
    if (plan.hasExternalEndpoints) n++;
  }
  if ((plan.ownChains & OwnChain.Firewall) !== 0) {
    let allowFromNode = false;
    for (const range of svc.loadBalancerSourceRanges) {
      if (ctx.primaryNodeIP !== null && cidrContains(parseCIDR(range)!, ctx.primaryNodeIP)) {
        allowFromNode = true;
      }
    }
    n += svc.loadBalancerSourceRanges.length + 1 + (allowFromNode ? svc.loadBalancerVIPs.length : 0);
  }
  const perEndpoint = svc.stickyMaxAgeSeconds > 0 ? 2 : 1;
  if ((plan.ownChains & OwnChain.ClusterPolicy) !== 0) n += perEndpoint * plan.clusterEndpoints.length;
  if ((plan.ownChains & OwnChain.LocalPolicy) !== 0) n += perEndpoint * plan.localEndpoints.length;
  return n + 2 * plan.reachable.length;
}

/** Upstream writeServiceToEndpointRules: affinity checks first, then the probability cascade. */
function writeServiceToEndpointRules(
  ctx: Context,
  rules: PayloadWriter,
  spn: string,
  affinitySeconds: number,
  svcChain: string,
  endpoints: readonly EndpointInfo[],
  epChains: readonly string[],
): void {
  const comment = (
    ep: EndpointInfo,
  ) => (ctx.largeClusterMode ? "" : ` -m comment --comment "${spn} -> ${ep.endpoint}"`);
  if (affinitySeconds > 0) {
    for (let i = 0; i < endpoints.length; i++) {
      rules.line(
        `-A ${svcChain}${comment(endpoints[i])} -m recent --name ${
          epChains[i]
        } --rcheck --seconds ${affinitySeconds} --reap -j ${epChains[i]}`,
      );
    }
  }
  const n = endpoints.length;
  for (let i = 0; i < n; i++) {
    const stat = i < n - 1 ? ` -m statistic --mode random --probability ${probability(n - i)}` : "";
    rules.line(`-A ${svcChain}${comment(endpoints[i])}${stat} -j ${epChains[i]}`);
  }
}

/** True when a partial sync writes this service port's own chains (it, or its Service, changed). */
function isWritten(input: RenderInput, key: string, svc: ServicePortInfo): boolean {
  if (input.full || input.changedServices.has(key)) return true;
  const n = svc.name;
  return n !== undefined && n !== null && input.changedServices.has(`${n.namespace}/${n.name}`);
}

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

/** Shared-chain and fixed-chain rule totals (sync_proxy_rules_iptables_total). */
function rulesTotalOf(
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

/** Stale per-service chains: those in `existing` that no service port's facts name (sorted). */
function staleChainsByScan(
  existing: ReadonlySet<string> | null,
  facts: readonly ServicePortFacts[],
): string[] {
  if (existing === null) return [];
  const candidates: string[] = [];
  for (const chain of existing) if (isServiceChainName(chain)) candidates.push(chain);
  if (candidates.length === 0) return candidates;
  const active = new Set<string>();
  const add = (c: string) => active.add(c);
  for (const f of facts) forEachOwnChain(f, add);
  return candidates.filter((c) => !active.has(c)).sort();
}

/** A RenderResult whose `payload` is joined from `chunks` on first read. */
function resultWithPayload(
  fields: Omit<RenderResult, "payload" | "payloadChunks">,
  chunks: readonly string[],
): RenderResult {
  let parts: readonly string[] | null = chunks;
  let text: string | null = null;
  return {
    ...fields,
    get payload(): string {
      if (text === null) {
        text = parts!.join("");
        parts = null;
      }
      return text;
    },
    get payloadChunks(): readonly string[] {
      return parts ?? [text!];
    },
  };
}

/** Full sync, or upstream's partial sync: every shared and fixed chain is rewritten. */
function renderAll(
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
  const own: OwnChainsOut = { decls: new PayloadWriter(), rules: new PayloadWriter() };

  const facts: ServicePortFacts[] = new Array(keys.length);
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
    facts[i] = f;
    totals.add(f);
    if (f.problem !== null) {
      warnings.push(`service port ${JSON.stringify(key)} skipped: ${f.problem}`);
      skippedServices.push(key);
      skipped.push([key, f.problem]);
    }
  }
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

  const filterChains = [
    KUBE_SERVICES,
    KUBE_EXTERNAL_SERVICES,
    KUBE_FORWARD,
    KUBE_NODEPORTS,
    KUBE_PROXY_FIREWALL,
  ];
  if (setup.localhostNodePorts) filterChains.push(KUBE_FIREWALL);
  const head = new PayloadWriter();
  head.line("*filter");
  for (const c of filterChains) head.line(`:${c} - [0:0]`);
  const natHead = new PayloadWriter();
  natHead.line("COMMIT");
  natHead.line("*nat");
  for (const c of [KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_MARK_MASQ]) {
    natHead.line(`:${c} - [0:0]`);
  }
  const staleDecls = new PayloadWriter();
  for (const c of staleChains) staleDecls.line(`:${c} - [0:0]`);
  const tail = new PayloadWriter();
  for (const c of staleChains) tail.line(`-X ${c}`);
  tail.lines(nodePortsTail);
  tail.line("COMMIT");
  const chunks = concatChunks([head, filterRules, natHead, own.decls, staleDecls, natRules, own.rules, tail]);

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
    work: { ...ctx.work },
  }, chunks);
}

/** Index of `key` in the sorted `keys`, or -1. */
function indexOfKey(keys: readonly string[], key: string): number {
  const i = lowerBound(keys, key);
  return i < keys.length && keys[i] === key ? i : -1;
}

/** First index whose key is >= `key` (sorted `keys`). */
function lowerBound(keys: readonly string[], key: string): number {
  let lo = 0;
  let hi = keys.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (keys[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Which service ports an incremental sync processes, and the key order after it. */
interface IncrementalPlan {
  /** Current keys, sorted. */
  readonly keys: readonly string[];
  /** Facts per key: the previous ones (replaced as keys are processed), null for new keys. */
  readonly facts: (ServicePortFacts | null)[];
  /** Indices (into keys) to process, ascending. */
  readonly process: number[];
  /** Previous facts of each processed key (same order), null when it is new. */
  readonly old: (ServicePortFacts | null)[];
  /** Previous facts of the keys that are gone, in key order. */
  readonly removed: ServicePortFacts[];
  readonly removedKeys: string[];
  /** Keys were added or removed (indices shifted). */
  readonly membershipChanged: boolean;
}

/**
 * The plan from changedServices alone: the named keys, and the previous keys of the named Services.
 * Returns null when the Map holds keys that this does not account for (a new port of a Service named
 * only as "namespace/name"): the caller then scans.
 */
function planFromChanges(input: RenderInput, prev: RenderState): IncrementalPlan | null {
  const pk = prev.keys;
  const candidates = new Set<string>();
  for (const e of input.changedServices) {
    candidates.add(e);
    // A Service's ports: "ns/name/PROTO" (unnamed port) and "ns/name:port/PROTO".
    for (const prefix of [e + "/", e + ":"]) {
      for (let j = lowerBound(pk, prefix); j < pk.length && pk[j].startsWith(prefix); j++) {
        candidates.add(pk[j]);
      }
    }
  }
  const dirty: number[] = [];
  const added: string[] = [];
  const removedIdx: number[] = [];
  for (const k of candidates) {
    const pi = indexOfKey(pk, k);
    const present = input.services.has(k);
    if (pi >= 0) (present ? dirty : removedIdx).push(pi);
    else if (present) added.push(k);
  }
  if (pk.length - removedIdx.length + added.length !== input.services.size) return null;
  dirty.sort((a, b) => a - b);
  removedIdx.sort((a, b) => a - b);
  const removed = removedIdx.map((i) => prev.facts[i]);
  const removedKeys = removedIdx.map((i) => pk[i]);
  if (added.length === 0 && removedIdx.length === 0) {
    return {
      keys: pk,
      facts: prev.facts.slice(),
      process: dirty,
      old: dirty.map((i) => prev.facts[i]),
      removed,
      removedKeys,
      membershipChanged: false,
    };
  }
  // Merge the surviving previous keys with the new ones.
  added.sort();
  const dirtySet = new Set(dirty);
  const removedSet = new Set(removedIdx);
  const keys: string[] = [];
  const facts: (ServicePortFacts | null)[] = [];
  const process: number[] = [];
  const old: (ServicePortFacts | null)[] = [];
  let a = 0;
  for (let i = 0; i <= pk.length; i++) {
    const k = i < pk.length ? pk[i] : null;
    while (a < added.length && (k === null || added[a] < k)) {
      process.push(keys.length);
      old.push(null);
      keys.push(added[a++]);
      facts.push(null);
    }
    if (k === null || removedSet.has(i)) continue;
    if (dirtySet.has(i)) {
      process.push(keys.length);
      old.push(prev.facts[i]);
    }
    keys.push(k);
    facts.push(prev.facts[i]);
  }
  return { keys, facts, process, old, removed, removedKeys, membershipChanged: true };
}

/**
 * The plan by scanning every current key: named, new, or with a ServicePortInfo or endpoints array
 * other than the previous render's (all of them when the render context changed).
 */
function planByScan(input: RenderInput, prev: RenderState, sameContext: boolean): IncrementalPlan {
  const sorted = [...input.services.keys()].sort();
  const pk = prev.keys;
  const facts: (ServicePortFacts | null)[] = new Array(sorted.length);
  const process: number[] = [];
  const old: (ServicePortFacts | null)[] = [];
  const removed: ServicePortFacts[] = [];
  const removedKeys: string[] = [];
  let added = 0;
  let pi = 0;
  for (let i = 0; i < sorted.length; i++) {
    const key = sorted[i];
    while (pi < pk.length && pk[pi] < key) {
      removed.push(prev.facts[pi]);
      removedKeys.push(pk[pi++]);
    }
    if (pi < pk.length && pk[pi] === key) {
      const f = prev.facts[pi++];
      facts[i] = f;
      const svc = input.services.get(key)!;
      if (
        !sameContext || f.svc !== svc || f.endpoints !== input.endpoints.get(key) ||
        isWritten(input, key, svc)
      ) {
        process.push(i);
        old.push(f);
      }
    } else {
      facts[i] = null;
      process.push(i);
      old.push(null);
      added++;
    }
  }
  while (pi < pk.length) {
    removed.push(prev.facts[pi]);
    removedKeys.push(pk[pi++]);
  }
  const membershipChanged = added > 0 || removed.length > 0;
  return {
    keys: membershipChanged ? sorted : pk,
    facts,
    process,
    old,
    removed,
    removedKeys,
    membershipChanged,
  };
}

/**
 * Incremental partial sync (see the module comment). Returns null when it would declare or delete more
 * per-service chains than incrementalMaxChains (the caller then renders upstream's partial sync).
 */
function renderIncremental(
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
    work: { ...ctx.work },
  }, chunks);
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

/**
 * The chains with a fixed set of rules: filter KUBE-FIREWALL (only with localhost NodePorts) and
 * KUBE-FORWARD, nat KUBE-POSTROUTING and KUBE-MARK-MASQ.
 */
function renderFixedChains(input: RenderInput, mark: string, localhostNodePorts: boolean): FixedChainRules[] {
  const out: FixedChainRules[] = [];
  if (localhostNodePorts) {
    // route_localnet opens a hole (issue 90259) that this copy of kubelet's rule closes.
    out.push({
      table: "filter",
      chain: KUBE_FIREWALL,
      rules: [
        `-A ${KUBE_FIREWALL} -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`,
      ],
    });
  }
  const forward: string[] = [];
  if (input.features.dropInvalid) {
    forward.push(
      `-A ${KUBE_FORWARD} -m conntrack --ctstate INVALID` +
        (input.features.nfacct ? ` -m nfacct --nfacct-name ${NFACCT_CT_STATE_INVALID_DROPPED}` : "") +
        " -j DROP",
    );
  }
  // Forward marked traffic even when the FORWARD policy is not ACCEPT, and everything that follows it.
  forward.push(
    `-A ${KUBE_FORWARD} -m comment --comment "kubernetes forwarding rules" -m mark --mark ${mark}/${mark} -j ACCEPT`,
  );
  forward.push(
    `-A ${KUBE_FORWARD} -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`,
  );
  out.push({ table: "filter", chain: KUBE_FORWARD, rules: forward });
  out.push({
    table: "nat",
    chain: KUBE_POSTROUTING,
    rules: [
      `-A ${KUBE_POSTROUTING} -m mark ! --mark ${mark}/${mark} -j RETURN`,
      // Clear the mark so a packet that re-traverses the stack is not masqueraded twice.
      `-A ${KUBE_POSTROUTING} -j MARK --xor-mark ${mark}`,
      `-A ${KUBE_POSTROUTING} -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE` +
      (input.features.randomFully ? " --random-fully" : ""),
    ],
  });
  out.push({
    table: "nat",
    chain: KUBE_MARK_MASQ,
    rules: [`-A ${KUBE_MARK_MASQ} -j MARK --or-mark ${mark}`],
  });
  return out;
}

/** The jump(s) to KUBE-NODEPORTS, which must be the last rule(s) of nat KUBE-SERVICES. */
function renderNodePortsTail(
  input: RenderInput,
  npa: ReturnType<typeof newNodePortAddresses>,
  localhostNodePorts: boolean,
  warnings: string[],
): string[] {
  const ipv6 = input.family === "IPv6";
  const tail: string[] = [];
  const nodePortsComment =
    `-m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain"`;
  if (npa.matchAll) {
    // Localhost NodePorts never work on IPv6, and on IPv4 only with route_localnet.
    const notLocalhost = ipv6 ? " ! -d ::1/128" : (!localhostNodePorts ? " ! -d 127.0.0.0/8" : "");
    tail.push(
      `-A ${KUBE_SERVICES} ${nodePortsComment} -m addrtype --dst-type LOCAL${notLocalhost} -j ${KUBE_NODEPORTS}`,
    );
    return tail;
  }
  for (const ip of npa.nodeIPs(input.nodeIPs)) {
    const b = parseIPOfFamily(ip, ipv6);
    if (b === null) continue;
    if (isLoopback(b)) {
      if (ipv6) {
        warnings.push(
          `nodePortAddresses includes localhost ${ip}, but localhost NodePorts are not supported on IPv6`,
        );
        continue;
      }
      if (!localhostNodePorts) {
        warnings.push(`nodePortAddresses includes localhost ${ip}, but localhost NodePorts are disabled`);
        continue;
      }
    }
    tail.push(`-A ${KUBE_SERVICES} ${nodePortsComment} -d ${ip} -j ${KUBE_NODEPORTS}`);
  }
  return tail;
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

function fixedRuleCount(fixed: readonly FixedChainRules[], table: "filter" | "nat"): number {
  let n = 0;
  for (const f of fixed) if (f.table === table) n += f.rules.length;
  return n;
}
