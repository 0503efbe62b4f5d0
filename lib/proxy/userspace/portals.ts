/**
 * `--userspace-portals=iptables`, the original userspace design (upstream pkg/proxy/userspace/proxier.go):
 * each service port's listeners sit on the node address at a port the kernel chooses, and nat rules steer
 * the service's addresses there — KUBE-PORTALS-CONTAINER and KUBE-NODEPORT-CONTAINER (from PREROUTING:
 * traffic from pods and other hosts), KUBE-PORTALS-HOST and KUBE-NODEPORT-HOST (from OUTPUT: traffic the
 * node itself sends). Every rule DNATs to the listener's address and port (the node address), so UDP
 * replies, sent from that address, match the flow's conntrack entry and are un-NATed to the service
 * address; with no node address the listeners bind the wildcard and the rules REDIRECT.
 *
 * The rules are rendered here, purely, as one iptables-restore payload of the nat table (the four chains
 * flushed and refilled: one transaction per sync).
 */
import type { IPFamily } from "../types.ts";
import { joinHostPort } from "../../net/go_net.ts";

/** The four chains, in upstream's names. */
export const PORTAL_CHAINS = {
  portalsContainer: "KUBE-PORTALS-CONTAINER",
  portalsHost: "KUBE-PORTALS-HOST",
  nodePortContainer: "KUBE-NODEPORT-CONTAINER",
  nodePortHost: "KUBE-NODEPORT-HOST",
} as const;

/** One steered destination: traffic to `ip:port` (or, for a node port, any local address) goes to the listener. */
export interface PortalRule {
  /** "ns/name:port" (the rule comment). */
  readonly servicePort: string;
  readonly protocol: "TCP" | "UDP";
  /** Destination address; null for a node port (any local address). */
  readonly ip: string | null;
  readonly port: number;
  /** The listener's address ("0.0.0.0" / "::" when it binds the wildcard) and port. */
  readonly listenIP: string;
  readonly listenPort: number;
}

/** The jump rules from the built-in chains (args after `-t nat`, without -A/-C/-I). */
export function portalJumps(): { chain: string; args: string[] }[] {
  const C = PORTAL_CHAINS;
  return [
    {
      chain: "PREROUTING",
      args: [
        "-m",
        "comment",
        "--comment",
        "handle ClusterIPs; NOTE: this must be before the NodePort rules",
        "-j",
        C.portalsContainer,
      ],
    },
    {
      chain: "OUTPUT",
      args: [
        "-m",
        "comment",
        "--comment",
        "handle ClusterIPs; NOTE: this must be before the NodePort rules",
        "-j",
        C.portalsHost,
      ],
    },
    {
      chain: "PREROUTING",
      args: [
        "-m",
        "addrtype",
        "--dst-type",
        "LOCAL",
        "-m",
        "comment",
        "--comment",
        "handle service NodePorts; NOTE: this must be the last rule in the chain",
        "-j",
        C.nodePortContainer,
      ],
    },
    {
      chain: "OUTPUT",
      args: [
        "-m",
        "addrtype",
        "--dst-type",
        "LOCAL",
        "-m",
        "comment",
        "--comment",
        "handle service NodePorts; NOTE: this must be the last rule in the chain",
        "-j",
        C.nodePortHost,
      ],
    },
  ];
}

function isWildcard(ip: string): boolean {
  return ip === "0.0.0.0" || ip === "::";
}

/**
 * The nat payload for `rules` (sorted for deterministic output): each rule once in the CONTAINER chain
 * and once in the HOST chain.
 */
export function renderPortalRules(
  family: IPFamily,
  rules: readonly PortalRule[],
  opts: { readonly localhostNodePorts?: boolean } = {},
): string {
  const C = PORTAL_CHAINS;
  const prefix = family === "IPv6" ? 128 : 32;
  const sorted = [...rules].sort((a, b) =>
    a.servicePort.localeCompare(b.servicePort, "en") || a.protocol.localeCompare(b.protocol) ||
    (a.ip ?? "").localeCompare(b.ip ?? "") || a.port - b.port
  );
  const lines = ["*nat"];
  for (const c of Object.values(C)) lines.push(`:${c} - [0:0]`);
  for (const r of sorted) {
    const proto = r.protocol.toLowerCase();
    const match = [`-m comment --comment "${r.servicePort}"`, `-p ${proto} -m ${proto} --dport ${r.port}`];
    if (r.ip !== null) match.push(`-d ${r.ip}/${prefix}`);
    const target = isWildcard(r.listenIP)
      ? `-j REDIRECT --to-ports ${r.listenPort}`
      : `-j DNAT --to-destination ${joinHostPort(r.listenIP, r.listenPort)}`;
    const [container, host] = r.ip === null
      ? [C.nodePortContainer, C.nodePortHost]
      : [C.portalsContainer, C.portalsHost];
    lines.push(`-A ${container} ${match.join(" ")} ${target}`);
    // The node's own connections to 127.0.0.0/8 reach node ports only with localhostNodePorts (IPv4).
    const noLoopback = r.ip === null && opts.localhostNodePorts === false && family === "IPv4"
      ? " ! -d 127.0.0.0/8"
      : "";
    lines.push(`-A ${host} ${match.join(" ")}${noLoopback} ${target}`);
  }
  lines.push("COMMIT", "");
  return lines.join("\n");
}

/** The cleanup payload: flush and delete the four chains (after their jumps are removed). */
export function renderPortalCleanup(): string {
  const cs = Object.values(PORTAL_CHAINS);
  return ["*nat", ...cs.map((c) => `:${c} - [0:0]`), ...cs.map((c) => `-X ${c}`), "COMMIT", ""].join("\n");
}

/**
 * Whether the kernel's nat table (`iptables-save -t nat`) still holds what `payload` (the last
 * {@link renderPortalRules} output) wrote: each portal chain with as many rules, and every jump from the
 * built-in chains. Returns the first difference found, or null. Counting is enough to catch an operator's
 * deleted rule or flushed chain without parsing iptables-save's canonical rule text.
 */
export function portalDrift(payload: string, saved: string): string | null {
  const count = (text: string, chain: string) => {
    let n = 0;
    for (const line of text.split("\n")) if (line.startsWith(`-A ${chain} `)) n++;
    return n;
  };
  for (const jump of portalJumps()) {
    const target = jump.args[jump.args.length - 1];
    const found = saved.split("\n").some((l) =>
      l.startsWith(`-A ${jump.chain} `) && l.endsWith(`-j ${target}`)
    );
    if (!found) return `the jump from ${jump.chain} to ${target} is missing`;
  }
  for (const chain of Object.values(PORTAL_CHAINS)) {
    if (!saved.includes(`:${chain} `)) return `chain ${chain} is missing`;
    const want = count(payload, chain);
    const have = count(saved, chain);
    if (want !== have) return `chain ${chain} has ${have} rules, ${want} written`;
  }
  return null;
}
