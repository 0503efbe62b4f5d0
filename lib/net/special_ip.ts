/**
 * The apiserver's check for addresses that must not be used as traffic destinations (upstream
 * pkg/apis/core/validation ValidateNonSpecialIP). Upstream applies it to Service `spec.externalIPs` and to
 * endpoint addresses (EndpointSlice validation in pkg/apis/discovery/validation); `spec.clusterIPs` and
 * `status.loadBalancer.ingress[].ip` are only required to be valid IPs there (the allocator keeps cluster IPs
 * inside the service CIDRs). With `--manifests` or a state cache edgeproxy is the only validator, so the core
 * applies the check to all four fields, whatever the object's source.
 */
import { isLoopback, parseIPInto } from "./ip.ts";

/** Go's net.IP.IsUnspecified: 0.0.0.0 or ::. */
function isUnspecified(b: Uint8Array): boolean {
  for (let i = 0; i < b.length; i++) if (b[i] !== 0) return false;
  return true;
}

/** Go's net.IP.IsLinkLocalUnicast: 169.254.0.0/16 or fe80::/10. */
function isLinkLocalUnicast(b: Uint8Array): boolean {
  return b.length === 4 ? b[0] === 169 && b[1] === 254 : b[0] === 0xfe && (b[1] & 0xc0) === 0x80;
}

/** Go's net.IP.IsLinkLocalMulticast: 224.0.0.0/24, or ff02::/16 whatever the flag bits (ff12::, ...). */
function isLinkLocalMulticast(b: Uint8Array): boolean {
  return b.length === 4 ? b[0] === 224 && b[1] === 0 && b[2] === 0 : b[0] === 0xff && (b[1] & 0x0f) === 0x02;
}

const V4 = new Uint8Array(4);
const V6 = new Uint8Array(16);

/**
 * Why `ip` (a normalised address, as lib/proxy's parseIP returns) may not be a Service external IP or an
 * endpoint address, or null when it may. One reason: the first upstream reports, in its words.
 */
export function nonSpecialIPProblem(ip: string): string | null {
  // Checked once per endpoint: the bytes go to scratch buffers (the function keeps none of them).
  const b = parseIPInto(ip, V4, V6);
  if (b === null) return "must be a valid IP address";
  if (isUnspecified(b)) return "may not be unspecified";
  if (isLoopback(b)) return "may not be in the loopback range (127.0.0.0/8, ::1/128)";
  if (isLinkLocalUnicast(b)) return "may not be in the link-local range (169.254.0.0/16, fe80::/10)";
  if (isLinkLocalMulticast(b)) {
    return "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)";
  }
  return null;
}
