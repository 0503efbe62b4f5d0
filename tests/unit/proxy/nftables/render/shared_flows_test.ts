/**
 * The backend-neutral packet-flow tables (tests/support/flows) run against the nftables backend: each
 * table's cluster is rendered by the nftables renderer (as the backend's sync loop calls it: a full sync,
 * then the `then` steps once as partial syncs and once as full syncs) into a fake table, and each packet is followed by the nft
 * tracer (tests/support/nft_tracer.ts). Flows whose outcome legitimately differs in nftables mode upstream
 * are skipped by NFT_MODE_SKIPS, each with its reason; no expectation is changed here.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { EndpointInfo } from "../../../../../lib/proxy/types.ts";
import { newNodePortAddresses } from "../../../../../lib/proxy/nodeport_addresses.ts";
import type { NftRenderInput } from "../../../../../lib/proxy/nftables/render/render.ts";
import { FakeNftProxier } from "../../../../support/nft_fixtures.ts";
import { traceNftPacket } from "../../../../support/nft_tracer.ts";
import { makeEndpoint } from "../../../../support/tracer.ts";
import {
  CLUSTER_CIDR,
  type Flow,
  FLOW_TABLES,
  type FlowEndpoint,
  type FlowService,
  flowServiceKey,
  type FlowTable,
  NODE_IP,
  NODE_IPS,
  NODE_IPV6,
  THIS_NODE,
} from "../../../../support/flows/index.ts";
import { flowServicePorts } from "../../../../support/flows/service_ports.ts";

/** What the tracer reports, in the tables' terms: sorted endpoints or a verdict, and masquerading. */
interface Observed {
  readonly output: string;
  readonly masq: boolean;
}

/**
 * A flow nftables mode handles differently from the tables' (iptables-derived) expectation. The flow is
 * not counted as run; what nftables mode does instead (`nft`) is still traced and checked, so a skip
 * cannot hide a packet the reason does not explain.
 */
interface ModeSkip {
  readonly reason: string;
  readonly nft: Observed;
  /** `live`: the table's Services present in the current state (after the steps so far). */
  readonly applies: (table: FlowTable, flow: Flow, live: readonly FlowService[]) => boolean;
}

/** Whether the flow expects the proxy to deliver the packet. */
const expectsDNAT = (f: Flow) => "dnat" in f.expect;

/** Flows the nftables backend does not run, and why (upstream pkg/proxy/nftables/README.md, proxier.go). */
export const NFT_MODE_SKIPS: readonly ModeSkip[] = [
  {
    reason: "nftables mode does not support NodePorts on localhost (no --iptables-localhost-nodeports " +
      "equivalent; upstream nftables README, 'Differences from iptables'): the packet is left alone",
    nft: { output: "", masq: false },
    applies: (_t, f) => f.from.kind === "localhost" && expectsDNAT(f),
  },
  {
    reason: "nftables mode writes no filter rule accepting the health-check node port (upstream's " +
      "KUBE-NODEPORTS filter chain is iptables-only): the packet is left alone, for the host's firewall",
    nft: { output: "", masq: false },
    applies: (_t, f) => "verdict" in f.expect && f.expect.verdict === "accept",
  },
  {
    reason: "nftables mode rejects new connections to a ClusterIP on a port (or protocol) no Service port " +
      "uses (upstream's cluster-ips-check chain: 'Reject traffic to invalid ports of ClusterIPs'); iptables " +
      "mode leaves them alone",
    nft: { output: "REJECT", masq: false },
    applies: (_t, f, live) =>
      "verdict" in f.expect && f.expect.verdict === "none" &&
      live.some((svc) =>
        svc.clusterIP === f.to.ip &&
        !svc.ports.some((p) => p.port === f.to.port && (p.protocol ?? "TCP") === (f.to.protocol ?? "TCP"))
      ),
  },
];

/** Addresses the tracer's `fib ... type local` treats as the node's own. */
const LOCAL_IPS: readonly string[] = [...NODE_IPS, "127.0.0.1", "::1"];

/** Renderer input for a table's settings, as lib/proxy/nftables/mode.ts and backend.ts build it. */
function renderInput(table: FlowTable): NftRenderInput {
  const c = table.config ?? {};
  const family = c.family ?? "IPv4";
  const v6 = family === "IPv6";
  return {
    family,
    services: [],
    endpoints: new Map(),
    nodeName: THIS_NODE,
    nodeLabels: {},
    nodeIP: v6 ? NODE_IPV6 : NODE_IP,
    nodePortAddresses: newNodePortAddresses(family, c.nodePortAddresses ?? []),
    localAddresses: LOCAL_IPS.filter((a) => a.includes(":") === v6),
    // The backend does not watch ServiceCIDR objects: no "drop unallocated ClusterIPs" rule.
    serviceCIDRs: [],
    masqueradeBit: 14,
    masqueradeAll: c.masqueradeAll ?? false,
    localDetector: c.localDetector === "none"
      ? { mode: "None" }
      : { mode: "CIDR", cidr: CLUSTER_CIDR[family] },
    firstSync: true,
    existingChains: null,
    existingSets: null,
  };
}

/** The service ports of a table's Service (one per FlowServicePort) with their target ports. */
function endpointInfos(eps: readonly FlowEndpoint[], targetPort: number): EndpointInfo[] {
  return eps.map((e) =>
    makeEndpoint(e.ip, targetPort, {
      nodeName: e.node,
      ready: e.ready,
      serving: e.serving,
      terminating: e.terminating,
    })
  );
}

