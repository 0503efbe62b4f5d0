/**
 * A packet tracer over a FakeNftTable, after upstream's nftablesTracer (pkg/proxy/nftables/helpers_test.go):
 * it recognises the pieces of rules the nftables renderer writes (no general nft parser), follows jumps,
 * gotos and verdict maps, and reports where a new connection ends up (endpoints, DROP or REJECT) and
 * whether it was marked for masquerading. Chains run as v1.34 hooks order them: filter-prerouting-pre-dnat,
 * nat-prerouting, then (after DNAT) filter-forward and filter-input.
 *
 * Beyond upstream's tracer: ClientIP affinity lookups (`ip saddr @affinity-...`) never match and
 * `update @affinity-...` is a no-op, since a traced packet is always a client's first connection.
 */
import assert from "node:assert/strict";
import { cidrContains, parseCIDR, parseIP } from "../../lib/net/ip.ts";
import type { FakeNftTable } from "./nft_fake.ts";

const destAddrRegexp = /^ip6* daddr (!= )?(\S+)/;
const destAddrLookupRegexp = /^ip6* daddr (!= )?\{([^}]*)\}/;
const destAddrLocalRegexp = /^fib daddr type local/;
const destPortRegexp = /^(tcp|udp|sctp) dport (\d+)/;
const destIPOnlyLookupRegexp = /^ip6* daddr @(\S+)/;
const destDispatchRegexp = /^ip6* daddr \. meta l4proto \. th dport vmap @(\S+)$/;
const destPortDispatchRegexp = /^meta l4proto \. th dport vmap @(\S+)$/;
const sourceAddrRegexp = /^ip6* saddr (!= )?(\S+)/;
const sourceAddrLookupRegexp = /^ip6* saddr (!= )?\{([^}]*)\}/;
const sourceAffinityRegexp = /^ip6* saddr @affinity-\S+ goto \S+$/;
const affinityUpdateRegexp = /^update @affinity-\S+ \{ ip6* saddr \}$/;
const sourceAddrLocalRegexp = /^fib saddr type local/;
const endpointVMAPRegexp = /^numgen random mod \d+ vmap \{(.*)\}$/;
const endpointVMapEntryRegexp = /\d+ : goto (\S+)/g;
const masqueradeRegexp = /^jump mark-for-masquerade$/;
const jumpRegexp = /^(jump|goto) (\S+)$/;
const returnRegexp = /^return$/;
const verdictRegexp = /^(drop|reject)$/;
const dnatRegexp = /^meta l4proto (tcp|udp|sctp) dnat to (\S+)$/;
const ignoredRegexp = / *comment "[^"]*"$|^ct state new/g;

/** Result of tracing one packet. */
export interface NftTrace {
  /** Rules that matched, for failure messages. */
  readonly matches: readonly string[];
  /** Endpoints ("ip:port", comma-separated) or "DROP" / "REJECT"; "" when nothing happened. */
  readonly output: string;
  readonly masq: boolean;
  /** Whether the connection's source was added to a ClientIP affinity set (`update @affinity-...`). */
  readonly affinity: boolean;
}

class Tracer {
  readonly matches: string[] = [];
  readonly outputs: string[] = [];
  markMasq = false;
  affinity = false;

  constructor(readonly nft: FakeNftTable, readonly nodeIPs: ReadonlySet<string>) {}

  addressMatches(ip: string, wantMatch: boolean, ruleAddress: string): boolean {
    const bytes = parseIP(ip);
    assert.ok(bytes !== null, `bad IP in test case: ${ip}`);
    let match: boolean;
    if (ruleAddress.includes("/")) {
      const cidr = parseCIDR(ruleAddress);
      assert.ok(cidr !== null, `bad CIDR in rules: ${ruleAddress}`);
      match = cidrContains(cidr, bytes);
    } else {
      const other = parseIP(ruleAddress);
      assert.ok(other !== null, `bad IP in rules: ${ruleAddress}`);
      match = other.length === bytes.length && other.every((b, i) => b === bytes[i]);
    }
    return match === wantMatch;
  }

