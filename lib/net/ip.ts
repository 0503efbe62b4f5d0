/**
 * The IP and CIDR core of the tree: one byte-level parser, one formatter and the CIDR arithmetic. Every
 * address that reaches an iptables-restore payload passes through here (strict syntax), so a value that
 * does not parse as a plain address of the expected family never reaches the kernel; lib/net/go_net.ts
 * builds Go's text-level API (net.ParseIP, ParseCIDR, the k8s "sloppy" variants) on the same core.
 *
 * The parser hand-scans character codes (no split, no regular expression): the renderer parses every
 * cluster, external and endpoint address of every sync.
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

/**
 * Which spellings the parser accepts; they differ only in leading zeros (everything else is RFC 4291 /
 * dotted-quad, no zones):
 * - `"strict"` (default): no leading zeros in IPv4 octets nor in a CIDR prefix. The renderer's rule:
 *   iptables would read "010" as octal, which is why upstream normalises such values before they reach
 *   a rule.
 * - `"go"`: Go's net.ParseIP / net.ParseCIDR (Go ≥ 1.17): no leading zeros in octets; a CIDR prefix is
 *   1 to 3 decimal digits, leading zeros allowed.
 * - `"legacy"`: k8s.io/utils/net ParseIPSloppy / ParseCIDRSloppy, which upstream uses for Service IPs and
 *   most config fields: leading zeros allowed anywhere and read as decimal ("172.30.0.041" is
 *   172.30.0.41).
 */
export type IPSyntax = "strict" | "go" | "legacy";

const DOT = 46, COLON = 58, ZERO = 48, NINE = 57;

/** Value of a hex digit's character code, or -1. */
function hexValue(c: number): number {
  if (c >= ZERO && c <= NINE) return c - ZERO;
  const l = c | 0x20; // lower case
  return l >= 97 && l <= 102 ? l - 87 : -1;
}

/**
 * Parses the dotted quad s[start, end) into out[off, off + 4); false when it is not one. Octets are
 * decimal; a leading zero is refused unless `legacy`.
 */
function parseIPv4Into(
  s: string,
  start: number,
  end: number,
  out: Uint8Array,
  off: number,
  legacy: boolean,
): boolean {
  let octets = 0, n = 0, digits = 0;
  for (let i = start; i <= end; i++) {
    const c = i < end ? s.charCodeAt(i) : DOT; // a virtual dot closes the last octet
    if (c === DOT) {
      if (digits === 0 || octets === 4) return false;
      out[off + octets++] = n;
      n = 0;
      digits = 0;
    } else if (c >= ZERO && c <= NINE) {
      if (digits === 1 && n === 0 && !legacy) return false;
      n = n * 10 + (c - ZERO);
      if (n > 255) return false;
      digits++;
    } else {
      return false;
    }
  }
  return octets === 4;
}

/**
 * Parses an IPv6 address (RFC 4291 text forms, including an IPv4 tail, which must end the address; no
 * zone). The embedded IPv4 part follows `legacy` like a plain IPv4 address.
 */
function parseIPv6Into(s: string, out: Uint8Array, legacy: boolean): boolean {
  const len = s.length;
  // 45 characters is the longest spelling without leading zeros ("ffff:" * 6 + "255.255.255.255").
  if (len < 2 || (!legacy && len > 45)) return false;
  let words = 0;
  let gap = -1; // word index where "::" stands
  let i = 0;
  if (s.charCodeAt(0) === COLON) {
    if (s.charCodeAt(1) !== COLON) return false;
    gap = 0;
    i = 2;
  }
  while (i < len) {
    if (words === 8) return false;
    let v = 0, digits = 0, j = i;
    for (; j < len; j++) {
      const h = hexValue(s.charCodeAt(j));
      if (h < 0) break;
      v = (v << 4) | (h & 0xf);
      digits++;
    }
    if (j < len && s.charCodeAt(j) === DOT) {
      if (words > 6 || !parseIPv4Into(s, i, len, out, 2 * words, legacy)) return false;
      words += 2;
      break;
    }
    if (digits === 0 || digits > 4) return false;
    out[2 * words] = v >> 8;
    out[2 * words + 1] = v & 0xff;
    words++;
    if (j === len) break;
    if (s.charCodeAt(j) !== COLON || j + 1 === len) return false;
    i = j + 1;
    if (s.charCodeAt(i) === COLON) {
      if (gap !== -1) return false;
      gap = words;
      i++;
    }
  }
  if (gap === -1) return words === 8;
  if (words > 7) return false; // "::" stands for at least one zero group
  const tail = 2 * (words - gap);
  out.copyWithin(16 - tail, 2 * gap, 2 * words);
  out.fill(0, 2 * gap, 16 - tail);
  return true;
}

/**
 * Parses an IPv4 or IPv6 address into its bytes (4 or 16; an IPv4-mapped IPv6 address stays 16 bytes);
 * null when it is not a plain address in the given syntax.
 */
export function parseIP(s: string, syntax: IPSyntax = "strict"): Uint8Array | null {
  const legacy = syntax === "legacy";
  if (s.indexOf(":") !== -1) {
    const out = new Uint8Array(16);
    return parseIPv6Into(s, out, legacy) ? out : null;
  }
  const out = new Uint8Array(4);
  return parseIPv4Into(s, 0, s.length, out, 0, legacy) ? out : null;
}

/**
 * Parses `s` into `out` (4 bytes for IPv4, 16 for IPv6, as {@link parseIP} would return) and returns it,
 * or null: for checks run once per endpoint, which need the bytes only for a moment (no allocation).
 */
