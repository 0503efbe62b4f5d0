/**
 * Real kernel, real traffic: a client namespace talks to ClusterIPs that a "node" namespace DNATs to
 * echo servers in two pod namespaces, using rules written by IptablesRunner.restore (one transaction, then
 * a split plan) after ensureJumpRules. Needs root and `ip netns`; skipped otherwise.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  addRoute,
  enableForwarding,
  type Netns,
  NetnsScope,
  netnsUnavailableReason,
} from "../support/netns.ts";
import { type EchoReply, echoRequest, startEchoServer } from "../support/echo_server.ts";
import { createIptablesRunner, type IptablesRunner, RestoreError } from "../../lib/proxy/iptables/runner.ts";
import { ensureJumpRules } from "../../lib/proxy/iptables/jump_rules.ts";
import { payloadOf, splitRestorePayload } from "../../lib/proxy/iptables/restore_plan.ts";
import { parseIptablesSave } from "../../lib/proxy/iptables/save_parse.ts";

const skip = netnsUnavailableReason();
if (skip !== "") console.log(`SKIP tests/e2e/iptables_traffic_test.ts: ${skip} (needs root and ip netns)`);

const FILTER = [
  "*filter",
  ":KUBE-SERVICES - [0:0]",
  ":KUBE-EXTERNAL-SERVICES - [0:0]",
  ":KUBE-FORWARD - [0:0]",
  ":KUBE-NODEPORTS - [0:0]",
  ":KUBE-PROXY-FIREWALL - [0:0]",
  // A Service without endpoints: REJECT, as upstream writes it.
  '-A KUBE-SERVICES -m comment --comment "ns/empty:http has no endpoints" -m tcp -p tcp -d 10.96.0.12 --dport 80 -j REJECT',
  '-A KUBE-FORWARD -m comment --comment "kubernetes forwarding rules" -m mark --mark 0x4000/0x4000 -j ACCEPT',
  "COMMIT",
];

const NAT_BASE = [
  "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN",
  "-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000",
  '-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully',
  "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000",
];

/** Service A (10.96.0.10 tcp/80 and udp/53) → pod1; optionally B (10.96.0.11, masquerade all) → pod2. */
function payload(opts: { withB: boolean; aTo?: "pod1" | "pod2"; broken?: boolean }): string {
  const aIP = opts.aTo === "pod2" ? "10.244.2.2" : "10.244.1.2";
  const L = [...FILTER, "*nat"];
  const chains = ["KUBE-SERVICES", "KUBE-NODEPORTS", "KUBE-POSTROUTING", "KUBE-MARK-MASQ"];
  chains.push(
    "KUBE-SVC-AAAAAAAAAAAAAAAA",
    "KUBE-SEP-AAAAAAAAAAAAAAA1",
    "KUBE-SVC-AAAAAAAAAAAAAAAU",
    "KUBE-SEP-AAAAAAAAAAAAAAU1",
  );
  if (opts.withB) chains.push("KUBE-SVC-BBBBBBBBBBBBBBBB", "KUBE-SEP-BBBBBBBBBBBBBBB1");
  for (const c of chains) L.push(`:${c} - [0:0]`);
  L.push(...NAT_BASE);
  L.push(
    '-A KUBE-SERVICES -m comment --comment "ns/a:http cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 80 -j KUBE-SVC-AAAAAAAAAAAAAAAA',
  );
  L.push(
    '-A KUBE-SERVICES -m comment --comment "ns/a:dns cluster IP" -m udp -p udp -d 10.96.0.10 --dport 53 -j KUBE-SVC-AAAAAAAAAAAAAAAU',
  );
  if (opts.withB) {
    L.push(
      '-A KUBE-SERVICES -m comment --comment "ns/b:http cluster IP" -m tcp -p tcp -d 10.96.0.11 --dport 80 -j KUBE-SVC-BBBBBBBBBBBBBBBB',
    );
  }
  L.push(
    '-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS',
  );
  // No masquerade rule in A's SVC chain (no local-traffic detector): the pod sees the client's address.
  L.push("-A KUBE-SVC-AAAAAAAAAAAAAAAA -j KUBE-SEP-AAAAAAAAAAAAAAA1");
  L.push(`-A KUBE-SEP-AAAAAAAAAAAAAAA1 -s ${aIP} -j KUBE-MARK-MASQ`);
  L.push(`-A KUBE-SEP-AAAAAAAAAAAAAAA1 -m tcp -p tcp -j DNAT --to-destination ${aIP}:8080`);
  L.push("-A KUBE-SVC-AAAAAAAAAAAAAAAU -j KUBE-SEP-AAAAAAAAAAAAAAU1");
  L.push(`-A KUBE-SEP-AAAAAAAAAAAAAAU1 -m udp -p udp -j DNAT --to-destination ${aIP}:8080`);
  if (opts.withB) {
    // Masquerade everything from outside the pod network (like a Service with externalTrafficPolicy=Cluster).
    L.push("-A KUBE-SVC-BBBBBBBBBBBBBBBB ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ");
    L.push("-A KUBE-SVC-BBBBBBBBBBBBBBBB -j KUBE-SEP-BBBBBBBBBBBBBBB1");
    L.push("-A KUBE-SEP-BBBBBBBBBBBBBBB1 -m tcp -p tcp -j DNAT --to-destination 10.244.2.2:8080");
  }
  if (opts.broken) L.push("-A KUBE-SVC-AAAAAAAAAAAAAAAA -j KUBE-SEP-DOESNOTEXIST0000");
  L.push("COMMIT", "");
  return L.join("\n");
}

