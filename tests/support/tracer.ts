/**
 * Test support for the rule renderer, modelled on upstream's proxier_test.go:
 *  - FakeIptables: an in-memory kernel rule set that applies iptables-restore --noflush payloads
 *    atomically (declared chains are flushed, "-X" refuses referenced chains, jumps need existing chains,
 *    "-D" needs the rule, "-I CHAIN n" needs 1 <= n <= rules + 1) and holds the built-in jump rules;
 *  - tracePacket / checkPacketFlows: upstream's iptablesTracer (follow jumps rule by rule; statistic
 *    rules match and continue so every endpoint is collected; recent/mark/conntrack rules never match);
 *  - fixtures (upstream NewFakeProxier conventions, addresses from tests/support/flows/addresses.ts) and FakeProxier, a tiny sync loop around
 *    renderIptablesRules that tracks changed services and full/partial syncs like upstream;
 *  - golden helpers (upstream goldens use the fake mark 0x4000; dedent; a line diff).
 */
import type { EndpointInfo, IPFamily, Protocol, ServicePortInfo } from "../../lib/proxy/types.ts";
import { servicePortKey } from "../../lib/proxy/types.ts";
import { type ParsedRule, parseRule } from "./iptables_canonical.ts";
import {
  IPTABLES_JUMP_RULES,
  IPTABLES_KUBELET_JUMP_RULES,
  type JumpRule,
  jumpRuleLine,
} from "../../lib/proxy/iptables/jump_rules_table.ts";
import { cidrContains, parseCIDR, parseIP } from "../../lib/net/ip.ts";
import {
  type RenderInput,
  renderIptablesRules,
  type RenderResult,
  type RenderState,
} from "../../lib/proxy/iptables/render/render.ts";
import { type LocalTrafficDetector, newDetectLocalByCIDR } from "../../lib/proxy/iptables/local_detector.ts";
import {
  CLUSTER_CIDR,
  EXTERNAL_CLIENT,
  EXTERNAL_CLIENT_BLOCKED,
  NODE_EXTERNAL_IP,
  NODE_IP,
  NODE_IP_ALT,
  NODE_IPS,
  NODE_IPV6,
  NODE_IPV6_ALT,
  THIS_NODE,
} from "./flows/addresses.ts";

const BUILTIN_CHAINS: Readonly<Record<string, readonly string[]>> = {
  filter: ["INPUT", "FORWARD", "OUTPUT"],
  nat: ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"],
  mangle: ["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"],
};
const BUILTIN_TARGETS = new Set(["ACCEPT", "DROP", "REJECT", "RETURN", "MARK", "DNAT", "SNAT", "MASQUERADE"]);

type Tables = Map<string, Map<string, ParsedRule[]>>;

function cloneTables(t: Tables): Tables {
  const out: Tables = new Map();
  for (const [name, chains] of t) {
    const c = new Map<string, ParsedRule[]>();
    for (const [chain, rules] of chains) c.set(chain, [...rules]);
    out.set(name, c);
  }
  return out;
}

/** An in-memory iptables rule set for one family. */
export class FakeIptables {
  private tables: Tables = new Map();
  /** Number of restore calls that were applied. */
  restores = 0;

  constructor(readonly family: IPFamily = "IPv4") {
    for (const [table, chains] of Object.entries(BUILTIN_CHAINS)) {
      this.tables.set(table, new Map(chains.map((c) => [c, []])));
    }
  }

  /** Chain names of a table (iptables-save's ":CHAIN" lines). */
  chains(table: string): Set<string> {
    return new Set(this.tables.get(table)?.keys() ?? []);
  }

  /** Rules of a chain, or null when the chain does not exist. */
  rules(table: string, chain: string): readonly ParsedRule[] | null {
    return this.tables.get(table)?.get(chain) ?? null;
  }

  /**
   * The whole rule set in a stable text form (iptables-save-like, without counters): tables and chains
   * sorted by name, rules in chain order. Two FakeIptables are equal when their save() texts are.
   */
  save(): string {
    const out: string[] = [];
    for (const table of [...this.tables.keys()].sort()) {
      const chains = this.tables.get(table)!;
      const names = [...chains.keys()].sort();
      out.push(`*${table}`);
      for (const c of names) out.push(`:${c}`);
      for (const c of names) for (const r of chains.get(c)!) out.push(r.raw);
      out.push("COMMIT");
    }
    return out.join("\n") + "\n";
  }

