/**
 * Node addresses the proxier needs: every local address of a family (for `--nodeport-addresses`, as
 * upstream reads network interfaces) and the primary node IP (for the KUBE-FW hairpin rule), from the
 * Node object first, as upstream's node IP detection does.
 */
import { networkInterfaces } from "node:os";
import type { Node } from "../k8s/objects.ts";
import type { IPFamily } from "./types.ts";
import { ipFamily, parseIP } from "../net/go_net.ts";

/** Addresses of one family on all local interfaces (loopback included), sorted and deduplicated. */
export function localAddresses(family: IPFamily): string[] {
  const want = family === "IPv4" ? 4 : 6;
  const out = new Set<string>();
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
