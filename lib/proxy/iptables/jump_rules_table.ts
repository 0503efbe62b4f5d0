/**
 * The jump rules from built-in chains into kube-proxy's chains (upstream iptablesJumpChains and
 * iptablesKubeletJumpChains). They are not part of the restore payload: upstream installs each with
 * EnsureRule(Prepend, ...) (`iptables -C` then `iptables -I`), and only on full syncs.
 */

/** One jump rule: in `table`, built-in `fromChain` jumps to `toChain`. */
export interface JumpRule {
  readonly table: "filter" | "nat";
  readonly fromChain: string;
  readonly toChain: string;
  /** Match arguments placed before the comment (e.g. conntrack NEW). */
  readonly extraArgs: readonly string[];
  /** Comment text; "" means no comment match. */
  readonly comment: string;
}

const NEW = Object.freeze(["-m", "conntrack", "--ctstate", "NEW"]);
const NONE: readonly string[] = Object.freeze([]);

/** kube-proxy's own jump rules (removed again by --cleanup), in upstream order. */
export const IPTABLES_JUMP_RULES: readonly JumpRule[] = Object.freeze([
  {
    table: "filter",
    fromChain: "INPUT",
    toChain: "KUBE-EXTERNAL-SERVICES",
    extraArgs: NEW,
    comment: "kubernetes externally-visible service portals",
  },
  {
    table: "filter",
    fromChain: "FORWARD",
    toChain: "KUBE-EXTERNAL-SERVICES",
    extraArgs: NEW,
    comment: "kubernetes externally-visible service portals",
  },
  {
    table: "filter",
    fromChain: "INPUT",
    toChain: "KUBE-NODEPORTS",
    extraArgs: NONE,
    comment: "kubernetes health check service ports",
  },
  {
    table: "filter",
    fromChain: "FORWARD",
    toChain: "KUBE-SERVICES",
    extraArgs: NEW,
    comment: "kubernetes service portals",
  },
  {
    table: "filter",
    fromChain: "OUTPUT",
    toChain: "KUBE-SERVICES",
    extraArgs: NEW,
    comment: "kubernetes service portals",
  },
  {
    table: "filter",
    fromChain: "FORWARD",
    toChain: "KUBE-FORWARD",
    extraArgs: NONE,
    comment: "kubernetes forwarding rules",
  },
  {
    table: "filter",
    fromChain: "INPUT",
    toChain: "KUBE-PROXY-FIREWALL",
    extraArgs: NEW,
    comment: "kubernetes load balancer firewall",
  },
  {
    table: "filter",
    fromChain: "OUTPUT",
    toChain: "KUBE-PROXY-FIREWALL",
    extraArgs: NEW,
    comment: "kubernetes load balancer firewall",
  },
  {
    table: "filter",
    fromChain: "FORWARD",
    toChain: "KUBE-PROXY-FIREWALL",
    extraArgs: NEW,
    comment: "kubernetes load balancer firewall",
  },
  {
    table: "nat",
    fromChain: "OUTPUT",
    toChain: "KUBE-SERVICES",
    extraArgs: NONE,
    comment: "kubernetes service portals",
  },
  {
    table: "nat",
    fromChain: "PREROUTING",
    toChain: "KUBE-SERVICES",
    extraArgs: NONE,
    comment: "kubernetes service portals",
  },
  {
    table: "nat",
    fromChain: "POSTROUTING",
    toChain: "KUBE-POSTROUTING",
    extraArgs: NONE,
    comment: "kubernetes postrouting rules",
  },
]);

/**
 * Duplicates of kubelet's own jumps into KUBE-FIREWALL: created at startup (full syncs) but, as upstream,
 * not removed by --cleanup since kubelet owns them.
 */
export const IPTABLES_KUBELET_JUMP_RULES: readonly JumpRule[] = Object.freeze([
  { table: "filter", fromChain: "INPUT", toChain: "KUBE-FIREWALL", extraArgs: NONE, comment: "" },
  { table: "filter", fromChain: "OUTPUT", toChain: "KUBE-FIREWALL", extraArgs: NONE, comment: "" },
]);

/**
 * The rule arguments after the chain, in upstream's order: extraArgs, comment, jump. Suitable for
 * `iptables -t <table> -C|-I|-D <fromChain> ...args` (argv form, no shell quoting needed).
 */
export function jumpRuleArgs(rule: JumpRule): string[] {
  const args = [...rule.extraArgs];
  if (rule.comment !== "") args.push("-m", "comment", "--comment", rule.comment);
  args.push("-j", rule.toChain);
  return args;
}

/** The rule as an iptables-restore / iptables-save line ("-A FROM ..."), comment quoted when it has spaces. */
export function jumpRuleLine(rule: JumpRule): string {
  const args = jumpRuleArgs(rule).map((a) => (a.includes(" ") ? `"${a}"` : a));
  return `-A ${rule.fromChain} ${args.join(" ")}`;
}
