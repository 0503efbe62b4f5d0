/** Local traffic detection fragments of the nftables renderer, and that nft accepts them. */
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { accessSync, constants } from "node:fs";
import { localTrafficMatches } from "../../../../lib/proxy/nftables/render/local_traffic.ts";
import { NetnsScope, netnsUnavailableReason } from "../../../support/netns.ts";
import { FakeNftTable } from "../../../support/nft_fake.ts";
import { nftFakeProxierInput, syncInto } from "../../../support/nft_fixtures.ts";
import { makeEndpoint, makeServicePort, TEST_NODE_NAME } from "../../../support/tracer.ts";

test("each detector mode gives upstream's match and its negation", () => {
  assert.equal(localTrafficMatches({ mode: "None" }), null);
  assert.deepEqual(localTrafficMatches({ mode: "CIDR", cidr: "10.0.0.1/8" }), {
    ifLocal: "ip saddr 10.0.0.0/8",
    ifNotLocal: "ip saddr != 10.0.0.0/8",
  });
  assert.deepEqual(localTrafficMatches({ mode: "CIDR", cidr: "fd00:10::/64" }), {
    ifLocal: "ip6 saddr fd00:10::/64",
    ifNotLocal: "ip6 saddr != fd00:10::/64",
  });
  assert.deepEqual(localTrafficMatches({ mode: "BridgeInterface", interfaceName: "cbr0" }), {
    ifLocal: "iifname cbr0",
    ifNotLocal: "iifname != cbr0",
  });
  assert.deepEqual(localTrafficMatches({ mode: "InterfaceNamePrefix", prefix: "veth" }), {
    ifLocal: "iifname veth*",
    ifNotLocal: "iifname != veth*",
  });
});

test("bad detector data is refused with the field named", () => {
  assert.throws(
    () => localTrafficMatches({ mode: "CIDR", cidr: "10.0.0.0/33" }),
    /invalid cidr "10.0.0.0\/33"/,
  );
  assert.throws(
    () => localTrafficMatches({ mode: "BridgeInterface", interfaceName: "a b" }),
    /invalid interfaceName "a b"/,
  );
  assert.throws(
    () => localTrafficMatches({ mode: "InterfaceNamePrefix", prefix: "x;drop" }),
    /invalid prefix "x;drop"/,
  );
});

const skip = (() => {
  try {
    accessSync("/usr/sbin/nft", constants.X_OK);
  } catch {
    return "/usr/sbin/nft not found";
  }
  return netnsUnavailableReason();
})();
const env = new NetnsScope("nftlocal");
after(() => env.cleanup());

test("nft -c accepts the interface-based detectors' rules", { skip: skip || false }, async () => {
  const ns = await env.create("c");
  const svc = makeServicePort("ns1", "svc1", {
    clusterIP: "172.30.0.41",
    nodePort: 3001,
    externalPolicyLocal: true,
  });
  const cluster = {
    services: [svc],
    endpoints: [[svc, [makeEndpoint("10.180.0.1", 80, { nodeName: TEST_NODE_NAME })]]] as const,
  };
  for (
    const localDetector of [
      { mode: "BridgeInterface", interfaceName: "cbr0" },
      { mode: "InterfaceNamePrefix", prefix: "veth" },
    ] as const
  ) {
    const tx = syncInto(new FakeNftTable("ip", "kube-proxy"), {
      services: cluster.services,
      endpoints: [...cluster.endpoints],
    }, {
      ...nftFakeProxierInput(),
      localDetector,
    }).transaction;
    assert.match(tx, /iifname/);
    const r = await ns.exec(["/usr/sbin/nft", "-c", "-f", "-"], { input: tx, timeoutMs: 30_000 });
    assert.equal(r.code, 0, r.stderr);
  }
});
