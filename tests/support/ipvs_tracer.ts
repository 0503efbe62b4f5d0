/**
 * A packet tracer for IPVS mode: given what upstream's IPVS proxier leaves in the kernel (virtual servers
 * with their real servers, the ipsets, the nat/filter payload, the addresses on kube-ipvs0), it answers
 * what the kernel does with one new packet, in the flow tables' terms (tests/support/flows): which real
 * servers may serve it and whether it is masqueraded, or rejected / dropped / accepted / left alone.
 *
 * The kernel path it follows (netfilter hook order, IPVS in NAT mode with net/ipv4/vs/conntrack=1):
 *  - a packet entering the node: nat PREROUTING (the jump rules → KUBE-SERVICES, which marks for
 *    masquerade); unless its destination is a local address (a node address or one on kube-ipvs0) it is
 *    routed on, untouched; else filter INPUT (KUBE-NODE-PORT, KUBE-PROXY-FIREWALL, KUBE-IPVS-FILTER), then
 *    IPVS at LOCAL_IN (priority after filter) looks the destination up among the virtual servers;
 *  - a packet the node sends: nat OUTPUT (→ KUBE-SERVICES), IPVS at LOCAL_OUT (any destination), then
 *    filter OUTPUT (KUBE-IPVS-OUT-FILTER, whose `-m ipvs --vaddr` sees the IPVS-handled packet); a packet
 *    IPVS does not handle and whose destination is local is then delivered through filter INPUT;
 *  - a virtual server with no usable real server (none, or all at weight 0) answers ICMP port
 *    unreachable (the kernel's ip_vs_leave): "REJECT"; with real servers the packet is DNATed to one of
 *    them and, in nat POSTROUTING (→ KUBE-POSTROUTING), masqueraded when marked or when KUBE-LOOP-BACK
 *    holds (endpoint, port, source) (hairpin; like the iptables tracer, "masq" when any candidate would be).
 * Rules that look at history (conntrack states other than NEW) never match; no packet arrives through a
 * bridge port (`--physdev-is-in` is false).
 */
import type { IPFamily } from "../../lib/proxy/types.ts";
import type { IpvsState } from "../../lib/proxy/ipvs/state.ts";
import { virtualServerKey } from "../../lib/proxy/ipvs/state.ts";
import { IPVS_JUMP_CHAINS } from "../../lib/proxy/ipvs/chains.ts";
import { ipsetInfo, ipsetName } from "../../lib/proxy/ipvs/ipsets.ts";
import { cidrContains, joinHostPort, parseIP } from "../../lib/net/go_net.ts";
import { splitWords } from "./iptables_canonical.ts";

/** A virtual server as the kernel holds it. */
export interface TracedVirtualServer {
  readonly address: string;
  readonly port: number;
  readonly protocol: string;
  readonly persistentTimeout: number;
  readonly realServers: ReadonlyArray<
    { readonly address: string; readonly port: number; readonly weight: number }
  >;
}

/** What the tracer reads: the kernel state of one family. */
export interface IpvsKernelView {
  readonly family: IPFamily;
  /** By "ip:port/PROTOCOL" (virtualServerKey). */
  readonly virtualServers: ReadonlyMap<string, TracedVirtualServer>;
  /** By kernel set name: its type and entries as `ipset save` prints them. */
  readonly ipsets: ReadonlyMap<string, { readonly type: string; readonly entries: ReadonlySet<string> }>;
  /** The proxier's iptables-restore payload (its own chains of nat and filter). */
  readonly iptables: string;
  /** Addresses on kube-ipvs0. */
  readonly dummyAddresses: readonly string[];
}

/** The kernel view of the state the pure model computes (what a successful sync programs). */
export function kernelViewOf(state: IpvsState, family: IPFamily): IpvsKernelView {
  const ipsets = new Map<string, { type: string; entries: ReadonlySet<string> }>();
  for (const [name, entries] of state.ipsets) {
    ipsets.set(ipsetName(name, family), { type: ipsetInfo(name).type, entries: new Set(entries) });
  }
  return {
    family,
    virtualServers: state.virtualServers,
    ipsets,
    iptables: state.iptables,
    dummyAddresses: state.bindAddresses,
  };
}

