/**
 * Go's text-level IP API, for validating the configuration and for any module that needs the same answers
 * kube-proxy would give. Built on the byte-level core in ./ip.ts (one parser, one formatter); this file
 * adds Go's conventions on top:
 *
 * - `parseIP` / `parseCIDR` follow Go's net.ParseIP / net.ParseCIDR (Go ≥ 1.17, core syntax "go"): IPv4
 *   octets with leading zeros are rejected.
 * - `parseIPLegacy` / `parseCIDRLegacy` follow k8s.io/utils/net ParseIPSloppy / ParseCIDRSloppy (core
 *   syntax "legacy"), which upstream uses for Service IPs and most config fields: leading zeros are
 *   allowed and read as decimal, so "172.30.0.041" is 172.30.0.41.
 * - Results are normalised like Go's String(): dotted-quad IPv4, RFC 5952 IPv6, and an IPv4-mapped IPv6
 *   address ("::ffff:1.2.3.4") as IPv4.
 * - A CIDR's family follows its syntax: an address written with ':' is IPv6.
 * Zones ("fe80::1%eth0") are rejected, as by net.ParseIP.
 */
import {
  cidrContains as bytesInCIDR,
  formatIP,
  type IPSyntax,
  isV4Mapped,
  parseCIDR as parseCIDRBytes,
  parseIP as parseIPBytes,
} from "./ip.ts";

/** 4 for IPv4, 6 for IPv6. */
export type IPFamilyNumber = 4 | 6;

/** A parsed CIDR block. */
export interface CIDR {
  /** The network address (host bits cleared), normalised, e.g. "10.0.0.0" for "10.0.0.7/8". */
  ip: string;
  /** Prefix length: 0-32 for IPv4, 0-128 for IPv6. */
  prefix: number;
  family: IPFamilyNumber;
}

/** Parses an address; an IPv4-mapped IPv6 address becomes its 4 IPv4 bytes (as Go's To4 does). */
function parseAddr(s: string, syntax: IPSyntax): Uint8Array | null {
  if (typeof s !== "string") return null;
  const b = parseIPBytes(s, syntax);
  return b !== null && isV4Mapped(b) ? b.subarray(12) : b;
}

/** Parses an IP like Go's net.ParseIP and returns it normalised, or null. Leading zeros are rejected. */
export function parseIP(s: string): string | null {
  const b = parseAddr(s, "go");
  return b === null ? null : formatIP(b);
}

/**
 * Parses an IP like k8s.io/utils/net ParseIPSloppy (IPv4 octets may have leading zeros, read as decimal)
 * and returns it normalised, e.g. "172.30.0.041" → "172.30.0.41"; null if it is not an IP.
 */
export function parseIPLegacy(s: string): string | null {
  const b = parseAddr(s, "legacy");
  return b === null ? null : formatIP(b);
}

/** The family of an IP address (legacy syntax accepted; IPv4-mapped IPv6 counts as 4), or null. */
export function ipFamily(ip: string): IPFamilyNumber | null {
  const b = parseAddr(ip, "legacy");
  return b === null ? null : b.length === 4 ? 4 : 6;
}

function parseCIDRWith(s: string, syntax: IPSyntax): CIDR | null {
  if (typeof s !== "string") return null;
  const c = parseCIDRBytes(s, syntax);
  if (c === null) return null;
  // An IPv6 block of mapped addresses keeps the mapped form explicit, as Go prints an IPv6 IPNet.
  const ip = isV4Mapped(c.bytes) ? `::ffff:${formatIP(c.bytes.subarray(12))}` : formatIP(c.bytes);
  return { ip, prefix: c.prefix, family: c.bytes.length === 4 ? 4 : 6 };
}

/** Parses a CIDR like Go's net.ParseCIDR (no leading zeros in IPv4 octets); the result has host bits cleared. */
export function parseCIDR(s: string): CIDR | null {
  return parseCIDRWith(s, "go");
}

/** Parses a CIDR like k8s.io/utils/net ParseCIDRSloppy (IPv4 octets may have leading zeros). */
export function parseCIDRLegacy(s: string): CIDR | null {
  return parseCIDRWith(s, "legacy");
}

/** Prints a parsed CIDR as "ip/prefix". */
export function formatCIDR(c: CIDR): string {
  return `${c.ip}/${c.prefix}`;
}

/**
 * True when `ip` lies inside `cidr` (a CIDR string, legacy syntax accepted, or a parsed CIDR).
 * Different families never match ("::/0" holds no IPv4 address). As in Go, an IPv4-mapped IPv6 address
 * counts as IPv4, and a block written as mapped addresses ("::ffff:10.0.0.0/104") as an IPv4 block.
 */
export function cidrContains(cidr: string | CIDR, ip: string): boolean {
  const c = typeof cidr === "string" ? parseCIDRLegacy(cidr) : cidr;
  const a = parseAddr(ip, "legacy");
  if (c === null || a === null) return false;
  let net = parseIPBytes(c.ip, "legacy");
  if (net === null || (net.length === 4) !== (c.family === 4)) return false;
  let prefix = c.prefix;
  if (isV4Mapped(net)) {
    // Go treats a block of IPv4-mapped addresses as an IPv4 block using the mask's last 32 bits.
    net = net.subarray(12);
    prefix = Math.max(0, prefix - 96);
  }
  return bytesInCIDR({ bytes: net, prefix }, a);
}

/**
 * Splits "host:port" or "[v6]:port" like Go's net.SplitHostPort; null when it is not of that form.
 * The host is returned without brackets; neither part is validated further.
 */
export function splitHostPort(hostport: string): { host: string; port: string } | null {
  const i = hostport.lastIndexOf(":");
  if (i < 0) return null;
  let host: string;
  let j = 0;
  let k = 0;
  if (hostport[0] === "[") {
    const end = hostport.indexOf("]");
    if (end < 0 || end + 1 !== i) return null;
    host = hostport.slice(1, end);
    j = 1;
    k = end + 1;
  } else {
    host = hostport.slice(0, i);
    if (host.includes(":")) return null;
  }
  if (hostport.slice(j).includes("[") || hostport.slice(k).includes("]")) return null;
  return { host, port: hostport.slice(i + 1) };
}

/** Joins host and port like Go's net.JoinHostPort: IPv6 hosts get brackets. */
export function joinHostPort(host: string, port: string | number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}