  /** Appends a rule line ("-A CHAIN ...") to an existing chain, as `iptables -A` would. */
  appendRule(table: string, line: string): void {
    const rule = parseRule(line);
    const chains = this.tables.get(table);
    const chain = chains?.get(rule.chain);
    if (chains === undefined || chain === undefined) {
      throw new Error(`iptables: chain ${rule.chain} does not exist`);
    }
    this.checkTarget(chains, rule);
    chain.push(rule);
  }

  /** EnsureRule(Prepend) for each jump rule: creates the target chain, inserts the rule if missing. */
  ensureJumpRules(
    rules: readonly JumpRule[] = [...IPTABLES_JUMP_RULES, ...IPTABLES_KUBELET_JUMP_RULES],
  ): void {
    for (const jr of rules) {
      const chains = this.tables.get(jr.table)!;
      if (!chains.has(jr.toChain)) chains.set(jr.toChain, []);
      const from = chains.get(jr.fromChain)!;
      const rule = parseRule(jumpRuleLine(jr));
      if (!from.some((r) => r.raw === rule.raw)) from.unshift(rule);
    }
  }

  private checkTarget(chains: Map<string, ParsedRule[]>, rule: ParsedRule): void {
    const target = rule.jump?.value;
    if (target !== undefined && !BUILTIN_TARGETS.has(target) && !chains.has(target)) {
      throw new Error(`iptables-restore: -A ${rule.chain}: target chain ${target} does not exist`);
    }
  }

  /**
   * iptables-restore --noflush: applies the payload table by table; all or nothing. Throws with the
   * offending line on failure (nothing is changed then).
   */
  restore(payload: string): void {
    const next = cloneTables(this.tables);
    let chains: Map<string, ParsedRule[]> | null = null;
    let lineNo = 0;
    for (const rawLine of payload.split("\n")) {
      lineNo++;
      const line = rawLine.trim();
      if (line === "" || line.startsWith("#")) continue;
      const fail = (why: string): never => {
        throw new Error(`iptables-restore: line ${lineNo} failed (${why}): ${line}`);
      };
      if (line.startsWith("*")) {
        if (chains !== null) fail("table not committed");
        const name = line.slice(1);
        if (!next.has(name)) next.set(name, new Map());
        chains = next.get(name)!;
      } else if (chains === null) {
        fail("no table");
      } else if (line === "COMMIT") {
        chains = null;
      } else if (line.startsWith(":")) {
        const m = /^:([^ ]+) (\S+) \[\d+:\d+\]$/.exec(line);
        if (m === null) fail("bad chain declaration");
        chains.set(m![1], []); // declare = create or flush
      } else if (line.startsWith("-A ")) {
        const rule = parseRule(line);
        const chain = chains.get(rule.chain);
        if (chain === undefined) fail(`chain ${rule.chain} does not exist`);
        this.checkTarget(chains, rule);
        chain!.push(rule);
      } else if (line.startsWith("-D ")) {
        // Delete by rule text: the first rule written with exactly this text (the renderer's contract;
        // the kernel compares parsed rules, which is the same for our canonical text).
        const rule = parseRule("-A" + line.slice(2));
        const chain = chains.get(rule.chain);
        if (chain === undefined) fail(`chain ${rule.chain} does not exist`);
        const at = chain!.findIndex((r) => r.raw === rule.raw);
        if (at < 0) fail("Bad rule (does a matching rule exist in that chain?)");
        chain!.splice(at, 1);
      } else if (line.startsWith("-I ")) {
        const m = /^-I (\S+)(?: (\d+))? (.*)$/.exec(line);
        if (m === null) fail("bad -I line");
        const rule = parseRule(`-A ${m![1]} ${m![3]}`);
        const chain = chains.get(rule.chain);
        if (chain === undefined) fail(`chain ${rule.chain} does not exist`);
        const position = m![2] === undefined ? 1 : Number(m![2]);
        if (position < 1 || position > chain!.length + 1) fail(`Index of insertion too big: ${position}`);
        this.checkTarget(chains, rule);
        chain!.splice(position - 1, 0, rule);
      } else if (line.startsWith("-X ")) {
        const name = line.slice(3).trim();
        const chain = chains.get(name);
        if (chain === undefined) fail(`chain ${name} does not exist`);
        if (chain!.length > 0) fail(`chain ${name} is not empty`);
        for (const [other, rules] of chains) {
          if (rules.some((r) => r.jump?.value === name)) {
            fail(`chain ${name} is still referenced from ${other}`);
          }
        }
        chains.delete(name);
      } else {
        fail("unknown command");
      }
    }
    if (chains !== null) throw new Error("iptables-restore: missing COMMIT");
    this.tables = next;
    this.restores++;
  }
}

