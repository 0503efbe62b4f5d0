/**
 * The iptables-restore payload of upstream's IPVS proxier (pkg/proxy/ipvs/proxier.go
 * createAndLinkKubeChain + writeIptablesRules): the owned chains of nat and filter, the ipset match rules
 * for the sets that are not empty, masquerading, the load-balancer source-range firewall, the VIP
 * access filters and the forward rules. Pure: the same sets give the same bytes.
 */
import type { IPFamily } from "../types.ts";
import type { LocalTrafficDetector } from "../iptables/local_detector.ts";
import {
  IPSET_CHAIN_RULES,
  IPVS_CHAINS,
  KUBE_FORWARD,
  KUBE_IPVS_FILTER,
  KUBE_IPVS_OUT_FILTER,
  KUBE_LOAD_BALANCER,
  KUBE_MARK_MASQ,
  KUBE_NODE_PORT,
  KUBE_POSTROUTING,
  KUBE_SERVICES,
  KUBE_SOURCE_RANGES_FIREWALL,
} from "./chains.ts";
import {
  ipsetInfo,
  ipsetName,
  KUBE_CLUSTER_IP_SET,
  KUBE_EXTERNAL_IP_LOCAL_SET,
  KUBE_EXTERNAL_IP_SET,
  KUBE_HEALTH_CHECK_NODE_PORT_SET,
  KUBE_IPVS_SET,
  KUBE_LOAD_BALANCER_SET,
} from "./ipsets.ts";

/** A load-balancer IP:port the node itself must not reach (no source range contains the node IP). */
export interface LbNoNodeAccess {
  readonly ip: string;
  readonly protocol: string;
  readonly port: number;
}

/** What the payload depends on. */
export interface IpvsIptablesInput {
  readonly family: IPFamily;
  /** Base (IPv4) set name → its entries; only emptiness matters here. */
  readonly ipsets: ReadonlyMap<string, readonly string[]>;
  readonly lbNoNodeAccess: readonly LbNoNodeAccess[];
  readonly masqueradeAll: boolean;
  readonly masqueradeBit: number;
  readonly localDetector: LocalTrafficDetector;
  /** iptables supports MASQUERADE --random-fully. */
  readonly randomFully: boolean;
}

/** Go's fmt "%#08x": "0x" plus hex, zero-padded so the whole is at least 8 characters. */
export function masqueradeMark(bit: number): string {
  return "0x" + (1 << bit).toString(16).padStart(6, "0");
}

