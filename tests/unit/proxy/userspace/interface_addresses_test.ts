import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  createServiceAddressHost,
  IpServiceAddressHost,
  LO_ADDRESS_LABEL,
  removeLoServiceAddresses,
  USERSPACE_INTERFACE,
} from "../../../../lib/proxy/userspace/interface_addresses.ts";
import type { Sysctl } from "../../../../lib/host/sysctl.ts";

function fakeIp(existing = "") {
  const calls: string[] = [];
  const ip = (args: readonly string[]) => {
    const line = args.join(" ");
    calls.push(line);
    if (line.startsWith("-4 -o addr show dev")) return Promise.resolve(existing);
    if (line === "-4 -o addr show") {
      return Promise.resolve(
        "2: eth0    inet 192.168.50.2/24 brd 192.168.50.255 scope global eth0\\\n" +
          "1: lo    inet 10.96.0.1/32 scope global lo\\\n" +
          "3: v1    inet 169.254.0.1/16 scope link v1\\\n",
      );
    }
    if (line.includes("addr add 10.96.0.9/32")) {
      return Promise.reject(new Error("ip addr add: Error: ipv4: Address already assigned."));
    }
    return Promise.resolve("");
  };
  return { calls, ip };
}

describe("IpServiceAddressHost", () => {
  it("adds missing addresses, removes stale ones it owns, tolerates already-assigned", async () => {
    const f = fakeIp();
    const h = new IpServiceAddressHost("lo", f.ip);
    await h.sync("IPv4", new Set(["10.96.0.1", "10.96.0.9"]));
    await h.sync("IPv4", new Set(["10.96.0.9"]));
    assert.deepEqual(f.calls, [
      "-4 -o addr show dev lo",
      "addr add 10.96.0.1/32 dev lo label lo:kubeus",
      "addr add 10.96.0.9/32 dev lo label lo:kubeus",
      "addr del 10.96.0.1/32 dev lo",
    ]);
  });

  it("adopts the dummy interface's /32s of an earlier run, so a restart removes stale ones", async () => {
    const f = fakeIp("5: kube-userspace0    inet 10.96.0.7/32 scope global kube-userspace0\\\n");
    const h = new IpServiceAddressHost(USERSPACE_INTERFACE, f.ip);
    await h.sync("IPv4", new Set());
    assert.ok(f.calls.includes(`addr del 10.96.0.7/32 dev ${USERSPACE_INTERFACE}`), f.calls.join("\n"));
  });

  it("node addresses: every interface, no link-scope, not the service addresses it added", async () => {
    const f = fakeIp();
    const h = new IpServiceAddressHost("lo", f.ip);
    await h.sync("IPv4", new Set(["10.96.0.1"]));
    assert.deepEqual(await h.nodeAddresses("IPv4"), ["192.168.50.2"]);
  });

  it("falls back to lo when the dummy cannot be created", async () => {
    const warnings: string[] = [];
    const ip = (args: readonly string[]) =>
      args[0] === "link" && args[1] === "add"
        ? Promise.reject(new Error("Error: Unknown device type."))
        : args.includes("show")
        ? Promise.resolve("")
        : Promise.resolve("");
    const sysctl: Sysctl = { get: () => Promise.resolve("0"), set: () => Promise.resolve() };
    const h = await createServiceAddressHost((m) => warnings.push(m), ip, sysctl);
    assert.equal(h.device, "lo");
    assert.match(warnings[0], /cannot create dummy interface kube-userspace0.*using lo/);
  });

  // lo's own addresses and an operator's beside the mode's: only the marked ones are the mode's.
  const LO_V4 = "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n" +
    "1: lo    inet 10.1.2.3/32 scope global lo\\       valid_lft forever preferred_lft forever\n" +
    `1: lo    inet 10.96.0.5/32 scope global ${LO_ADDRESS_LABEL}\\       valid_lft forever preferred_lft forever\n`;
  const LO_V6 = "1: lo    inet6 fd00::6/128 scope global \\       valid_lft forever preferred_lft forever\n" +
    "1: lo    inet6 fd00::5/128 scope global nodad noprefixroute \\       valid_lft forever preferred_lft forever\n" +
    "1: lo    inet6 ::1/128 scope host \\       valid_lft forever preferred_lft forever\n";
  const loIp = (calls: string[]) => (args: readonly string[]) => {
    const line = args.join(" ");
    calls.push(line);
    if (line === "-4 -o addr show dev lo") return Promise.resolve(LO_V4);
    if (line === "-6 -o addr show dev lo") return Promise.resolve(LO_V6);
    return Promise.resolve("");
  };

  it("on lo, marks its addresses (IPv4 label, IPv6 nodad noprefixroute) and adopts only marked ones", async () => {
    const calls: string[] = [];
    const h = new IpServiceAddressHost("lo", loIp(calls));
    await h.sync("IPv4", new Set(["10.96.0.7"]));
    await h.sync("IPv6", new Set(["fd00::7"]));
    assert.deepEqual(calls.filter((c) => !c.includes("show")), [
      `addr add 10.96.0.7/32 dev lo label ${LO_ADDRESS_LABEL}`,
      "addr del 10.96.0.5/32 dev lo",
      "addr add fd00::7/128 dev lo nodad noprefixroute",
      "addr del fd00::5/128 dev lo",
    ]);
  });

  it("cleanup and mode switch remove the marked lo addresses and nothing else of lo", async () => {
    const calls: string[] = [];
    await removeLoServiceAddresses(loIp(calls));
    assert.deepEqual(calls.filter((c) => !c.includes("show")), [
      "addr del 10.96.0.5/32 dev lo",
      "addr del fd00::5/128 dev lo",
    ]);
  });

  it("missing: an address deleted by an operator is reported once and added again by the next sync", async () => {
    let present = "5: kube-userspace0    inet 10.96.0.1/32 scope global kube-userspace0\\\n";
    const calls: string[] = [];
    const ip = (args: readonly string[]) => {
      const line = args.join(" ");
      calls.push(line);
      return Promise.resolve(line.startsWith("-4 -o addr show dev") ? present : "");
    };
    const h = new IpServiceAddressHost(USERSPACE_INTERFACE, ip);
    await h.sync("IPv4", new Set(["10.96.0.1", "10.96.0.2"]));
    present += "5: kube-userspace0    inet 10.96.0.2/32 scope global kube-userspace0\\\n";
    assert.deepEqual(await h.missing("IPv4"), []);
    present = "5: kube-userspace0    inet 10.96.0.2/32 scope global kube-userspace0\\\n";
    assert.deepEqual(await h.missing("IPv4"), ["10.96.0.1"]);
    calls.length = 0;
    await h.sync("IPv4", new Set(["10.96.0.1", "10.96.0.2"]));
    assert.deepEqual(calls, [`addr add 10.96.0.1/32 dev ${USERSPACE_INTERFACE}`]);
  });
});
