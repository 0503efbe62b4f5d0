/**
 * The iptables rule renderer: upstream kube-proxy's syncProxyRules (pkg/proxy/iptables/proxier.go) as a
 * pure function. Plain service-port and endpoint data in, one iptables-restore payload (filter, then nat)
 * out, with the same chains, rule text and argument order as upstream. No I/O, no clock; the same input
 * gives the same bytes (service ports are processed in sorted key order, not map order).
 *
 * Partial syncs follow upstream: the filter table and the nat chains KUBE-SERVICES, KUBE-NODEPORTS,
 * KUBE-POSTROUTING and KUBE-MARK-MASQ are always rewritten; a service port's KUBE-SVC/SVL/EXT/FW/SEP
 * chains are only written when it changed (or on a full sync). iptables-restore --noflush keeps the rest.
 *
 * Later extension (not implemented): an incremental mode would also leave KUBE-SERVICES undeclared and
 * patch it with `-D KUBE-SERVICES <rule>` / `-I KUBE-SERVICES <n> <rule>` for the changed service ports
 * only. It needs the previous sync's KUBE-SERVICES rules per service port (kept by the caller, or returned
 * here as a per-key map) and must keep the nodeports rule last; see the notes at renderServicePort.
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

/** Above this many endpoints in total, comments are dropped from SEP and SVC→SEP rules (upstream). */
export const LARGE_CLUSTER_ENDPOINTS_THRESHOLD = 1000;

/** nfacct counter on the KUBE-FORWARD INVALID drop rule. */
export const NFACCT_CT_STATE_INVALID_DROPPED = "ct_state_invalid_dropped_pkts";
/** nfacct counter on localhost NodePort rules. */
export const NFACCT_LOCALHOST_NODEPORTS_ACCEPTED = "localhost_nps_accepted_pkts";

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

/** What one render produced. */
export interface RenderResult {
  /** `*filter ... COMMIT\n*nat ... COMMIT\n` for iptables-restore --noflush --counters. */
  readonly payload: string;
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
  readonly filterRules: string[];
  /** nat KUBE-SERVICES / KUBE-NODEPORTS rules (always written). */
  readonly natRules: string[];
  noLocalInternal: number;
  noLocalExternal: number;
}

/**
 * Writes one service port: its filter rules and KUBE-SERVICES/KUBE-NODEPORTS jumps into the always-written
 * buffers, and its own chains into `own` (or, when `own` is null, only counts them). Returns the number
 * of rules in its own chains.
 *
 * For an incremental mode, the lines this pushes into ctx.natRules for KUBE-SERVICES/KUBE-NODEPORTS are
 * exactly the per-service-port set to diff against the previous sync's.
 */
