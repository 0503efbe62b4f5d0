/**
 * One service port's share of a full nftables sync (the loop body of upstream syncProxyRules, v1.34):
 * its elements in the dispatch, "no endpoints" and firewall maps, its service/local/external/firewall
 * chains, its per-endpoint chains (with `numgen random mod N vmap` endpoint choice) and its ClientIP
 * affinity sets.
 */
import type { EndpointInfo, ServicePortInfo } from "../../types.ts";
import { externallyAccessible, servicePortNameString } from "../../types.ts";
import type { CategorizedEndpoints } from "../../topology.ts";
import { usesClusterEndpoints, usesLocalEndpoints } from "../../topology.ts";
import { cidrContains, parseCIDR, parseIP } from "../../../net/ip.ts";
import type { NftFamily, NftTransaction } from "./transaction.ts";
import type { LocalTrafficMatches } from "./local_traffic.ts";
import { ensureChain } from "./setup.ts";
import type { ElementWriter } from "./elements.ts";
import {
  CLUSTER_IPS_SET,
  type EndpointNames,
  endpointNames,
  FIREWALL_IPS_MAP,
  MARK_MASQ_CHAIN,
  NO_ENDPOINT_NODEPORTS_MAP,
  NO_ENDPOINT_SERVICES_MAP,
  REJECT_CHAIN,
  SERVICE_IPS_MAP,
  SERVICE_NODEPORTS_MAP,
  type ServicePortChainNames,
  servicePortChainNames,
} from "./names.ts";

/** Settings shared by every service port of one sync. */
export interface ServicePortContext {
  readonly family: NftFamily;
  readonly masqueradeAll: boolean;
  /** Local traffic detector fragments, or null when none is configured. */
  readonly local: LocalTrafficMatches | null;
  /** The node's primary IP of this family (loadBalancerSourceRanges hairpin), or null. */
  readonly nodeIP: string | null;
  /** Where set and map elements go (full or partial). */
  readonly elements: ElementWriter;
}

/** Objects one service port keeps alive, and its "no local endpoints" facts (for metrics). */
export interface ServicePortOutcome {
  /** Per-service and per-endpoint chains in use. */
  readonly chains: readonly string[];
  /** ClientIP affinity sets in use. */
  readonly affinitySets: readonly string[];
  /** iTP=Local with endpoints elsewhere but none here (upstream serviceNoLocalEndpointsTotalInternal). */
  readonly noLocalInternal: boolean;
  /** eTP=Local with endpoints elsewhere but none here (upstream serviceNoLocalEndpointsTotalExternal). */
  readonly noLocalExternal: boolean;
}

/**
 * Writes `svc` into `tx`: its elements always, its chains, rules and affinity sets only when
 * `writeChains` (false on a partial sync for a service whose objects did not change: its chains are then
 * only noted as in use). `cat` is categorizeEndpoints' result for the service port's endpoints.
 */
