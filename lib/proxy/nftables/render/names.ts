/**
 * Names in kube-proxy's nftables table (upstream pkg/proxy/nftables/proxier.go): the fixed chains, sets
 * and maps, and the per-service-port and per-endpoint chain and affinity-set names, which are a hash of
 * a readable name followed by that name ("service-ULMVA6XW-ns1/svc1/tcp/p80",
 * "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80").
 */
import type { EndpointInfo, ServicePortName } from "../../types.ts";
import { sha256Base32Prefix16 } from "../../../util/sha256.ts";
import { splitHostPort } from "../../../net/go_net.ts";

/** The one table kube-proxy owns, in the `ip` and `ip6` families. */
export const KUBE_PROXY_TABLE = "kube-proxy";

// Base chains ("<type>-<hook>[-pre-dnat]").
export const FILTER_PREROUTING_PRE_DNAT_CHAIN = "filter-prerouting-pre-dnat";
export const FILTER_OUTPUT_PRE_DNAT_CHAIN = "filter-output-pre-dnat";
export const FILTER_INPUT_CHAIN = "filter-input";
export const FILTER_FORWARD_CHAIN = "filter-forward";
export const FILTER_OUTPUT_CHAIN = "filter-output";
export const NAT_PREROUTING_CHAIN = "nat-prerouting";
export const NAT_OUTPUT_CHAIN = "nat-output";
export const NAT_POSTROUTING_CHAIN = "nat-postrouting";

// Service dispatch.
export const SERVICES_CHAIN = "services";
export const SERVICE_IPS_MAP = "service-ips";
export const SERVICE_NODEPORTS_MAP = "service-nodeports";
/** Addresses accepting NodePort traffic (absent when every local address does). */
export const NODEPORT_IPS_SET = "nodeport-ips";
/** Every active ClusterIP. */
export const CLUSTER_IPS_SET = "cluster-ips";

// Services without (usable) endpoints.
export const SERVICE_ENDPOINTS_CHECK_CHAIN = "service-endpoints-check";
export const NODEPORT_ENDPOINTS_CHECK_CHAIN = "nodeport-endpoints-check";
export const NO_ENDPOINT_SERVICES_MAP = "no-endpoint-services";
export const NO_ENDPOINT_NODEPORTS_MAP = "no-endpoint-nodeports";
export const REJECT_CHAIN = "reject-chain";

/** Traffic to unallocated ClusterIPs and to undefined ports of ClusterIPs. */
export const CLUSTER_IPS_CHECK_CHAIN = "cluster-ips-check";

// loadBalancerSourceRanges.
export const FIREWALL_IPS_MAP = "firewall-ips";
export const FIREWALL_CHECK_CHAIN = "firewall-check";

// Masquerading.
export const MARK_MASQ_CHAIN = "mark-for-masquerade";
export const MASQUERADING_CHAIN = "masquerading";

// Per-service-port and per-endpoint name prefixes (at most 16 characters, hyphen included).
export const SERVICE_CHAIN_PREFIX = "service-";
export const LOCAL_CHAIN_PREFIX = "local-";
export const EXTERNAL_CHAIN_PREFIX = "external-";
export const ENDPOINT_CHAIN_PREFIX = "endpoint-";
export const AFFINITY_SET_PREFIX = "affinity-";
export const FIREWALL_CHAIN_PREFIX = "firewall-";

/** nftables' maximum object-name length, as knftables.NameLengthMax. */
export const NAME_LENGTH_MAX = 256;
const CHAIN_NAME_PREFIX_LENGTH_MAX = 16;
const CHAIN_NAME_BASE_LENGTH_MAX = NAME_LENGTH_MAX - CHAIN_NAME_PREFIX_LENGTH_MAX;

/**
 * Upstream hashAndTruncate: the first 8 base32 characters of sha256(name), "-", then name; cut to 240
 * characters with a "..." tail (the hash keeps truncated names unique). Names are ASCII here.
 */
export function hashAndTruncate(name: string): string {
  const out = sha256Base32Prefix16(name).slice(0, 8) + "-" + name;
  return out.length > CHAIN_NAME_BASE_LENGTH_MAX ? out.slice(0, CHAIN_NAME_BASE_LENGTH_MAX - 3) + "..." : out;
}

/** "HASH-namespace/name/protocol/portName" for a service port (upstream servicePortChainNameBase). */
export function servicePortChainNameBase(name: ServicePortName): string {
  return hashAndTruncate(`${name.namespace}/${name.name}/${name.protocol.toLowerCase()}/${name.port}`);
}

/**
 * "HASH-namespace/name/protocol/portName__ip/port" for an endpoint of a service port (upstream
 * servicePortEndpointChainNameBase); an IPv6 address has its colons replaced by dots.
 */
export function endpointChainNameBase(name: ServicePortName, endpoint: EndpointInfo): string {
  const hp = splitHostPort(endpoint.endpoint);
  const ip = (hp === null ? endpoint.ip : hp.host).replaceAll(":", ".");
  const port = hp === null ? String(endpoint.port) : hp.port;
  return hashAndTruncate(
    `${name.namespace}/${name.name}/${name.protocol.toLowerCase()}/${name.port}__${ip}/${port}`,
  );
}

/** The per-service-port chain names (upstream servicePortInfo's precomputed fields). */
export interface ServicePortChainNames {
  /** Endpoints used with Cluster traffic policy. */
  readonly clusterPolicy: string;
  /** Endpoints used with Local traffic policy. */
  readonly localPolicy: string;
  /** Entry chain for NodePort, LoadBalancer and externalIP traffic. */
  readonly external: string;
  /** loadBalancerSourceRanges filter. */
  readonly firewall: string;
}

/** Chain names of a service port. */
export function servicePortChainNames(name: ServicePortName): ServicePortChainNames {
  const base = servicePortChainNameBase(name);
  return {
    clusterPolicy: SERVICE_CHAIN_PREFIX + base,
    localPolicy: LOCAL_CHAIN_PREFIX + base,
    external: EXTERNAL_CHAIN_PREFIX + base,
    firewall: FIREWALL_CHAIN_PREFIX + base,
  };
}

/** Chain and ClientIP-affinity set names of one endpoint of a service port. */
export interface EndpointNames {
  readonly chain: string;
  readonly affinitySet: string;
}

/** Names of an endpoint's chain and affinity set. */
export function endpointNames(name: ServicePortName, endpoint: EndpointInfo): EndpointNames {
  const base = endpointChainNameBase(name, endpoint);
  return { chain: ENDPOINT_CHAIN_PREFIX + base, affinitySet: AFFINITY_SET_PREFIX + base };
}

/** True for per-service and per-endpoint chains: only they contain "/" (upstream isServiceChainName). */
export function isServiceChainName(chain: string): boolean {
  return chain.includes("/");
}

/** True for ClientIP affinity sets (upstream isAffinitySetName). */
export function isAffinitySetName(set: string): boolean {
  return set.startsWith(AFFINITY_SET_PREFIX);
}
