/**
 * Building ServicePortInfo from a Service (upstream pkg/proxy/serviceport.go newBaseServiceInfo and
 * servicechangetracker.go serviceToServiceMap), for one IP family.
 *
 * Everything that can reach an iptables rule is validated here, because the renderer trusts its input:
 * names become rule comments and chain-name hashes, IPs and ports become match arguments. A Service that
 * fails validation is skipped with one warning line naming the object, the field and the value; a bad
 * port skips only that port; a bad entry of a list (externalIPs, LB ingress, source ranges) is dropped
 * as upstream drops it. External IPs the apiserver refuses (unspecified, loopback, link-local; see
 * special_ip.ts) are dropped the same way, since a manifest or a cache has no apiserver in front of it.
 * Nothing here throws.
 */
import type { Service, ServicePortSpec } from "../k8s/objects.ts";
import { type IPFamily, type Protocol, type ServicePortInfo, servicePortKey } from "./types.ts";
import { formatCIDR, ipFamily, parseCIDRLegacy, parseIPLegacy } from "../net/go_net.ts";
import { nonSpecialIPProblem } from "../net/special_ip.ts";
import { isIPOfFamily } from "../net/ip.ts";

/** Receives one human-readable line per problem found in an object. */
export type Warn = (msg: string) => void;

/** Upstream's default ClientIP affinity timeout (v1.DefaultClientIPServiceAffinitySeconds). */
export const DEFAULT_CLIENT_IP_TIMEOUT_SECONDS = 10800;
/** Upstream's maximum ClientIP affinity timeout (v1.MaxClientIPServiceAffinitySeconds). */
export const MAX_CLIENT_IP_TIMEOUT_SECONDS = 86400;

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const SAFE_FOR_LOG = /^[A-Za-z0-9._-]{1,63}$/;
const PROTOCOLS: ReadonlySet<string> = new Set(["TCP", "UDP", "SCTP"]);
const SERVICE_TYPES: ReadonlySet<string> = new Set([
  "",
  "ClusterIP",
  "NodePort",
  "LoadBalancer",
  "ExternalName",
]);

/**
 * True for an RFC 1123 DNS label (lower-case alphanumerics and '-', at most 63 characters). Service
 * names, namespaces and port names must be labels: they end up in rule comments and chain hashes, and a
 * label can hold no quote, space, newline or anything iptables-restore would split on.
 */
export function isDNSLabel(s: unknown): s is string {
  return typeof s === "string" && s.length <= 63 && DNS_LABEL.test(s);
}

/**
 * Renders any value for a log line: numbers as is, strings JSON-quoted (so newlines and quotes stay
 * visible and the line stays one line), long values truncated.
 */
export function formatValue(v: unknown): string {
  if (v === undefined) return "<unset>";
  let s: string;
  try {
    s = typeof v === "number" || typeof v === "boolean" ? String(v) : JSON.stringify(v) ?? String(v);
  } catch {
    s = Object.prototype.toString.call(v);
  }
  const length = typeof v === "string" ? v.length : s.length;
  return s.length > 80 ? `${s.slice(0, 80)}...(${length} chars)` : s;
}

/** "ns/name" of an object for a log line; parts that are not plain names are quoted and escaped. */
export function objectRef(namespace: unknown, name: unknown): string {
  const part = (x: unknown) => typeof x === "string" && SAFE_FOR_LOG.test(x) ? x : formatValue(x);
  return `${part(namespace)}/${part(name)}`;
}

/** A port number (1-65535) check for values read from JSON. */
export function isPortNumber(v: unknown): v is number {
  return typeof v === "number" && Number.isInteger(v) && v >= 1 && v <= 65535;
}

/**
 * Parses an IP from a JSON value as upstream does for Service and endpoint IPs (ParseIPSloppy: leading
 * zeros allowed, read as decimal) and returns it normalised, or null.
 */
export function parseIP(raw: unknown): string | null {
  if (typeof raw !== "string") return null;
  // Fast path for the common case, an already canonical IPv4 address (the general parser is slower).
  return isIPOfFamily(raw, false) ? raw : parseIPLegacy(raw);
}

/** Family of an address returned by parseIP. */
export function ipFamilyOf(ip: string): IPFamily {
  // A dotted quad needs no parse (this runs once per endpoint and cluster IP).
  if (isIPOfFamily(ip, false)) return "IPv4";
  return ipFamily(ip) === 6 ? "IPv6" : "IPv4";
}

/** Thrown inside this module only, to skip a Service or a port with one message; never escapes. */
class Skip {
  constructor(readonly field: string, readonly problem: string) {}
}

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

/** What an absent list reads as (shared: nothing writes to it). */
const NO_ITEMS: readonly unknown[] = Object.freeze([]);

