/**
 * The chains kube-proxy writes on every sync whatever the Services are: filter KUBE-FIREWALL (localhost
 * NodePorts only) and KUBE-FORWARD, nat KUBE-POSTROUTING and KUBE-MARK-MASQ, plus the jump(s) to
 * KUBE-NODEPORTS that end nat KUBE-SERVICES. Their text depends only on the render settings, so the
 * state keeps it and an incremental sync rewrites a fixed chain only when it changed.
 */
import {
  KUBE_EXTERNAL_SERVICES,
  KUBE_FIREWALL,
  KUBE_FORWARD,
  KUBE_MARK_MASQ,
  KUBE_NODEPORTS,
  KUBE_POSTROUTING,
  KUBE_PROXY_FIREWALL,
  KUBE_SERVICES,
} from "../chain_names.ts";
import type { newNodePortAddresses } from "../../nodeport_addresses.ts";
import { isLoopback, parseIPOfFamily } from "../../../net/ip.ts";
import type { FixedChainRules, RenderState } from "./state.ts";
import { SHARED_CHAIN_COUNT, SHARED_CHAIN_NAME, SHARED_CHAIN_TABLE } from "./shared_chains.ts";
import type { RenderInput } from "./input.ts";

/** nfacct counter on the KUBE-FORWARD INVALID drop rule. */
export const NFACCT_CT_STATE_INVALID_DROPPED = "ct_state_invalid_dropped_pkts";

/**
 * The chains with a fixed set of rules: filter KUBE-FIREWALL (only with localhost NodePorts) and
 * KUBE-FORWARD, nat KUBE-POSTROUTING and KUBE-MARK-MASQ.
 */
export function renderFixedChains(
  input: RenderInput,
  mark: string,
  localhostNodePorts: boolean,
): FixedChainRules[] {
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
export function renderNodePortsTail(
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
 * The non-per-service chains a full render declares, per table, in upstream's order (filter KUBE-FIREWALL
 * only with localhost NodePorts).
 */
export const DECLARED_CHAINS: { readonly filter: readonly string[]; readonly nat: readonly string[] } = {
  filter: [
    KUBE_SERVICES,
    KUBE_EXTERNAL_SERVICES,
    KUBE_FORWARD,
    KUBE_NODEPORTS,
    KUBE_PROXY_FIREWALL,
    KUBE_FIREWALL,
  ],
  nat: [KUBE_SERVICES, KUBE_NODEPORTS, KUBE_POSTROUTING, KUBE_MARK_MASQ],
};

/**
 * Rule counts of the shared and fixed chains once the state's payload is applied (table → chain → rules,
 * in DECLARED_CHAINS' order): the shared chains' totals, the fixed chains' rules, and the KUBE-NODEPORTS
 * jump(s) that end nat KUBE-SERVICES. What the drift check expects there.
 */
export function fixedChainRuleCounts(state: RenderState): Map<"filter" | "nat", Map<string, number>> {
  const out = new Map<"filter" | "nat", Map<string, number>>();
  for (const table of ["filter", "nat"] as const) {
    const counts = new Map<string, number>();
    for (const chain of DECLARED_CHAINS[table]) {
      let n: number | null = null;
      for (let c = 0; c < SHARED_CHAIN_COUNT; c++) {
        if (SHARED_CHAIN_TABLE[c] === table && SHARED_CHAIN_NAME[c] === chain) {
          n = (n ?? 0) + state.totals.shared[c];
        }
      }
      for (const f of state.fixedChains) {
        if (f.table === table && f.chain === chain) n = (n ?? 0) + f.rules.length;
      }
      if (table === "nat" && chain === KUBE_SERVICES) n = (n ?? 0) + state.nodePortsTail.length;
      if (n !== null) counts.set(chain, n);
    }
    out.set(table, counts);
  }
  return out;
}

/** Rules of the fixed chains in one table. */
export function fixedRuleCount(fixed: readonly FixedChainRules[], table: "filter" | "nat"): number {
  let n = 0;
  for (const f of fixed) if (f.table === table) n += f.rules.length;
  return n;
}