export function parseIPInto(s: string, out4: Uint8Array, out16: Uint8Array): Uint8Array | null {
  if (s.indexOf(":") !== -1) return parseIPv6Into(s, out16, false) ? out16 : null;
  return parseIPv4Into(s, 0, s.length, out4, 0, false) ? out4 : null;
}

/**
 * Parses the strict dotted quad `s[start, end)` into `out[off, off + 4)` without cutting it out of `s`
 * (the netlink encoder reads tens of thousands of element keys in place); false when it is not one.
 */
export function parseIPv4At(s: string, start: number, end: number, out: Uint8Array, off: number): boolean {
  return parseIPv4Into(s, start, end, out, off, false);
}

/** A strict dotted quad, for checks that need no bytes (same acceptance as the parser in strict syntax). */
const IPV4_STRICT =
  /^(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}$/;

/**
 * 4 or 6 when `s` is an IPv4 or IPv6 address in strict syntax (an IPv4-mapped address counts as 6), else 0;
 * the answers of node:net's isIP for every address without a zone.
 */
export function ipVersion(s: string): 0 | 4 | 6 {
  // Validation only: the bytes go to a scratch buffer (conntrack listings check 100k+ lines at a time).
  if (s.indexOf(":") !== -1) return parseIPv6Into(s, scratch, false) ? 6 : 0;
  return IPV4_STRICT.test(s) ? 4 : 0;
}

const scratch = new Uint8Array(16);

/**
 * The canonical text of an address as conntrack and the kernel print it: IPv4 as given, IPv6 in RFC 5952
 * form ("FD00:0:0::1" → "fd00::1"). Text that is not an address is returned unchanged.
 */
export function canonicalIP(s: string): string {
  if (s.indexOf(":") === -1) return s;
  const b = parseIP(s);
  return b === null ? s : formatIP(b);
}

/** True for ::ffff:a.b.c.d (Go treats these as IPv4 addresses). */
export function isV4Mapped(b: Uint8Array): boolean {
  if (b.length !== 16 || b[10] !== 0xff || b[11] !== 0xff) return false;
  for (let i = 0; i < 10; i++) if (b[i] !== 0) return false;
  return true;
}

/** Fast check without allocation for IPv4: a plain address of the family (same acceptance as parseIPOfFamily). */
export function isIPOfFamily(s: string, ipv6: boolean): boolean {
  if (!ipv6) return IPV4_STRICT.test(s);
  return parseIPOfFamily(s, true) !== null;
}

/**
 * Parses an address (strict syntax) and requires the given family. IPv4-mapped IPv6 addresses belong to
 * neither (Go would call them IPv4, iptables would not accept them): they are refused.
 */
export function parseIPOfFamily(s: string, ipv6: boolean): Uint8Array | null {
  const b = parseIP(s);
  if (b === null || (b.length === 16) !== ipv6 || isV4Mapped(b)) return null;
  return b;
}

/** Parses a CIDR prefix length s[start, end) of at most `max` bits; -1 when it is not one. */
function parsePrefix(s: string, start: number, end: number, max: number, syntax: IPSyntax): number {
  const digits = end - start;
  if (digits < 1 || digits > 3) return -1;
  if (syntax === "strict" && digits > 1 && s.charCodeAt(start) === ZERO) return -1;
  let n = 0;
  for (let i = start; i < end; i++) {
    const c = s.charCodeAt(i);
    if (c < ZERO || c > NINE) return -1;
    n = n * 10 + (c - ZERO);
  }
  return n > max ? -1 : n;
}

/** Clears the host bits of `b` after the first `prefix` bits, in place. */
function maskInPlace(b: Uint8Array, prefix: number): Uint8Array {
  for (let i = 0; i < b.length; i++) {
    const bits = prefix - 8 * i;
    if (bits < 8) b[i] &= bits <= 0 ? 0 : (0xff << (8 - bits)) & 0xff;
  }
  return b;
}

/**
 * Parses "addr/prefix"; the host bits are cleared in the result (as Go's net.ParseCIDR does). The
 * family follows the syntax: an address written with ':' is IPv6, also an IPv4-mapped one.
 */
export function parseCIDR(s: string, syntax: IPSyntax = "strict"): ParsedCIDR | null {
  const slash = s.indexOf("/");
  if (slash === -1) return null;
  const ip = parseIP(s.slice(0, slash), syntax);
  if (ip === null) return null;
  const prefix = parsePrefix(s, slash + 1, s.length, ip.length * 8, syntax);
  if (prefix < 0) return null;
  return { bytes: maskInPlace(ip, prefix), prefix };
}

/** True when `ip` is inside `cidr` (same length required; the CIDR's host bits are ignored). */
export function cidrContains(cidr: ParsedCIDR, ip: Uint8Array): boolean {
  if (cidr.bytes.length !== ip.length) return false;
  let bits = cidr.prefix;
  for (let i = 0; i < ip.length && bits > 0; i++) {
    const n = Math.min(8, bits);
    const mask = (0xff << (8 - n)) & 0xff;
    if (((ip[i] ^ cidr.bytes[i]) & mask) !== 0) return false;
    bits -= n;
  }
  return true;
}

/**
 * Formats address bytes: dotted quad for 4 bytes, RFC 5952 for 16 (lower case, the longest run of two or
 * more zero groups as "::", the first on a tie; all groups in hex, an IPv4-mapped address included, as
 * conntrack and the WHATWG URL serializer print it). Go's IP.String differs only for mapped addresses,
 * which lib/net/go_net.ts turns into IPv4 first.
 */
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
