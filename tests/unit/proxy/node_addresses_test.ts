/**
 * Local addresses for --nodeport-addresses: every address of an interface that is up, with or without
 * carrier (as upstream's net.InterfaceAddrs), read from the kernel's own lists.
 */
import { after, describe, it } from "node:test";
import process from "node:process";
import assert from "node:assert/strict";
import { localAddresses, parseFibTrieLocal, parseIfInet6 } from "../../../lib/proxy/node_addresses.ts";
import { IP_BIN, NetnsScope, netnsUnavailableReason, runOk } from "../../support/netns.ts";

const FIB_TRIE = `Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     +-- 192.0.2.0/24 2 0 2
        +-- 192.0.2.0/29 2 0 2
           |-- 192.0.2.0
              /24 link UNICAST
           |-- 192.0.2.5
              /32 host LOCAL
        |-- 192.0.2.255
           /32 link BROADCAST
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 10.244.1.1
        /32 host LOCAL
     |-- 198.51.100.0
        /24 link UNICAST
        /32 host LOCAL
`;

const IF_INET6 = `00000000000000000000000000000001 01 80 10 80       lo
fe800000000000001c612cfffe32ceca 03 40 20 80     eth0
20010db8000000000000000000000005 03 40 00 80     eth0
not a line
`;

describe("parsers of the kernel's address lists", () => {
  it("fib_trie: /32 host LOCAL leaves only (no ranges, broadcasts or subnets)", () => {
    assert.deepEqual(parseFibTrieLocal(FIB_TRIE).sort(), [
      "10.244.1.1",
      "127.0.0.1",
      "192.0.2.5",
      "198.51.100.0",
    ]);
    assert.deepEqual(parseFibTrieLocal(""), []);
  });

  it("if_inet6: every address, formatted like Go", () => {
    assert.deepEqual(parseIfInet6(IF_INET6), ["::1", "fe80::1c61:2cff:fe32:ceca", "2001:db8::5"]);
  });
});

describe("localAddresses", () => {
  it("lists this namespace's addresses of each family (loopback included, sorted)", () => {
    const v4 = localAddresses("IPv4");
    assert.ok(v4.includes("127.0.0.1"), `127.0.0.1 in ${v4}`);
    assert.deepEqual(v4, [...v4].sort());
    assert.ok(v4.every((a) => !a.includes(":")));
    assert.ok(localAddresses("IPv6").every((a) => a.includes(":")));
  });

  const skip = netnsUnavailableReason();
  describe("an interface without carrier, in a network namespace", { skip: skip || undefined }, () => {
    const scope = new NetnsScope("npa");
    after(() => scope.cleanup());

    it("keeps its address (the runtime's networkInterfaces() leaves it out)", async () => {
      const ns = await scope.create("node");
      // A veth whose peer is down: the interface is UP but NO-CARRIER, as a NIC that is still coming up.
      const peer = await scope.create("peer");
      await runOk([
        IP_BIN,
        "-n",
        ns.name,
        "link",
        "add",
        "v0",
        "type",
        "veth",
        "peer",
        "v1",
        "netns",
        peer.name,
      ]);
      await runOk([IP_BIN, "-n", ns.name, "addr", "add", "192.0.2.5/24", "dev", "v0"]);
      await runOk([IP_BIN, "-n", ns.name, "link", "set", "v0", "up"]);
      const link = await ns.execOk([IP_BIN, "-o", "link", "show", "v0"]);
      assert.match(link, /NO-CARRIER/);
      const fib = await ns.execOk(["cat", "/proc/net/fib_trie"]);
      assert.ok(parseFibTrieLocal(fib).includes("192.0.2.5"), `192.0.2.5 in ${parseFibTrieLocal(fib)}`);
      // localAddresses itself, run by this runtime inside the namespace.
      const module = new URL("../../../lib/proxy/node_addresses.ts", import.meta.url).href;
      const script = `import { localAddresses } from ${JSON.stringify(module)}; ` +
        `console.log(JSON.stringify(localAddresses("IPv4")));`;
      const argv = "Deno" in globalThis
        ? [process.execPath, "eval", "--ext=ts", script]
        : [process.execPath, "-e", script];
      const listed = JSON.parse(await ns.execOk(argv)) as string[];
      assert.deepEqual(listed, ["127.0.0.1", "192.0.2.5"]);
    });
  });
});