/** Reads an optional array field; a present non-array is a Skip. */
function optionalArray(v: unknown, field: string): readonly unknown[] {
  if (v === undefined || v === null) return NO_ITEMS;
  if (!Array.isArray(v)) throw new Skip(field, `must be a list (got ${formatValue(v)})`);
  return v;
}

/** Whether {@link optionalString} accepts `v` (without a field name to make). */
function isOptionalString(v: unknown): v is string | undefined | null {
  return v === undefined || v === null || typeof v === "string";
}

/** Reads an optional string field; a present non-string is a Skip. */
function optionalString(v: unknown, field: string): string {
  if (v === undefined || v === null) return "";
  if (typeof v !== "string") throw new Skip(field, `must be a string (got ${formatValue(v)})`);
  return v;
}

/**
 * The ServicePorts of `svc` for the proxier of `family`, in spec order. Returns [] for headless and
 * ExternalName Services and for Services without a cluster IP of this family (all silently, as they are
 * normal), and for invalid Services (with one warning). Never throws.
 */
export function servicePortsFromService(svc: Service, family: IPFamily, warn: Warn): ServicePortInfo[] {
  const ref = new ServiceRef(svc);
  try {
    return build(svc, family, ref, warn);
  } catch (e) {
    if (e instanceof Skip) {
      warn(`skipping Service ${ref}: ${e.field}: ${e.problem}`);
    } else {
      // A bug here must not take the process down; say which object triggered it.
      warn(`skipping Service ${ref}: unexpected error: ${formatValue(String(e))}`);
    }
    return [];
  }
}

/**
 * "namespace/name" of a Service for messages, made only when a message is (`${ref}`): Services are read
 * at every list and change, and all but a few never warn.
 */
class ServiceRef {
  constructor(private readonly svc: Service) {}

  toString(): string {
    const meta = isObject(this.svc) && isObject(this.svc.metadata) ? this.svc.metadata : undefined;
    return objectRef(meta?.namespace, meta?.name);
  }
}

