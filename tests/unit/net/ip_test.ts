/**
 * The one IP core (lib/net/ip.ts): its three syntaxes, the embedded-IPv4 rule, and the helpers that
 * replaced conntrack's URL-based canonical form and node:net's isIP.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  canonicalIP,
  cidrContains,
  formatCIDR,
  formatIP,
  ipVersion,
  parseCIDR,
  parseIP,
  parseIPOfFamily,
} from "../../../lib/net/ip.ts";
import { isIPv4, isIPv6 } from "../../../lib/server/listen.ts";

const text = (b: Uint8Array | null) => (b === null ? null : formatIP(b));

describe("parseIP syntaxes", () => {
  it("strict and go refuse leading zeros in IPv4 octets; legacy reads them as decimal", () => {
    assert.equal(parseIP("172.30.0.041"), null);
    assert.equal(parseIP("172.30.0.041", "go"), null);
    assert.equal(text(parseIP("172.30.0.041", "legacy")), "172.30.0.41");
    assert.equal(text(parseIP("::ffff:010.0.0.1", "legacy")), "::ffff:a00:1");
    assert.equal(parseIP("::ffff:010.0.0.1"), null);
    assert.equal(text(parseIP("0.0.0.0")), "0.0.0.0");
  });

  it("an embedded IPv4 address must end the address (as Go's net.ParseIP)", () => {
    for (const s of ["1.2.3.4::", "1.2.3.4::1", "10:1.2.3.4::", "1.2.3.4::1.2.3.4"]) {
      assert.equal(parseIP(s), null, s);
      assert.equal(parseIPOfFamily(s, true), null, s);
    }
    assert.equal(text(parseIP("::1.2.3.4")), "::102:304");
    assert.equal(text(parseIP("1:2:3:4:5:6:1.2.3.4")), "1:2:3:4:5:6:102:304");
    assert.equal(parseIP("1:2:3:4:5:6:7:1.2.3.4"), null);
  });

  it("IPv6 forms: '::' anywhere once, at least one zero group, at most 8 groups, no zone", () => {
    assert.equal(text(parseIP("::")), "::");
    assert.equal(text(parseIP("1::")), "1::");
    assert.equal(text(parseIP("FD00:0:0::1")), "fd00::1");
    for (
      const s of [
        "1::2::3",
        ":::",
        "1:",
        ":1",
        "1:2:3:4:5:6:7:8::",
        "1:2:3:4:5:6:7:8:9",
        "fe80::1%eth0",
        "12345::",
      ]
    ) {
      assert.equal(parseIP(s), null, s);
    }
  });
});

describe("parseCIDR syntaxes", () => {
  it("a prefix with a leading zero is refused only in strict syntax", () => {
    assert.equal(parseCIDR("10.0.0.0/08"), null);
    assert.equal(formatCIDR(parseCIDR("10.0.0.0/08", "go")!), "10.0.0.0/8");
    assert.equal(formatCIDR(parseCIDR("010.0.0.7/08", "legacy")!), "10.0.0.0/8");
    assert.equal(parseCIDR("010.0.0.7/8", "go"), null);
    assert.equal(parseCIDR("10.0.0.0/33", "legacy"), null);
  });

  it("cidrContains ignores host bits the caller left in the block", () => {
    const ip = parseIP("10.1.2.3")!;
    assert.equal(cidrContains({ bytes: parseIP("10.1.255.255")!, prefix: 16 }, ip), true);
    assert.equal(cidrContains({ bytes: parseIP("10.2.0.0")!, prefix: 16 }, ip), false);
  });
});

describe("canonicalIP and ipVersion", () => {
  it("canonicalIP prints IPv6 as conntrack does and leaves anything else as given", () => {
    assert.equal(canonicalIP("FD00:0:0::1"), "fd00::1");
    assert.equal(canonicalIP("::FFFF:1.2.3.4"), "::ffff:102:304");
    assert.equal(canonicalIP("10.0.0.1"), "10.0.0.1");
    assert.equal(canonicalIP("not:an:address"), "not:an:address");
  });

  it("ipVersion answers like node:net isIP for addresses without a zone", () => {
    assert.equal(ipVersion("10.0.0.1"), 4);
    assert.equal(ipVersion("010.0.0.1"), 0);
    assert.equal(ipVersion("::ffff:1.2.3.4"), 6);
    assert.equal(ipVersion("fd00::1"), 6);
    assert.equal(ipVersion("fd00::1%eth0"), 0);
    assert.equal(ipVersion(""), 0);
  });

  it("the bind-address checks use it", () => {
    assert.equal(isIPv4("10.0.0.1"), true);
    assert.equal(isIPv4("10.0.0.01"), false);
    assert.equal(isIPv6("::"), true);
    assert.equal(isIPv6("[::]"), false);
  });
});
