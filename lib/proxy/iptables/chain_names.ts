/**
 * iptables chain names, exactly as upstream kube-proxy derives them (pkg/proxy/iptables/proxier.go):
 * a fixed prefix plus the first 16 characters of base32(sha256(servicePortName + protocol [+ endpoint])).
 *
 * No cache here: the renderer keeps each service port's hashes in its RenderState (16 characters per
 * chain, keyed by the service port) and re-hashes only service ports that changed, which costs far less
 * memory than a process-wide map from hash input to hash (10–14 MB at 50k endpoints).
 */
import { Buffer } from "node:buffer";
import { sha256Base32Prefix16, sha256Base32Prefix16Into } from "../../util/sha256.ts";

/** nat/filter: entry chain for service portals. */
export const KUBE_SERVICES = "KUBE-SERVICES";
/** filter: REJECT/DROP for external destinations without (local) endpoints. */
export const KUBE_EXTERNAL_SERVICES = "KUBE-EXTERNAL-SERVICES";
/** nat: NodePort dispatch; filter: health-check node port ACCEPT rules. */
export const KUBE_NODEPORTS = "KUBE-NODEPORTS";
/** nat: SNAT of marked traffic. */
export const KUBE_POSTROUTING = "KUBE-POSTROUTING";
/** nat: marks a packet for masquerading. */
export const KUBE_MARK_MASQ = "KUBE-MARK-MASQ";
/** filter: forwarding rules for marked and established traffic. */
export const KUBE_FORWARD = "KUBE-FORWARD";
/** filter: DROP rules for LoadBalancer source ranges. */
export const KUBE_PROXY_FIREWALL = "KUBE-PROXY-FIREWALL";
/** filter: copy of kubelet's anti-martian chain (IPv4 with localhost NodePorts only). */
export const KUBE_FIREWALL = "KUBE-FIREWALL";
/** Canary chain watched for foreign flushes (mangle, nat, filter). */
export const KUBE_PROXY_CANARY = "KUBE-PROXY-CANARY";

/** Prefix of a service port's cluster-policy chain. */
export const SVC_PREFIX = "KUBE-SVC-";
/** Prefix of a service port's local-policy chain. */
export const SVL_PREFIX = "KUBE-SVL-";
/** Prefix of a service port's external-destinations chain. */
export const EXT_PREFIX = "KUBE-EXT-";
/** Prefix of a service port's loadBalancerSourceRanges chain. */
export const FW_PREFIX = "KUBE-FW-";
/** Prefix of an endpoint chain. */
export const SEP_PREFIX = "KUBE-SEP-";

const BASE32_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/** RFC 4648 base32 (upper-case alphabet, "=" padding), like Go's base32.StdEncoding. */
export function base32Encode(bytes: Uint8Array): string {
  let out = "";
  let buffer = 0;
  let bits = 0;
  for (const byte of bytes) {
    buffer = ((buffer << 8) | byte) & 0xffff;
    bits += 8;
    while (bits >= 5) {
      out += BASE32_ALPHABET[(buffer >> (bits - 5)) & 31];
      bits -= 5;
    }
  }
  if (bits > 0) out += BASE32_ALPHABET[(buffer << (5 - bits)) & 31];
  while (out.length % 8 !== 0) out += "=";
  return out;
}

/** The first 16 base32 characters of sha256(input) (allocation-free SHA-256, see lib/util/sha256.ts). */
function hash16(input: string): string {
  return sha256Base32Prefix16(input);
}

/**
 * Upstream portProtoHash: base32(sha256(servicePortName + protocol))[:16].
 * `servicePortName` is "ns/name[:port]", `protocol` lower-case ("tcp", "udp", "sctp").
 */
export function portProtoHash(servicePortName: string, protocol: string): string {
  return hash16(servicePortName + protocol);
}

/** KUBE-SVC-<hash>: the service port's chain for Cluster traffic policy. */
export function servicePortPolicyClusterChain(servicePortName: string, protocol: string): string {
  return SVC_PREFIX + portProtoHash(servicePortName, protocol);
}

/** KUBE-SVL-<hash>: the service port's chain for Local traffic policy. */
export function servicePortPolicyLocalChain(servicePortName: string, protocol: string): string {
  return SVL_PREFIX + portProtoHash(servicePortName, protocol);
}

/** KUBE-FW-<hash>: the service port's loadBalancerSourceRanges chain. */
export function serviceFirewallChain(servicePortName: string, protocol: string): string {
  return FW_PREFIX + portProtoHash(servicePortName, protocol);
}

/** KUBE-EXT-<hash>: the service port's chain for external destinations (NodePort, externalIPs, LB). */
export function serviceExternalChain(servicePortName: string, protocol: string): string {
  return EXT_PREFIX + portProtoHash(servicePortName, protocol);
}

/**
 * KUBE-SEP-<hash>: an endpoint's chain. `endpoint` is "ip:port" with IPv6 bracketed
 * ("[fd00::1]:80"), as Go's net.JoinHostPort writes it.
 */
export function servicePortEndpointChain(
  servicePortName: string,
  protocol: string,
  endpoint: string,
): string {
  return SEP_PREFIX + endpointHash(servicePortName, protocol, endpoint);
}

/** The 16-character hash of an endpoint chain name (KUBE-SEP-<hash>); arguments as servicePortEndpointChain. */
export function endpointHash(servicePortName: string, protocol: string, endpoint: string): string {
  return hash16(servicePortName + protocol + endpoint);
}

/** Where endpointHashes writes the hashes before making them one string (grown to the largest need). */
let hashScratch = Buffer.alloc(16 * 64);

/**
 * endpointHash of each endpoint, concatenated (16 characters each, in order), made as one string: no
 * joined input or per-endpoint hash string (a first full sync at 10k Services hashes ~65k endpoints).
 */
export function endpointHashes(
  servicePortName: string,
  protocol: string,
  endpoints: readonly { readonly endpoint: string }[],
): string {
  if (endpoints.length === 0) return "";
  if (16 * endpoints.length > hashScratch.length) hashScratch = Buffer.alloc(32 * endpoints.length);
  for (let i = 0; i < endpoints.length; i++) {
    sha256Base32Prefix16Into(servicePortName, protocol, endpoints[i].endpoint, hashScratch, 16 * i);
  }
  return hashScratch.toString("latin1", 0, 16 * endpoints.length);
}

/** The four per-service-port chain names (they share one hash). */
export interface ServicePortChains {
  readonly clusterPolicy: string;
  readonly localPolicy: string;
  readonly external: string;
  readonly firewall: string;
}

/** All per-service-port chain names for a service port name and lower-case protocol. */
export function servicePortChains(servicePortName: string, protocol: string): ServicePortChains {
  return chainsForHash(portProtoHash(servicePortName, protocol));
}

/** The per-service-port chain names for an already computed portProtoHash. */
export function chainsForHash(hash: string): ServicePortChains {
  return {
    clusterPolicy: SVC_PREFIX + hash,
    localPolicy: SVL_PREFIX + hash,
    external: EXT_PREFIX + hash,
    firewall: FW_PREFIX + hash,
  };
}

/** Upstream isServiceChainName: true for the per-service chain prefixes (SVC, SVL, SEP, FW, EXT). */
export function isServiceChainName(chain: string): boolean {
  return chain.startsWith(SVC_PREFIX) || chain.startsWith(SVL_PREFIX) || chain.startsWith(SEP_PREFIX) ||
    chain.startsWith(FW_PREFIX) || chain.startsWith(EXT_PREFIX);
}
