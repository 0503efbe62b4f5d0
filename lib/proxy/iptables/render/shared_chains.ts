/**
 * The rules one service port contributes to the chains every service port shares: filter KUBE-SERVICES,
 * KUBE-EXTERNAL-SERVICES, KUBE-NODEPORTS, KUBE-PROXY-FIREWALL and nat KUBE-SERVICES, KUBE-NODEPORTS
 * (upstream syncProxyRules, the part before the per-service chains).
 *
 * The text is a pure function of the ServicePortInfo, three endpoint facts (`SharedRuleFlags`) and one
 * render-wide switch (localhost NodePort nfacct counters). Full renders write it straight into the
 * payload; incremental renders write it for both the previous and the current sync and diff the two,
 * so a `-D` line is always byte-identical to the `-A`/`-I` line that added the rule.
 */
import type { ServicePortInfo } from "../../types.ts";
import type { ServicePortChains } from "../chain_names.ts";
import {
  KUBE_EXTERNAL_SERVICES,
  KUBE_NODEPORTS,
  KUBE_PROXY_FIREWALL,
  KUBE_SERVICES,
} from "../chain_names.ts";

/** nfacct counter on localhost NodePort rules. */
export const NFACCT_LOCALHOST_NODEPORTS_ACCEPTED = "localhost_nps_accepted_pkts";

/** The shared chains, as small integers (index into SHARED_CHAIN_TABLE / SHARED_CHAIN_NAME). */
export const SharedChain = {
  FilterServices: 0,
  FilterExternalServices: 1,
  FilterNodePorts: 2,
  FilterProxyFirewall: 3,
  NatServices: 4,
  NatNodePorts: 5,
} as const;

/** One of the SharedChain values. */
export type SharedChain = (typeof SharedChain)[keyof typeof SharedChain];

/** Number of shared chains. */
export const SHARED_CHAIN_COUNT = 6;

/** Table of each shared chain. */
export const SHARED_CHAIN_TABLE: readonly ("filter" | "nat")[] = [
  "filter",
  "filter",
  "filter",
  "filter",
  "nat",
  "nat",
];

/** Name of each shared chain. */
export const SHARED_CHAIN_NAME: readonly string[] = [
  KUBE_SERVICES,
  KUBE_EXTERNAL_SERVICES,
  KUBE_NODEPORTS,
  KUBE_PROXY_FIREWALL,
  KUBE_SERVICES,
  KUBE_NODEPORTS,
];

/** Endpoint facts that decide a service port's shared rules; bits of one byte (kept per key in the state). */
export const SharedRuleFlags = {
  /** Some endpoint can take traffic (upstream hasEndpoints). */
  HasEndpoints: 1,
  /** Traffic to the cluster IP has endpoints under the internal policy (upstream hasInternalEndpoints). */
  HasInternalEndpoints: 2,
  /** External traffic has endpoints under the external policy (upstream hasExternalEndpoints). */
  HasExternalEndpoints: 4,
  /** The service port was skipped (unsafe value): it contributes no rules at all. */
  Skipped: 8,
} as const;

/** Receives one shared-chain rule line ("-A CHAIN …"). */
export type SharedRuleSink = (chain: SharedChain, line: string) => void;

/**
 * Writes a service port's shared-chain rules, in upstream's order (cluster IP, externalIPs, LB IPs,
 * NodePort, health-check node port). `spn` is ServicePortName.String(), `protocol` lower-case, `names`
 * its chain names, `flags` SharedRuleFlags, `localhostNodePortsNfacct` whether localhost NodePort rules
 * are written (with their nfacct counter).
 */
