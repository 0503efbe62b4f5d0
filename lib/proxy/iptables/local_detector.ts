/**
 * Local traffic detection (upstream pkg/proxy/util/localdetector.go and getLocalDetectors in
 * cmd/kube-proxy/app/server_linux.go): the iptables match arguments that say "this packet comes from a
 * pod on this node" (-s <podCIDR>, -i <bridge>, -i <prefix>+) and their negations.
 */
import type { IPFamily } from "../types.ts";
import { formatCIDR, parseCIDR } from "../../net/ip.ts";

/** A local traffic detector: iptables arguments matching (or not matching) local pod traffic. */
export interface LocalTrafficDetector {
  /** False for the no-op detector: then no ClusterIP masquerade rule and no eTP=Local short-circuit. */
  readonly implemented: boolean;
  /** Arguments matching traffic from a local pod (e.g. ["-s", "10.0.0.0/8"]). */
  readonly ifLocal: readonly string[];
  /** Arguments matching traffic not from a local pod (e.g. ["!", "-s", "10.0.0.0/8"]). */
  readonly ifNotLocal: readonly string[];
}

/** kube-proxy's detectLocalMode values ("" is treated as no detection). */
export type DetectLocalMode = "ClusterCIDR" | "NodeCIDR" | "BridgeInterface" | "InterfaceNamePrefix" | "";

const NO_OP: LocalTrafficDetector = Object.freeze({ implemented: false, ifLocal: [], ifNotLocal: [] });

/** Linux interface names: at most 15 bytes, no "/", ":" or whitespace; kept to a safe character set. */
const IFACE_NAME = /^[A-Za-z0-9._@-]{1,15}$/;

/** The no-op detector (upstream NewNoOpLocalDetector). */
export function newNoOpLocalDetector(): LocalTrafficDetector {
  return NO_OP;
}

/** Detector by pod CIDR. Throws on an invalid CIDR; the CIDR is normalised ("10.0.0.1/8" → "10.0.0.0/8"). */
export function newDetectLocalByCIDR(cidr: string): LocalTrafficDetector {
  const parsed = parseCIDR(cidr.trim());
  if (parsed === null) throw new Error(`local traffic detector: invalid CIDR ${JSON.stringify(cidr)}`);
  const c = formatCIDR(parsed);
  return Object.freeze({ implemented: true, ifLocal: ["-s", c], ifNotLocal: ["!", "-s", c] });
}

/** Detector by bridge interface (-i <bridge>). Throws on an invalid interface name. */
export function newDetectLocalByBridgeInterface(interfaceName: string): LocalTrafficDetector {
  if (!IFACE_NAME.test(interfaceName)) {
    throw new Error(`local traffic detector: invalid bridge interface name ${JSON.stringify(interfaceName)}`);
  }
  return Object.freeze({
    implemented: true,
    ifLocal: ["-i", interfaceName],
    ifNotLocal: ["!", "-i", interfaceName],
  });
}

/** Detector by interface name prefix (-i <prefix>+). Throws on an invalid prefix. */
export function newDetectLocalByInterfaceNamePrefix(prefix: string): LocalTrafficDetector {
  if (!IFACE_NAME.test(prefix) || prefix.length > 14) {
    throw new Error(`local traffic detector: invalid interface name prefix ${JSON.stringify(prefix)}`);
  }
  return Object.freeze({
    implemented: true,
    ifLocal: ["-i", prefix + "+"],
    ifNotLocal: ["!", "-i", prefix + "+"],
  });
}

/** Inputs for choosing a family's detector, as kube-proxy's configuration provides them. */
export interface LocalDetectorConfig {
  readonly mode: DetectLocalMode;
  /** `clusterCIDR`, comma-separated for dual-stack (ClusterCIDR mode). */
  readonly clusterCIDR?: string;
  /** The own Node's spec.podCIDRs (NodeCIDR mode). */
  readonly nodePodCIDRs?: readonly string[];
  /** `detectLocal.bridgeInterface` (BridgeInterface mode). */
  readonly bridgeInterface?: string;
  /** `detectLocal.interfaceNamePrefix` (InterfaceNamePrefix mode). */
  readonly interfaceNamePrefix?: string;
}

/** A chosen detector plus a human-readable note when it fell back to no-op. */
export interface LocalDetectorChoice {
  readonly detector: LocalTrafficDetector;
  readonly warning: string | null;
}

/**
 * Picks the detector for one IP family, as upstream getLocalDetectors does: the first CIDR of this family
 * for ClusterCIDR/NodeCIDR modes, the same interface match for both families otherwise, no-op when the
 * mode is empty or no CIDR of the family is given. Never throws: bad values become a no-op plus warning.
 */
export function localDetectorFor(family: IPFamily, config: LocalDetectorConfig): LocalDetectorChoice {
  const ipv6 = family === "IPv6";
  try {
    switch (config.mode) {
      case "ClusterCIDR":
      case "NodeCIDR": {
        const list = config.mode === "ClusterCIDR"
          ? (config.clusterCIDR ?? "").split(",").map((s) => s.trim()).filter((s) => s !== "")
          : (config.nodePodCIDRs ?? []).map((s) => s.trim());
        for (const s of list) {
          const parsed = parseCIDR(s);
          if (parsed === null) {
            return {
              detector: NO_OP,
              warning: `detect-local-mode ${config.mode}: invalid CIDR ${JSON.stringify(s)}`,
            };
          }
          if ((parsed.bytes.length === 16) === ipv6) {
            return { detector: newDetectLocalByCIDR(s), warning: null };
          }
        }
        return {
          detector: NO_OP,
          warning:
            `detect-local-mode ${config.mode}: no ${family} CIDR given; local traffic detection disabled`,
        };
      }
      case "BridgeInterface":
        return { detector: newDetectLocalByBridgeInterface(config.bridgeInterface ?? ""), warning: null };
      case "InterfaceNamePrefix":
        return {
          detector: newDetectLocalByInterfaceNamePrefix(config.interfaceNamePrefix ?? ""),
          warning: null,
        };
      case "":
        return { detector: NO_OP, warning: null };
    }
  } catch (e) {
    return { detector: NO_OP, warning: (e as Error).message };
  }
}