// ---------------------------------------------------------------------------------------------------
// Packet tracer (upstream iptablesTracer).

/** A packet to trace. Protocol lower-case ("tcp"), default tcp. */
export interface Packet {
  readonly sourceIP: string;
  readonly destIP: string;
  readonly destPort: number;
  readonly protocol?: string;
}

/** What happened to a traced packet. */
export interface TraceResult {
  /** The rules that matched, for debugging. */
  readonly matches: string[];
  /** "" (nothing), "ACCEPT" / "DROP" / "REJECT", or the DNAT destinations joined with ", ". */
  readonly output: string;
  /** The packet was marked for masquerading. */
  readonly masq: boolean;
}

function addressMatches(v: { negated: boolean; value: string }, ipStr: string): boolean {
  const ip = parseIP(ipStr);
  if (ip === null) throw new Error(`bad IP in test case: ${ipStr}`);
  let matches: boolean;
  if (v.value.includes("/")) {
    const c = parseCIDR(v.value);
    if (c === null) throw new Error(`bad CIDR in rules: ${v.value}`);
    matches = cidrContains(c, ip);
  } else {
    const other = parseIP(v.value);
    if (other === null) throw new Error(`bad IP in rules: ${v.value}`);
    matches = other.length === ip.length && other.every((b, i) => b === ip[i]);
  }
  return v.negated ? !matches : matches;
}

function valueMatches(v: { negated: boolean; value: string }, cmp: string): boolean {
  return v.negated ? v.value !== cmp : v.value === cmp;
}

class Tracer {
  matches: string[] = [];
  outputs: string[] = [];
  markMasq = false;
  constructor(private ipt: FakeIptables, private localIPs: Set<string>) {}

  private ruleMatches(r: ParsedRule, src: string, proto: string, dst: string, dport: string): boolean {
    if (r.sourceAddress !== null && !addressMatches(r.sourceAddress, src)) return false;
    if (
      r.sourceType !== null && !valueMatches(r.sourceType, this.localIPs.has(src) ? "LOCAL" : "not-matched")
    ) {
      return false;
    }
    if (r.protocol !== null && !valueMatches(r.protocol, proto)) return false;
    if (r.destinationAddress !== null && !addressMatches(r.destinationAddress, dst)) return false;
    if (
      r.destinationType !== null &&
      !valueMatches(r.destinationType, this.localIPs.has(dst) ? "LOCAL" : "not-matched")
    ) {
      return false;
    }
    if (r.destinationPort !== null && !valueMatches(r.destinationPort, dport)) return false;
    // Anything that checks past state/history does not match.
    if (r.affinityCheck || r.markCheck || r.ctStateCheck) return false;
    return true;
  }

  /** Runs a chain; true when a terminal action was hit. */
  runChain(
    table: string,
    chain: string,
    src: string,
    proto: string,
    dst: string,
    dport: string,
    depth = 0,
  ): boolean {
    if (depth > 64) throw new Error(`jump loop through ${table}/${chain}`);
    const rules = this.ipt.rules(table, chain);
    if (rules === null) return false;
    for (const r of rules) {
      if (r.jump === null) continue;
      if (!this.ruleMatches(r, src, proto, dst, dport)) continue;
      this.matches.push(r.raw);
      switch (r.jump.value) {
        case "KUBE-MARK-MASQ":
          this.markMasq = true;
          continue;
        case "ACCEPT":
        case "REJECT":
        case "DROP":
          this.outputs.push(r.jump.value);
          return true;
        case "DNAT":
          this.outputs.push(r.dnatDestination?.value ?? "<no --to-destination>");
          return true;
        default: {
          const terminated = this.runChain(table, r.jump.value, src, proto, dst, dport, depth + 1);
          // A probabilistic jump keeps collecting the following alternatives.
          if (terminated && r.probability === null) return true;
        }
      }
    }
    return false;
  }
}