  /** Upstream addressMatchesSet: every address of the anonymous set must (not) match. */
  addressMatchesSet(ip: string, wantMatch: boolean, set: string): boolean {
    return set.replaceAll(" ", "").split(",").every((a) => this.addressMatches(ip, true, a) === wantMatch);
  }

  elements(name: string): { key: string[]; value: string[] }[] {
    const els = this.nft.elements(name);
    assert.ok(els !== null, `unknown set or map ${name}`);
    return els;
  }

  /** Runs a chain; true when a terminal verdict was reached. */
  runChain(chain: string, src: string, proto: string, dst: string, dport: string): boolean {
    const rules = this.nft.rules(chain);
    assert.ok(rules !== null, `unknown chain ${JSON.stringify(chain)}`);
    for (const ruleText of rules) {
      let rule = ruleText.replace(ignoredRegexp, "");
      while (rule !== "") {
        rule = rule.trimStart();
        const consume = (re: RegExp): RegExpExecArray => {
          const m = re.exec(rule)!;
          rule = rule.slice(m[0].length);
          return m;
        };
        if (destIPOnlyLookupRegexp.test(rule)) {
          const [, set] = consume(destIPOnlyLookupRegexp);
          if (!this.elements(set).some((e) => e.key[0] === dst)) rule = "";
        } else if (destDispatchRegexp.test(rule)) {
          const [, map] = consume(destDispatchRegexp);
          const el = this.elements(map).find((e) =>
            e.key[0] === dst && e.key[1] === proto && e.key[2] === dport
          );
          rule = el === undefined ? "" : el.value[0];
        } else if (destPortDispatchRegexp.test(rule)) {
          const [, map] = consume(destPortDispatchRegexp);
          const el = this.elements(map).find((e) => e.key[0] === proto && e.key[1] === dport);
          rule = el === undefined ? "" : el.value[0];
        } else if (destAddrLookupRegexp.test(rule)) {
          const [, neg, set] = consume(destAddrLookupRegexp);
          if (!this.addressMatchesSet(dst, neg !== "!= ", set)) rule = "";
        } else if (destAddrRegexp.test(rule)) {
          const [, neg, addr] = consume(destAddrRegexp);
          if (!this.addressMatches(dst, neg !== "!= ", addr)) rule = "";
        } else if (destAddrLocalRegexp.test(rule)) {
          consume(destAddrLocalRegexp);
          if (!this.nodeIPs.has(dst)) rule = "";
        } else if (destPortRegexp.test(rule)) {
          const [, p, port] = consume(destPortRegexp);
          if (p !== proto || port !== dport) rule = "";
        } else if (sourceAffinityRegexp.test(rule)) {
          rule = ""; // affinity sets are empty for a first connection
        } else if (affinityUpdateRegexp.test(rule)) {
          consume(affinityUpdateRegexp);
          this.matches.push(ruleText);
          this.affinity = true;
        } else if (sourceAddrLookupRegexp.test(rule)) {
          const [, neg, set] = consume(sourceAddrLookupRegexp);
          if (!this.addressMatchesSet(src, neg !== "!= ", set)) rule = "";
        } else if (sourceAddrRegexp.test(rule)) {
          const [, neg, addr] = consume(sourceAddrRegexp);
          if (!this.addressMatches(src, neg !== "!= ", addr)) rule = "";
        } else if (sourceAddrLocalRegexp.test(rule)) {
          consume(sourceAddrLocalRegexp);
          if (!this.nodeIPs.has(src)) rule = "";
        } else if (masqueradeRegexp.test(rule)) {
          // The jump itself stands for the mark; mark-for-masquerade/masquerading are not traced.
          consume(masqueradeRegexp);
          this.matches.push(ruleText);
          this.markMasq = true;
        } else if (jumpRegexp.test(rule)) {
          const [, action, dest] = consume(jumpRegexp);
          this.matches.push(ruleText);
          if (this.runChain(dest, src, proto, dst, dport)) return true;
          if (action === "goto") return false;
        } else if (verdictRegexp.test(rule)) {
          const [, verdict] = consume(verdictRegexp);
          this.matches.push(ruleText);
          this.outputs.push(verdict.toUpperCase());
          return true;
        } else if (returnRegexp.test(rule)) {
          this.matches.push(ruleText);
          return false;
        } else if (dnatRegexp.test(rule)) {
          const [, , endpoint] = consume(dnatRegexp);
          this.matches.push(ruleText);
          this.outputs.push(endpoint);
          return true;
        } else if (endpointVMAPRegexp.test(rule)) {
          // Random endpoint choice: follow every endpoint, collecting all of them.
          const [, elements] = consume(endpointVMAPRegexp);
          for (const e of elements.matchAll(endpointVMapEntryRegexp)) {
            this.matches.push(ruleText);
            this.runChain(e[1], src, proto, dst, dport);
          }
          return true;
        } else {
          assert.fail(`unmatched rule in ${chain}: ${ruleText}`);
        }
      }
    }
    return false;
  }
}