/** A new packet (protocol lower-case). `local`: the node itself sends it. */
export interface IpvsPacket {
  readonly sourceIP: string;
  readonly destIP: string;
  readonly destPort: number;
  readonly protocol: string;
  readonly local: boolean;
}

/** What happened to the packet. */
export interface IpvsTraceResult {
  /** "" (left alone), "ACCEPT" / "DROP" / "REJECT", or the real servers ("ip:port") sorted, joined ", ". */
  readonly output: string;
  readonly masq: boolean;
  /** The virtual server that took the packet, if any. */
  readonly virtualServer: TracedVirtualServer | null;
  /** The rules that matched and the IPVS decisions, for failure messages. */
  readonly matches: string[];
}

interface Rule {
  readonly raw: string;
  readonly words: readonly string[];
}

type Chains = Map<string, Rule[]>;

function parsePayload(payload: string): Map<string, Chains> {
  const tables = new Map<string, Chains>();
  let chains: Chains | null = null;
  for (const line of payload.split("\n")) {
    if (line.startsWith("*")) {
      chains = new Map();
      tables.set(line.slice(1), chains);
    } else if (line.startsWith(":") && chains) {
      chains.set(line.slice(1).split(" ")[0], []);
    } else if (line.startsWith("-A ") && chains) {
      const words = splitWords(line);
      const rules = chains.get(words[1]);
      if (!rules) throw new Error(`ipvs tracer: rule for undeclared chain: ${line}`);
      rules.push({ raw: line, words: words.slice(2) });
    }
  }
  return tables;
}

/** The jump rules of a built-in chain in the order prepending leaves them (last prepended first). */
function builtinJumps(table: string, chain: string): string[] {
  return IPVS_JUMP_CHAINS.filter((j) => j.table === table && j.from === chain).map((j) => j.to).reverse();
}

function sameIP(a: string, b: string): boolean {
  return parseIP(a) !== null && parseIP(a) === parseIP(b);
}

function addressMatches(spec: string, ip: string): boolean {
  return spec.includes("/") ? cidrContains(spec, ip) : sameIP(spec, ip);
}

/** Per-packet state while walking the rules. */
interface Walk {
  src: string;
  dst: string;
  dport: number;
  proto: string;
  mark: number;
  /** Set once IPVS took the packet: the virtual server's address/port/protocol (for `-m ipvs`). */
  vaddr: { ip: string; port: number; proto: string } | null;
  matches: string[];
}

type Verdict = "ACCEPT" | "DROP" | "REJECT" | "MASQUERADE" | null;

