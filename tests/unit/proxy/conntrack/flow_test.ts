/** The conntrack CLI text format: `conntrack -L` lines captured from conntrack-tools 1.4.7 on kernel 6.x. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  type ConntrackFlow,
  deleteArgs,
  filterMatches,
  listArgs,
  parseConntrackLine,
  parseConntrackOutput,
} from "../../../../lib/proxy/conntrack/flow.ts";

const EXTENDED_V4 =
  "ipv4     2 udp      17 99 src=10.0.0.1 dst=10.96.0.10 sport=40000 dport=53 [UNREPLIED] src=10.244.1.5 dst=10.0.0.1 sport=5353 dport=40000 mark=0 use=1";
const DEFAULT_V4 =
  "udp      17 96 src=10.0.0.2 dst=10.96.0.11 sport=40001 dport=53 [UNREPLIED] src=10.96.0.11 dst=10.0.0.2 sport=53 dport=40001 mark=0 use=1";
const EXTENDED_V6 =
  "ipv6     10 udp      17 99 src=fd00::1 dst=fd00:96::10 sport=40000 dport=53 [UNREPLIED] src=fd00:244::5 dst=fd00::1 sport=53 dport=40000 mark=0 use=1";
// With nf_conntrack_acct=1, a zone and an id: counters follow each tuple.
const WITH_ACCT =
  "ipv4     2 udp      17 29 src=10.0.0.1 dst=10.96.0.10 sport=41000 dport=53 packets=3 bytes=120 src=10.244.1.5 dst=10.0.0.1 sport=5353 dport=41000 packets=3 bytes=150 [ASSURED] mark=0 zone=3 use=1 id=1073945146";
const SCTP =
  "ipv4     2 sctp     132 431999 ESTABLISHED src=10.0.0.1 dst=10.96.0.12 sport=5000 dport=9999 src=10.244.1.9 dst=10.0.0.1 sport=9999 dport=5000 [ASSURED] mark=0 use=1";
const ICMP =
  "ipv4     2 icmp     1 29 src=10.0.0.1 dst=10.96.0.10 type=8 code=0 id=7 src=10.244.1.5 dst=10.0.0.1 type=0 code=0 id=7 mark=0 use=1";

describe("parseConntrackLine", () => {
  it("reads the original and reply tuples of an extended line", () => {
    assert.deepEqual(
      parseConntrackLine(EXTENDED_V4),
      {
        family: "IPv4",
        protocol: "UDP",
        origSrc: "10.0.0.1",
        origDst: "10.96.0.10",
        origSrcPort: 40000,
        origDstPort: 53,
        replySrc: "10.244.1.5",
        replyDst: "10.0.0.1",
        replySrcPort: 5353,
        replyDstPort: 40000,
      } satisfies ConntrackFlow,
    );
  });

  it("reads the default format, inferring the family from the addresses", () => {
    const f = parseConntrackLine(DEFAULT_V4);
    assert.equal(f?.family, "IPv4");
    assert.equal(f?.replySrc, "10.96.0.11", "an entry that was never DNATed replies from the service IP");
    assert.equal(f?.replySrcPort, 53);
  });

  it("reads IPv6, counters, zones, ids and protocol states without confusing tuples", () => {
    const v6 = parseConntrackLine(EXTENDED_V6);
    assert.equal(v6?.family, "IPv6");
    assert.equal(v6?.origDst, "fd00:96::10");
    assert.equal(v6?.replySrc, "fd00:244::5");
    const acct = parseConntrackLine(WITH_ACCT);
    assert.equal(acct?.replySrc, "10.244.1.5");
    assert.equal(acct?.replySrcPort, 5353);
    assert.equal(acct?.replyDstPort, 41000);
    const sctp = parseConntrackLine(SCTP);
    assert.equal(sctp?.protocol, "SCTP");
    assert.equal(sctp?.origDstPort, 9999);
    assert.equal(sctp?.replySrc, "10.244.1.9");
  });

  it("returns null for ICMP, summaries, truncated and inconsistent lines", () => {
    assert.equal(parseConntrackLine(ICMP), null);
    assert.equal(
      parseConntrackLine("conntrack v1.4.7 (conntrack-tools): 2 flow entries have been shown."),
      null,
    );
    assert.equal(parseConntrackLine(""), null);
    assert.equal(parseConntrackLine(EXTENDED_V4.slice(0, 90)), null);
    assert.equal(parseConntrackLine(EXTENDED_V4.replace("sport=5353", "sport=70000")), null);
    assert.equal(
      parseConntrackLine(EXTENDED_V4.replace("ipv4     2", "ipv6     10")),
      null,
      "family mismatch",
    );
    assert.equal(parseConntrackLine(EXTENDED_V4.replace("dst=10.96.0.10", "dst=10.96.0")), null);
  });

  it("parses a whole output, skipping what is not a flow", () => {
    const out = [EXTENDED_V4, ICMP, EXTENDED_V6, "", "garbage"].join("\n");
    assert.deepEqual(parseConntrackOutput(out).map((f) => f.origDst), ["10.96.0.10", "fd00:96::10"]);
  });
});

describe("conntrack arguments", () => {
  it("lists one family and protocol in extended format", () => {
    assert.deepEqual(listArgs("IPv4", "UDP"), ["-L", "-f", "ipv4", "-p", "udp", "-o", "extended"]);
    assert.deepEqual(listArgs("IPv6", "SCTP"), ["-L", "-f", "ipv6", "-p", "sctp", "-o", "extended"]);
  });

  it("renders the service-IP and NodePort filter shapes", () => {
    assert.deepEqual(
      deleteArgs({
        family: "IPv4",
        protocol: "UDP",
        origDst: "10.96.0.10",
        origDstPort: 53,
        replySrc: "10.244.1.5",
        replySrcPort: 5353,
      }),
      [
        "-D",
        "-p",
        "udp",
        "--orig-dst",
        "10.96.0.10",
        "--orig-port-dst",
        "53",
        "--reply-src",
        "10.244.1.5",
        "--reply-port-src",
        "5353",
      ],
    );
    assert.deepEqual(
      deleteArgs({
        family: "IPv6",
        protocol: "UDP",
        origDstPort: 30053,
        replySrc: "fd00::5",
        replySrcPort: 53,
      }),
      [
        "-D",
        "-f",
        "ipv6",
        "-p",
        "udp",
        "--orig-port-dst",
        "30053",
        "--reply-src",
        "fd00::5",
        "--reply-port-src",
        "53",
      ],
    );
  });

  it("refuses filters that would match too much or carry a bad value", () => {
    assert.throws(() => deleteArgs({ family: "IPv4", protocol: "UDP" }), /no match field set/);
    assert.throws(
      () => deleteArgs({ family: "IPv4", protocol: "UDP", origDst: "fd00::1" }),
      /origDst "fd00::1" is not an IPv4 address/,
    );
    assert.throws(
      () => deleteArgs({ family: "IPv4", protocol: "UDP", origDst: "10.0.0.1\n-F" }),
      /is not an IPv4 address/,
    );
    assert.throws(
      () => deleteArgs({ family: "IPv4", protocol: "UDP", origDstPort: 0 }),
      /origDstPort 0 is not a port/,
    );
  });

  it("filterMatches follows conntrack -D semantics", () => {
    const flow = parseConntrackLine(EXTENDED_V4)!;
    assert.equal(
      filterMatches({ family: "IPv4", protocol: "UDP", origDstPort: 53, replySrc: "10.244.1.5" }, flow),
      true,
    );
    assert.equal(filterMatches({ family: "IPv4", protocol: "UDP", replySrcPort: 53 }, flow), false);
    assert.equal(filterMatches({ family: "IPv4", protocol: "TCP", origDstPort: 53 }, flow), false);
    assert.equal(filterMatches({ family: "IPv6", protocol: "UDP", origDstPort: 53 }, flow), false);
  });
});
