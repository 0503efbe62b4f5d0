/**
 * IP address and CIDR helpers with Go's semantics, for validating the configuration and for any module
 * that needs the same answers kube-proxy would give.
 *
 * - `parseIP` / `parseCIDR` follow Go's net.ParseIP / net.ParseCIDR (Go ≥ 1.17): IPv4 octets with leading
 *   zeros are rejected.
 * - `parseIPLegacy` / `parseCIDRLegacy` follow k8s.io/utils/net ParseIPSloppy / ParseCIDRSloppy, which
 *   upstream uses for Service IPs and most config fields: leading zeros are allowed and read as decimal,
 *   so "172.30.0.041" is 172.30.0.41.
 * - Results are normalised like Go's String(): dotted-quad IPv4, RFC 5952 IPv6 (lower case, longest run
 *   of two or more zero groups as "::"), and an IPv4-mapped IPv6 address ("::ffff:1.2.3.4") as IPv4.
 * - A CIDR's family follows its syntax: an address written with ':' is IPv6.
 * Zones ("fe80::1%eth0") are rejected, as by net.ParseIP.
 */

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

interface Addr {
  family: IPFamilyNumber;
  bits: bigint;
}

function parseIPv4Bits(s: string, legacy: boolean): bigint | null {
  const parts = s.split(".");
  if (parts.length !== 4) return null;
  let bits = 0n;
  for (const p of parts) {
    if (!/^[0-9]+$/.test(p)) return null;
    if (!legacy && p.length > 1 && p[0] === "0") return null;
    // Sloppy parsing accepts any number of leading zeros; the value must still fit in a byte.
    const n = Number(p.length > 12 ? p.replace(/^0+(?=.)/, "") : p);
    if (n > 255) return null;
    bits = (bits << 8n) | BigInt(n);
  }
  return bits;
}

function parseIPv6Bits(s: string, legacy: boolean): bigint | null {
  if (s.length < 2 || !/^[0-9A-Fa-f:.]+$/.test(s)) return null;
  const halves = s.split("::");
  if (halves.length > 2) return null;
  const side = (text: string, last: boolean): bigint[] | null => {
    if (text === "") return [];
    const fields = text.split(":");
    const groups: bigint[] = [];
    for (let i = 0; i < fields.length; i++) {
      const f = fields[i];
      if (f.includes(".")) {
        // An embedded IPv4 address may only end the whole address.
        if (!last || i !== fields.length - 1) return null;
        const v4 = parseIPv4Bits(f, legacy);
        if (v4 === null) return null;
        groups.push(v4 >> 16n, v4 & 0xffffn);
      } else {
        if (!/^[0-9A-Fa-f]{1,4}$/.test(f)) return null;
        groups.push(BigInt(parseInt(f, 16)));
      }
    }
    return groups;
  };
  let groups: bigint[];
  if (halves.length === 1) {
    const g = side(halves[0], true);
    if (g === null || g.length !== 8) return null;
    groups = g;
  } else {
    const head = side(halves[0], false);
    const tail = side(halves[1], true);
    if (head === null || tail === null) return null;
    // "::" stands for at least one zero group.
    if (head.length + tail.length > 7) return null;
    groups = [...head, ...new Array<bigint>(8 - head.length - tail.length).fill(0n), ...tail];
  }
  return groups.reduce((acc, g) => (acc << 16n) | g, 0n);
}

/** Parses an address; an IPv4-mapped IPv6 address becomes IPv4 (as Go's To4 does). */
function parseAddr(s: string, legacy: boolean): Addr | null {
  if (typeof s !== "string" || s === "") return null;
  if (s.includes(":")) {
    const bits = parseIPv6Bits(s, legacy);
    if (bits === null) return null;
    if (bits >> 32n === 0xffffn) return { family: 4, bits: bits & 0xffffffffn };
    return { family: 6, bits };
  }
  const bits = parseIPv4Bits(s, legacy);
  return bits === null ? null : { family: 4, bits };
}

function formatV4(bits: bigint): string {
  return [24n, 16n, 8n, 0n].map((sh) => ((bits >> sh) & 0xffn).toString()).join(".");
}

