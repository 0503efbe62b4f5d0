/**
 * Local traffic detection for nftables rules (upstream pkg/proxy/util/localdetector.go, the *NFT forms):
 * plain data saying how traffic from a pod on this node is recognised, and the rule fragments matching
 * it ("ip saddr 10.0.0.0/8") or not ("ip saddr != 10.0.0.0/8"). Interfaces are matched by name
 * (`iifname`), as since upstream's v1.34 patch releases: v1.34.0 wrote `iif`, which nft rejects for a
 * wildcard and resolves to an index at load time for a bridge name.
 */
import { formatCIDR, parseCIDR } from "../../../net/ip.ts";

/** How local pod traffic is recognised: by pod CIDR, bridge interface, interface-name prefix, or not. */
export type NftLocalTrafficDetector =
  | { readonly mode: "CIDR"; readonly cidr: string }
  | { readonly mode: "BridgeInterface"; readonly interfaceName: string }
  | { readonly mode: "InterfaceNamePrefix"; readonly prefix: string }
  | { readonly mode: "None" };

/** Rule fragments of a detector; null when it detects nothing (upstream IsImplemented() == false). */
export interface LocalTrafficMatches {
  readonly ifLocal: string;
  readonly ifNotLocal: string;
}

/** Linux interface names: at most 15 bytes; kept to a safe character set. */
const IFACE_NAME = /^[A-Za-z0-9._@-]{1,15}$/;

/**
 * The nft fragments of `d`, or null for mode "None". Throws on an invalid CIDR or interface name, naming
 * the field, so nothing unchecked reaches a rule.
 */
export function localTrafficMatches(d: NftLocalTrafficDetector): LocalTrafficMatches | null {
  switch (d.mode) {
    case "None":
      return null;
    case "CIDR": {
      const parsed = parseCIDR(d.cidr.trim());
      if (parsed === null) throw new Error(`local traffic detector: invalid cidr ${JSON.stringify(d.cidr)}`);
      const family = parsed.bytes.length === 16 ? "ip6" : "ip";
      const cidr = formatCIDR(parsed);
      return { ifLocal: `${family} saddr ${cidr}`, ifNotLocal: `${family} saddr != ${cidr}` };
    }
    case "BridgeInterface":
      if (!IFACE_NAME.test(d.interfaceName)) {
        throw new Error(`local traffic detector: invalid interfaceName ${JSON.stringify(d.interfaceName)}`);
      }
      return { ifLocal: `iifname ${d.interfaceName}`, ifNotLocal: `iifname != ${d.interfaceName}` };
    case "InterfaceNamePrefix":
      if (!IFACE_NAME.test(d.prefix) || d.prefix.length > 14) {
        throw new Error(`local traffic detector: invalid prefix ${JSON.stringify(d.prefix)}`);
      }
      return { ifLocal: `iifname ${d.prefix}*`, ifNotLocal: `iifname != ${d.prefix}*` };
  }
}
