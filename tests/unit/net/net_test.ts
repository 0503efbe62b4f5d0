import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  cidrContains,
  formatCIDR,
  ipFamily,
  joinHostPort,
  parseCIDR,
  parseCIDRLegacy,
  parseIP,
  parseIPLegacy,
  splitHostPort,
} from "../../../lib/net/go_net.ts";

describe("parseIP (Go net.ParseIP, normalised like IP.String)", () => {
  const ok: Array<[string, string]> = [
    ["10.0.0.1", "10.0.0.1"],
    ["0.0.0.0", "0.0.0.0"],
    ["255.255.255.255", "255.255.255.255"],
    ["::", "::"],
    ["::1", "::1"],
    ["FD00::0001", "fd00::1"],
    ["2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"], // first of two equal runs is compressed
    ["2001:db8:0:0:0:0:2:1", "2001:db8::2:1"],
    ["2001:db8::0:1:0:0:0", "2001:db8:0:0:1::"], // longest run wins
    ["2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"], // a single zero group is not compressed
    ["::ffff:1.2.3.4", "1.2.3.4"], // IPv4-mapped prints as IPv4
    ["::ffff:0102:0304", "1.2.3.4"],
    ["::1.2.3.4", "::102:304"],
    ["1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8"],
  ];
  for (const [input, want] of ok) {
    it(`${input} → ${want}`, () => {
      assert.equal(parseIP(input), want);
      assert.equal(parseIPLegacy(input), want);
    });
  }
  const bad = [
    "",
    "1.2.3",
    "1.2.3.4.5",
    "256.1.1.1",
    "1.2.3.-4",
    "a.b.c.d",
    " 1.2.3.4",
    "1.2.3.4 ",
    "1:2:3:4:5:6:7:8:9",
    "1::2::3",
    ":::",
    "fe80::1%eth0",
    "12345::",
    "1.2.3.4::",
    "::1.2.3.4:5",
    "10.0.0.0/8",
  ];
  for (const input of bad) {
    it(`rejects ${JSON.stringify(input)}`, () => {
      assert.equal(parseIP(input), null);
      assert.equal(parseIPLegacy(input), null);
    });
  }
  it("leading zeros: rejected by parseIP, read as decimal by parseIPLegacy", () => {
    assert.equal(parseIP("172.30.0.041"), null);
    assert.equal(parseIPLegacy("172.30.0.041"), "172.30.0.41");
    assert.equal(parseIPLegacy("010.000.000.001"), "10.0.0.1");
    assert.equal(parseIPLegacy("0256.1.1.1"), null);
  });
});

describe("ipFamily", () => {
  it("tells IPv4 from IPv6, mapped addresses count as IPv4", () => {
    assert.equal(ipFamily("10.1.2.3"), 4);
    assert.equal(ipFamily("fd00::1"), 6);
    assert.equal(ipFamily("::ffff:10.1.2.3"), 4);
    assert.equal(ipFamily("172.30.0.041"), 4);
    assert.equal(ipFamily("nope"), null);
  });
});

describe("parseCIDR", () => {
  it("clears host bits and normalises", () => {
    assert.deepEqual(parseCIDR("10.1.2.3/8"), { ip: "10.0.0.0", prefix: 8, family: 4 });
    assert.deepEqual(parseCIDR("FD00:10:244::1/56"), { ip: "fd00:10:244::", prefix: 56, family: 6 });
    assert.deepEqual(parseCIDR("0.0.0.0/0"), { ip: "0.0.0.0", prefix: 0, family: 4 });
    assert.deepEqual(parseCIDR("::/0"), { ip: "::", prefix: 0, family: 6 });
    assert.deepEqual(parseCIDR("1.2.3.4/32"), { ip: "1.2.3.4", prefix: 32, family: 4 });
    assert.equal(formatCIDR(parseCIDR("192.168.7.9/20")!), "192.168.0.0/20");
  });
  it("rejects bad prefixes and addresses", () => {
    for (
      const s of [
        "10.0.0.0",
        "10.0.0.0/33",
        "fd00::/129",
        "10.0.0.0/-1",
        "10.0.0.0/a",
        "/8",
        "10.0.0/8",
        "10.0.0.0/8/8",
      ]
    ) {
      assert.equal(parseCIDR(s), null, s);
    }
  });
  it("leading zeros only with the legacy parser", () => {
    assert.equal(parseCIDR("010.0.0.0/8"), null);
    assert.deepEqual(parseCIDRLegacy("010.0.0.0/8"), { ip: "10.0.0.0", prefix: 8, family: 4 });
  });
});

describe("cidrContains", () => {
  const cases: Array<[string, string, boolean]> = [
    ["10.0.0.0/8", "10.255.1.1", true],
    ["10.0.0.0/8", "11.0.0.1", false],
    ["10.1.2.3/32", "10.1.2.3", true],
    ["10.1.2.3/32", "10.1.2.4", false],
    ["0.0.0.0/0", "203.0.113.9", true],
    ["fd00::/64", "fd00::abcd", true],
    ["fd00::/64", "fd00:0:0:1::1", false],
    ["::/0", "10.0.0.1", false], // no IPv4 address is inside an IPv6 block
    ["0.0.0.0/0", "fd00::1", false],
    ["10.0.0.0/8", "::ffff:10.2.3.4", true], // mapped address counts as IPv4
    ["::ffff:10.0.0.0/104", "10.9.9.9", true], // block of mapped addresses counts as IPv4
    ["::ffff:10.0.0.0/104", "11.0.0.1", false],
    ["172.30.0.0/16", "172.30.0.041", true], // legacy IP syntax
    ["bad", "10.0.0.1", false],
    ["10.0.0.0/8", "bad", false],
  ];
  for (const [cidr, ip, want] of cases) {
    it(`${cidr} ${want ? "contains" : "does not contain"} ${ip}`, () => {
      assert.equal(cidrContains(cidr, ip), want);
    });
  }
  it("accepts a parsed CIDR", () => {
    assert.equal(cidrContains(parseCIDR("192.168.0.0/16")!, "192.168.44.1"), true);
  });
});

describe("host:port", () => {
  it("splitHostPort like Go", () => {
    assert.deepEqual(splitHostPort("0.0.0.0:10256"), { host: "0.0.0.0", port: "10256" });
    assert.deepEqual(splitHostPort("[::]:10256"), { host: "::", port: "10256" });
    assert.deepEqual(splitHostPort(":80"), { host: "", port: "80" });
    assert.deepEqual(splitHostPort("host:"), { host: "host", port: "" });
    assert.equal(splitHostPort("10.0.0.1"), null);
    assert.equal(splitHostPort("::1:80"), null); // too many colons
    assert.equal(splitHostPort("[::1]"), null); // missing port
    assert.equal(splitHostPort("[::1]x:80"), null);
    assert.equal(splitHostPort("a]:80"), null);
  });
  it("joinHostPort brackets IPv6", () => {
    assert.equal(joinHostPort("10.0.0.1", 80), "10.0.0.1:80");
    assert.equal(joinHostPort("::1", "80"), "[::1]:80");
  });
});
