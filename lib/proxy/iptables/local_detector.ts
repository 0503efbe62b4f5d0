/**
 * The iptables form of local traffic detection: the match arguments that say "this packet comes from a
 * pod on this node" (-s <podCIDR>, -i <bridge>, -i <prefix>+) and their negations, rendered from the
 * core's {@link LocalDetection} (upstream pkg/proxy/util/localdetector.go).
 */
import type { IPFamily } from "../types.ts";
import {
  detectLocalByBridgeInterface,
  detectLocalByCIDR,
  detectLocalByInterfaceNamePrefix,
  type LocalDetectConfig,
  type LocalDetection,
  localDetectionFor,
} from "../local_detect.ts";

/** A local traffic detector: iptables arguments matching (or not matching) local pod traffic. */
export interface LocalTrafficDetector {
  /** False for the no-op detector: then no ClusterIP masquerade rule and no eTP=Local short-circuit. */
  readonly implemented: boolean;
  /** Arguments matching traffic from a local pod (e.g. ["-s", "10.0.0.0/8"]). */
  readonly ifLocal: readonly string[];
  /** Arguments matching traffic not from a local pod (e.g. ["!", "-s", "10.0.0.0/8"]). */
  readonly ifNotLocal: readonly string[];
}

const NO_OP: LocalTrafficDetector = Object.freeze({ implemented: false, ifLocal: [], ifNotLocal: [] });

/** The iptables match of a detection. */
export function iptablesLocalDetector(detection: LocalDetection): LocalTrafficDetector {
  const match = (flag: string, value: string): LocalTrafficDetector =>
    Object.freeze({ implemented: true, ifLocal: [flag, value], ifNotLocal: ["!", flag, value] });
  switch (detection.kind) {
    case "cidr":
      return match("-s", detection.cidr);
    case "iface":
      return match("-i", detection.name);
    case "prefix":
      return match("-i", detection.prefix + "+");
    case "none":
      return NO_OP;
  }
}

/** The no-op detector (upstream NewNoOpLocalDetector). */
export function newNoOpLocalDetector(): LocalTrafficDetector {
  return NO_OP;
}

/** Detector by pod CIDR. Throws on an invalid CIDR; the CIDR is normalised ("10.0.0.1/8" → "10.0.0.0/8"). */
export function newDetectLocalByCIDR(cidr: string): LocalTrafficDetector {
  return iptablesLocalDetector(detectLocalByCIDR(cidr));
}

/** Detector by bridge interface (-i <bridge>). Throws on an invalid interface name. */
export function newDetectLocalByBridgeInterface(interfaceName: string): LocalTrafficDetector {
  return iptablesLocalDetector(detectLocalByBridgeInterface(interfaceName));
}

/** Detector by interface name prefix (-i <prefix>+). Throws on an invalid prefix. */
export function newDetectLocalByInterfaceNamePrefix(prefix: string): LocalTrafficDetector {
  return iptablesLocalDetector(detectLocalByInterfaceNamePrefix(prefix));
}

/** A chosen detector plus a human-readable note when it fell back to no-op. */
export interface LocalDetectorChoice {
  readonly detector: LocalTrafficDetector;
  readonly warning: string | null;
}

/** The core's choice for one family ({@link localDetectionFor}) in iptables form. */
export function localDetectorFor(family: IPFamily, config: LocalDetectConfig): LocalDetectorChoice {
  const { detection, warning } = localDetectionFor(family, config);
  return { detector: iptablesLocalDetector(detection), warning };
}
