/**
 * Local traffic detection as data (upstream pkg/proxy/util/localdetector.go and getLocalDetectors in
 * cmd/kube-proxy/app/server_linux.go): which packets come from a pod on this node, decided once per IP
 * family from detectLocalMode, the configuration and the own Node's podCIDRs. Each backend renders its
 * own match from this (iptables: `-s <cidr>`, `-i <bridge>`, `-i <prefix>+` and their negations).
 */
import type { Node } from "../k8s/objects.ts";
import type { IPFamily } from "./types.ts";
import { formatCIDR, parseCIDR } from "../net/ip.ts";

/**
 * How local traffic is recognised: by source CIDR, by input interface, by input interface name prefix,
 * or not at all (then no ClusterIP masquerade rule and no eTP=Local short-circuit). One CIDR per family,
 * as upstream's detector takes one.
 */
export type LocalDetection =
  | { readonly kind: "cidr"; readonly cidr: string }
  | { readonly kind: "iface"; readonly name: string }
  | { readonly kind: "prefix"; readonly prefix: string }
  | { readonly kind: "none" };

/** kube-proxy's detectLocalMode values ("" is treated as no detection). */
export type DetectLocalMode = "ClusterCIDR" | "NodeCIDR" | "BridgeInterface" | "InterfaceNamePrefix" | "";

/** No detection (upstream NewNoOpLocalDetector). */
export const NO_LOCAL_DETECTION: LocalDetection = Object.freeze({ kind: "none" });

/** Linux interface names: at most 15 bytes, no "/", ":" or whitespace; kept to a safe character set. */
const IFACE_NAME = /^[A-Za-z0-9._@-]{1,15}$/;

/** Detection by pod CIDR. Throws on an invalid CIDR; the CIDR is normalised ("10.0.0.1/8" → "10.0.0.0/8"). */
export function detectLocalByCIDR(cidr: string): LocalDetection {
  const parsed = parseCIDR(cidr.trim());
  if (parsed === null) throw new Error(`local traffic detector: invalid CIDR ${JSON.stringify(cidr)}`);
  return Object.freeze({ kind: "cidr", cidr: formatCIDR(parsed) });
}

/** Detection by bridge interface. Throws on an invalid interface name. */
export function detectLocalByBridgeInterface(interfaceName: string): LocalDetection {
  if (!IFACE_NAME.test(interfaceName)) {
    throw new Error(`local traffic detector: invalid bridge interface name ${JSON.stringify(interfaceName)}`);
  }
  return Object.freeze({ kind: "iface", name: interfaceName });
}

/** Detection by interface name prefix. Throws on an invalid prefix (room is left for the wildcard). */
export function detectLocalByInterfaceNamePrefix(prefix: string): LocalDetection {
  if (!IFACE_NAME.test(prefix) || prefix.length > 14) {
    throw new Error(`local traffic detector: invalid interface name prefix ${JSON.stringify(prefix)}`);
  }
  return Object.freeze({ kind: "prefix", prefix });
}

/** Inputs for choosing a family's detection, as kube-proxy's configuration provides them. */
export interface LocalDetectConfig {
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

/** A chosen detection plus a human-readable note when it fell back to none. */
export interface LocalDetectChoice {
  readonly detection: LocalDetection;
  readonly warning: string | null;
}

/**
 * Picks the detection for one IP family, as upstream getLocalDetectors does: the first CIDR of this
 * family for ClusterCIDR/NodeCIDR modes, the same interface match for both families otherwise, none when
 * the mode is empty or no CIDR of the family is given. Never throws: bad values become none plus warning.
 */
export function localDetectionFor(family: IPFamily, config: LocalDetectConfig): LocalDetectChoice {
  const ipv6 = family === "IPv6";
  const none = (warning: string | null) => ({ detection: NO_LOCAL_DETECTION, warning });
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
            return none(`detect-local-mode ${config.mode}: invalid CIDR ${JSON.stringify(s)}`);
          }
          if ((parsed.bytes.length === 16) === ipv6) {
            return { detection: detectLocalByCIDR(s), warning: null };
          }
        }
        return none(
          `detect-local-mode ${config.mode}: no ${family} CIDR given; local traffic detection disabled`,
        );
      }
      case "BridgeInterface":
        return { detection: detectLocalByBridgeInterface(config.bridgeInterface ?? ""), warning: null };
      case "InterfaceNamePrefix":
        return {
          detection: detectLocalByInterfaceNamePrefix(config.interfaceNamePrefix ?? ""),
          warning: null,
        };
      case "":
        return none(null);
    }
  } catch (e) {
    return none((e as Error).message);
  }
}

/** The own Node's pod CIDRs: spec.podCIDRs, else the single spec.podCIDR, else none. */
export function nodePodCIDRs(node: Node | null): string[] {
  if (!node) return [];
  const l = node.spec?.podCIDRs ?? [];
  return l.length > 0 ? l : node.spec?.podCIDR ? [node.spec.podCIDR] : [];
}

/**
 * A detection chooser for one family that logs each warning once (not on every Node update); in NodeCIDR
 * mode the warning waits for the Node, since without it there are no podCIDRs yet.
 */
export function localDetectionChooser(
  family: IPFamily,
  config: Omit<LocalDetectConfig, "nodePodCIDRs">,
  warn: (msg: string) => void,
  warned: Set<string> = new Set(),
): (node: Node | null) => LocalDetection {
  return (node) => {
    const choice = localDetectionFor(family, { ...config, nodePodCIDRs: nodePodCIDRs(node) });
    const warning = choice.warning ? `${family}: ${choice.warning}` : null;
    if (warning && (config.mode !== "NodeCIDR" || node !== null) && !warned.has(warning)) {
      warned.add(warning);
      warn(warning);
    }
    return choice.detection;
  };
}