function build(svc: Service, family: IPFamily, ref: ServiceRef, warn: Warn): ServicePortInfo[] {
  if (!isObject(svc)) throw new Skip("object", `not an object (got ${formatValue(svc)})`);
  if (!isObject(svc.metadata)) throw new Skip("metadata", "missing");
  const { namespace, name } = svc.metadata;
  if (!isDNSLabel(namespace)) {
    throw new Skip("metadata.namespace", `must be a DNS label (got ${formatValue(namespace)})`);
  }
  if (!isDNSLabel(name)) throw new Skip("metadata.name", `must be a DNS label (got ${formatValue(name)})`);
  const spec = svc.spec;
  if (!isObject(spec)) throw new Skip("spec", spec === undefined ? "missing" : `must be an object`);

  const type = optionalString(spec.type, "spec.type");
  if (!SERVICE_TYPES.has(type)) {
    throw new Skip(
      "spec.type",
      `must be ClusterIP, NodePort, LoadBalancer or ExternalName (got ${formatValue(type)})`,
    );
  }
  if (type === "ExternalName") return [];

  const clusterIP = pickClusterIP(spec.clusterIP, spec.clusterIPs, family);
  if (clusterIP === null) return [];

  const externalIPsSpec = optionalArray(spec.externalIPs, "spec.externalIPs");
  const externallyAccessible = type === "LoadBalancer" || type === "NodePort" ||
    externalIPsSpec.length > 0;
  const externalPolicyLocal = externallyAccessible &&
    optionalString(spec.externalTrafficPolicy, "spec.externalTrafficPolicy") === "Local";
  const internalPolicyLocal =
    optionalString(spec.internalTrafficPolicy, "spec.internalTrafficPolicy") === "Local";

  let stickyMaxAgeSeconds = 0;
  if (optionalString(spec.sessionAffinity, "spec.sessionAffinity") === "ClientIP") {
    const t = isObject(spec.sessionAffinityConfig) && isObject(spec.sessionAffinityConfig.clientIP)
      ? spec.sessionAffinityConfig.clientIP.timeoutSeconds
      : undefined;
    if (t === undefined || t === null) {
      stickyMaxAgeSeconds = DEFAULT_CLIENT_IP_TIMEOUT_SECONDS;
    } else if (typeof t === "number" && Number.isInteger(t) && t >= 1 && t <= MAX_CLIENT_IP_TIMEOUT_SECONDS) {
      stickyMaxAgeSeconds = t;
    } else {
      throw new Skip(
        "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
        `must be 1-${MAX_CLIENT_IP_TIMEOUT_SECONDS} (got ${formatValue(t)})`,
      );
    }
  }

  let healthCheckNodePort = 0;
  if (type === "LoadBalancer" && externalPolicyLocal) {
    const p = spec.healthCheckNodePort;
    if (p === undefined || p === null || p === 0) {
      // Upstream logs "Service has no healthcheck nodeport" and carries on without one.
      warn(
        `Service ${ref}: spec.healthCheckNodePort: missing on a LoadBalancer with externalTrafficPolicy Local`,
      );
    } else if (isPortNumber(p)) {
      healthCheckNodePort = p;
    } else {
      throw new Skip("spec.healthCheckNodePort", `must be 1-65535 (got ${formatValue(p)})`);
    }
  }

  // Most Services have none of the three lists below: no set and no callback is made for an empty one.
  const externalIPs = externalIPsSpec.length === 0 ? NO_STRINGS : new Set<string>();
  if (externalIPsSpec.length > 0) {
    externalIPsSpec.forEach((raw, i) => {
      const ip = parseIP(raw);
      if (ip === null) {
        // Upstream skips unparsable externalIPs (quietly when empty).
        if (!(typeof raw === "string" && raw.trim() === "")) {
          warn(
            `ignoring spec.externalIPs[${i}] of Service ${ref}: not a valid IP address (got ${
              formatValue(raw)
            })`,
          );
        }
      } else if (ipFamilyOf(ip) === family) {
        // The apiserver refuses these (ValidateNonSpecialIP): a loopback or link-local external IP would
        // capture the node's own traffic to that address.
        const problem = nonSpecialIPProblem(ip);
        if (problem === null) externalIPs.add(ip);
        else warn(`ignoring spec.externalIPs[${i}] of Service ${ref}: ${problem} (got ${formatValue(raw)})`);
      }
    });
  }

  const sourceRangesSpec = optionalArray(spec.loadBalancerSourceRanges, "spec.loadBalancerSourceRanges");
  const loadBalancerSourceRanges = sourceRangesSpec.length === 0 ? NO_STRINGS : new Set<string>();
  if (sourceRangesSpec.length > 0) {
    sourceRangesSpec.forEach((raw, i) => {
      // The API mistakenly allows whitespace padding; upstream trims it for backward compatibility.
      const cidr = typeof raw === "string" ? parseCIDRLegacy(raw.trim()) : null;
      if (cidr === null) {
        warn(
          `ignoring spec.loadBalancerSourceRanges[${i}] of Service ${ref}: not a valid CIDR (got ${
            formatValue(raw)
          })`,
        );
      } else if ((cidr.family === 6 ? "IPv6" : "IPv4") === family) {
        loadBalancerSourceRanges.add(formatCIDR(cidr));
      }
    });
  }

  const lb = isObject(svc.status) && isObject(svc.status.loadBalancer) ? svc.status.loadBalancer : undefined;
  const ingressSpec = optionalArray(lb?.ingress, "status.loadBalancer.ingress");
  const loadBalancerVIPs = ingressSpec.length === 0 ? NO_STRINGS : new Set<string>();
  if (ingressSpec.length > 0) {
    ingressSpec.forEach((ing, i) => {
      if (!isObject(ing) || ing.ip === undefined || ing.ip === null || ing.ip === "") return;
      // Only VIP-mode ingresses are programmed (upstream IsVIPMode: unset or "VIP").
      if (ing.ipMode !== undefined && ing.ipMode !== null && ing.ipMode !== "VIP") return;
      const ip = parseIP(ing.ip);
      if (ip === null) {
        warn(
          `ignoring status.loadBalancer.ingress[${i}] of Service ${ref}: ip: not a valid IP address (got ${
            formatValue(ing.ip)
          })`,
        );
      } else if (ipFamilyOf(ip) === family) {
        // Not checked by the apiserver, but a loopback or link-local VIP would capture the node's own traffic
        // exactly as such an external IP would.
        const problem = nonSpecialIPProblem(ip);
        if (problem === null) loadBalancerVIPs.add(ip);
        else {
          warn(
            `ignoring status.loadBalancer.ingress[${i}] of Service ${ref}: ip: ${problem} (got ${
              formatValue(ing.ip)
            })`,
          );
        }
      }
    });
  }

  // One array per Service, shared by its ports (and one empty array shared by all): the model holds
  // ~13k ServicePorts at 10k Services and these lists are nearly always empty.
  const externalIPList = listOf(externalIPs);
  const loadBalancerVIPList = listOf(loadBalancerVIPs);
  const sourceRangeList = listOf(loadBalancerSourceRanges);
  const ports = optionalArray(spec.ports, "spec.ports");
  const out: ServicePortInfo[] = [];
  const seen = new Set<string>();
  for (let i = 0; i < ports.length; i++) {
    const raw = ports[i];
    try {
      const p = readPort(raw, i);
      const info: ServicePortInfo = {
        name: { namespace, name, port: p.name, protocol: p.protocol },
        clusterIP,
        port: p.port,
        protocol: p.protocol,
        nodePort: p.nodePort,
        externalIPs: externalIPList,
        loadBalancerVIPs: loadBalancerVIPList,
        loadBalancerSourceRanges: sourceRangeList,
        stickyMaxAgeSeconds,
        externalPolicyLocal,
        internalPolicyLocal,
        healthCheckNodePort,
      };
      const key = servicePortKey(info.name);
      if (seen.has(key)) {
        throw new Skip(`spec.ports[${i}].name`, `duplicate port ${formatValue(p.name)}/${p.protocol}`);
      }
      seen.add(key);
      out.push(info);
    } catch (e) {
      if (!(e instanceof Skip)) throw e;
      warn(`skipping spec.ports[${i}] of Service ${ref}: ${e.field}: ${e.problem}`);
    }
  }
  return out;
}