export function writeSharedRules(
  sink: SharedRuleSink,
  svc: ServicePortInfo,
  spn: string,
  protocol: string,
  names: ServicePortChains,
  flags: number,
  localhostNodePortsNfacct: boolean,
): void {
  if ((flags & SharedRuleFlags.Skipped) !== 0) return;
  const hasEndpoints = (flags & SharedRuleFlags.HasEndpoints) !== 0;
  const hasInternalEndpoints = (flags & SharedRuleFlags.HasInternalEndpoints) !== 0;
  const hasExternalEndpoints = (flags & SharedRuleFlags.HasExternalEndpoints) !== 0;
  const internalTrafficChain = svc.internalPolicyLocal ? names.localPolicy : names.clusterPolicy;
  const externalTrafficChain = names.external;
  const fwChain = names.firewall;
  const usesFWChain = hasEndpoints && svc.loadBalancerVIPs.length > 0 &&
    svc.loadBalancerSourceRanges.length > 0;
  const loadBalancerTrafficChain = usesFWChain ? fwChain : externalTrafficChain;

  // REJECT when nothing can take the traffic, DROP when only the Local policy has nothing.
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
    }
    if (!hasExternalEndpoints) {
      externalFilterTarget = "DROP";
      externalFilterComment = `"${spn} has no local endpoints"`;
    }
  }

  const mp = `-m ${protocol} -p ${protocol}`;
  const port = svc.port;

  // ClusterIP.
  if (hasInternalEndpoints) {
    sink(
      SharedChain.NatServices,
      `-A ${KUBE_SERVICES} -m comment --comment "${spn} cluster IP" ${mp} -d ${svc.clusterIP} --dport ${port} -j ${internalTrafficChain}`,
    );
  } else {
    sink(
      SharedChain.FilterServices,
      `-A ${KUBE_SERVICES} -m comment --comment ${internalFilterComment} ${mp} -d ${svc.clusterIP} --dport ${port} -j ${internalFilterTarget}`,
    );
  }

  // externalIPs.
  for (const externalIP of svc.externalIPs) {
    if (hasEndpoints) {
      sink(
        SharedChain.NatServices,
        `-A ${KUBE_SERVICES} -m comment --comment "${spn} external IP" ${mp} -d ${externalIP} --dport ${port} -j ${externalTrafficChain}`,
      );
    }
    if (!hasExternalEndpoints) {
      sink(
        SharedChain.FilterExternalServices,
        `-A ${KUBE_EXTERNAL_SERVICES} -m comment --comment ${externalFilterComment} ${mp} -d ${externalIP} --dport ${port} -j ${externalFilterTarget}`,
      );
    }
  }

  // LoadBalancer ingress IPs.
  for (const lbip of svc.loadBalancerVIPs) {
    if (hasEndpoints) {
      sink(
        SharedChain.NatServices,
        `-A ${KUBE_SERVICES} -m comment --comment "${spn} loadbalancer IP" ${mp} -d ${lbip} --dport ${port} -j ${loadBalancerTrafficChain}`,
      );
    }
    if (usesFWChain) {
      sink(
        SharedChain.FilterProxyFirewall,
        `-A ${KUBE_PROXY_FIREWALL} -m comment --comment "${spn} traffic not accepted by ${fwChain}" ${mp} -d ${lbip} --dport ${port} -j DROP`,
      );
    }
  }
  if (!hasExternalEndpoints) {
    for (const lbip of svc.loadBalancerVIPs) {
      sink(
        SharedChain.FilterExternalServices,
        `-A ${KUBE_EXTERNAL_SERVICES} -m comment --comment ${externalFilterComment} ${mp} -d ${lbip} --dport ${port} -j ${externalFilterTarget}`,
      );
    }
  }

  // NodePort (not subject to loadBalancerSourceRanges, as upstream).
  if (svc.nodePort !== 0) {
    if (hasEndpoints) {
      if (localhostNodePortsNfacct) {
        sink(
          SharedChain.NatNodePorts,
          `-A ${KUBE_NODEPORTS} -m comment --comment ${spn} ${mp} -d 127.0.0.0/8 --dport ${svc.nodePort} -m nfacct --nfacct-name ${NFACCT_LOCALHOST_NODEPORTS_ACCEPTED} -j ${externalTrafficChain}`,
        );
      }
      sink(
        SharedChain.NatNodePorts,
        `-A ${KUBE_NODEPORTS} -m comment --comment ${spn} ${mp} --dport ${svc.nodePort} -j ${externalTrafficChain}`,
      );
    }
    if (!hasExternalEndpoints) {
      sink(
        SharedChain.FilterExternalServices,
        `-A ${KUBE_EXTERNAL_SERVICES} -m comment --comment ${externalFilterComment} -m addrtype --dst-type LOCAL ${mp} --dport ${svc.nodePort} -j ${externalFilterTarget}`,
      );
    }
  }

  // Health-check node port: accepted whether or not there are local endpoints. The text does not depend
  // on the protocol (always tcp), the only shared rule two service ports could both write identically.
  if (svc.healthCheckNodePort !== 0) {
    sink(
      SharedChain.FilterNodePorts,
      `-A ${KUBE_NODEPORTS} -m comment --comment "${spn} health check node port" -m tcp -p tcp --dport ${svc.healthCheckNodePort} -j ACCEPT`,
    );
  }
}