function renderServicePort(
  ctx: Context,
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
  const loadBalancerTrafficChain = usesFWChain ? fwChain : externalTrafficChain;

  let internalFilterTarget = "";
  let internalFilterComment = "";
  let externalFilterTarget = "";
  let externalFilterComment = "";
  if (!hasEndpoints) {
    internalFilterTarget = "REJECT";
    internalFilterComment = `"${spn} has no endpoints"`;
    externalFilterTarget = "REJECT";
    externalFilterComment = internalFilterComment;
  } else {
    if (!hasInternalEndpoints) {
      internalFilterTarget = "DROP";
      internalFilterComment = `"${spn} has no local endpoints"`;
      ctx.noLocalInternal++;
    }
    if (!hasExternalEndpoints) {
      externalFilterTarget = "DROP";
      externalFilterComment = `"${spn} has no local endpoints"`;
      ctx.noLocalExternal++;
    }
  }

  const filterRules = ctx.filterRules;
  const natRules = ctx.natRules;
  const mp = `-m ${protocol} -p ${protocol}`;
  const port = svc.port;
  const cip = svc.clusterIP;

  // ClusterIP.
  if (hasInternalEndpoints) {
    natRules.push(
      `-A ${KUBE_SERVICES} -m comment --comment "${spn} cluster IP" ${mp} -d ${cip} --dport ${port} -j ${internalTrafficChain}`,
    );
  } else {
    filterRules.push(
      `-A ${KUBE_SERVICES} -m comment --comment ${internalFilterComment} ${mp} -d ${cip} --dport ${port} -j ${internalFilterTarget}`,
    );
  }

  // externalIPs.
  for (const externalIP of svc.externalIPs) {
    if (hasEndpoints) {
      natRules.push(
        `-A ${KUBE_SERVICES} -m comment --comment "${spn} external IP" ${mp} -d ${externalIP} --dport ${port} -j ${externalTrafficChain}`,
      );
    }
    if (!hasExternalEndpoints) {
      filterRules.push(
        `-A ${KUBE_EXTERNAL_SERVICES} -m comment --comment ${externalFilterComment} ${mp} -d ${externalIP} --dport ${port} -j ${externalFilterTarget}`,
      );
    }
  }

  // LoadBalancer ingress IPs.
  for (const lbip of svc.loadBalancerVIPs) {
    if (hasEndpoints) {
      natRules.push(
        `-A ${KUBE_SERVICES} -m comment --comment "${spn} loadbalancer IP" ${mp} -d ${lbip} --dport ${port} -j ${loadBalancerTrafficChain}`,
      );
    }
    if (usesFWChain) {
      filterRules.push(
        `-A ${KUBE_PROXY_FIREWALL} -m comment --comment "${spn} traffic not accepted by ${fwChain}" ${mp} -d ${lbip} --dport ${port} -j DROP`,
      );
    }
  }
  if (!hasExternalEndpoints) {
    for (const lbip of svc.loadBalancerVIPs) {
      filterRules.push(
        `-A ${KUBE_EXTERNAL_SERVICES} -m comment --comment ${externalFilterComment} ${mp} -d ${lbip} --dport ${port} -j ${externalFilterTarget}`,
      );
    }
  }

  // NodePort (not subject to loadBalancerSourceRanges, as upstream).
  if (svc.nodePort !== 0) {
    if (hasEndpoints) {
      if (ctx.localhostNodePortsNfacct) {
        natRules.push(
          `-A ${KUBE_NODEPORTS} -m comment --comment ${spn} ${mp} -d 127.0.0.0/8 --dport ${svc.nodePort} -m nfacct --nfacct-name ${NFACCT_LOCALHOST_NODEPORTS_ACCEPTED} -j ${externalTrafficChain}`,
        );
      }
      natRules.push(
        `-A ${KUBE_NODEPORTS} -m comment --comment ${spn} ${mp} --dport ${svc.nodePort} -j ${externalTrafficChain}`,
      );
    }
    if (!hasExternalEndpoints) {
      filterRules.push(
        `-A ${KUBE_EXTERNAL_SERVICES} -m comment --comment ${externalFilterComment} -m addrtype --dst-type LOCAL ${mp} --dport ${svc.nodePort} -j ${externalFilterTarget}`,
      );
    }
  }

  // Health-check node port: accepted whether or not there are local endpoints.
  if (svc.healthCheckNodePort !== 0) {
    filterRules.push(
      `-A ${KUBE_NODEPORTS} -m comment --comment "${spn} health check node port" -m tcp -p tcp --dport ${svc.healthCheckNodePort} -j ACCEPT`,
    );
  }

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

/** Renders one sync's iptables-restore payload. Pure: reads only `input`. */
export function renderIptablesRules(input: RenderInput): RenderResult {
  const ipv6 = input.family === "IPv6";
  const mark = masqueradeMark(input.masqueradeBit);
  const warnings: string[] = [];
  const skippedServices: string[] = [];

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

  const keys = [...input.services.keys()].sort();
  const totalEndpoints = totalEndpointCount(input.services, input.endpoints);
  const largeClusterMode = totalEndpoints > LARGE_CLUSTER_ENDPOINTS_THRESHOLD;

  const filterChains = [
    KUBE_SERVICES,
    KUBE_EXTERNAL_SERVICES,
    KUBE_FORWARD,
    KUBE_NODEPORTS,
    KUBE_PROXY_FIREWALL,
  ].map(
    (c) => `:${c} - [0:0]`,
  );
  const filterRules: string[] = [];
  const natChains = [KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_MARK_MASQ].map((c) =>
    `:${c} - [0:0]`
  );
  const natRules: string[] = [];

  natRules.push(`-A ${KUBE_POSTROUTING} -m mark ! --mark ${mark}/${mark} -j RETURN`);
  // Clear the mark so a packet that re-traverses the stack is not masqueraded twice.
  natRules.push(`-A ${KUBE_POSTROUTING} -j MARK --xor-mark ${mark}`);
  natRules.push(
    `-A ${KUBE_POSTROUTING} -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE` +
      (input.features.randomFully ? " --random-fully" : ""),
  );
  natRules.push(`-A ${KUBE_MARK_MASQ} -j MARK --or-mark ${mark}`);

  if (localhostNodePorts) {
    // route_localnet opens a hole (issue 90259) that this copy of kubelet's rule closes.
    filterChains.push(`:${KUBE_FIREWALL} - [0:0]`);
    filterRules.push(
      `-A ${KUBE_FIREWALL} -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`,
    );
  }

  const ctx: Context = {
    nodeName: input.nodeName,
    nodeLabels: input.nodeLabels,
    primaryNodeIP,
    masqueradeAll: input.masqueradeAll,
    detector,
    ifLocal: detector.ifLocal.join(" "),
    ifNotLocal: detector.ifNotLocal.join(" "),
    localhostNodePortsNfacct: localhostNodePorts && input.features.nfacct,
    largeClusterMode,
    preferSameTrafficDistribution: input.features.preferSameTrafficDistribution ?? true,
    activeNatChains: new Set<string>(),
    filterRules,
    natRules,
    noLocalInternal: 0,
    noLocalExternal: 0,
  };

  // Service ports' own chains: declared and written only when the service port is synced this time.
  const svcChainDecls: string[] = [];
  const svcChainRules: string[] = [];
  const own = { chains: svcChainDecls, rules: svcChainRules };
  let skippedNatRules = 0;

  for (const key of keys) {
    const svc = input.services.get(key)!;
    const problem = checkServicePort(svc, ipv6);
    if (problem !== null) {
      warnings.push(`service port ${JSON.stringify(key)} skipped: ${problem}`);
      skippedServices.push(key);
      continue;
    }
    const eps = sortedByEndpoint(input.endpoints.get(key) ?? EMPTY_ENDPOINTS);
    let epProblem: string | null = null;
    for (const ep of eps) {
      epProblem = checkEndpoint(ep, ipv6);
      if (epProblem !== null) break;
    }
    if (epProblem !== null) {
      warnings.push(`service port ${JSON.stringify(key)} skipped: ${epProblem}`);
      skippedServices.push(key);
      continue;
    }
    const write = input.full || input.changedServices.has(key) ||
      input.changedServices.has(`${svc.name.namespace}/${svc.name.name}`);
    if (write) {
      renderServicePort(ctx, svc, eps, own);
    } else {
      skippedNatRules += renderServicePort(ctx, svc, eps, null);
    }
  }

  // Stale chains: flush (declare) then delete.
  const staleChains: string[] = [];
  if (input.existingNatChains !== null) {
    for (const chain of input.existingNatChains) {
      if (isServiceChainName(chain) && !ctx.activeNatChains.has(chain)) staleChains.push(chain);
    }
    staleChains.sort();
  }

  // The NodePorts jump must be the last rule of nat KUBE-SERVICES.
  const nodePortsTail: string[] = [];
  const nodePortsComment =
    `-m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain"`;
  if (npa.matchAll) {
    // Localhost NodePorts never work on IPv6, and on IPv4 only with route_localnet.
    const notLocalhost = ipv6 ? " ! -d ::1/128" : (!localhostNodePorts ? " ! -d 127.0.0.0/8" : "");
    nodePortsTail.push(
      `-A ${KUBE_SERVICES} ${nodePortsComment} -m addrtype --dst-type LOCAL${notLocalhost} -j ${KUBE_NODEPORTS}`,
    );
  } else {
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
      nodePortsTail.push(`-A ${KUBE_SERVICES} ${nodePortsComment} -d ${ip} -j ${KUBE_NODEPORTS}`);
    }
  }

  if (input.features.dropInvalid) {
    filterRules.push(
      `-A ${KUBE_FORWARD} -m conntrack --ctstate INVALID` +
        (input.features.nfacct ? ` -m nfacct --nfacct-name ${NFACCT_CT_STATE_INVALID_DROPPED}` : "") +
        " -j DROP",
    );
  }
  // Forward marked traffic even when the FORWARD policy is not ACCEPT, and everything that follows it.
  filterRules.push(
    `-A ${KUBE_FORWARD} -m comment --comment "kubernetes forwarding rules" -m mark --mark ${mark}/${mark} -j ACCEPT`,
  );
  filterRules.push(
    `-A ${KUBE_FORWARD} -m comment --comment "kubernetes forwarding conntrack rule" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT`,
  );

  const out: string[] = ["*filter"];
  pushAll(out, filterChains);
  pushAll(out, filterRules);
  out.push("COMMIT", "*nat");
  pushAll(out, natChains);
  pushAll(out, svcChainDecls);
  for (const c of staleChains) out.push(`:${c} - [0:0]`);
  pushAll(out, natRules);
  pushAll(out, svcChainRules);
  for (const c of staleChains) out.push(`-X ${c}`);
  pushAll(out, nodePortsTail);
  out.push("COMMIT", "");

  const natWritten = natRules.length + svcChainRules.length + nodePortsTail.length;
  return {
    payload: out.join("\n"),
    activeNatChains: ctx.activeNatChains,
    staleChains,
    rulesWritten: { filter: filterRules.length, nat: natWritten },
    rulesTotal: { filter: filterRules.length, nat: natWritten + skippedNatRules },
    noLocalEndpoints: { internal: ctx.noLocalInternal, external: ctx.noLocalExternal },
    largeClusterMode,
    totalEndpoints,
    localhostNodePorts,
    skippedServices,
    warnings,
  };
}

function pushAll(out: string[], lines: readonly string[]): void {
  for (const l of lines) out.push(l);
}
