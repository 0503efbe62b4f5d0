/**
 * Packet-flow tests of the iptables backend: every backend-neutral table of tests/support/flows (upstream
 * proxier_test.go's flow tables and the scenarios S1-S18) is rendered by renderIptablesRules into the fake
 * kernel and each packet is followed by the tracer (tests/support/tracer.ts); plus the iptables-only
 * checks (KUBE-FIREWALL, the nodeports tail rule, nfacct, the no-local-endpoints counts).
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  newDetectLocalByCIDR,
  newNoOpLocalDetector,
} from "../../../../../lib/proxy/iptables/local_detector.ts";
import {
  checkPacketFlows,
  FakeProxier,
  type FakeProxierOptions,
  makeEndpoint,
  makeServicePort,
  type PacketFlow,
  TEST_NODE_IPS,
  TEST_NODE_NAME,
} from "../../../../support/tracer.ts";
import {
  CLUSTER_CIDR,
  type Flow,
  FLOW_TABLES,
  type FlowEndpoint,
  type FlowService,
  flowServiceKey,
  type FlowTable,
} from "../../../../support/flows/index.ts";
import { flowServicePorts } from "../../../../support/flows/service_ports.ts";

/** Syncs; the sync must apply, and (unless `warnings` is false) warn about nothing. */
function syncOk(p: FakeProxier, warnings = true): void {
  const s = p.sync();
  assert.equal(s.error, null);
  if (warnings) assert.deepEqual(s.result.warnings, []);
}

const S18 = "TestNodePorts (S18): --nodeport-addresses and --iptables-localhost-nodeports";

/** A flow as the tracer states it: the DNAT targets in rule order (sorted), or the verdict's target. */
function toPacketFlow(f: Flow): PacketFlow {
  const e = f.expect;
  const verdicts = { reject: "REJECT", drop: "DROP", accept: "ACCEPT", none: "" } as const;
  return {
    name: f.name,
    sourceIP: f.from.ip,
    destIP: f.to.ip,
    destPort: f.to.port,
    ...(f.to.protocol !== undefined ? { protocol: f.to.protocol.toLowerCase() } : {}),
    output: "dnat" in e ? e.dnat.join(", ") : verdicts[e.verdict],
    masq: "dnat" in e && e.source === "masqueraded",
  };
}

function assertFlows(p: FakeProxier, flows: readonly Flow[]): void {
  assert.deepEqual(checkPacketFlows(p.ipt, TEST_NODE_IPS, flows.map(toPacketFlow)), []);
}

function proxierOptions(table: FlowTable): FakeProxierOptions {
  const c = table.config ?? {};
  const family = c.family ?? "IPv4";
  const o: FakeProxierOptions = {
    family,
    masqueradeAll: c.masqueradeAll ?? false,
    localDetector: c.localDetector === "none"
      ? newNoOpLocalDetector()
      : newDetectLocalByCIDR(CLUSTER_CIDR[family]),
  };
  return {
    ...o,
    ...(c.nodePortAddresses !== undefined ? { nodePortAddresses: c.nodePortAddresses } : {}),
    ...(c.localhostNodePorts !== undefined ? { localhostNodePorts: c.localhostNodePorts } : {}),
  };
}

/** The service ports of a table's Service (one per FlowServicePort). */
function setEndpoints(p: FakeProxier, svc: FlowService, eps: readonly FlowEndpoint[]): void {
  for (const [sp, targetPort] of flowServicePorts(svc)) {
    p.setEndpoints(
      sp,
      eps.map((e) =>
        makeEndpoint(e.ip, targetPort, {
          nodeName: e.node,
          ready: e.ready,
          serving: e.serving,
          terminating: e.terminating,
        })
      ),
    );
  }
}

/**
 * Builds the table's cluster in a FakeProxier and syncs it. (The S18 tables configure odd
 * --nodeport-addresses on purpose: their warnings are expected.)
 */
function loadTable(table: FlowTable): FakeProxier {
  const p = new FakeProxier(proxierOptions(table));
  for (const svc of table.services) {
    for (const [sp] of flowServicePorts(svc)) p.setService(sp);
    setEndpoints(p, svc, svc.endpoints);
  }
  syncOk(p, table.group !== S18);
  return p;
}

/** iptables-only expectations of some tables, checked after the first sync. */
const EXTRA: Readonly<Record<string, (p: FakeProxier, table: FlowTable) => void>> = {
  "TestInternalTrafficPolicy (S17)": (p, table) => {
    const dropped = table.flows.some((f) => "verdict" in f.expect && f.expect.verdict === "drop");
    assert.equal(p.lastSync!.result.noLocalEndpoints.internal, dropped ? 1 : 0);
  },
  [S18]: (p, table) => {
    // KUBE-FIREWALL guards localhost NodePorts: only IPv4 with them enabled and no nodeport-addresses.
    const expectFirewall = table.name === "ipv4, localhost-nodeports enabled";
    const firewall = p.ipt.rules("filter", "KUBE-FIREWALL")?.map((r) => r.raw) ?? [];
    assert.deepEqual(
      firewall,
      expectFirewall
        ? [
          `-A KUBE-FIREWALL -m comment --comment "block incoming localnet connections" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP`,
        ]
        : [],
    );
    assert.equal(p.lastSync!.result.localhostNodePorts, expectFirewall);
  },
};

