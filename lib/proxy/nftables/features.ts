/**
 * The kernel feature probe of the nftables mode: one transaction, checked and never applied
 * (`nft -c -f -`), using every kind of expression the ruleset relies on — base chains on the nat and
 * filter hooks, concatenated verdict maps, `numgen random` endpoint choice, dynamic timeout sets
 * (ClientIP affinity), DNAT, `masquerade fully-random`, `reject`, conntrack state. A kernel lacking one
 * (module missing, too old) fails it with nft's message naming the line.
 */
import type { NftFamily } from "./render/transaction.ts";

/** A throwaway table name, so the probe never touches table `kube-proxy`. */
export const PROBE_TABLE = "kube-proxy-feature-probe";

/** The probe transaction for `family`. */
export function featureProbeTransaction(family: NftFamily): string {
  const v6 = family === "ip6";
  const addr = v6 ? "ipv6_addr" : "ipv4_addr";
  const ep = v6 ? "[fd00::1]:80" : "10.0.0.1:80";
  const t = `${family} ${PROBE_TABLE}`;
  return [
    `add table ${t}`,
    `add chain ${t} nat-prerouting { type nat hook prerouting priority -100 ; }`,
    `add chain ${t} nat-postrouting { type nat hook postrouting priority 100 ; }`,
    `add chain ${t} filter-input { type filter hook input priority 0 ; }`,
    `add map ${t} service-ips { type ${addr} . inet_proto . inet_service : verdict ; }`,
    `add set ${t} affinity { type ${addr} ; flags dynamic,timeout ; timeout 10800s ; }`,
    `add chain ${t} endpoint`,
    `add chain ${t} service`,
    `add rule ${t} nat-prerouting ${family} daddr . meta l4proto . th dport vmap @service-ips`,
    `add rule ${t} endpoint update @affinity { ${family} saddr }`,
    `add rule ${t} endpoint meta l4proto tcp dnat to ${ep}`,
    `add rule ${t} service numgen random mod 2 vmap { 0 : goto endpoint , 1 : goto endpoint }`,
    `add rule ${t} nat-postrouting mark and 0x4000 != 0 masquerade fully-random`,
    `add rule ${t} filter-input ct state new reject`,
    "",
  ].join("\n");
}