/**
 * Upstream tracePacket: nat PREROUTING first; then, with the destination rewritten to the first DNAT
 * target, filter KUBE-SERVICES, KUBE-EXTERNAL-SERVICES, KUBE-NODEPORTS and KUBE-PROXY-FIREWALL.
 * `nodeIPs` are treated as LOCAL (with 127.0.0.1 and ::1).
 */
export function tracePacket(ipt: FakeIptables, packet: Packet, nodeIPs: readonly string[]): TraceResult {
  const tracer = new Tracer(ipt, new Set(["127.0.0.1", "::1", ...nodeIPs]));
  const proto = packet.protocol ?? "tcp";
  const dport = String(packet.destPort);
  let dest = packet.destIP;
  tracer.runChain("nat", "PREROUTING", packet.sourceIP, proto, dest, dport);
  if (tracer.outputs.length !== 0) {
    const first = tracer.outputs[0];
    dest = first.startsWith("[") ? first.slice(1, first.indexOf("]")) : first.split(":")[0];
  }
  for (const chain of ["KUBE-SERVICES", "KUBE-EXTERNAL-SERVICES", "KUBE-NODEPORTS", "KUBE-PROXY-FIREWALL"]) {
    tracer.runChain("filter", chain, packet.sourceIP, proto, dest, dport);
  }
  return { matches: tracer.matches, output: tracer.outputs.join(", "), masq: tracer.markMasq };
}

/** One packet-flow expectation (upstream packetFlowTest). */
export interface PacketFlow extends Packet {
  readonly name: string;
  readonly output: string;
  readonly masq?: boolean;
}

/** Upstream runPacketFlowTests: returns one message per failing flow (empty when all pass). */
export function checkPacketFlows(
  ipt: FakeIptables,
  nodeIPs: readonly string[],
  flows: readonly PacketFlow[],
): string[] {
  const failures: string[] = [];
  for (const f of flows) {
    const r = tracePacket(ipt, f, nodeIPs);
    const errs: string[] = [];
    if (r.output !== f.output) {
      errs.push(`wrong output: expected ${JSON.stringify(f.output)} got ${JSON.stringify(r.output)}`);
    }
    if (r.masq !== (f.masq ?? false)) errs.push(`wrong masq: expected ${f.masq ?? false} got ${r.masq}`);
    if (errs.length > 0) {
      failures.push(
        `${JSON.stringify(f.name)} (${f.protocol ?? "tcp"} ${f.sourceIP} -> ${f.destIP}:${f.destPort}): ${
          errs.join("; ")
        }\n  matched:\n    ${r.matches.join("\n    ")}`,
      );
    }
  }
  return failures;
}

// ---------------------------------------------------------------------------------------------------
// Fixtures (upstream NewFakeProxier conventions).

/** Upstream testNodeName. */
export const TEST_NODE_NAME = THIS_NODE;
/** Upstream testNodeIP. */
export const TEST_NODE_IP = NODE_IP;
/** Upstream testNodeIPAlt. */
export const TEST_NODE_IP_ALT = NODE_IP_ALT;
/** Upstream testExternalIP. */
export const TEST_EXTERNAL_IP = NODE_EXTERNAL_IP;
/** Upstream testNodeIPv6. */
export const TEST_NODE_IPV6 = NODE_IPV6;
/** Upstream testNodeIPv6Alt. */
export const TEST_NODE_IPV6_ALT = NODE_IPV6_ALT;
/** Upstream testExternalClient. */
export const TEST_EXTERNAL_CLIENT = EXTERNAL_CLIENT;
/** Upstream testExternalClientBlocked. */
export const TEST_EXTERNAL_CLIENT_BLOCKED = EXTERNAL_CLIENT_BLOCKED;
/** Upstream testNodeIPs: the addresses the tracer treats as LOCAL. */
export const TEST_NODE_IPS: readonly string[] = NODE_IPS;
/** Upstream's fake network interfaces: lo plus eth0. */
export const TEST_INTERFACE_ADDRESSES: readonly string[] = ["127.0.0.1", "::1", ...TEST_NODE_IPS];