function reply(r: unknown): EchoReply {
  assert.equal(typeof r, "object", `expected a reply, got ${JSON.stringify(r)}`);
  assert.ok(r !== null && "id" in (r as object), `expected a reply, got ${JSON.stringify(r)}`);
  return r as EchoReply;
}

describe("iptables e2e: ClusterIP traffic through a node namespace", { skip: skip || undefined }, () => {
  const env = new NetnsScope("ipt");
  let node: Netns;
  let client: Netns;
  let runner: IptablesRunner;

  before(async () => {
    node = await env.create("node");
    client = await env.create("cli");
    const pod1 = await env.create("pod1");
    const pod2 = await env.create("pod2");
    await env.link(client, "eth0", "10.10.0.2/24", node, "vcli", "10.10.0.1/24");
    await env.link(pod1, "eth0", "10.244.1.2/24", node, "vp1", "10.244.1.1/24");
    await env.link(pod2, "eth0", "10.244.2.2/24", node, "vp2", "10.244.2.1/24");
    await addRoute(client, "default", { via: "10.10.0.1" });
    await addRoute(pod1, "default", { via: "10.244.1.1" });
    await addRoute(pod2, "default", { via: "10.244.2.1" });
    await enableForwarding(node);
    // Like a real node, route everything else somewhere: to a sink namespace (no router, drops it), so
    // a Service IP without rules goes nowhere instead of being answered "net unreachable". Its own
    // interface, because a route back out of the incoming one makes the node send an ICMP redirect,
    // which uses up the per-host ICMP budget that REJECT needs.
    const sink = await env.create("sink");
    await env.link(sink, "eth0", "10.99.0.2/24", node, "vsink", "10.99.0.1/24");
    await addRoute(node, "default", { via: "10.99.0.2" });
    await Promise.all([
      startEchoServer(env, pod1, { id: "pod1", port: 8080 }),
      startEchoServer(env, pod2, { id: "pod2", port: 8080 }),
    ]);
    runner = await createIptablesRunner({ family: "IPv4", commandPrefix: node.prefix });
    await ensureJumpRules(runner);
  });
  after(() => env.cleanup());

  it("detects the iptables version inside the namespace", () => {
    assert.match(runner.version.text, /^\d+\.\d+/);
    assert.equal(runner.versionNote, "");
  });

  it("restore (one transaction): TCP to the ClusterIP reaches the endpoint, source preserved", async () => {
    await runner.restore(payload({ withB: false }));
    const [r] = await echoRequest(client, { host: "10.96.0.10", port: 80 });
    assert.equal(reply(r).id, "pod1");
    assert.match(reply(r).remote, /^10\.10\.0\.2:\d+$/);
  });

  it("UDP to the ClusterIP is DNATed too", async () => {
    const [r] = await echoRequest(client, { host: "10.96.0.10", port: 53, proto: "udp" });
    assert.equal(reply(r).id, "pod1");
    assert.equal(reply(r).proto, "udp");
  });

  it("a Service without endpoints is rejected by filter KUBE-SERVICES", async () => {
    const [r] = await echoRequest(client, { host: "10.96.0.12", port: 80 });
    assert.equal(r, "refused");
  });

  it("restore of a split plan adds Service B; KUBE-POSTROUTING masquerades it", async () => {
    const plan = splitRestorePayload(payload({ withB: true }), { maxChainsPerTransaction: 2 });
    assert.ok(plan.transactions.length >= 4);
    await runner.restore(payloadOf(plan));
    const [a] = await echoRequest(client, { host: "10.96.0.10", port: 80 });
    const [b] = await echoRequest(client, { host: "10.96.0.11", port: 80 });
    assert.equal(reply(a).id, "pod1");
    assert.equal(reply(b).id, "pod2");
    assert.match(reply(b).remote, /^10\.244\.2\.1:\d+$/, "masqueraded to the node's address towards pod2");
  });

  it("a failing restore throws RestoreError naming the line and leaves the previous rules in force", async () => {
    const before = await runner.save("nat");
    const bad = payload({ withB: true, aTo: "pod2", broken: true });
    await assert.rejects(runner.restore(bad), (e: unknown) => {
      assert.ok(e instanceof RestoreError, String(e));
      assert.equal(e.family, "IPv4");
      assert.equal(e.lineText, "-A KUBE-SVC-AAAAAAAAAAAAAAAA -j KUBE-SEP-DOESNOTEXIST0000");
      assert.equal(bad.split("\n")[e.line! - 1], e.lineText);
      assert.match(
        e.message,
        /^iptables-restore failed \(IPv4\): line \d+: -A KUBE-SVC-AAAAAAAAAAAAAAAA -j KUBE-SEP-DOESNOTEXIST0000: /,
      );
      assert.equal(e.committedTransactions, 1, "the filter transaction before it was applied");
      return true;
    });
    const afterText = await runner.save("nat");
    const strip = (s: string) =>
      [...parseIptablesSave(s).get("nat")!.chains.values()].map((c) => [c.name, c.rules]);
    assert.deepEqual(strip(afterText), strip(before));
    const [a] = await echoRequest(client, { host: "10.96.0.10", port: 80 });
    assert.equal(reply(a).id, "pod1", "Service A still goes to pod1, not the pod2 of the failed payload");
  });

  it("several connections: every one answered by the single endpoint", async () => {
    const rs = await echoRequest(client, { host: "10.96.0.10", port: 80, count: 5 });
    assert.deepEqual(rs.map((r) => reply(r).id), ["pod1", "pod1", "pod1", "pod1", "pod1"]);
  });
});
