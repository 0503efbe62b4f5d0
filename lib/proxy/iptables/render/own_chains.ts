/**
 * A service port's own nat chains, as upstream writes them: the cluster-IP masquerade rule, KUBE-EXT
 * (external traffic policy), KUBE-FW (load balancer source ranges), KUBE-SVC/KUBE-SVL (the probability
 * cascade over endpoints, with session affinity) and one KUBE-SEP per endpoint (hairpin masquerade and
 * DNAT). ownChainRules gives the same rule counts per chain without the text, for partial syncs that
 * leave the chains in place and for the drift check's expectation.
 */
import type { EndpointInfo, ServicePortInfo } from "../../types.ts";
import { endpointHash, KUBE_MARK_MASQ, SEP_PREFIX, type ServicePortChains } from "../chain_names.ts";
import { cidrContains, formatCIDR, parseCIDR } from "../../../net/ip.ts";
import { probability } from "./probability.ts";
import { HASH_LENGTH, OWN_CHAIN_RULES_LENGTH, OwnChain, OwnChainRules, SEP_CHAIN_RULES } from "./state.ts";
import type { PayloadWriter } from "./payload.ts";
import type { Context } from "./context.ts";

/** " -j KUBE-MARK-MASQ", the end of every masquerade rule. */
const MASQ_TARGET = ` -j ${KUBE_MARK_MASQ}`;

/** Where a written service port's own chains go. */
export interface OwnChainsOut {
  readonly decls: PayloadWriter;
  readonly rules: PayloadWriter;
}

