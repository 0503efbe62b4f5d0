/**
 * Strict IP and CIDR parsing for the rule renderer: every address that reaches an iptables-restore payload
 * passes through here, so a value that does not parse as a plain address of the expected family never
 * reaches the kernel. Also used by node-port address selection and the test packet tracer.
 */

/** An address family as a number of bytes: 4 (IPv4) or 16 (IPv6). */
export type AddressLength = 4 | 16;

/** A parsed address: its bytes (4 or 16). */
export interface ParsedIP {
  readonly bytes: Uint8Array;
}

/** A parsed CIDR: the network address (host bits cleared) and the prefix length. */
export interface ParsedCIDR {
  readonly bytes: Uint8Array;
  readonly prefix: number;
}

const V4_OCTET = /^(0|[1-9][0-9]{0,2})$/;
const HEX_GROUP = /^[0-9a-fA-F]{1,4}$/;

/**
 * Parses a dotted-quad IPv4 address. Leading zeros are refused: iptables would read "010" as octal,
 * which is why upstream normalises them away before they reach a rule.
 */
function parseIPv4(s: string): Uint8Array | null {
  const parts = s.split(".");
  if (parts.length !== 4) return null;
  const out = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    const p = parts[i];
    if (!V4_OCTET.test(p)) return null;
    const n = Number(p);
    if (n > 255) return null;
    out[i] = n;
  }
  return out;
}

/** Parses an IPv6 address (RFC 4291 text forms, including an embedded IPv4 tail; no zone). */
function parseIPv6(s: string): Uint8Array | null {
  if (s.length < 2 || s.length > 45) return null;
  const dbl = s.indexOf("::");
  if (dbl !== -1 && s.indexOf("::", dbl + 1) !== -1) return null;
  const parseGroups = (part: string): number[] | null => {
    if (part === "") return [];
    const groups = part.split(":");
    const words: number[] = [];
    for (let i = 0; i < groups.length; i++) {
      const g = groups[i];
      if (i === groups.length - 1 && g.includes(".")) {
        const v4 = parseIPv4(g);
        if (v4 === null) return null;
        words.push((v4[0] << 8) | v4[1], (v4[2] << 8) | v4[3]);
      } else {
        if (!HEX_GROUP.test(g)) return null;
        words.push(parseInt(g, 16));
      }
    }
    return words;
  };
  let words: number[];
  if (dbl === -1) {
    const all = parseGroups(s);
    if (all === null || all.length !== 8) return null;
    words = all;
  } else {
    const head = parseGroups(s.slice(0, dbl));
    const tail = parseGroups(s.slice(dbl + 2));
    if (head === null || tail === null) return null;
    const missing = 8 - head.length - tail.length;
    if (missing < 1) return null;
    words = [...head, ...new Array<number>(missing).fill(0), ...tail];
  }
  const out = new Uint8Array(16);
  for (let i = 0; i < 8; i++) {
    out[2 * i] = words[i] >> 8;
    out[2 * i + 1] = words[i] & 0xff;
  }
  return out;
}

/** Parses an IPv4 or IPv6 address; null when it is not a plain address. */
export function parseIP(s: string): Uint8Array | null {
  if (s.includes(":")) return parseIPv6(s);
  return parseIPv4(s);
}

/** True for ::ffff:a.b.c.d (Go treats these as IPv4 addresses). */
function isV4Mapped(b: Uint8Array): boolean {
  if (b.length !== 16 || b[10] !== 0xff || b[11] !== 0xff) return false;
  for (let i = 0; i < 10; i++) if (b[i] !== 0) return false;
  return true;
}

const IPV4_STRICT =
  /^(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$/;

/** Fast check without allocation: a plain address of the family (same acceptance as parseIPOfFamily). */
export function isIPOfFamily(s: string, ipv6: boolean): boolean {
  if (!ipv6) return IPV4_STRICT.test(s);
  return parseIPOfFamily(s, true) !== null;
}

/**
 * Parses an address and requires the given family. IPv4-mapped IPv6 addresses belong to neither
 * (Go would call them IPv4, iptables would not accept them): they are refused.
 */
export function parseIPOfFamily(s: string, ipv6: boolean): Uint8Array | null {
  const b = parseIP(s);
  if (b === null || (b.length === 16) !== ipv6 || isV4Mapped(b)) return null;
  return b;
}

/** Parses "addr/prefix"; the host bits are cleared in the result (as Go's net.ParseCIDR does). */
export function parseCIDR(s: string): ParsedCIDR | null {
  const slash = s.indexOf("/");
  if (slash === -1) return null;
  const ip = parseIP(s.slice(0, slash));
  const p = s.slice(slash + 1);
  if (ip === null || !/^(0|[1-9][0-9]{0,2})$/.test(p)) return null;
  const prefix = Number(p);
  if (prefix > ip.length * 8) return null;
  const net = new Uint8Array(ip.length);
  for (let i = 0; i < ip.length; i++) {
    const bits = Math.max(0, Math.min(8, prefix - 8 * i));
    const mask = bits === 0 ? 0 : (0xff << (8 - bits)) & 0xff;
    net[i] = ip[i] & mask;
  }
  return { bytes: net, prefix };
}

/** True when `ip` is inside `cidr` (same family required). */
export function cidrContains(cidr: ParsedCIDR, ip: Uint8Array): boolean {
  if (cidr.bytes.length !== ip.length) return false;
  let bits = cidr.prefix;
  for (let i = 0; i < ip.length && bits > 0; i++) {
    const n = Math.min(8, bits);
    const mask = (0xff << (8 - n)) & 0xff;
    if ((ip[i] & mask) !== cidr.bytes[i]) return false;
    bits -= n;
  }
  return true;
}

/** Formats address bytes like Go's net.IP.String (RFC 5952 for IPv6). */
export function formatIP(b: Uint8Array): string {
  if (b.length === 4) return `${b[0]}.${b[1]}.${b[2]}.${b[3]}`;
  const words: number[] = [];
  for (let i = 0; i < 8; i++) words.push((b[2 * i] << 8) | b[2 * i + 1]);
  // Longest run (length >= 2) of zero words, first one on ties.
  let bestStart = -1, bestLen = 0;
  for (let i = 0; i < 8;) {
    if (words[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && words[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = (w: number) => w.toString(16);
  if (bestStart === -1) return words.map(hex).join(":");
  const head = words.slice(0, bestStart).map(hex).join(":");
  const tail = words.slice(bestStart + bestLen).map(hex).join(":");
  return `${head}::${tail}`;
}

/** Formats a CIDR like Go's net.IPNet.String ("10.0.0.0/8"). */
export function formatCIDR(c: ParsedCIDR): string {
  return `${formatIP(c.bytes)}/${c.prefix}`;
}

/** True for 127.0.0.0/8 and ::1 (Go's net.IP.IsLoopback). */
export function isLoopback(b: Uint8Array): boolean {
  if (b.length === 4) return b[0] === 127;
  for (let i = 0; i < 15; i++) if (b[i] !== 0) return false;
  return b[15] === 1;
}

/** Orders addresses by family (IPv4 first), then bytes; used to make address lists deterministic. */
export function compareIPBytes(a: Uint8Array, b: Uint8Array): number {
  if (a.length !== b.length) return a.length - b.length;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return 0;
}