/** Endpoint host of "ip:port" / "[ip6]:port". */
function hostOf(endpoint: string): string {
  return endpoint.startsWith("[")
    ? endpoint.slice(1, endpoint.indexOf("]"))
    : endpoint.slice(0, endpoint.lastIndexOf(":"));
}

/**
 * Traces a new connection from `src` to `dst`:`dport` (`proto` lower-case) through the table; `nodeIPs`
 * are the addresses `fib ... type local` treats as local.
 */
export function traceNftPacket(
  nft: FakeNftTable,
  src: string,
  proto: string,
  dst: string,
  dport: string,
  nodeIPs: readonly string[],
): NftTrace {
  const t = new Tracer(nft, new Set(nodeIPs));
  const done = () => ({
    matches: t.matches,
    output: t.outputs.join(", "),
    masq: t.markMasq,
    affinity: t.affinity,
  });
  if (t.runChain("filter-prerouting-pre-dnat", src, proto, dst, dport)) return done();
  t.runChain("nat-prerouting", src, proto, dst, dport);
  // DNAT happens after prerouting: later chains see the (first) endpoint as destination.
  const dnatDst = t.outputs.length > 0 ? hostOf(t.outputs[0]) : dst;
  if (t.runChain("filter-forward", src, proto, dnatDst, dport)) return done();
  t.runChain("filter-input", src, proto, dnatDst, dport);
  return done();
}

/** One packet-flow expectation (upstream packetFlowTest). */
export interface NftPacketFlow {
  readonly name: string;
  readonly sourceIP: string;
  /** "TCP" when not given. */
  readonly protocol?: "TCP" | "UDP" | "SCTP";
  readonly destIP: string;
  readonly destPort: number;
  readonly output: string;
  readonly masq?: boolean;
}

/** Traces every flow; returns one failure message per mismatch (empty when all match). */
export function checkNftPacketFlows(
  nft: FakeNftTable,
  nodeIPs: readonly string[],
  flows: readonly NftPacketFlow[],
): string[] {
  const failures: string[] = [];
  for (const f of flows) {
    const proto = (f.protocol ?? "TCP").toLowerCase();
    const r = traceNftPacket(nft, f.sourceIP, proto, f.destIP, String(f.destPort), nodeIPs);
    const masq = f.masq ?? false;
    if (r.output !== f.output || r.masq !== masq) {
      failures.push(
        `${f.name}: ${f.sourceIP} -> ${f.destIP}:${f.destPort}: expected ${
          JSON.stringify(f.output)
        } masq=${masq}, ` +
          `got ${JSON.stringify(r.output)} masq=${r.masq}\n  by matching:\n    ${r.matches.join("\n    ")}`,
      );
    }
  }
  return failures;
}