/** What a service port's own chains consist of (decided in processServicePort). */
export interface OwnChainsPlan {
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

/**
 * KUBE-SEP chain names of `subset` (a subset of plan.reachable), or null when `subset` is plan.reachable
 * itself: its names are then written from plan.seps (putSepChain) without making a string per chain.
 */
function endpointChainNames(
  plan: OwnChainsPlan,
  subset: readonly EndpointInfo[],
  spn: string,
  protocol: string,
): string[] | null {
  if (subset === plan.reachable) return null;
  const byEndpoint = new Map<string, string>();
  plan.reachable.forEach((ep, i) => {
    byEndpoint.set(ep.endpoint, SEP_PREFIX + plan.seps.slice(i * HASH_LENGTH, (i + 1) * HASH_LENGTH));
  });
  return subset.map((ep) =>
    byEndpoint.get(ep.endpoint) ?? SEP_PREFIX + endpointHash(spn, protocol, ep.endpoint)
  );
}

/** Writes a chain's declaration, `:<chain> - [0:0]`. */
function declare(decls: PayloadWriter, chain: string): void {
  decls.put(":");
  decls.put(chain);
  decls.put(" - [0:0]");
  decls.end();
}

/** Writes the KUBE-SEP chain name of endpoint `i`: names[i], or its hash in plan.seps when names is null. */
function putSepChain(
  w: PayloadWriter,
  plan: OwnChainsPlan,
  names: readonly string[] | null,
  i: number,
): void {
  if (names !== null) {
    w.put(names[i]);
    return;
  }
  w.put(SEP_PREFIX);
  w.putRange(plan.seps, i * HASH_LENGTH, (i + 1) * HASH_LENGTH);
}

/** Writes a service port's own chains; returns the number of rules written. */
export function writeOwnChains(
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

  if (plan.hasInternalEndpoints && (ctx.masqueradeAll || ctx.detector.implemented)) {
    // `-A chain -m comment --comment "<spn> cluster IP" <mp> -d <ip> --dport <port>[ <not local>] -j MASQ`
    rules.put("-A ");
    rules.put(internalTrafficChain);
    rules.put(' -m comment --comment "');
    rules.put(spn);
    rules.put(' cluster IP" ');
    rules.put(mp);
    rules.put(" -d ");
    rules.put(svc.clusterIP);
    rules.put(" --dport ");
    rules.put(String(svc.port));
    // Unless masquerading all: masquerade off-cluster traffic to the service VIP (it may be bridged in
    // via a static route).
    if (!ctx.masqueradeAll) {
      rules.put(" ");
      rules.put(ctx.ifNotLocal);
    }
    rules.put(MASQ_TARGET);
    rules.end();
  }

  if ((plan.ownChains & OwnChain.External) !== 0) {
    declare(decls, externalTrafficChain);
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
    declare(decls, fwChain);
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
    declare(decls, clusterPolicyChain);
    writeServiceToEndpointRules(
      ctx,
      rules,
      spn,
      affinitySeconds,
      clusterPolicyChain,
      plan.clusterEndpoints,
      plan,
      endpointChainNames(plan, plan.clusterEndpoints, spn, protocol),
    );
  }
  if ((plan.ownChains & OwnChain.LocalPolicy) !== 0) {
    declare(decls, localPolicyChain);
    writeServiceToEndpointRules(
      ctx,
      rules,
      spn,
      affinitySeconds,
      localPolicyChain,
      plan.localEndpoints,
      plan,
      endpointChainNames(plan, plan.localEndpoints, spn, protocol),
    );
  }

  // Endpoint chains, written from plan.seps piece by piece (no string per line or chain name).
  const comment = ctx.largeClusterMode ? "" : ` -m comment --comment ${spn}`;
  const dnat = ` ${mp} -j DNAT --to-destination `;
  for (let i = 0; i < plan.reachable.length; i++) {
    const ep = plan.reachable[i];
    decls.put(":");
    putSepChain(decls, plan, null, i);
    decls.put(" - [0:0]");
    decls.end();
    // Hairpin: an endpoint reaching itself through the service must be masqueraded.
    rules.put("-A ");
    putSepChain(rules, plan, null, i);
    rules.put(comment);
    rules.put(" -s ");
    rules.put(ep.ip);
    rules.put(MASQ_TARGET);
    rules.end();
    // `-A <sep><comment>[ -m recent --name <sep> --set] <mp> -j DNAT --to-destination <endpoint>`
    rules.put("-A ");
    putSepChain(rules, plan, null, i);
    rules.put(comment);
    if (affinitySeconds > 0) {
      rules.put(" -m recent --name ");
      putSepChain(rules, plan, null, i);
      rules.put(" --set");
    }
    rules.put(dnat);
    rules.put(ep.endpoint);
    rules.end();
  }
  return rules.count - before;
}

/**
 * The number of rules writeOwnChains would write into each own chain but the KUBE-SEP ones (which hold
 * SEP_CHAIN_RULES each), by OwnChainRules index, without building the rule text (upstream writes them to
 * a discard buffer for the same purpose). Must mirror writeOwnChains; tests compare both paths.
 */
export function ownChainRules(ctx: Context, svc: ServicePortInfo, plan: OwnChainsPlan): number[] {
  const r = new Array<number>(OWN_CHAIN_RULES_LENGTH).fill(0);
  if (plan.hasInternalEndpoints && (ctx.masqueradeAll || ctx.detector.implemented)) {
    r[svc.internalPolicyLocal ? OwnChainRules.LocalPolicy : OwnChainRules.ClusterPolicy]++;
  }
  if ((plan.ownChains & OwnChain.External) !== 0) {
    r[OwnChainRules.External] = (svc.externalPolicyLocal ? (ctx.detector.implemented ? 3 : 2) : 1) +
      (plan.hasExternalEndpoints ? 1 : 0);
  }
  if ((plan.ownChains & OwnChain.Firewall) !== 0) {
    let allowFromNode = false;
    for (const range of svc.loadBalancerSourceRanges) {
      if (ctx.primaryNodeIP !== null && cidrContains(parseCIDR(range)!, ctx.primaryNodeIP)) {
        allowFromNode = true;
      }
    }
    r[OwnChainRules.Firewall] = svc.loadBalancerSourceRanges.length + 1 +
      (allowFromNode ? svc.loadBalancerVIPs.length : 0);
  }
  const perEndpoint = svc.stickyMaxAgeSeconds > 0 ? 2 : 1;
  if ((plan.ownChains & OwnChain.ClusterPolicy) !== 0) {
    r[OwnChainRules.ClusterPolicy] += perEndpoint * plan.clusterEndpoints.length;
  }
  if ((plan.ownChains & OwnChain.LocalPolicy) !== 0) {
    r[OwnChainRules.LocalPolicy] += perEndpoint * plan.localEndpoints.length;
  }
  return r;
}

/** The total of `chainRules` (ownChainRules) and the KUBE-SEP chains' rules: writeOwnChains' count. */
export function countOwnChains(chainRules: readonly number[], plan: OwnChainsPlan): number {
  let n = SEP_CHAIN_RULES * plan.reachable.length;
  for (const c of chainRules) n += c;
  return n;
}

/**
 * Upstream writeServiceToEndpointRules: affinity checks first, then the probability cascade. `epChains`
 * names the endpoints' KUBE-SEP chains (null: `endpoints` is plan.reachable, named by plan.seps).
 */
function writeServiceToEndpointRules(
  ctx: Context,
  rules: PayloadWriter,
  spn: string,
  affinitySeconds: number,
  svcChain: string,
  endpoints: readonly EndpointInfo[],
  plan: OwnChainsPlan,
  epChains: readonly string[] | null,
): void {
  // `-A <svc>[ -m comment --comment "<spn> -> <endpoint>"]`
  const head = (ep: EndpointInfo) => {
    rules.put("-A ");
    rules.put(svcChain);
    if (!ctx.largeClusterMode) {
      rules.put(' -m comment --comment "');
      rules.put(spn);
      rules.put(" -> ");
      rules.put(ep.endpoint);
      rules.put('"');
    }
  };
  if (affinitySeconds > 0) {
    const seconds = ` --rcheck --seconds ${affinitySeconds} --reap -j `;
    for (let i = 0; i < endpoints.length; i++) {
      head(endpoints[i]);
      rules.put(" -m recent --name ");
      putSepChain(rules, plan, epChains, i);
      rules.put(seconds);
      putSepChain(rules, plan, epChains, i);
      rules.end();
    }
  }
  const n = endpoints.length;
  for (let i = 0; i < n; i++) {
    head(endpoints[i]);
    if (i < n - 1) {
      rules.put(" -m statistic --mode random --probability ");
      rules.put(probability(n - i));
    }
    rules.put(" -j ");
    putSepChain(rules, plan, epChains, i);
    rules.end();
  }
}