function expected(f: Flow): Observed {
  const e = f.expect;
  if ("dnat" in e) return { output: [...e.dnat].sort().join(", "), masq: e.source === "masqueraded" };
  const verdicts = { reject: "REJECT", drop: "DROP", none: "", accept: "ACCEPT" } as const;
  return { output: verdicts[e.verdict], masq: false };
}

/** Counts over every table, reported by the last test. */
const counts = { run: 0, skipped: 0 };
/** Skipped flows per reason. */
const skipsUsed = new Map<string, number>();

/**
 * Traces `flows`; one failure message per mismatch. A skipped flow is checked against its skip's
 * nftables outcome. `count`: add the flows to `counts` (once per table, not per sync variant).
 */
function checkFlows(
  p: FakeNftProxier,
  table: FlowTable,
  live: readonly FlowService[],
  flows: readonly Flow[],
  count: boolean,
): string[] {
  const failures: string[] = [];
  for (const f of flows) {
    const skip = NFT_MODE_SKIPS.find((s) => s.applies(table, f, live));
    if (count) {
      if (skip === undefined) counts.run++;
      else counts.skipped++;
    }
    if (count && skip !== undefined) skipsUsed.set(skip.reason, (skipsUsed.get(skip.reason) ?? 0) + 1);
    const proto = (f.to.protocol ?? "TCP").toLowerCase();
    const r = traceNftPacket(p.nft, f.from.ip, proto, f.to.ip, String(f.to.port), LOCAL_IPS);
    const got: Observed = {
      output: r.output.split(", ").sort().join(", "),
      masq: r.masq,
    };
    const want = skip?.nft ?? expected(f);
    const problems: string[] = [];
    if (got.output !== want.output || got.masq !== want.masq) {
      problems.push(
        `expected ${skip === undefined ? "" : "(nftables mode skip) "}${
          JSON.stringify(want.output)
        } masq=${want.masq}, got ${JSON.stringify(got.output)} masq=${got.masq}`,
      );
    }
    // A sticky flow must record the client in the service's affinity set.
    if (skip === undefined && f.sticky === true && !r.affinity) {
      problems.push("no affinity set recorded the client");
    }
    if (problems.length > 0) {
      failures.push(
        `${f.name}: ${f.from.ip} -> ${f.to.ip}:${f.to.port}: ${problems.join("; ")}\n  by matching:\n    ${
          r.matches.join("\n    ")
        }`,
      );
    }
  }
  return failures;
}

/**
 * Runs one table: a full sync and its flows, then each step as a sync: partial (as the backend's sync loop
 * does between full syncs) or full.
 */
function runTable(table: FlowTable, partial: boolean): void {
  const count = partial;
  const p = new FakeNftProxier(renderInput(table), partial);
  for (const svc of table.services) {
    for (const [sp, targetPort] of flowServicePorts(svc)) {
      p.setService(sp);
      p.setEndpoints(sp, endpointInfos(svc.endpoints, targetPort));
    }
  }
  p.sync();
  let live = [...table.services];
  assert.deepEqual(checkFlows(p, table, live, table.flows, count), [], `${table.name}: first sync`);
  for (const step of table.then ?? []) {
    for (const key of step.deleteServices ?? []) {
      const svc = table.services.find((s) => flowServiceKey(s) === key);
      if (svc === undefined) throw new Error(`${table.name}: step ${step.name}: no Service ${key}`);
      for (const [sp] of flowServicePorts(svc)) p.deleteService(sp);
      live = live.filter((s) => s !== svc);
    }
    for (const [key, eps] of Object.entries(step.setEndpoints ?? {})) {
      const svc = table.services.find((s) => flowServiceKey(s) === key);
      if (svc === undefined) throw new Error(`${table.name}: step ${step.name}: no Service ${key}`);
      for (const [sp, targetPort] of flowServicePorts(svc)) {
        p.setEndpoints(sp, endpointInfos(eps, targetPort));
      }
    }
    p.ageStaleChains();
    p.sync();
    assert.deepEqual(checkFlows(p, table, live, step.flows, count), [], `${table.name}: step ${step.name}`);
  }
}

const groups = new Map<string, FlowTable[]>();
for (const t of FLOW_TABLES) groups.set(t.group, [...(groups.get(t.group) ?? []), t]);
describe("shared packet-flow tables, nftables mode", () => {
  for (const [group, tables] of groups) {
    describe(group, () => {
      for (const t of tables) {
        it(t.name, () => {
          runTable(t, false);
          runTable(t, true);
        });
      }
    });
  }

  it("ran every table, and every mode skip applies to some flow", () => {
    const total = FLOW_TABLES.reduce(
      (n, t) => n + t.flows.length + (t.then ?? []).reduce((m, s) => m + s.flows.length, 0),
      0,
    );
    console.log(
      `nftables flow tables: ${FLOW_TABLES.length} tables, ${counts.run} flows run, ${counts.skipped} skipped`,
    );
    for (const [reason, n] of skipsUsed) console.log(`  skipped ${n}: ${reason}`);
    assert.equal(counts.run + counts.skipped, total);
    assert.deepEqual(NFT_MODE_SKIPS.map((s) => s.reason).filter((r) => !skipsUsed.has(r)), []);
  });
});
