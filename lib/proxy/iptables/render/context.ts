/**
 * The render-wide settings, derived and validated once per render (Setup: node IP, local-traffic
 * detector, NodePort addresses, localhost NodePorts, the fixed chains, and the context string that
 * decides whether a previous render's per-service-port facts can be reused), and the Context handed to
 * every service port (those settings plus large-cluster mode, the shared-rule sink and work counters).
 * Also the two settings helpers the API exports: the masquerade mark and the large-cluster endpoint count.
 */
import type { EndpointInfo, ServicePortInfo } from "../../types.ts";
import { LABEL_TOPOLOGY_ZONE } from "../../topology.ts";
import { type LocalTrafficDetector, newNoOpLocalDetector } from "../local_detector.ts";
import { newNodePortAddresses, resolveNodePortAddresses } from "../../nodeport_addresses.ts";
import { parseIPOfFamily } from "../../../net/ip.ts";
import { checkArgs } from "./validate.ts";
import { SHARED_CHAIN_COUNT, type SharedChain, type SharedRuleSink } from "./shared_chains.ts";
import type { FixedChainRules } from "./state.ts";
import { renderFixedChains } from "./fixed_chains.ts";
import type { RenderInput } from "./input.ts";

/** Above this many endpoints in total, comments are dropped from SEP and SVC→SEP rules (upstream). */
export const LARGE_CLUSTER_ENDPOINTS_THRESHOLD = 1000;

/** Upstream's masquerade mark: fmt.Sprintf("%#08x", 1<<bit) (Go pads the digits, not the "0x"). */
export function masqueradeMark(bit: number): string {
  if (!Number.isInteger(bit) || bit < 0 || bit > 31) {
    throw new RangeError(`masqueradeBit must be an integer in 0..31, got ${bit}`);
  }
  return "0x" + (2 ** bit).toString(16).padStart(8, "0");
}

/** Total endpoints over the given service ports (upstream's large-cluster measure: all, not only ready). */
export function totalEndpointCount(
  services: ReadonlyMap<string, ServicePortInfo>,
  endpoints: ReadonlyMap<string, readonly EndpointInfo[]>,
): number {
  let n = 0;
  for (const key of services.keys()) n += endpoints.get(key)?.length ?? 0;
  return n;
}

/** Render-wide settings, validated once per render. */
export interface Setup {
  readonly ipv6: boolean;
  /** Warnings about the settings (before any service port's). */
  readonly warnings: readonly string[];
  readonly primaryNodeIP: Uint8Array | null;
  readonly detector: LocalTrafficDetector;
  readonly npa: ReturnType<typeof newNodePortAddresses>;
  readonly localhostNodePorts: boolean;
  readonly localhostNodePortsNfacct: boolean;
  readonly preferSameTrafficDistribution: boolean;
  /** RenderState.context of this render. */
  readonly context: string;
  readonly fixedChains: FixedChainRules[];
}

/**
 * Derives and validates the render-wide settings of `input`: an unusable node IP, detector or NodePort
 * address becomes a warning; an invalid masqueradeBit throws (masqueradeMark).
 */
export function renderSetup(input: RenderInput): Setup {
  const ipv6 = input.family === "IPv6";
  const mark = masqueradeMark(input.masqueradeBit);
  const warnings: string[] = [];

  let primaryNodeIP: Uint8Array | null = null;
  if (input.primaryNodeIP !== null && input.primaryNodeIP !== "") {
    primaryNodeIP = parseIPOfFamily(input.primaryNodeIP, ipv6);
    if (primaryNodeIP === null) {
      warnings.push(`primaryNodeIP ${JSON.stringify(input.primaryNodeIP)} ignored: not ${input.family}`);
    }
  }

  let detector = input.localDetector;
  const detectorProblem = checkArgs("localDetector", [...detector.ifLocal, ...detector.ifNotLocal]);
  if (detectorProblem !== null) {
    warnings.push(`${detectorProblem}; local traffic detection disabled for this sync`);
    detector = newNoOpLocalDetector();
  }

  const npa = newNodePortAddresses(
    input.family,
    resolveNodePortAddresses(input.nodePortAddresses, input.family, input.primaryNodeIP),
  );
  for (const bad of npa.invalid) {
    warnings.push(`nodePortAddresses value ${JSON.stringify(bad)} ignored: not a CIDR`);
  }
  const localhostNodePorts = !ipv6 && input.localhostNodePorts && npa.containsIPv4Loopback;
  const localhostNodePortsNfacct = localhostNodePorts && input.features.nfacct;
  const preferSameTrafficDistribution = input.features.preferSameTrafficDistribution ?? true;
  const labels = input.nodeLabels;
  const zone = Object.hasOwn(labels, LABEL_TOPOLOGY_ZONE) ? labels[LABEL_TOPOLOGY_ZONE] : "";
  // Everything a service port's facts depend on besides its own objects (see ServicePortFacts).
  const context = JSON.stringify([
    input.family,
    input.nodeName,
    zone,
    preferSameTrafficDistribution,
    input.masqueradeAll,
    detector.implemented,
    primaryNodeIP === null ? "" : input.primaryNodeIP,
    localhostNodePortsNfacct,
  ]);
  return {
    ipv6,
    warnings,
    primaryNodeIP,
    detector,
    npa,
    localhostNodePorts,
    localhostNodePortsNfacct,
    preferSameTrafficDistribution,
    context,
    fixedChains: renderFixedChains(input, mark, localhostNodePorts),
  };
}

/** Mutable work counters of one render. */
export interface WorkCounters {
  servicePorts: number;
  categorized: number;
  hashes: number;
  validated: number;
  scanned: number;
}

/** Per-render constants shared by every service port, plus the shared-rule sink. */
export interface Context {
  readonly ipv6: boolean;
  readonly nodeName: string;
  readonly nodeLabels: Readonly<Record<string, string>>;
  readonly primaryNodeIP: Uint8Array | null;
  readonly masqueradeAll: boolean;
  readonly detector: LocalTrafficDetector;
  readonly ifLocal: string;
  readonly ifNotLocal: string;
  readonly localhostNodePortsNfacct: boolean;
  readonly largeClusterMode: boolean;
  readonly preferSameTrafficDistribution: boolean;
  /** Receives the service ports' shared-chain rules (it must count them in `counts`). */
  readonly sink: SharedRuleSink;
  /** Rules per shared chain of the service port being processed. */
  readonly counts: number[];
  readonly work: WorkCounters;
}

/** The Context for one render; `out` receives each shared-chain rule after it is counted. */
export function newContext(
  input: RenderInput,
  setup: Setup,
  largeClusterMode: boolean,
  out: (c: SharedChain, line: string) => void,
): Context {
  const counts = new Array<number>(SHARED_CHAIN_COUNT).fill(0);
  return {
    ipv6: setup.ipv6,
    nodeName: input.nodeName,
    nodeLabels: input.nodeLabels,
    primaryNodeIP: setup.primaryNodeIP,
    masqueradeAll: input.masqueradeAll,
    detector: setup.detector,
    ifLocal: setup.detector.ifLocal.join(" "),
    ifNotLocal: setup.detector.ifNotLocal.join(" "),
    localhostNodePortsNfacct: setup.localhostNodePortsNfacct,
    largeClusterMode,
    preferSameTrafficDistribution: setup.preferSameTrafficDistribution,
    sink: (c: SharedChain, line: string) => {
      counts[c]++;
      out(c, line);
    },
    counts,
    work: { servicePorts: 0, categorized: 0, hashes: 0, validated: 0, scanned: 0 },
  };
}