/** Options for makeServicePort; everything not given takes the ServicePortInfo zero value. */
export interface ServicePortFixture {
  readonly port?: string;
  readonly protocol?: Protocol;
  readonly clusterIP: string;
  readonly portNumber?: number;
  readonly nodePort?: number;
  readonly externalIPs?: readonly string[];
  readonly loadBalancerVIPs?: readonly string[];
  readonly loadBalancerSourceRanges?: readonly string[];
  readonly stickyMaxAgeSeconds?: number;
  readonly externalPolicyLocal?: boolean;
  readonly internalPolicyLocal?: boolean;
  readonly healthCheckNodePort?: number;
}

/** Builds a ServicePortInfo (default port name "p80", TCP, port 80). */
export function makeServicePort(namespace: string, name: string, f: ServicePortFixture): ServicePortInfo {
  const protocol = f.protocol ?? "TCP";
  return {
    name: { namespace, name, port: f.port ?? "p80", protocol },
    clusterIP: f.clusterIP,
    port: f.portNumber ?? 80,
    protocol,
    nodePort: f.nodePort ?? 0,
    externalIPs: f.externalIPs ?? [],
    loadBalancerVIPs: f.loadBalancerVIPs ?? [],
    loadBalancerSourceRanges: f.loadBalancerSourceRanges ?? [],
    stickyMaxAgeSeconds: f.stickyMaxAgeSeconds ?? 0,
    externalPolicyLocal: f.externalPolicyLocal ?? false,
    internalPolicyLocal: f.internalPolicyLocal ?? false,
    healthCheckNodePort: f.healthCheckNodePort ?? 0,
  };
}

/** Options for makeEndpoint; conditions default as an EndpointSlice with no conditions set (ready). */
export interface EndpointFixture {
  readonly nodeName?: string;
  readonly ready?: boolean;
  readonly serving?: boolean;
  readonly terminating?: boolean;
  readonly zoneHints?: readonly string[] | null;
  readonly nodeHints?: readonly string[] | null;
  readonly zone?: string;
}

/** Builds an EndpointInfo; local when nodeName is TEST_NODE_NAME. */
export function makeEndpoint(ip: string, port: number, f: EndpointFixture = {}): EndpointInfo {
  const nodeName = f.nodeName ?? "";
  return {
    ip,
    port,
    endpoint: ip.includes(":") ? `[${ip}]:${port}` : `${ip}:${port}`,
    isLocal: nodeName === TEST_NODE_NAME,
    ready: f.ready ?? true,
    serving: f.serving ?? true,
    terminating: f.terminating ?? false,
    zoneHints: f.zoneHints ?? null,
    nodeHints: f.nodeHints ?? null,
    nodeName,
    zone: f.zone ?? "",
  };
}

/** Settings of a FakeProxier (RenderInput without the per-sync fields). */
export type FakeProxierOptions = Partial<
  Omit<RenderInput, "services" | "endpoints" | "full" | "changedServices" | "existingNatChains">
>;

/** Upstream NewFakeProxier's settings for a family (pod CIDR detector, mark bit 14, nfacct present). */
export function fakeProxierDefaults(family: IPFamily = "IPv4"): Omit<
  RenderInput,
  "services" | "endpoints" | "full" | "changedServices" | "existingNatChains"
> {
  const detector: LocalTrafficDetector = newDetectLocalByCIDR(CLUSTER_CIDR[family]);
  return {
    family,
    nodeName: TEST_NODE_NAME,
    nodeLabels: {},
    primaryNodeIP: family === "IPv4" ? TEST_NODE_IP : TEST_NODE_IPV6,
    nodeIPs: TEST_INTERFACE_ADDRESSES,
    masqueradeAll: false,
    masqueradeBit: 14,
    localhostNodePorts: true,
    nodePortAddresses: [],
    localDetector: detector,
    features: { randomFully: false, nfacct: true, dropInvalid: true },
  };
}

/** Outcome of one FakeProxier sync. */
export interface FakeSync {
  readonly ok: boolean;
  readonly full: boolean;
  readonly result: RenderResult;
  readonly error: string | null;
}

/**
 * A minimal proxier around the renderer: keeps service ports and endpoints, records which Services
 * changed (by namespace/name, as upstream), renders full or partial syncs, applies them to a FakeIptables,
 * and falls back to a full sync after a failure.
 */