class IpvsTracer {
  readonly #tables: Map<string, Chains>;
  readonly #local: Set<string>;
  constructor(readonly view: IpvsKernelView, localAddresses: readonly string[]) {
    this.#tables = parsePayload(view.iptables);
    this.#local = new Set(
      [...localAddresses, ...view.dummyAddresses, "127.0.0.1", "::1"].map((a) => parseIP(a) ?? a),
    );
  }

  isLocal(ip: string): boolean {
    const p = parseIP(ip);
    return p !== null && (this.#local.has(p) || p.startsWith("127."));
  }

  #inSet(name: string, dirs: string, w: Walk): boolean {
    const set = this.view.ipsets.get(name);
    if (!set) throw new Error(`ipvs tracer: rule names missing set ${name}`);
    const d = dirs.split(",");
    const pick = (i: number) => (d[i] === "src" ? w.src : w.dst);
    switch (set.type) {
      case "bitmap:port":
        return set.entries.has(String(w.dport));
      case "hash:ip":
        return [...set.entries].some((e) => sameIP(e, pick(0)));
      case "hash:ip,port":
        return [...set.entries].some((e) => {
          const [ip, pp] = e.split(",");
          return sameIP(ip, pick(0)) && pp === `${w.proto}:${w.dport}`;
        });
      case "hash:ip,port,ip":
      case "hash:ip,port,net":
        return [...set.entries].some((e) => {
          const [ip, pp, third] = e.split(",");
          return sameIP(ip, pick(0)) && pp === `${w.proto}:${w.dport}` && addressMatches(third, pick(2));
        });
      default:
        throw new Error(`ipvs tracer: set type ${set.type} of ${name}`);
    }
  }

  /** Whether every match of a rule holds; the index where the target starts is returned via `target`. */
  #matches(words: readonly string[], w: Walk): { ok: boolean; target: readonly string[] } {
    let i = 0;
    let neg = false;
    const fail = { ok: false, target: [] as string[] };
    while (i < words.length) {
      const word = words[i];
      if (word === "!") {
        neg = true;
        i++;
        continue;
      }
      const arg = words[i + 1];
      let hit: boolean | null = null;
      let used = 2;
      switch (word) {
        case "-j":
          return { ok: true, target: words.slice(i + 1) };
        case "-m":
          used = 2;
          break; // the module's options follow
        case "-s":
          hit = addressMatches(arg, w.src);
          break;
        case "-d":
          hit = addressMatches(arg, w.dst);
          break;
        case "-p":
          hit = arg === w.proto;
          break;
        case "--comment":
          break;
        case "--match-set":
          hit = this.#inSet(arg, words[i + 2], w);
          used = 3;
          break;
        case "--dst-type":
          hit = arg === "LOCAL" && this.isLocal(w.dst);
          break;
        case "--src-type":
          hit = arg === "LOCAL" && this.isLocal(w.src);
          break;
        case "--physdev-is-in":
          hit = false; // no bridge port in these topologies
          used = 1;
          break;
        case "--mark": {
          const [value, mask] = arg.split("/").map((s) => Number.parseInt(s, 16));
          hit = (w.mark & (mask ?? 0xffffffff)) === value;
          break;
        }
        case "--ctstate":
          hit = arg.split(",").includes("NEW");
          break;
        case "--vaddr":
          hit = w.vaddr !== null && sameIP(w.vaddr.ip, arg);
          break;
        case "--vproto":
          hit = w.vaddr !== null && w.vaddr.proto === arg.toLowerCase();
          break;
        case "--vport":
          hit = w.vaddr !== null && String(w.vaddr.port) === arg;
          break;
        default:
          throw new Error(`ipvs tracer: unknown rule word ${word} in ${words.join(" ")}`);
      }
      if (hit !== null && hit === neg) return fail;
      neg = false;
      i += used;
    }
    return { ok: false, target: [] }; // no target: nothing to do
  }

  /** Runs a chain; returns a terminal verdict (ACCEPT ends the table's traversal) or null at its end. */
  runChain(table: string, chain: string, w: Walk, depth = 0): Verdict {
    if (depth > 32) throw new Error(`ipvs tracer: jump loop at ${table}/${chain}`);
    const rules = this.#tables.get(table)?.get(chain);
    if (!rules) return null;
    for (const r of rules) {
      const m = this.#matches(r.words, w);
      if (!m.ok) continue;
      w.matches.push(`${table}: ${r.raw}`);
      const [target, ...opts] = m.target;
      switch (target) {
        case "RETURN":
          return null;
        case "ACCEPT":
        case "DROP":
        case "REJECT":
        case "MASQUERADE":
          return target;
        case "MARK": {
          const v = Number.parseInt(opts[1], 16);
          if (opts[0] === "--or-mark") w.mark |= v;
          else if (opts[0] === "--xor-mark") w.mark ^= v;
          else throw new Error(`ipvs tracer: MARK ${opts.join(" ")}`);
          continue;
        }
        default: {
          const v = this.runChain(table, target, w, depth + 1);
          if (v !== null) return v;
        }
      }
    }
    return null;
  }

  /** A built-in chain: our jump rules into the proxier's chains (policy ACCEPT). */
  runBuiltin(table: string, chain: string, w: Walk): Verdict {
    for (const to of builtinJumps(table, chain)) {
      const v = this.runChain(table, to, w);
      if (v !== null) return v;
    }
    return null;
  }

  lookup(w: Walk): TracedVirtualServer | null {
    const key = virtualServerKey({
      address: parseIP(w.dst) ?? w.dst,
      port: w.dport,
      protocol: w.proto.toUpperCase(),
    });
    return this.view.virtualServers.get(key) ?? null;
  }
}