/** The one empty list every ServicePort without entries shares (frozen: readers only read it). */
export const EMPTY_LIST: readonly string[] = Object.freeze([]);

/** An empty set for the lists a Service leaves out (only ever read: nothing is added to it). */
const NO_STRINGS: Set<string> = new Set();

/** The entries of `set` in insertion order, or the shared {@link EMPTY_LIST}. */
function listOf(set: ReadonlySet<string>): readonly string[] {
  return set.size === 0 ? EMPTY_LIST : [...set];
}

/**
 * The cluster IP of `family` (upstream GetClusterIPByFamily), normalised; null when the Service is
 * headless or has no cluster IP of this family. Any unparsable cluster IP makes the Service invalid.
 */
function pickClusterIP(clusterIP: unknown, clusterIPs: unknown, family: IPFamily): string | null {
  const primary = optionalString(clusterIP, "spec.clusterIP");
  const list = optionalArray(clusterIPs, "spec.clusterIPs");
  if (primary === "None") return null;
  // The apiserver keeps clusterIP == clusterIPs[0]; hand-written manifests may set only one of them.
  // (The field names are made only for a message: this runs for every Service.)
  const fromList = list.length > 0;
  const first = fromList ? list[0] : primary;
  if (first === "None" || first === "") return null;
  let picked: string | null = null;
  for (let i = 0; i < (fromList ? list.length : 1); i++) {
    const raw = fromList ? list[i] : primary;
    const ip = parseIP(raw);
    if (ip === null) {
      throw new Skip(clusterIPField(fromList, i), `not a valid IP address (got ${formatValue(raw)})`);
    }
    // The apiserver's allocator only hands out addresses from the service CIDRs, so a loopback, link-local
    // or unspecified cluster IP can only come from a manifest or a tampered cache: refuse it the same way.
    const problem = nonSpecialIPProblem(ip);
    if (problem !== null) throw new Skip(clusterIPField(fromList, i), `${problem} (got ${formatValue(raw)})`);
    if (picked === null && ipFamilyOf(ip) === family) picked = ip;
  }
  return picked;
}

function clusterIPField(fromList: boolean, i: number): string {
  return fromList ? `spec.clusterIPs[${i}]` : "spec.clusterIP";
}

/** "spec.ports[i]" or "spec.ports[i].field", for a message. */
function portField(i: number, field: string): string {
  return field === "" ? `spec.ports[${i}]` : `spec.ports[${i}].${field}`;
}

interface PortFields {
  name: string;
  protocol: Protocol;
  port: number;
  nodePort: number;
}

function readPort(raw: unknown, i: number): PortFields {
  // Field names are made only for a message: this runs for every port of every Service.
  if (!isObject(raw)) throw new Skip(portField(i, ""), `must be an object (got ${formatValue(raw)})`);
  const p = raw as ServicePortSpec;
  if (!isOptionalString(p.name)) optionalString(p.name, portField(i, "name")); // throws the field's Skip
  const name = p.name ?? "";
  if (name !== "" && !isDNSLabel(name)) {
    throw new Skip(portField(i, "name"), `must be a DNS label (got ${formatValue(name)})`);
  }
  if (!isOptionalString(p.protocol)) optionalString(p.protocol, portField(i, "protocol")); // throws the field's Skip
  const protocol = p.protocol || "TCP";
  if (!PROTOCOLS.has(protocol)) {
    throw new Skip(portField(i, "protocol"), `must be TCP, UDP or SCTP (got ${formatValue(protocol)})`);
  }
  if (!isPortNumber(p.port)) {
    throw new Skip(portField(i, "port"), `must be 1-65535 (got ${formatValue(p.port)})`);
  }
  let nodePort = 0;
  if (p.nodePort !== undefined && p.nodePort !== null && p.nodePort !== 0) {
    if (!isPortNumber(p.nodePort)) {
      throw new Skip(portField(i, "nodePort"), `must be 1-65535 (got ${formatValue(p.nodePort)})`);
    }
    nodePort = p.nodePort;
  }
  return { name, protocol: protocol as Protocol, port: p.port, nodePort };
}