/** Runs one table: load, check its flows, then each step. */
function runTable(table: FlowTable): void {
  const p = loadTable(table);
  assertFlows(p, table.flows);
  EXTRA[table.group]?.(p, table);
  for (const step of table.then ?? []) {
    for (const key of step.deleteServices ?? []) {
      const [ns, name] = key.split("/");
      p.deleteService(ns, name);
    }
    for (const [key, eps] of Object.entries(step.setEndpoints ?? {})) {
      const svc = table.services.find((s) => flowServiceKey(s) === key);
      if (svc === undefined) throw new Error(`${table.name}: step ${step.name}: no Service ${key}`);
      setEndpoints(p, svc, eps);
    }
    syncOk(p);
    assertFlows(p, step.flows);
  }
}

const groups = new Map<string, FlowTable[]>();
for (const t of FLOW_TABLES) groups.set(t.group, [...(groups.get(t.group) ?? []), t]);
for (const [group, tables] of groups) {
  describe(group, () => {
    for (const t of tables) it(t.name, () => runTable(t));
  });
}

describe("TestNodePorts (S18), iptables rules", () => {
  it("writes the exact nodeports tail rules per mode", () => {
    const tail = (options: FakeProxierOptions) => {
      const p = new FakeProxier(options);
      return p.sync().result.payload.split("\n").filter((l) => l.includes("must be the last rule"));
    };
    const c =
      `-A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain"`;
    assert.deepEqual(tail({}), [`${c} -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS`]);
    assert.deepEqual(tail({ localhostNodePorts: false }), [
      `${c} -m addrtype --dst-type LOCAL ! -d 127.0.0.0/8 -j KUBE-NODEPORTS`,
    ]);
    assert.deepEqual(tail({ family: "IPv6" }), [
      `${c} -m addrtype --dst-type LOCAL ! -d ::1/128 -j KUBE-NODEPORTS`,
    ]);
    assert.deepEqual(tail({ nodePortAddresses: ["192.168.0.0/16"] }), [
      `${c} -d 192.168.0.2 -j KUBE-NODEPORTS`,
      `${c} -d 192.168.1.2 -j KUBE-NODEPORTS`,
      `${c} -d 192.168.99.11 -j KUBE-NODEPORTS`,
    ]);
    // A zero CIDR among others means "all addresses" again.
    assert.deepEqual(tail({ nodePortAddresses: ["192.168.0.0/24", "0.0.0.0/0"] }), [
      `${c} -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS`,
    ]);
    // nodePortAddresses without loopback turn localhost NodePorts (and KUBE-FIREWALL) off, as NewProxier does.
    const p = new FakeProxier({ nodePortAddresses: ["192.168.0.0/24"] });
    const r = p.sync().result;
    assert.equal(r.localhostNodePorts, false);
    assert.ok(!r.payload.includes("KUBE-FIREWALL"));
  });

  it("writes the localhost nfacct NodePort rule only with nfacct and localhost NodePorts", () => {
    const payload = (options: FakeProxierOptions) => {
      const p = new FakeProxier(options);
      const svc = makeServicePort("ns1", "svc1", { clusterIP: "172.30.0.41", nodePort: 3001 });
      p.setService(svc).setEndpoints(svc, [makeEndpoint("10.180.0.1", 80)]);
      return p.sync().result.payload;
    };
    const nfacctRule =
      "-A KUBE-NODEPORTS -m comment --comment ns1/svc1:p80 -m tcp -p tcp -d 127.0.0.0/8 --dport 3001 -m nfacct --nfacct-name localhost_nps_accepted_pkts -j KUBE-EXT-XPGD46QRK7WJZT7O";
    assert.ok(payload({}).includes(nfacctRule));
    assert.ok(
      !payload({ features: { randomFully: false, nfacct: false, dropInvalid: true } }).includes("nfacct"),
    );
    assert.ok(!payload({ localhostNodePorts: false }).includes("localhost_nps_accepted_pkts"));
  });
});

describe("TestNoEndpointsMetric", () => {
  const cases: Array<[string, boolean, boolean, Array<[string, string]>, number, number]> = [
    [
      "iTP=Local with local endpoints",
      true,
      false,
      [["10.0.1.1", TEST_NODE_NAME], ["10.0.1.2", "node1"]],
      0,
      0,
    ],
    [
      "eTP=Local with local endpoints",
      false,
      true,
      [["10.0.1.1", TEST_NODE_NAME], ["10.0.1.2", "node1"]],
      0,
      0,
    ],
    ["both with local endpoints", true, true, [["10.0.1.1", TEST_NODE_NAME], ["10.0.1.2", "node1"]], 0, 0],
    ["iTP=Local without local endpoints", true, false, [["10.0.1.1", "node0"], ["10.0.1.2", "node1"]], 1, 0],
    ["eTP=Local without local endpoints", false, true, [["10.0.1.1", "node0"], ["10.0.1.2", "node1"]], 0, 1],
    ["both without local endpoints", true, true, [["10.0.1.1", "node0"], ["10.0.1.2", "node1"]], 1, 1],
    ["both, no endpoints at all", true, true, [], 0, 0],
  ];
  for (const [name, itp, etp, list, internal, external] of cases) {
    it(name, () => {
      const p = new FakeProxier();
      const svc = makeServicePort("ns1", "svc1", {
        clusterIP: "172.30.1.1",
        port: "",
        nodePort: 123,
        internalPolicyLocal: itp,
        externalPolicyLocal: etp,
      });
      p.setService(svc).setEndpoints(svc, list.map(([ip, node]) => makeEndpoint(ip, 80, { nodeName: node })));
      const s = p.sync();
      assert.equal(s.error, null);
      assert.deepEqual(s.result.noLocalEndpoints, { internal, external });
    });
  }
});