/**
 * Follows one new packet through the kernel state (see the file comment). `localAddresses`: the node's
 * addresses on its other interfaces (kube-ipvs0's are added from the view).
 */
export function traceIpvsPacket(
  view: IpvsKernelView,
  packet: IpvsPacket,
  localAddresses: readonly string[],
): IpvsTraceResult {
  const t = new IpvsTracer(view, localAddresses);
  const w: Walk = {
    src: packet.sourceIP,
    dst: packet.destIP,
    dport: packet.destPort,
    proto: packet.protocol,
    mark: 0,
    vaddr: null,
    matches: [],
  };
  const done = (output: string, vs: TracedVirtualServer | null = null, masq = false): IpvsTraceResult => ({
    output,
    masq,
    virtualServer: vs,
    matches: w.matches,
  });
  const filterVerdict = (chain: string): string | null => {
    const v = t.runBuiltin("filter", chain, w);
    return v === "DROP" || v === "REJECT" ? v : v === "ACCEPT" ? "ACCEPT" : null;
  };

  t.runBuiltin("nat", packet.local ? "OUTPUT" : "PREROUTING", w);
  if (!packet.local) {
    if (!t.isLocal(w.dst)) return done(""); // routed past the node's services
    const v = filterVerdict("INPUT");
    if (v === "DROP" || v === "REJECT") return done(v);
    const vs = t.lookup(w);
    if (vs === null) return done(v === "ACCEPT" ? "ACCEPT" : "");
    return schedule(t, w, vs, done);
  }
  const vs = t.lookup(w);
  if (vs === null) {
    const out = filterVerdict("OUTPUT");
    if (out === "DROP" || out === "REJECT") return done(out);
    if (!t.isLocal(w.dst)) return done("");
    return done(filterVerdict("INPUT") ?? "");
  }
  w.vaddr = { ip: vs.address, port: vs.port, proto: vs.protocol.toLowerCase() };
  w.matches.push(`ipvs: LOCAL_OUT ${virtualServerKey(vs)}`);
  const out = filterVerdict("OUTPUT");
  if (out === "DROP" || out === "REJECT") return done(out, vs);
  return schedule(t, w, vs, done);
}

/** IPVS scheduling (weight-0 real servers are never chosen) and nat POSTROUTING for each candidate. */
function schedule(
  t: IpvsTracer,
  w: Walk,
  vs: TracedVirtualServer,
  done: (output: string, vs: TracedVirtualServer | null, masq?: boolean) => IpvsTraceResult,
): IpvsTraceResult {
  const usable = vs.realServers.filter((rs) => rs.weight > 0);
  w.matches.push(
    `ipvs: ${virtualServerKey(vs)} -> ${usable.map((rs) => joinHostPort(rs.address, rs.port)).join(" ")}`,
  );
  if (usable.length === 0) return done("REJECT", vs); // ip_vs_leave: ICMP port unreachable
  let masq = false;
  for (const rs of usable) {
    const after: Walk = { ...w, dst: rs.address, dport: rs.port, matches: [] };
    if (t.runBuiltin("nat", "POSTROUTING", after) === "MASQUERADE") masq = true;
    w.matches.push(...after.matches);
  }
  const eps = usable.map((rs) => joinHostPort(rs.address, rs.port)).sort();
  return done(eps.join(", "), vs, masq);
}
