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
 *    shared chain ends up equal, in order, to a full sync's (see render_incremental.ts); a fixed chain is
 *    rewritten only when its rules changed. The payload size then depends on what changed, not on the
 *    number of Services.
 * Full syncs write everything, byte for byte as before, and every render returns a fresh RenderState
 * for the next one (the caller keeps it only once the payload was applied).
 */
import type { EndpointInfo, IPFamily, ServicePortInfo } from "../model/types.ts";
import { externallyAccessible, servicePortNameString } from "../model/types.ts";
import { categorizeEndpoints, usesClusterEndpoints, usesLocalEndpoints } from "../model/topology.ts";
import {
  isServiceChainName,
  KUBE_EXTERNAL_SERVICES,
  KUBE_FIREWALL,
  KUBE_FORWARD,
  KUBE_MARK_MASQ,
  KUBE_NODEPORTS,
  KUBE_POSTROUTING,
  KUBE_PROXY_FIREWALL,
  KUBE_SERVICES,
  servicePortChains,
  servicePortEndpointChain,
} from "./chain_names.ts";
import { type LocalTrafficDetector, newNoOpLocalDetector } from "./local_detector.ts";
import { newNodePortAddresses } from "./nodeport_addresses.ts";
import { probability } from "./probability.ts";
import { cidrContains, formatCIDR, isLoopback, parseCIDR, parseIPOfFamily } from "./render_ip.ts";
import { checkArgs, checkEndpoint, checkServicePort } from "./render_validate.ts";
import { deleteLine, SharedChainDiff } from "./render_incremental.ts";
import {
  NFACCT_LOCALHOST_NODEPORTS_ACCEPTED,
  SHARED_CHAIN_COUNT,
  SHARED_CHAIN_TABLE,
  type SharedChain,
  SharedRuleFlags,
  type SharedRuleSink,
  writeSharedRules,
} from "./render_shared.ts";
import { type FixedChainRules, type RenderState, sameRules } from "./render_state.ts";

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
   * "namespace/name" of whole Services (upstream tracks changes per Service).
   */
  readonly changedServices: ReadonlySet<string>;
  /** Override of INCREMENTAL_MAX_CHAINS (tests, tuning). */
  readonly incrementalMaxChains?: number;
  /**
   * Chains now in the kernel's nat table (from iptables-save), or null to skip stale-chain deletion
   * (upstream skips it in large-cluster mode more often than once per syncPeriod).
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

/** What one render produced. */
export interface RenderResult {
  /** `*filter ... COMMIT\n*nat ... COMMIT\n` for iptables-restore --noflush --counters. */
  readonly payload: string;
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
  /** Every per-service nat chain (SVC/SVL/EXT/FW/SEP) that exists once the payload is applied. */
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

/** Per-render constants shared by every service port. */
interface Context {
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
  readonly activeNatChains: Set<string>;
  /** Receives the service ports' shared-chain rules. */
  readonly sink: SharedRuleSink;
  /** SharedRuleFlags per service port, by processing index (becomes RenderState.flags). */
  readonly flags: Uint8Array;
  noLocalInternal: number;
  noLocalExternal: number;
}

/**
 * Writes one service port: its shared-chain rules (filter rules, nat KUBE-SERVICES/KUBE-NODEPORTS jumps)
 * into ctx.sink, its SharedRuleFlags into ctx.flags[index], and its own chains into `own` (or, when `own`
 * is null, only counts them). Returns the number of rules in its own chains.
 */
function renderServicePort(
  ctx: Context,
  index: number,
  svc: ServicePortInfo,
  allEndpoints: readonly EndpointInfo[],
  own: { chains: string[]; rules: string[] } | null,
): number {
  const protocol = svc.protocol.toLowerCase();
  const spn = servicePortNameString(svc.name);
  const names = servicePortChains(spn, protocol);
  const cat = categorizeEndpoints(allEndpoints, svc, ctx.nodeName, ctx.nodeLabels, {
    preferSameTrafficDistribution: ctx.preferSameTrafficDistribution,
  });
  const hasEndpoints = cat.hasAnyEndpoints;
  const clusterPolicyChain = names.clusterPolicy;
  const usesClusterPolicyChain = cat.clusterEndpoints.length > 0 && usesClusterEndpoints(svc);
  const localPolicyChain = names.localPolicy;
  const usesLocalPolicyChain = cat.localEndpoints.length > 0 && usesLocalEndpoints(svc);

  let internalTrafficChain = clusterPolicyChain;
  let hasInternalEndpoints = hasEndpoints;
  if (svc.internalPolicyLocal) {
    internalTrafficChain = localPolicyChain;
    if (cat.localEndpoints.length === 0) hasInternalEndpoints = false;
  }
  let externalPolicyChain = clusterPolicyChain;
  let hasExternalEndpoints = hasEndpoints;
  if (svc.externalPolicyLocal) {
    externalPolicyChain = localPolicyChain;
    if (cat.localEndpoints.length === 0) hasExternalEndpoints = false;
  }
  const externalTrafficChain = names.external;
  // Based on hasEndpoints, not hasExternalEndpoints: the short-circuit rules are needed even when
  // no endpoint can take external traffic.
  const usesExternalTrafficChain = hasEndpoints && externallyAccessible(svc);
  const fwChain = names.firewall;
  const usesFWChain = hasEndpoints && svc.loadBalancerVIPs.length > 0 &&
    svc.loadBalancerSourceRanges.length > 0;

  if (hasEndpoints) {
    if (!hasInternalEndpoints) ctx.noLocalInternal++;
    if (!hasExternalEndpoints) ctx.noLocalExternal++;
  }
  const flags = (hasEndpoints ? SharedRuleFlags.HasEndpoints : 0) |
    (hasInternalEndpoints ? SharedRuleFlags.HasInternalEndpoints : 0) |
    (hasExternalEndpoints ? SharedRuleFlags.HasExternalEndpoints : 0);
  ctx.flags[index] = flags;
  writeSharedRules(ctx.sink, svc, spn, protocol, names, flags, ctx.localhostNodePortsNfacct);

  const mp = `-m ${protocol} -p ${protocol}`;
  const port = svc.port;
  const cip = svc.clusterIP;

  // From here on: the service port's own chains. On a partial sync an unchanged service port's chains
  // stay in the kernel: only their names (active chains) and rule count are needed.
  if (own === null) {
    return countOwnChains(ctx, svc, spn, protocol, cat.allReachableEndpoints, {
      internalMasq: hasInternalEndpoints && (ctx.masqueradeAll || ctx.detector.implemented),
      external: usesExternalTrafficChain ? externalTrafficChain : null,
      hasExternalEndpoints,
      firewall: usesFWChain ? fwChain : null,
      cluster: usesClusterPolicyChain ? [clusterPolicyChain, cat.clusterEndpoints.length] : null,
      local: usesLocalPolicyChain ? [localPolicyChain, cat.localEndpoints.length] : null,
    });
  }
  const { chains, rules } = own;
  const before = rules.length;
  if (hasInternalEndpoints) {
    const args = `-m comment --comment "${spn} cluster IP" ${mp} -d ${cip} --dport ${port}`;
    if (ctx.masqueradeAll) {
      rules.push(`-A ${internalTrafficChain} ${args} -j ${KUBE_MARK_MASQ}`);
    } else if (ctx.detector.implemented) {
      // Masquerade off-cluster traffic to the service VIP (it may be bridged in via a static route).
      rules.push(`-A ${internalTrafficChain} ${args} ${ctx.ifNotLocal} -j ${KUBE_MARK_MASQ}`);
    }
  }

  if (usesExternalTrafficChain) {
    chains.push(`:${externalTrafficChain} - [0:0]`);
    ctx.activeNatChains.add(externalTrafficChain);
    if (!svc.externalPolicyLocal) {
      rules.push(
        `-A ${externalTrafficChain} -m comment --comment "masquerade traffic for ${spn} external destinations" -j ${KUBE_MARK_MASQ}`,
      );
    } else {
      if (ctx.detector.implemented) {
        // Pod → external destination acts as if it went out to the LB and came back: all endpoints.
        rules.push(
          `-A ${externalTrafficChain} -m comment --comment "pod traffic for ${spn} external destinations" ${ctx.ifLocal} -j ${clusterPolicyChain}`,
        );
      }
      rules.push(
        `-A ${externalTrafficChain} -m comment --comment "masquerade LOCAL traffic for ${spn} external destinations" -m addrtype --src-type LOCAL -j ${KUBE_MARK_MASQ}`,
      );
      rules.push(
        `-A ${externalTrafficChain} -m comment --comment "route LOCAL traffic for ${spn} external destinations" -m addrtype --src-type LOCAL -j ${clusterPolicyChain}`,
      );
    }
    if (hasExternalEndpoints) rules.push(`-A ${externalTrafficChain} -j ${externalPolicyChain}`);
  }

  if (usesFWChain) {
    chains.push(`:${fwChain} - [0:0]`);
    ctx.activeNatChains.add(fwChain);
    const head = `-A ${fwChain} -m comment --comment "${spn} loadbalancer IP"`;
    let allowFromNode = false;
    for (const range of svc.loadBalancerSourceRanges) {
      const cidr = parseCIDR(range)!; // checked by checkServicePort
      rules.push(`${head} -s ${formatCIDR(cidr)} -j ${externalTrafficChain}`);
      if (ctx.primaryNodeIP !== null && cidrContains(cidr, ctx.primaryNodeIP)) allowFromNode = true;
    }
    // A node connecting to a VIP-like LB IP that is also a local address loops back with the LB IP as
    // source; admit that when the node itself is allowed.
    if (allowFromNode) {
      for (const lbip of svc.loadBalancerVIPs) rules.push(`${head} -s ${lbip} -j ${externalTrafficChain}`);
    }
    rules.push(
      `-A ${fwChain} -m comment --comment "other traffic to ${spn} will be dropped by KUBE-PROXY-FIREWALL"`,
    );
  }

  const affinitySeconds = svc.stickyMaxAgeSeconds;
  if (usesClusterPolicyChain) {
    chains.push(`:${clusterPolicyChain} - [0:0]`);
    ctx.activeNatChains.add(clusterPolicyChain);
    writeServiceToEndpointRules(
      ctx,
      rules,
      spn,
      protocol,
      affinitySeconds,
      clusterPolicyChain,
      cat.clusterEndpoints,
    );
  }
  if (usesLocalPolicyChain) {
    chains.push(`:${localPolicyChain} - [0:0]`);
    ctx.activeNatChains.add(localPolicyChain);
    writeServiceToEndpointRules(
      ctx,
      rules,
      spn,
      protocol,
      affinitySeconds,
      localPolicyChain,
      cat.localEndpoints,
    );
  }

  // Endpoint chains.
  const comment = ctx.largeClusterMode ? "" : ` -m comment --comment ${spn}`;
  for (const ep of cat.allReachableEndpoints) {
    const epChain = servicePortEndpointChain(spn, protocol, ep.endpoint);
    chains.push(`:${epChain} - [0:0]`);
    ctx.activeNatChains.add(epChain);
    // Hairpin: an endpoint reaching itself through the service must be masqueraded.
    rules.push(`-A ${epChain}${comment} -s ${ep.ip} -j ${KUBE_MARK_MASQ}`);
    const recent = affinitySeconds > 0 ? ` -m recent --name ${epChain} --set` : "";
    rules.push(`-A ${epChain}${comment}${recent} ${mp} -j DNAT --to-destination ${ep.endpoint}`);
  }
  return rules.length - before;
}

/** What an unchanged service port's own chains consist of (decided in renderServicePort). */
interface OwnChainsPlan {
  readonly internalMasq: boolean;
  readonly external: string | null;
  readonly hasExternalEndpoints: boolean;
  readonly firewall: string | null;
  readonly cluster: readonly [string, number] | null;
  readonly local: readonly [string, number] | null;
}

/**
 * The number of rules renderServicePort would write into the service port's own chains, and their
 * names added to the active set, without building the rule text (upstream writes them to a discard
 * buffer for the same purpose). Must mirror renderServicePort; tests compare both paths.
 */
function countOwnChains(
  ctx: Context,
  svc: ServicePortInfo,
  spn: string,
  protocol: string,
  reachable: readonly EndpointInfo[],
  plan: OwnChainsPlan,
): number {
  let n = plan.internalMasq ? 1 : 0;
  if (plan.external !== null) {
    ctx.activeNatChains.add(plan.external);
    n += svc.externalPolicyLocal ? (ctx.detector.implemented ? 3 : 2) : 1;
    if (plan.hasExternalEndpoints) n++;
  }
  if (plan.firewall !== null) {
    ctx.activeNatChains.add(plan.firewall);
    let allowFromNode = false;
    for (const range of svc.loadBalancerSourceRanges) {
      if (ctx.primaryNodeIP !== null && cidrContains(parseCIDR(range)!, ctx.primaryNodeIP)) {
        allowFromNode = true;
      }
    }
    n += svc.loadBalancerSourceRanges.length + 1 + (allowFromNode ? svc.loadBalancerVIPs.length : 0);
  }
  const perEndpoint = svc.stickyMaxAgeSeconds > 0 ? 2 : 1;
  for (const policy of [plan.cluster, plan.local]) {
    if (policy === null) continue;
    ctx.activeNatChains.add(policy[0]);
    n += perEndpoint * policy[1];
  }
  for (const ep of reachable) ctx.activeNatChains.add(servicePortEndpointChain(spn, protocol, ep.endpoint));
  return n + 2 * reachable.length;
}

/** Upstream writeServiceToEndpointRules: affinity checks first, then the probability cascade. */
function writeServiceToEndpointRules(
  ctx: Context,
  rules: string[],
  spn: string,
  protocol: string,
  affinitySeconds: number,
  svcChain: string,
  endpoints: readonly EndpointInfo[],
): void {
  const epChains = endpoints.map((ep) => servicePortEndpointChain(spn, protocol, ep.endpoint));
  const comment = (
    ep: EndpointInfo,
  ) => (ctx.largeClusterMode ? "" : ` -m comment --comment "${spn} -> ${ep.endpoint}"`);
  if (affinitySeconds > 0) {
    for (let i = 0; i < endpoints.length; i++) {
      rules.push(
        `-A ${svcChain}${comment(endpoints[i])} -m recent --name ${
          epChains[i]
        } --rcheck --seconds ${affinitySeconds} --reap -j ${epChains[i]}`,
      );
    }
  }
  const n = endpoints.length;
  for (let i = 0; i < n; i++) {
    const stat = i < n - 1 ? ` -m statistic --mode random --probability ${probability(n - i)}` : "";
    rules.push(`-A ${svcChain}${comment(endpoints[i])}${stat} -j ${epChains[i]}`);
  }
}

/**
 * Renders one sync's iptables-restore payload. Pure: reads only `input` and `previous`.
 *
 * `previous` is the `state` of the last render whose payload iptables-restore applied successfully (null
 * when there is none, e.g. after a failure). A partial sync (`input.full` false) with a previous state of
 * the same family is incremental, unless it would touch more than INCREMENTAL_MAX_CHAINS per-service
 * chains; otherwise it is upstream's partial sync. Full syncs ignore `previous`.
 */
export function renderIptablesRules(input: RenderInput, previous: RenderState | null = null): RenderResult {
  const ipv6 = input.family === "IPv6";
  const mark = masqueradeMark(input.masqueradeBit);
  const warnings: string[] = [];
  const skippedServices: string[] = [];
  const incremental = !input.full && previous !== null && previous.family === input.family;
  const mode: RenderMode = input.full ? "full" : incremental ? "incremental" : "partial";

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

  const keys = [...input.services.keys()].sort();
  const totalEndpoints = totalEndpointCount(input.services, input.endpoints);
  const largeClusterMode = totalEndpoints > LARGE_CLUSTER_ENDPOINTS_THRESHOLD;

  const fixedChains = renderFixedChains(input, mark, localhostNodePorts);

  // Full and upstream-partial renders collect every shared-chain rule into the table's rule list (filter
  // rules between KUBE-FIREWALL's and KUBE-FORWARD's, as upstream); incremental renders collect one
  // service port at a time and diff it against the previous state.
  const filterRules: string[] = [];
  const natRules: string[] = [];
  const scratch: string[][] = Array.from({ length: SHARED_CHAIN_COUNT }, () => []);
  let sink: SharedRuleSink;
  if (incremental) {
    sink = (c: SharedChain, line: string) => {
      scratch[c].push(line);
    };
  } else {
    sink = (c: SharedChain, line: string) => {
      (SHARED_CHAIN_TABLE[c] === "filter" ? filterRules : natRules).push(line);
    };
    for (const f of fixedChains) {
      if (f.chain === KUBE_FIREWALL || f.table === "nat") {
        pushAll(f.table === "filter" ? filterRules : natRules, f.rules);
      }
    }
  }
  const diff = incremental ? new SharedChainDiff(previous!, localhostNodePortsNfacct) : null;
  const sharedRules = { filter: 0, nat: 0 };

  const stateServices: (ServicePortInfo | null)[] = new Array(keys.length);
  const ctx: Context = {
    nodeName: input.nodeName,
    nodeLabels: input.nodeLabels,
    primaryNodeIP,
    masqueradeAll: input.masqueradeAll,
    detector,
    ifLocal: detector.ifLocal.join(" "),
    ifNotLocal: detector.ifNotLocal.join(" "),
    localhostNodePortsNfacct,
    largeClusterMode,
    preferSameTrafficDistribution: input.features.preferSameTrafficDistribution ?? true,
    activeNatChains: new Set<string>(),
    sink,
    flags: new Uint8Array(keys.length),
    noLocalInternal: 0,
    noLocalExternal: 0,
  };

  // Service ports' own chains: declared and written only when the service port is synced this time.
  const svcChainDecls: string[] = [];
  const svcChainRules: string[] = [];
  const own = { chains: svcChainDecls, rules: svcChainRules };
  let skippedNatRules = 0;

  for (let i = 0; i < keys.length; i++) {
    const key = keys[i];
    const svc = input.services.get(key)!;
    const problem = servicePortProblem(svc, input.endpoints.get(key) ?? EMPTY_ENDPOINTS, ipv6);
    if (problem !== null) {
      warnings.push(`service port ${JSON.stringify(key)} skipped: ${problem}`);
      skippedServices.push(key);
      ctx.flags[i] = SharedRuleFlags.Skipped;
      stateServices[i] = null;
      diff?.servicePort(key, null, SharedRuleFlags.Skipped, scratch);
      continue;
    }
    const eps = sortedByEndpoint(input.endpoints.get(key) ?? EMPTY_ENDPOINTS);
    const write = input.full || input.changedServices.has(key) ||
      input.changedServices.has(`${svc.name.namespace}/${svc.name.name}`);
    if (write) {
      renderServicePort(ctx, i, svc, eps, own);
    } else {
      skippedNatRules += renderServicePort(ctx, i, svc, eps, null);
    }
    stateServices[i] = svc;
    if (diff !== null) {
      diff.servicePort(key, svc, ctx.flags[i], scratch);
      for (let c = 0; c < SHARED_CHAIN_COUNT; c++) {
        sharedRules[SHARED_CHAIN_TABLE[c]] += scratch[c].length;
        scratch[c].length = 0;
      }
    }
  }
  diff?.finish();

  // Stale chains: flush (declare) then delete.
  const staleChains: string[] = [];
  if (input.existingNatChains !== null) {
    for (const chain of input.existingNatChains) {
      if (isServiceChainName(chain) && !ctx.activeNatChains.has(chain)) staleChains.push(chain);
    }
    staleChains.sort();
  }

  if (
    diff !== null &&
    svcChainDecls.length + staleChains.length > (input.incrementalMaxChains ?? INCREMENTAL_MAX_CHAINS)
  ) {
    return renderIptablesRules(input, null);
  }

  const nodePortsTail = renderNodePortsTail(input, npa, localhostNodePorts, warnings);

  const state: RenderState = {
    family: input.family,
    keys,
    services: stateServices,
    flags: ctx.flags,
    localhostNodePortsNfacct,
    nodePortsTail,
    fixedChains,
  };
  const common = {
    mode,
    state,
    activeNatChains: ctx.activeNatChains,
    staleChains,
    noLocalEndpoints: { internal: ctx.noLocalInternal, external: ctx.noLocalExternal },
    largeClusterMode,
    totalEndpoints,
    localhostNodePorts,
    skippedServices,
    warnings,
  };

  if (diff !== null) {
    return {
      ...common,
      ...incrementalPayload(
        previous!,
        diff,
        fixedChains,
        nodePortsTail,
        svcChainDecls,
        svcChainRules,
        staleChains,
      ),
      rulesTotal: {
        filter: sharedRules.filter + fixedRuleCount(fixedChains, "filter"),
        nat: sharedRules.nat + fixedRuleCount(fixedChains, "nat") + nodePortsTail.length +
          svcChainRules.length + skippedNatRules,
      },
      sharedChainEdits: diff.changedServicePorts,
    };
  }

  for (const f of fixedChains) if (f.chain === KUBE_FORWARD) pushAll(filterRules, f.rules);

  const filterChains = [
    KUBE_SERVICES,
    KUBE_EXTERNAL_SERVICES,
    KUBE_FORWARD,
    KUBE_NODEPORTS,
    KUBE_PROXY_FIREWALL,
  ];
  if (localhostNodePorts) filterChains.push(KUBE_FIREWALL);
  const out: string[] = ["*filter"];
  for (const c of filterChains) out.push(`:${c} - [0:0]`);
  pushAll(out, filterRules);
  out.push("COMMIT", "*nat");
  for (const c of [KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_MARK_MASQ]) {
    out.push(`:${c} - [0:0]`);
  }
  pushAll(out, svcChainDecls);
  for (const c of staleChains) out.push(`:${c} - [0:0]`);
  pushAll(out, natRules);
  pushAll(out, svcChainRules);
  for (const c of staleChains) out.push(`-X ${c}`);
  pushAll(out, nodePortsTail);
  out.push("COMMIT", "");

  const natWritten = natRules.length + svcChainRules.length + nodePortsTail.length;
  return {
    ...common,
    payload: out.join("\n"),
    rulesWritten: { filter: filterRules.length, nat: natWritten },
    rulesTotal: { filter: filterRules.length, nat: natWritten + skippedNatRules },
    sharedChainEdits: 0,
  };
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

function fixedRuleCount(fixed: readonly FixedChainRules[], table: "filter" | "nat"): number {
  let n = 0;
  for (const f of fixed) if (f.table === table) n += f.rules.length;
  return n;
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
  svcChainDecls: readonly string[],
  svcChainRules: readonly string[],
  staleChains: readonly string[],
): { payload: string; rulesWritten: TableRuleCounts } {
  // A fixed chain that is no longer rendered (KUBE-FIREWALL without localhost NodePorts) is left alone,
  // as a full sync leaves it.
  const changedFixed = fixedChains.filter((f) => {
    const old = previous.fixedChains.find((o) => o.table === f.table && o.chain === f.chain);
    return old === undefined || !sameRules(old.rules, f.rules);
  });
  const tailChanged = !sameRules(previous.nodePortsTail, nodePortsTail);
  const written = { filter: diff.inserted.filter, nat: diff.inserted.nat + svcChainRules.length };

  const out: string[] = ["*filter"];
  for (const f of changedFixed) if (f.table === "filter") out.push(`:${f.chain} - [0:0]`);
  for (const f of changedFixed) {
    if (f.table === "filter") {
      pushAll(out, f.rules);
      written.filter += f.rules.length;
    }
  }
  pushAll(out, diff.filter.deletes);
  pushAll(out, diff.filter.inserts);
  out.push("COMMIT", "*nat");
  for (const f of changedFixed) if (f.table === "nat") out.push(`:${f.chain} - [0:0]`);
  pushAll(out, svcChainDecls);
  for (const c of staleChains) out.push(`:${c} - [0:0]`);
  for (const f of changedFixed) {
    if (f.table === "nat") {
      pushAll(out, f.rules);
      written.nat += f.rules.length;
    }
  }
  pushAll(out, svcChainRules);
  pushAll(out, diff.nat.deletes);
  if (tailChanged) { for (const l of previous.nodePortsTail) out.push(deleteLine(l)); }
  pushAll(out, diff.nat.inserts);
  if (tailChanged) {
    pushAll(out, nodePortsTail);
    written.nat += nodePortsTail.length;
  }
  for (const c of staleChains) out.push(`-X ${c}`);
  out.push("COMMIT", "");
  return { payload: out.join("\n"), rulesWritten: written };
}

function pushAll(out: string[], lines: readonly string[]): void {
  for (const l of lines) out.push(l);
}