function formatV6(bits: bigint): string {
  if (bits >> 32n === 0xffffn) return formatV4(bits & 0xffffffffn);
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((bits >> BigInt(i * 16)) & 0xffffn));
  // Longest run of at least two zero groups; the first one wins a tie.
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (g: number[]) => g.map((x) => x.toString(16)).join(":");
  if (bestStart < 0) return hex(groups);
  return hex(groups.slice(0, bestStart)) + "::" + hex(groups.slice(bestStart + bestLen));
}

function formatAddr(a: Addr): string {
  return a.family === 4 ? formatV4(a.bits) : formatV6(a.bits);
}

/** Parses an IP like Go's net.ParseIP and returns it normalised, or null. Leading zeros are rejected. */
export function parseIP(s: string): string | null {
  const a = parseAddr(s, false);
  return a === null ? null : formatAddr(a);
}

/**
 * Parses an IP like k8s.io/utils/net ParseIPSloppy (IPv4 octets may have leading zeros, read as decimal)
 * and returns it normalised, e.g. "172.30.0.041" → "172.30.0.41"; null if it is not an IP.
 */
export function parseIPLegacy(s: string): string | null {
  const a = parseAddr(s, true);
  return a === null ? null : formatAddr(a);
}

/** The family of an IP address (legacy syntax accepted; IPv4-mapped IPv6 counts as 4), or null. */
export function ipFamily(ip: string): IPFamilyNumber | null {
  return parseAddr(ip, true)?.family ?? null;
}

function parseCIDRWith(s: string, legacy: boolean): CIDR | null {
  if (typeof s !== "string") return null;
  const slash = s.indexOf("/");
  if (slash < 0) return null;
  const addrText = s.slice(0, slash);
  const prefixText = s.slice(slash + 1);
  if (!/^[0-9]{1,3}$/.test(prefixText)) return null;
  const prefix = Number(prefixText);
  let family: IPFamilyNumber;
  let bits: bigint | null;
  if (addrText.includes(":")) {
    family = 6;
    bits = parseIPv6Bits(addrText, legacy);
  } else {
    family = 4;
    bits = parseIPv4Bits(addrText, legacy);
  }
  const width = family === 4 ? 32 : 128;
  if (bits === null || prefix > width) return null;
  const hostMask = (1n << BigInt(width - prefix)) - 1n;
  const net = bits & ~hostMask & ((1n << BigInt(width)) - 1n);
  return { ip: family === 4 ? formatV4(net) : formatV6Plain(net), prefix, family };
}

/** IPv6 formatting without the IPv4-mapped shortcut, so an IPv6 CIDR always prints as IPv6. */
function formatV6Plain(bits: bigint): string {
  if (bits >> 32n === 0xffffn) {
    // Keep the mapped form explicit, as Go prints an IPv6 IPNet: "::ffff:a.b.c.d".
    return "::ffff:" + formatV4(bits & 0xffffffffn);
  }
  return formatV6(bits);
}

/** Parses a CIDR like Go's net.ParseCIDR (no leading zeros in IPv4 octets); the result has host bits cleared. */
export function parseCIDR(s: string): CIDR | null {
  return parseCIDRWith(s, false);
}

/** Parses a CIDR like k8s.io/utils/net ParseCIDRSloppy (IPv4 octets may have leading zeros). */
export function parseCIDRLegacy(s: string): CIDR | null {
  return parseCIDRWith(s, true);
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
  const a = parseAddr(ip, true);
  if (c === null || a === null) return false;
  let netBits: bigint | null;
  let width: number;
  let prefix = c.prefix;
  if (c.family === 4) {
    netBits = parseIPv4Bits(c.ip, true);
    width = 32;
  } else {
    netBits = parseIPv6Bits(c.ip, true);
    width = 128;
    if (netBits !== null && netBits >> 32n === 0xffffn) {
      // Go treats a block of IPv4-mapped addresses as an IPv4 block using the mask's last 32 bits.
      netBits &= 0xffffffffn;
      width = 32;
      prefix = Math.max(0, prefix - 96);
    }
  }
  if (netBits === null || (width === 32) !== (a.family === 4)) return false;
  const shift = BigInt(width - prefix);
  return (a.bits >> shift) === (netBits >> shift);
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