export class FakeProxier {
  readonly ipt: FakeIptables;
  readonly services = new Map<string, ServicePortInfo>();
  readonly endpoints = new Map<string, readonly EndpointInfo[]>();
  readonly changed = new Set<string>();
  settings: ReturnType<typeof fakeProxierDefaults>;
  needFullSync = true;
  /** When false, stale chains are not looked up (upstream's large-cluster throttle). */
  cleanupStaleChains = true;
  lastSync: FakeSync | null = null;
  /** Partial syncs are incremental (the renderer gets the state of the last applied sync). */
  incremental = false;
  /** RenderState of the last applied sync (kept only in incremental mode; dropped after a failure). */
  state: RenderState | null = null;

  constructor(options: FakeProxierOptions = {}) {
    const family = options.family ?? "IPv4";
    this.settings = { ...fakeProxierDefaults(family), ...options };
    this.ipt = new FakeIptables(family);
  }

  /** Adds or replaces a service port. */
  setService(svc: ServicePortInfo): this {
    this.services.set(servicePortKey(svc.name), svc);
    this.changed.add(`${svc.name.namespace}/${svc.name.name}`);
    return this;
  }

  /** Removes every port of a Service. */
  deleteService(namespace: string, name: string): this {
    for (const [key, svc] of this.services) {
      if (svc.name.namespace === namespace && svc.name.name === name) this.services.delete(key);
    }
    this.changed.add(`${namespace}/${name}`);
    return this;
  }

  /** Replaces the endpoints of a service port (sorted by "ip:port", as the endpoint tracker keeps them). */
  setEndpoints(svc: ServicePortInfo, eps: readonly EndpointInfo[]): this {
    const sorted = [...eps].sort((a, b) => (a.endpoint < b.endpoint ? -1 : a.endpoint > b.endpoint ? 1 : 0));
    this.endpoints.set(servicePortKey(svc.name), sorted);
    this.changed.add(`${svc.name.namespace}/${svc.name.name}`);
    return this;
  }

  /** Renders and applies one sync; a failed restore makes the next sync full. */
  sync(forceFull = false): FakeSync {
    const full = forceFull || this.needFullSync;
    const result = renderIptablesRules(
      {
        ...this.settings,
        services: this.services,
        endpoints: this.endpoints,
        full,
        changedServices: new Set(this.changed),
        existingNatChains: this.cleanupStaleChains ? this.ipt.chains("nat") : null,
      },
      this.incremental ? this.state : null,
    );
    this.changed.clear();
    try {
      if (full) this.ipt.ensureJumpRules();
      this.ipt.restore(result.payload);
      this.needFullSync = false;
      this.state = this.incremental ? result.state : null;
      this.lastSync = { ok: true, full, result, error: null };
    } catch (e) {
      this.needFullSync = true;
      this.state = null;
      this.lastSync = { ok: false, full, result, error: (e as Error).message };
    }
    return this.lastSync;
  }
}

// ---------------------------------------------------------------------------------------------------
// Golden comparison (upstream assertIPTablesRulesEqual).

/**
 * Upstream's golden texts come from a fake proxier whose mark is "0x4000"; the real proxier (and this
 * renderer) write Go's %#08x, "0x00004000" (iptables-save shows 0x4000 again). Converts a golden.
 */
export function withRealMark(golden: string): string {
  return golden.replace(/\b0x4000\b/g, "0x00004000");
}

/** Removes the common leading indentation and the leading newline of a template literal. */
export function dedent(text: string): string {
  const lines = text.replace(/^\n/, "").split("\n");
  const indents = lines.filter((l) => l.trim() !== "").map((l) => /^[ \t]*/.exec(l)![0].length);
  const cut = indents.length === 0 ? 0 : Math.min(...indents);
  return lines.map((l) => l.slice(cut)).join("\n");
}

/** A readable line diff of two texts ("-" expected only, "+" actual only), or null when equal. */
export function lineDiff(expected: string, actual: string): string | null {
  if (expected === actual) return null;
  const e = expected.split("\n");
  const a = actual.split("\n");
  const out: string[] = [];
  const max = Math.max(e.length, a.length);
  for (let i = 0; i < max; i++) {
    if (e[i] === a[i]) continue;
    if (e[i] !== undefined) out.push(`- ${e[i]}`);
    if (a[i] !== undefined) out.push(`+ ${a[i]}`);
  }
  return `first difference at line ${e.findIndex((l, i) => l !== a[i]) + 1}:\n${out.slice(0, 40).join("\n")}`;
}
