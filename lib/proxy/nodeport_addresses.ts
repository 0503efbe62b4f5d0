/**
 * `--nodeport-addresses` for one IP family (upstream pkg/proxy/util/nodeport_addresses.go): which local
 * addresses accept NodePort traffic. No CIDR of the family means "all local addresses" (0.0.0.0/0 or
 * ::/0, matched with addrtype LOCAL). The special value "primary" is resolved first with
 * {@link resolveNodePortAddresses}.
 */
import type { IPFamily } from "./types.ts";
import { NODE_PORT_ADDRESSES_PRIMARY } from "../config/validate.ts";
import { cidrContains, compareIPBytes, formatIP, parseCIDR, type ParsedCIDR, parseIP } from "../net/ip.ts";

/** NodePort address selection for one family. */
export interface NodePortAddresses {
  /** The CIDR strings of this family in use (["0.0.0.0/0"] / ["::/0"] when none were given). */
  readonly cidrStrings: readonly string[];
  /** True when every local address accepts NodePorts (a zero CIDR is present). */
  readonly matchAll: boolean;
  /** True when some CIDR contains an IPv4 loopback address (upstream ContainsIPv4Loopback). */
  readonly containsIPv4Loopback: boolean;
  /** Values that were not valid CIDRs and were ignored. */
  readonly invalid: readonly string[];
  /**
   * Upstream GetNodeIPs: the given local interface addresses inside any CIDR, deduplicated and
   * sorted (upstream returns them in map order).
   */
  nodeIPs(localAddresses: readonly string[]): string[];
}

const IPV4_ZERO_CIDR = "0.0.0.0/0";
const IPV6_ZERO_CIDR = "::/0";

/**
 * Builds the selection for `family` from the `--nodeport-addresses` values (both families may be mixed;
 * only this family's are kept). Invalid values are ignored and reported in `invalid`.
 */
export function newNodePortAddresses(family: IPFamily, cidrStrings: readonly string[]): NodePortAddresses {
  const ipv6 = family === "IPv6";
  const invalid: string[] = [];
  let strings: string[] = [];
  const parsedList: ParsedCIDR[] = [];
  for (const raw of cidrStrings) {
    const s = raw.trim();
    const parsed = parseCIDR(s);
    if (parsed === null) {
      invalid.push(raw);
      continue;
    }
    if ((parsed.bytes.length === 16) !== ipv6) continue;
    strings.push(s);
    parsedList.push(parsed);
  }
  if (strings.length === 0) {
    strings = [ipv6 ? IPV6_ZERO_CIDR : IPV4_ZERO_CIDR];
    parsedList.push(parseCIDR(strings[0])!);
  }
  let matchAll = false;
  let containsIPv4Loopback = false;
  let cidrs: ParsedCIDR[] = [];
  const loopbackStart = new Uint8Array([127, 0, 0, 0]);
  for (let i = 0; i < strings.length; i++) {
    const c = parsedList[i];
    if (c.bytes.length === 4 && (c.bytes[0] === 127 || cidrContains(c, loopbackStart))) {
      containsIPv4Loopback = true;
    }
    // Upstream IsZeroCIDR compares the string itself; a zero CIDR makes every other entry irrelevant.
    if (strings[i] === IPV4_ZERO_CIDR || strings[i] === IPV6_ZERO_CIDR) {
      cidrs = [c];
      matchAll = true;
      break;
    }
    cidrs.push(c);
  }
  const frozenStrings = Object.freeze([...strings]);
  return {
    cidrStrings: frozenStrings,
    matchAll,
    containsIPv4Loopback,
    invalid: Object.freeze(invalid),
    nodeIPs(localAddresses: readonly string[]): string[] {
      const found = new Map<string, Uint8Array>();
      for (const a of localAddresses) {
        const ip = parseIP(a);
        if (ip === null) continue;
        if (cidrs.some((c) => cidrContains(c, ip))) found.set(formatIP(ip), ip);
      }
      return [...found.values()].sort(compareIPBytes).map(formatIP);
    },
  };
}

/**
 * Upstream's resolution of `--nodeport-addresses primary`: the node's primary IP of `family` as a host CIDR,
 * or no CIDR of this family (every local address) when the primary IP is unknown or a loopback address, as
 * upstream does when it cannot detect a non-loopback node IP. Other values are returned unchanged.
 */
export function resolveNodePortAddresses(
  values: readonly string[],
  family: IPFamily,
  primaryNodeIP: string | null,
): readonly string[] {
  if (values.length !== 1 || values[0] !== NODE_PORT_ADDRESSES_PRIMARY) return values;
  const ip = primaryNodeIP === null ? null : parseIP(primaryNodeIP);
  if (ip === null || (ip.length === 16) !== (family === "IPv6")) return [];
  const loopback = ip.length === 4 ? ip[0] === 127 : ip.every((b, i) => b === (i === 15 ? 1 : 0));
  if (loopback) return [];
  return [`${formatIP(ip)}/${ip.length === 4 ? 32 : 128}`];
}
