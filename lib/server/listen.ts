/**
 * Listening the way upstream's Go listeners do:
 * - bind addresses are `host:port`, `[v6]:port`, `:port`, or a bare IP that gets the component's default
 *   port (upstream's AppendPortIfNeeded);
 * - a wildcard host ("", "0.0.0.0", "::") opens one dual-stack socket on "::", because Go's
 *   `net.Listen("tcp", "0.0.0.0:p")` does exactly that (so a kube-proxy on 0.0.0.0:10256 also answers
 *   IPv6 load-balancer probes). When the kernel has no IPv6, it falls back to "0.0.0.0", as Go does.
 */
import {
  type FetchApp,
  type FetchHandler,
  ListenError,
  serveApp,
  type ServedApp,
  type ServeFn,
} from "../runtime/serve.ts";
import { ipVersion } from "../net/ip.ts";

/** A parsed bind address. */
export interface BindAddress {
  /** Bare host: IPv4, IPv6 without brackets, or "" for all addresses. */
  readonly host: string;
  readonly port: number;
}

/** True for an IPv4 literal (no leading zeros). */
export function isIPv4(s: string): boolean {
  return ipVersion(s) === 4;
}

/** True for an IPv6 literal (no zone, no brackets). */
export function isIPv6(s: string): boolean {
  return ipVersion(s) === 6;
}

function parsePort(s: string, addr: string): number {
  if (!/^\d{1,5}$/.test(s) || Number(s) > 65535) {
    throw new Error(`bind address "${addr}": port "${s}" is not a number in 0..65535`);
  }
  return Number(s);
}

/**
 * Parses a bind address such as "0.0.0.0:10256", "[::]:10256", ":10256" or "10.0.0.1" (then `defaultPort`).
 * Throws one line naming the address and what is wrong with it.
 */
export function parseBindAddress(addr: string, defaultPort: number): BindAddress {
  const a = addr.trim();
  if (a === "") throw new Error(`bind address is empty`);
  if (isIPv4(a) || isIPv6(a)) return { host: a, port: defaultPort };
  if (a.startsWith("[")) {
    const m = /^\[([^\]]+)\]:(.*)$/.exec(a);
    if (!m || !isIPv6(m[1])) throw new Error(`bind address "${addr}": expected [IPv6]:port`);
    return { host: m[1], port: parsePort(m[2], addr) };
  }
  const i = a.lastIndexOf(":");
  if (i < 0) throw new Error(`bind address "${addr}": expected IP:port`);
  const host = a.slice(0, i);
  if (host !== "" && !isIPv4(host)) {
    throw new Error(`bind address "${addr}": host "${host}" is not an IP address (IPv6 needs brackets)`);
  }
  return { host, port: parsePort(a.slice(i + 1), addr) };
}

/** True for "", "0.0.0.0" and "::" (and other spellings of the IPv6 unspecified address). */
export function isWildcard(host: string): boolean {
  return host === "" || host === "0.0.0.0" || (isIPv6(host) && /^[0:]+$/.test(host));
}

/** Errors after which "::" is retried as "0.0.0.0" (IPv6 absent or disabled), never EADDRINUSE. */
const NO_IPV6 = new Set(["EAFNOSUPPORT", "EADDRNOTAVAIL", "EPROTONOSUPPORT", "EINVAL"]);

/**
 * Serves `app` on `host:port` with Go's wildcard semantics (see the module comment). The returned
 * `hostname` is the address really bound. Rejects with a {@link ListenError} naming the address asked for.
 */
export async function listen(
  app: FetchApp | FetchHandler,
  host: string,
  port: number,
  serve: ServeFn = serveApp,
): Promise<ServedApp> {
  if (!isWildcard(host)) return await serve(app, { hostname: host, port });
  try {
    return await serve(app, { hostname: "::", port });
  } catch (e) {
    if (!(e instanceof ListenError) || !NO_IPV6.has(e.code)) {
      if (e instanceof ListenError && host !== "::") {
        // Report the address the operator configured, not our dual-stack spelling of it.
        throw new ListenError(host === "" ? "0.0.0.0" : host, port, e.code, e.reason, e);
      }
      throw e;
    }
    return await serve(app, { hostname: "0.0.0.0", port });
  }
}
