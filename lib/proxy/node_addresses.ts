/**
 * Node addresses the proxier needs: every local address of a family (for `--nodeport-addresses`, as
 * upstream reads network interfaces) and the primary node IP (for the KUBE-FW hairpin rule), from the
 * Node object first, as upstream's node IP detection does.
 */
import { networkInterfaces } from "node:os";
import { readFileSync } from "node:fs";
import type { Node } from "../k8s/objects.ts";
import type { IPFamily } from "./types.ts";
import { ipFamily, parseIP } from "../net/go_net.ts";

/**
 * IPv4 addresses of the kernel's local routes in `/proc/net/fib_trie` ("|-- a.b.c.d" followed by
 * "/32 host LOCAL"): one per address of every interface that is up, with or without carrier.
 */
export function parseFibTrieLocal(text: string): string[] {
  const out = new Set<string>();
  let leaf: string | null = null;
  for (const line of text.split("\n")) {
    const t = line.trim();
    if (t.startsWith("|-- ")) leaf = t.slice(4);
    else if (leaf !== null && /^\/32 host LOCAL$/.test(t)) {
      const ip = parseIP(leaf);
      if (ip !== null && ipFamily(ip) === 4) out.add(ip);
    } else if (!t.startsWith("/")) leaf = null;
  }
  return [...out];
}

/** IPv6 addresses listed in `/proc/net/if_inet6` (32 hex digits, then index, prefix, scope, flags, name). */
export function parseIfInet6(text: string): string[] {
  const out = new Set<string>();
  for (const line of text.split("\n")) {
    const hex = line.trim().split(/\s+/)[0] ?? "";
    if (!/^[0-9a-f]{32}$/i.test(hex)) continue;
    const ip = parseIP(hex.match(/.{4}/g)!.join(":"));
    if (ip !== null && ipFamily(ip) === 6) out.add(ip);
  }
  return [...out];
}

/** Reads a /proc file, or "" when it is not there (not Linux, or /proc not mounted). */
function readProc(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return "";
  }
}

/**
 * Addresses of one family on all local interfaces (loopback included), sorted and deduplicated — whatever
 * the link state, like upstream's net.InterfaceAddrs: the runtimes' networkInterfaces() leaves out
 * interfaces without carrier (libuv wants IFF_RUNNING), so a NIC that is still coming up or flapping would
 * drop its NodePort addresses. The kernel's own lists are read too.
 */
export function localAddresses(family: IPFamily): string[] {
  const want = family === "IPv4" ? 4 : 6;
  const out = new Set<string>(
    want === 4
      ? parseFibTrieLocal(readProc("/proc/net/fib_trie"))
      : parseIfInet6(readProc("/proc/net/if_inet6")),
  );
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) {
      const ip = parseIP(a.address.split("%")[0]);
      if (ip !== null && ipFamily(ip) === want) out.add(ip);
    }
  }
  return [...out].sort();
}

/**
 * The primary node IP of a family: the Node's first InternalIP (then ExternalIP) of that family, else
 * `bindAddress` when it is a specific address of that family, else null.
 */
export function primaryNodeIP(family: IPFamily, node: Node | null, bindAddress: string): string | null {
  const want = family === "IPv4" ? 4 : 6;
  for (const type of ["InternalIP", "ExternalIP"]) {
    for (const a of node?.status?.addresses ?? []) {
      if (a.type !== type || !a.address) continue;
      const ip = parseIP(a.address);
      if (ip !== null && ipFamily(ip) === want) return ip;
    }
  }
  const b = parseIP(bindAddress);
  if (b !== null && ipFamily(b) === want && b !== "0.0.0.0" && b !== "::") return b;
  return null;
}
