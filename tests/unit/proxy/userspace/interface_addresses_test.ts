import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  createServiceAddressHost,
  IpServiceAddressHost,
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
      "addr add 10.96.0.1/32 dev lo",
      "addr add 10.96.0.9/32 dev lo",
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
});