export function writeServicePort(
  tx: NftTransaction,
  ctx: ServicePortContext,
  svc: ServicePortInfo,
  cat: CategorizedEndpoints,
  writeChains = true,
): ServicePortOutcome {
  const ipX = ctx.family;
  const protocol = svc.protocol.toLowerCase();
  const port = String(svc.port);
  const spn = servicePortNameString(svc.name);
  const names: ServicePortChainNames = servicePortChainNames(svc.name);
  const sticky = svc.stickyMaxAgeSeconds > 0;
  const active = new Set<string>();
  const affinitySets: string[] = [];
  const useChain = (chain: string): void => {
    if (writeChains) ensureChain(tx, chain, active);
    else active.add(chain);
  };
  const el = ctx.elements;

  // One chain per "ip:port" (the endpoint tracker already keeps one endpoint per address and port).
  const byEndpoint = new Map<string, { ep: EndpointInfo; names: EndpointNames }>();
  for (const ep of cat.allReachableEndpoints) {
    const at = ep.endpoint;
    if (!byEndpoint.has(at)) byEndpoint.set(at, { ep, names: endpointNames(svc.name, ep) });
  }
  const reachable = [...byEndpoint.values()];
  for (const r of reachable) {
    useChain(r.names.chain);
    if (sticky) affinitySets.push(r.names.affinitySet);
  }

  const clusterPolicyChain = names.clusterPolicy;
  const usesClusterPolicyChain = cat.clusterEndpoints.length > 0 && usesClusterEndpoints(svc);
  if (usesClusterPolicyChain) useChain(clusterPolicyChain);
  const localPolicyChain = names.localPolicy;
  const usesLocalPolicyChain = cat.localEndpoints.length > 0 && usesLocalEndpoints(svc);
  if (usesLocalPolicyChain) useChain(localPolicyChain);

  const hasEndpoints = cat.hasAnyEndpoints;
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
  // Needed even without externally usable endpoints, for the short-circuit rules of local traffic.
  const usesExternalTrafficChain = hasEndpoints && externallyAccessible(svc);
  if (usesExternalTrafficChain) useChain(externalTrafficChain);

  let internalFilterVerdict = "";
  let externalFilterVerdict = "";
  let noLocalInternal = false;
  let noLocalExternal = false;
  if (!hasEndpoints) {
    internalFilterVerdict = `goto ${REJECT_CHAIN}`;
    externalFilterVerdict = `goto ${REJECT_CHAIN}`;
  } else {
    if (!hasInternalEndpoints) {
      internalFilterVerdict = "drop";
      noLocalInternal = true;
    }
    if (!hasExternalEndpoints) {
      externalFilterVerdict = "drop";
      noLocalExternal = true;
    }
  }

  // ClusterIP.
  el.ensure(CLUSTER_IPS_SET, [svc.clusterIP]);
  if (hasInternalEndpoints) {
    el.ensure(SERVICE_IPS_MAP, [svc.clusterIP, protocol, port], [`goto ${internalTrafficChain}`]);
  } else {
    el.ensure(NO_ENDPOINT_SERVICES_MAP, [svc.clusterIP, protocol, port], [internalFilterVerdict], spn);
  }

  // External IPs.
  for (const ip of svc.externalIPs) {
    if (hasEndpoints) el.ensure(SERVICE_IPS_MAP, [ip, protocol, port], [`goto ${externalTrafficChain}`]);
    if (!hasExternalEndpoints) {
      el.ensure(NO_ENDPOINT_SERVICES_MAP, [ip, protocol, port], [externalFilterVerdict], spn);
    }
  }

  // LoadBalancer IPs.
  const usesFWChain = svc.loadBalancerVIPs.length > 0 && svc.loadBalancerSourceRanges.length > 0;
  const fwChain = names.firewall;
  if (usesFWChain) useChain(fwChain);
  for (const ip of svc.loadBalancerVIPs) {
    if (hasEndpoints) el.ensure(SERVICE_IPS_MAP, [ip, protocol, port], [`goto ${externalTrafficChain}`]);
    if (usesFWChain) el.ensure(FIREWALL_IPS_MAP, [ip, protocol, port], [`goto ${fwChain}`]);
  }
  if (!hasExternalEndpoints) {
    for (const ip of svc.loadBalancerVIPs) {
      el.ensure(NO_ENDPOINT_SERVICES_MAP, [ip, protocol, port], [externalFilterVerdict], spn);
    }
  }

  // NodePort (not subject to loadBalancerSourceRanges).
  if (svc.nodePort !== 0) {
    const key = [protocol, String(svc.nodePort)];
    if (hasEndpoints) el.ensure(SERVICE_NODEPORTS_MAP, key, [`goto ${externalTrafficChain}`]);
    if (!hasExternalEndpoints) el.ensure(NO_ENDPOINT_NODEPORTS_MAP, key, [externalFilterVerdict], spn);
  }

  if (!writeChains) return { chains: [...active], affinitySets, noLocalInternal, noLocalExternal };

  // Masquerade off-cluster traffic to the ClusterIP (it may be routed here from outside).
  if (hasInternalEndpoints) {
    if (ctx.masqueradeAll) {
      tx.addRule(internalTrafficChain, `${ipX} daddr ${svc.clusterIP} jump ${MARK_MASQ_CHAIN}`);
    } else if (ctx.local !== null) {
      tx.addRule(
        internalTrafficChain,
        `${ipX} daddr ${svc.clusterIP} ${ctx.local.ifNotLocal} jump ${MARK_MASQ_CHAIN}`,
      );
    }
  }

  if (usesExternalTrafficChain) {
    if (!svc.externalPolicyLocal) {
      // Endpoints may be on other nodes: masquerade.
      tx.addRule(externalTrafficChain, `jump ${MARK_MASQ_CHAIN}`);
    } else {
      if (ctx.local !== null) {
        // Pod traffic to an external destination behaves as if it went out and came back in.
        tx.addRule(
          externalTrafficChain,
          `${ctx.local.ifLocal} goto ${clusterPolicyChain}`,
          "short-circuit pod traffic",
        );
      }
      tx.addRule(
        externalTrafficChain,
        `fib saddr type local jump ${MARK_MASQ_CHAIN}`,
        "masquerade local traffic",
      );
      tx.addRule(
        externalTrafficChain,
        `fib saddr type local goto ${clusterPolicyChain}`,
        "short-circuit local traffic",
      );
    }
    if (hasExternalEndpoints) tx.addRule(externalTrafficChain, `goto ${externalPolicyChain}`);
  }

  if (usesFWChain) {
    const sources = [...svc.loadBalancerSourceRanges];
    const nodeIP = ctx.nodeIP === null ? null : parseIP(ctx.nodeIP);
    const allowFromNode = nodeIP !== null && svc.loadBalancerSourceRanges.some((c) => {
      const parsed = parseCIDR(c);
      return parsed !== null && cidrContains(parsed, nodeIP);
    });
    // A VIP bound locally loops a node's request back with the VIP as source: let it through.
    if (allowFromNode) sources.push(...svc.loadBalancerVIPs);
    tx.addRule(fwChain, `${ipX} saddr != { ${sources.join(" , ")} } drop`);
  }

  if (sticky) {
    for (const r of reachable) {
      tx.addSet(r.names.affinitySet, {
        type: ctx.family === "ip6" ? "ipv6_addr" : "ipv4_addr",
        flags: ["dynamic", "timeout"],
        timeoutSeconds: svc.stickyMaxAgeSeconds,
      });
    }
  }

  const namesOf = (ep: EndpointInfo): EndpointNames =>
    byEndpoint.get(ep.endpoint)?.names ?? endpointNames(svc.name, ep);
  if (usesClusterPolicyChain) {
    writeServiceToEndpointRules(tx, ipX, sticky, clusterPolicyChain, cat.clusterEndpoints, namesOf);
  }
  if (usesLocalPolicyChain) {
    writeServiceToEndpointRules(tx, ipX, sticky, localPolicyChain, cat.localEndpoints, namesOf);
  }

  for (const r of reachable) {
    tx.addRule(r.names.chain, `${ipX} saddr ${r.ep.ip} jump ${MARK_MASQ_CHAIN}`);
    if (sticky) tx.addRule(r.names.chain, `update @${r.names.affinitySet} { ${ipX} saddr }`);
    tx.addRule(r.names.chain, `meta l4proto ${protocol} dnat to ${r.ep.endpoint}`);
  }

  return { chains: [...active], affinitySets, noLocalInternal, noLocalExternal };
}

/** Affinity lookups, then the random choice among `endpoints` (upstream writeServiceToEndpointRules). */
function writeServiceToEndpointRules(
  tx: NftTransaction,
  ipX: NftFamily,
  sticky: boolean,
  chain: string,
  endpoints: readonly EndpointInfo[],
  namesOf: (ep: EndpointInfo) => EndpointNames,
): void {
  if (sticky) {
    for (const ep of endpoints) {
      const n = namesOf(ep);
      tx.addRule(chain, `${ipX} saddr @${n.affinitySet} goto ${n.chain}`);
    }
  }
  const elements = endpoints.map((ep, i) => `${i} : goto ${namesOf(ep).chain}`).join(" , ");
  tx.addRule(chain, `numgen random mod ${endpoints.length} vmap { ${elements} }`);
}
