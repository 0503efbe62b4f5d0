/**
 * The apiserver's check for addresses that must not be used as traffic destinations (upstream
 * pkg/apis/core/validation ValidateNonSpecialIP). Upstream applies it to Service `spec.externalIPs` and to
 * endpoint addresses (EndpointSlice validation in pkg/apis/discovery/validation); `spec.clusterIPs` and
 * `status.loadBalancer.ingress[].ip` are only required to be valid IPs there. With `--manifests` or a state
 * cache edgeproxy is the only validator, so the same check runs on every object in lib/model, whatever its
 * source.
 */
import { type CIDR, cidrContains, parseCIDR } from "../config/net.ts";

interface SpecialRange {
  readonly cidrs: readonly CIDR[];
  readonly problem: string;
}

function ranges(list: readonly string[]): CIDR[] {
  return list.map((c) => parseCIDR(c)!);
}

/** Go's net.IP predicates used by ValidateNonSpecialIP, in its order, with its messages. */
const SPECIAL: readonly SpecialRange[] = [
  { cidrs: ranges(["0.0.0.0/32", "::/128"]), problem: "may not be unspecified" },
  {
    cidrs: ranges(["127.0.0.0/8", "::1/128"]),
    problem: "may not be in the loopback range (127.0.0.0/8, ::1/128)",
  },
  {
    cidrs: ranges(["169.254.0.0/16", "fe80::/10"]),
    problem: "may not be in the link-local range (169.254.0.0/16, fe80::/10)",
  },
  {
    // Go's IsLinkLocalMulticast: 224.0.0.0/24, and ff02::/16 whatever the flag bits (ff02, ff12, ... ff f2).
    cidrs: ranges([
      "224.0.0.0/24",
      ...Array.from({ length: 16 }, (_, flags) => `ff${flags.toString(16)}2::/16`),
    ]),
    problem: "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)",
  },
];

/**
 * Why `ip` (a normalised address, as lib/model's parseIP returns) may not be a Service external IP or an
 * endpoint address, or null when it may. One reason, the first upstream would report.
 */
export function nonSpecialIPProblem(ip: string): string | null {
  for (const r of SPECIAL) {
    if (r.cidrs.some((c) => cidrContains(c, ip))) return r.problem;
  }
  return null;
}
