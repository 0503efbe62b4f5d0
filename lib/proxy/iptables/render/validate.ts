/**
 * Payload safety for the rule renderer. Names and addresses are validated upstream of the renderer, but
 * the restore payload is a line-oriented language: a quote, newline, backslash or control character in a
 * value could end a rule early or inject another one. Every value is checked here before it is written;
 * a service port with any bad value is skipped (with a warning) rather than emitted.
 */
import type { EndpointInfo, ServicePortInfo } from "../../types.ts";
import { isIPOfFamily, parseCIDR } from "../../../net/ip.ts";
import { joinHostPort } from "../../../net/go_net.ts";

/** Namespace, name and port name: Kubernetes names are DNS labels/subdomains; only this set is emitted. */
const SAFE_NAME = /^[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?$/;
/** Port names are IANA service names (may be empty for a single unnamed port). */
const SAFE_PORT_NAME = /^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)?$/;
/** Tokens of externally supplied match arguments (local detector). */
const SAFE_ARG = /^(!|[A-Za-z0-9._:\/+@-]{1,64})$/;

function isPort(n: unknown, allowZero: boolean): boolean {
  return typeof n === "number" && Number.isInteger(n) && n <= 65535 && (n >= 1 || (allowZero && n === 0));
}

/**
 * Checks every field of a service port that reaches the payload. Returns null when it is safe, otherwise
 * one line naming the field and value.
 */
export function checkServicePort(svc: ServicePortInfo, ipv6: boolean): string | null {
  const n = svc.name;
  if (typeof n?.namespace !== "string" || !SAFE_NAME.test(n.namespace)) {
    return `metadata.namespace ${JSON.stringify(n?.namespace)} is not a valid name`;
  }
  if (typeof n.name !== "string" || !SAFE_NAME.test(n.name)) {
    return `metadata.name ${JSON.stringify(n.name)} is not a valid name`;
  }
  if (typeof n.port !== "string" || !SAFE_PORT_NAME.test(n.port)) {
    return `spec.ports[].name ${JSON.stringify(n.port)} is not a valid port name`;
  }
  if (svc.protocol !== "TCP" && svc.protocol !== "UDP" && svc.protocol !== "SCTP") {
    return `spec.ports[].protocol ${JSON.stringify(svc.protocol)} is not TCP, UDP or SCTP`;
  }
  if (n.protocol !== svc.protocol) {
    return `protocol mismatch: name has ${JSON.stringify(n.protocol)}, port has ${
      JSON.stringify(svc.protocol)
    }`;
  }
  if (typeof svc.clusterIP !== "string" || !isIPOfFamily(svc.clusterIP, ipv6)) {
    return `spec.clusterIP ${JSON.stringify(svc.clusterIP)} is not a normalised ${
      ipv6 ? "IPv6" : "IPv4"
    } address`;
  }
  if (!isPort(svc.port, false)) return `spec.ports[].port ${JSON.stringify(svc.port)} is not a port number`;
  if (!isPort(svc.nodePort, true)) {
    return `spec.ports[].nodePort ${JSON.stringify(svc.nodePort)} is not a port number`;
  }
  if (!isPort(svc.healthCheckNodePort, true)) {
    return `spec.healthCheckNodePort ${JSON.stringify(svc.healthCheckNodePort)} is not a port number`;
  }
  if (
    !Number.isInteger(svc.stickyMaxAgeSeconds) || svc.stickyMaxAgeSeconds < 0 ||
    svc.stickyMaxAgeSeconds > 86400
  ) {
    return `sessionAffinityConfig.clientIP.timeoutSeconds ${
      JSON.stringify(svc.stickyMaxAgeSeconds)
    } is out of range`;
  }
  for (const ip of svc.externalIPs) {
    if (typeof ip !== "string" || !isIPOfFamily(ip, ipv6)) {
      return `spec.externalIPs value ${JSON.stringify(ip)} is not a normalised address of this family`;
    }
  }
  for (const ip of svc.loadBalancerVIPs) {
    if (typeof ip !== "string" || !isIPOfFamily(ip, ipv6)) {
      return `status.loadBalancer.ingress IP ${
        JSON.stringify(ip)
      } is not a normalised address of this family`;
    }
  }
  for (const c of svc.loadBalancerSourceRanges) {
    const parsed = typeof c === "string" ? parseCIDR(c) : null;
    if (parsed === null || (parsed.bytes.length === 16) !== ipv6) {
      return `spec.loadBalancerSourceRanges value ${JSON.stringify(c)} is not a CIDR of this family`;
    }
  }
  return null;
}

/** Checks an endpoint's address and port; null when safe, otherwise one line naming the problem. */
export function checkEndpoint(ep: EndpointInfo, ipv6: boolean): string | null {
  if (typeof ep.ip !== "string" || !isIPOfFamily(ep.ip, ipv6)) {
    return `endpoint address ${JSON.stringify(ep.ip)} is not a normalised ${ipv6 ? "IPv6" : "IPv4"} address`;
  }
  if (!isPort(ep.port, false)) return `endpoint port ${JSON.stringify(ep.port)} is not a port number`;
  if (ep.endpoint !== joinHostPort(ep.ip, ep.port)) {
    return `endpoint string ${JSON.stringify(ep.endpoint)} does not match ${joinHostPort(ep.ip, ep.port)}`;
  }
  return null;
}

/** Checks externally supplied match arguments (e.g. a local detector's); null when safe. */
export function checkArgs(what: string, args: readonly string[]): string | null {
  for (const a of args) {
    if (typeof a !== "string" || !SAFE_ARG.test(a)) return `${what}: unsafe argument ${JSON.stringify(a)}`;
  }
  return null;
}