/** The whole nat + filter payload for iptables-restore --noflush. */
export function renderIpvsIptables(input: IpvsIptablesInput): string {
  const { family } = input;
  const nonEmpty = (set: string) => (input.ipsets.get(set)?.length ?? 0) > 0;
  const name = (set: string) => ipsetName(set, family);
  const comment = (set: string) => `"${ipsetInfo(set).comment}"`;
  const mark = masqueradeMark(input.masqueradeBit);
  const natChains: string[] = ["*nat"];
  const filterChains: string[] = ["*filter"];
  for (const c of IPVS_CHAINS) (c.table === "nat" ? natChains : filterChains).push(`:${c.chain} - [0:0]`);
  const nat: string[] = [];
  const filter: string[] = [];
  const w = (out: string[], ...args: string[]) => out.push(args.join(" "));

  w(nat, "-A", KUBE_SERVICES, "-s", family === "IPv6" ? "::1/128" : "127.0.0.0/8", "-j", "RETURN");
  for (const r of IPSET_CHAIN_RULES) {
    if (!nonEmpty(r.set)) continue;
    const args = ["-A", r.from];
    if (r.protocol) args.push("-p", r.protocol);
    args.push(
      "-m",
      "comment",
      "--comment",
      comment(r.set),
      "-m",
      "set",
      "--match-set",
      name(r.set),
      r.matchType,
    );
    w(r.table === "filter" ? filter : nat, ...args, "-j", r.to);
  }
  if (nonEmpty(KUBE_CLUSTER_IP_SET)) {
    const args = [
      "-A",
      KUBE_SERVICES,
      "-m",
      "comment",
      "--comment",
      comment(KUBE_CLUSTER_IP_SET),
      "-m",
      "set",
      "--match-set",
      name(KUBE_CLUSTER_IP_SET),
    ];
    if (input.masqueradeAll) w(nat, ...args, "dst,dst", "-j", KUBE_MARK_MASQ);
    else if (input.localDetector.implemented) {
      w(nat, ...args, "dst,dst", ...input.localDetector.ifNotLocal, "-j", KUBE_MARK_MASQ);
    } else w(nat, ...args, "src,dst", "-j", KUBE_MARK_MASQ);
  }
  const externalIPRules = (args: string[]) => {
    w(
      nat,
      ...args,
      "-m",
      "physdev",
      "!",
      "--physdev-is-in",
      "-m",
      "addrtype",
      "!",
      "--src-type",
      "LOCAL",
      "-j",
      "ACCEPT",
    );
    w(nat, ...args, "-m", "addrtype", "--dst-type", "LOCAL", "-j", "ACCEPT");
  };
  for (const set of [KUBE_EXTERNAL_IP_SET, KUBE_EXTERNAL_IP_LOCAL_SET]) {
    if (!nonEmpty(set)) continue;
    const args = [
      "-A",
      KUBE_SERVICES,
      "-m",
      "comment",
      "--comment",
      comment(set),
      "-m",
      "set",
      "--match-set",
      name(set),
      "dst,dst",
    ];
    if (set === KUBE_EXTERNAL_IP_SET) w(nat, ...args, "-j", KUBE_MARK_MASQ);
    externalIPRules(args);
  }
  w(nat, "-A", KUBE_SERVICES, "-m", "addrtype", "--dst-type", "LOCAL", "-j", KUBE_NODE_PORT);
  w(nat, "-A", KUBE_LOAD_BALANCER, "-j", KUBE_MARK_MASQ);
  w(filter, "-A", KUBE_SOURCE_RANGES_FIREWALL, "-j", "DROP");
  for (const e of input.lbNoNodeAccess) {
    w(
      filter,
      "-A",
      KUBE_IPVS_OUT_FILTER,
      "-s",
      e.ip,
      "-m",
      "ipvs",
      "--vaddr",
      e.ip,
      "--vproto",
      e.protocol,
      "--vport",
      String(e.port),
      "-j",
      "DROP",
    );
  }
  // acceptIPVSTraffic: last in KUBE-SERVICES.
  for (const set of [KUBE_CLUSTER_IP_SET, KUBE_LOAD_BALANCER_SET]) {
    if (nonEmpty(set)) {
      w(nat, "-A", KUBE_SERVICES, "-m", "set", "--match-set", name(set), "dst,dst", "-j", "ACCEPT");
    }
  }
  w(
    filter,
    "-A",
    KUBE_FORWARD,
    "-m",
    "comment",
    "--comment",
    `"kubernetes forwarding rules"`,
    "-m",
    "mark",
    "--mark",
    `${mark}/${mark}`,
    "-j",
    "ACCEPT",
  );
  w(
    filter,
    "-A",
    KUBE_FORWARD,
    "-m",
    "comment",
    "--comment",
    `"kubernetes forwarding conntrack rule"`,
    "-m",
    "conntrack",
    "--ctstate",
    "RELATED,ESTABLISHED",
    "-j",
    "ACCEPT",
  );
  w(
    filter,
    "-A",
    KUBE_NODE_PORT,
    "-m",
    "comment",
    "--comment",
    comment(KUBE_HEALTH_CHECK_NODE_PORT_SET),
    "-m",
    "set",
    "--match-set",
    name(KUBE_HEALTH_CHECK_NODE_PORT_SET),
    "dst",
    "-j",
    "ACCEPT",
  );
  for (
    const [set, match] of [
      [KUBE_LOAD_BALANCER_SET, "dst,dst"],
      [KUBE_CLUSTER_IP_SET, "dst,dst"],
      [KUBE_EXTERNAL_IP_SET, "dst,dst"],
      [KUBE_EXTERNAL_IP_LOCAL_SET, "dst,dst"],
      [KUBE_HEALTH_CHECK_NODE_PORT_SET, "dst"],
    ]
  ) {
    w(filter, "-A", KUBE_IPVS_FILTER, "-m", "set", "--match-set", name(set), match, "-j", "RETURN");
  }
  w(
    filter,
    "-A",
    KUBE_IPVS_FILTER,
    "-m",
    "conntrack",
    "--ctstate",
    "NEW",
    "-m",
    "set",
    "--match-set",
    name(KUBE_IPVS_SET),
    "dst",
    "-j",
    "REJECT",
  );
  w(nat, "-A", KUBE_POSTROUTING, "-m", "mark", "!", "--mark", `${mark}/${mark}`, "-j", "RETURN");
  w(nat, "-A", KUBE_POSTROUTING, "-j", "MARK", "--xor-mark", mark);
  const masq = [
    "-A",
    KUBE_POSTROUTING,
    "-m",
    "comment",
    "--comment",
    `"kubernetes service traffic requiring SNAT"`,
    "-j",
    "MASQUERADE",
  ];
  if (input.randomFully) masq.push("--random-fully");
  w(nat, ...masq);
  w(nat, "-A", KUBE_MARK_MASQ, "-j", "MARK", "--or-mark", mark);
  filter.push("COMMIT");
  nat.push("COMMIT");
  return [...natChains, ...nat, ...filterChains, ...filter].join("\n") + "\n";
}
