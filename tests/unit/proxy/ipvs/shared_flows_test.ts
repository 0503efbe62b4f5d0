/**
 * The backend-neutral packet-flow tables (tests/support/flows) run against IPVS mode, two ways:
 *  - the pure IPVS model (lib/proxy/ipvs/state.ts): each table's state is traced as computed;
 *  - the IPVS provider (lib/proxy/ipvs/backend.ts) writing into a simulated kernel
 *    (tests/support/ipvs_sim_kernel.ts): a full sync, then the `then` steps once as partial syncs (deltas
 *    against the last state: graceful termination, deletions) and once as full syncs (deltas against what
 *    the kernel reads back), and the packets traced through what the writers left.
 * Each packet is followed by the IPVS tracer (tests/support/ipvs_tracer.ts) over the virtual servers,
 * ipsets, iptables payload and kube-ipvs0 addresses. Flows whose outcome legitimately differs in upstream's
 * IPVS mode are skipped by IPVS_MODE_SKIPS, each with its reason; a skipped flow is still traced and must
 * give IPVS mode's own outcome. No expectation changes.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { EndpointInfo, IPFamily, ServicePortInfo } from "../../../../lib/proxy/types.ts";
import { servicePortKey } from "../../../../lib/proxy/types.ts";
import { newNodePortAddresses } from "../../../../lib/proxy/nodeport_addresses.ts";
import { newDetectLocalByCIDR, newNoOpLocalDetector } from "../../../../lib/proxy/iptables/local_detector.ts";
import { computeIpvsState } from "../../../../lib/proxy/ipvs/state.ts";
import { type IpvsKernelView, kernelViewOf, traceIpvsPacket } from "../../../support/ipvs_tracer.ts";
import { SimulatedIpvsKernel } from "../../../support/ipvs_sim_kernel.ts";
import { IpvsBackend } from "../../../../lib/proxy/ipvs/backend.ts";
import { ServicePortMap } from "../../../../lib/proxy/service_change_tracker.ts";
import { EndpointsMap } from "../../../../lib/proxy/endpoints_change_tracker.ts";
import { detectLocalByCIDR, NO_LOCAL_DETECTION } from "../../../../lib/proxy/local_detect.ts";
import type { ProxyState } from "../../../../lib/proxy/provider.ts";
import { makeEndpoint } from "../../../support/tracer.ts";
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
} from "../../../support/flows/index.ts";
import { flowServicePorts } from "../../../support/flows/service_ports.ts";

/** What the tracer reports, in the tables' terms. */
interface Observed {
  readonly output: string;
  readonly masq: boolean;
}

/**
 * A flow IPVS mode handles differently from the tables' (iptables-derived) expectation. The flow is not
 * counted as run; what IPVS mode does instead (`ipvs`, from the flow) is still traced and checked.
 */
interface ModeSkip {
  readonly reason: string;
  readonly ipvs: (f: Flow) => Observed;
  readonly applies: (table: FlowTable, flow: Flow, live: readonly FlowService[]) => boolean;
}

const expectsDNAT = (f: Flow) => "dnat" in f.expect;
const sortedEps = (f: Flow) => ("dnat" in f.expect ? [...f.expect.dnat].sort().join(", ") : "");

/** Flows upstream's IPVS proxier handles differently, and why (pkg/proxy/ipvs/proxier.go at v1.34). */
export const IPVS_MODE_SKIPS: readonly ModeSkip[] = [
  {
    reason: "IPVS mode has no NodePorts on localhost: virtual servers are made for the node-port addresses " +
      "without loopback (upstream skips them); the packet is left alone",
    ipvs: () => ({ output: "", masq: false }),
    applies: (_t, f) => f.from.kind === "localhost" && expectsDNAT(f),
  },
  {
    reason: "IPVS mode applies loadBalancerSourceRanges to packets entering the node (filter INPUT); the " +
      "node's own connection to an LB IP is balanced at LOCAL_OUT, and only one sent from the LB IP itself " +
      "is dropped (KUBE-IPVS-OUT-FILTER): sent from the node's address it is delivered, masqueraded",
    ipvs: (f) => ({ output: endpointsFor(f, false).join(", "), masq: true }),
    applies: (_t, f, live) =>
      f.from.kind === "node" && "verdict" in f.expect && f.expect.verdict === "drop" &&
      live.some((s) => (s.loadBalancerIPs ?? []).includes(f.to.ip)),
  },
  {
    reason: "IPVS mode has no externalTrafficPolicy short-circuit for pods or the node: their packet to a " +
      "NodePort, externalIP or LB IP of an eTP=Local Service reaches that address's virtual server, whose " +
      "real servers are the local endpoints, unmasqueraded (the *-LOCAL sets RETURN before KUBE-MARK-MASQ)",
    ipvs: (f) => ({ output: endpointsFor(f, true).join(", "), masq: false }),
    applies: (t, f) =>
      (f.from.kind === "pod" || f.from.kind === "node") && expectsDNAT(f) &&
      externalOfLocalPolicy(t, f) && endpointsFor(f, true).length > 0 &&
      sortedEps(f) !== endpointsFor(f, true).join(", "),
  },
  {
    reason: "IPVS mode falls back to the cluster endpoints when an eTP=Local Service has no local endpoint " +
      "(upstream #97081, so local pods keep access): an external packet is delivered, unmasqueraded, to a " +
      "remote endpoint (whose reply does not come back through the node); iptables mode drops it",
    ipvs: (f) => ({ output: endpointsFor(f, false).join(", "), masq: false }),
    applies: (t, f) =>
      f.from.kind === "external" && "verdict" in f.expect && f.expect.verdict === "drop" &&
      externalOfLocalPolicy(t, f) && endpointsFor(f, true).length === 0 && endpointsFor(f, false).length > 0,
  },
  {
    reason:
      "IPVS mode cannot drop at a virtual server: an iTP=Local Service without local endpoints has one " +
      "with no real servers, and IPVS answers ICMP port unreachable (the kernel's ip_vs_leave)",
    ipvs: () => ({ output: "REJECT", masq: false }),
    applies: (_t, f) =>
      f.from.kind === "pod" && "verdict" in f.expect && f.expect.verdict === "drop" &&
      serviceOf(f)?.internalTrafficPolicy === "Local" && serviceOf(f)?.clusterIP === f.to.ip,
  },
  {
    reason:
      "IPVS mode rejects new connections to a service address on a port (or protocol) no Service port " +
      "uses (KUBE-IPVS-FILTER's REJECT for KUBE-IPVS-IPS); iptables mode leaves them alone",
    ipvs: () => ({ output: "REJECT", masq: false }),
    applies: (_t, f, live) =>
      "verdict" in f.expect && f.expect.verdict === "none" &&
      live.some((svc) =>
        svc.clusterIP === f.to.ip &&
        !svc.ports.some((p) => p.port === f.to.port && (p.protocol ?? "TCP") === (f.to.protocol ?? "TCP"))
      ),
  },
  {
    reason:
      "IPVS mode writes a health-check node port only when the Service's NodePort has a node address: " +
      "with --nodeport-addresses matching loopback only, upstream skips both (the `continue` in " +
      "syncProxyRules), so no rule accepts it and the packet is left to the host's firewall",
    ipvs: () => ({ output: "", masq: false }),
    applies: (t, f) =>
      "verdict" in f.expect && f.expect.verdict === "accept" &&
      (t.config?.nodePortAddresses ?? []).length > 0 &&
      (t.config?.nodePortAddresses ?? []).every((c) => c.startsWith("127.") || c === "::1/128"),
  },
];

/** Whether the flow goes to a NodePort, externalIP or LB IP of an eTP=Local Service. */
function externalOfLocalPolicy(t: FlowTable, f: Flow): boolean {
  const s = serviceOf(f);
  return s !== undefined && s.externalTrafficPolicy === "Local" &&
    ((s.loadBalancerIPs ?? []).includes(f.to.ip) || (s.externalIPs ?? []).includes(f.to.ip) ||
      (nodeAddressesOf(t).includes(f.to.ip) && s.ports.some((p) => p.nodePort === f.to.port)));
}

/** The flow currently being checked, for the skips' outcome functions (set by checkFlows). */
let current: { live: readonly FlowService[]; table: FlowTable } | null = null;

function serviceOf(f: Flow): FlowService | undefined {
  const { live, table } = current!;
  return live.find((s) =>
    s.clusterIP === f.to.ip || (s.loadBalancerIPs ?? []).includes(f.to.ip) ||
    (s.externalIPs ?? []).includes(f.to.ip) ||
    (nodeAddressesOf(table).includes(f.to.ip) && s.ports.some((p) => p.nodePort === f.to.port))
  );
}

function portOf(s: FlowService, f: Flow) {
  return s.ports.find((p) => p.port === f.to.port || p.nodePort === f.to.port)!;
}

function join(ip: string, port: number) {
  return ip.includes(":") ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/**
 * The endpoints ("ip:port", sorted) the flow's Service port would use: ready ones, else the serving
 * terminating ones (upstream CategorizeEndpoints); only this node's when `local`.
 */
function endpointsFor(f: Flow, local: boolean): string[] {
  const s = serviceOf(f);
  if (!s) return [];
  const p = portOf(s, f);
  const mine = s.endpoints.filter((e) => !local || e.node === THIS_NODE);
  const ready = mine.filter((e) => e.ready !== false);
  const use = ready.length > 0 ? ready : mine.filter((e) => e.serving !== false && e.terminating === true);
  return use.map((e) => join(e.ip, p.targetPort ?? p.port)).sort();
}

function familyOf(table: FlowTable): IPFamily {
  return table.config?.family ?? "IPv4";
}

/** The node's addresses of the table's family (its other interfaces; kube-ipvs0 comes from the state). */
function nodeAddressesOf(table: FlowTable): string[] {
  const v6 = familyOf(table) === "IPv6";
  return [...NODE_IPS, "127.0.0.1", "::1"].filter((a) => a.includes(":") === v6);
}

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

/** The service ports and endpoints of the Services live in a table. */
function clusterOf(live: readonly FlowService[], endpointsOf: Map<string, readonly FlowEndpoint[]>) {
  const services: ServicePortInfo[] = [];
  const endpoints = new Map<string, EndpointInfo[]>();
  for (const svc of live) {
    for (const [sp, targetPort] of flowServicePorts(svc)) {
      services.push(sp);
      endpoints.set(
        servicePortKey(sp.name),
        endpointInfos(endpointsOf.get(flowServiceKey(svc))!, targetPort),
      );
    }
  }
  return { services, endpoints };
}

/** The model's state for the Services live in a table, with its settings (as lib/proxy/ipvs/mode.ts builds them). */
function stateOf(
  table: FlowTable,
  live: readonly FlowService[],
  endpointsOf: Map<string, readonly FlowEndpoint[]>,
) {
  const c = table.config ?? {};
  const family = familyOf(table);
  const { services, endpoints } = clusterOf(live, endpointsOf);
  return computeIpvsState({
    family,
    services,
    endpoints,
    nodeName: THIS_NODE,
    nodeLabels: {},
    nodeIP: family === "IPv6" ? NODE_IPV6 : NODE_IP,
    nodeAddresses: nodeAddressesOf(table),
    nodePortAddresses: newNodePortAddresses(family, c.nodePortAddresses ?? []),
    scheduler: "",
    masqueradeAll: c.masqueradeAll ?? false,
    masqueradeBit: 14,
    localDetector: c.localDetector === "none"
      ? newNoOpLocalDetector()
      : newDetectLocalByCIDR(CLUSTER_CIDR[family]),
    randomFully: true,
    preferSameTrafficDistribution: true,
  });
}

/** The IPVS provider of a table's settings over a simulated kernel. */
function providerOf(table: FlowTable): { backend: IpvsBackend; kernel: SimulatedIpvsKernel } {
  const c = table.config ?? {};
  const family = familyOf(table);
  const kernel = new SimulatedIpvsKernel(family, nodeAddressesOf(table));
  const backend = new IpvsBackend({
    family,
    nodeName: THIS_NODE,
    host: kernel.host(),
    iptables: kernel.iptablesRunner(),
    scheduler: "",
    excludeCIDRs: [],
    masqueradeAll: c.masqueradeAll ?? false,
    masqueradeBit: 14,
    nodePortAddresses: newNodePortAddresses(family, c.nodePortAddresses ?? []),
    primaryNodeIP: () => (family === "IPv6" ? NODE_IPV6 : NODE_IP),
    preferSameTrafficDistribution: true,
    log: { info: () => {}, warn: () => {}, debug: () => {} },
  });
  return { backend, kernel };
}

/** The ProxyState the sync loop would hand the provider. */
function proxyStateOf(
  table: FlowTable,
  live: readonly FlowService[],
  endpointsOf: Map<string, readonly FlowEndpoint[]>,
): ProxyState {
  const family = familyOf(table);
  const { services, endpoints } = clusterOf(live, endpointsOf);
  const spm = new ServicePortMap();
  const epm = new EndpointsMap();
  for (const sp of services) spm.set(servicePortKey(sp.name), sp);
  for (const [k, eps] of endpoints) if (eps.length > 0) epm.set(k, eps);
  return {
    family,
    services: spm,
    endpoints: epm,
    changedServices: new Set(services.map((sp) => servicePortKey(sp.name))),
    nodeLabels: {},
    localDetection: table.config?.localDetector === "none"
      ? NO_LOCAL_DETECTION
      : detectLocalByCIDR(CLUSTER_CIDR[family]),
  };
}

function expected(f: Flow): Observed {
  const e = f.expect;
  if ("dnat" in e) return { output: sortedEps(f), masq: e.source === "masqueraded" };
  const verdicts = { reject: "REJECT", drop: "DROP", none: "", accept: "ACCEPT" } as const;
  return { output: verdicts[e.verdict], masq: false };
}

const LOCAL_SENDERS = new Set(["node", "localhost", "lb-ip"]);

const counts = { run: 0, skipped: 0 };
const skipsUsed = new Map<string, number>();

function checkFlows(
  table: FlowTable,
  live: readonly FlowService[],
  view: IpvsKernelView,
  flows: readonly Flow[],
  count: boolean,
): string[] {
  const failures: string[] = [];
  current = { live, table };
  for (const f of flows) {
    const skip = IPVS_MODE_SKIPS.find((s) => s.applies(table, f, live));
    if (count && skip === undefined) counts.run++;
    else if (count && skip !== undefined) {
      counts.skipped++;
      skipsUsed.set(skip.reason, (skipsUsed.get(skip.reason) ?? 0) + 1);
    }
    const r = traceIpvsPacket(view, {
      sourceIP: f.from.ip,
      destIP: f.to.ip,
      destPort: f.to.port,
      protocol: (f.to.protocol ?? "TCP").toLowerCase(),
      local: LOCAL_SENDERS.has(f.from.kind),
    }, nodeAddressesOf(table));
    const want = skip?.ipvs(f) ?? expected(f);
    const problems: string[] = [];
    if (r.output !== want.output || r.masq !== want.masq) {
      problems.push(
        `expected ${skip === undefined ? "" : "(IPVS mode skip) "}${
          JSON.stringify(want.output)
        } masq=${want.masq}, got ${JSON.stringify(r.output)} masq=${r.masq}`,
      );
    }
    // A sticky flow needs a persistent virtual server (IPVS persistence keeps a client on one real server).
    if (
      skip === undefined && f.sticky === true && !(r.virtualServer && r.virtualServer.persistentTimeout > 0)
    ) {
      problems.push("the virtual server is not persistent");
    }
    if (problems.length > 0) {
      failures.push(
        `${f.name}: ${f.from.ip} -> ${f.to.ip}:${f.to.port}: ${problems.join("; ")}\n  by:\n    ${
          r.matches.join("\n    ")
        }`,
      );
    }
  }
  current = null;
  return failures;
}

/** The table's steps, each with the Services live and their endpoints after it. */
function* steps(table: FlowTable) {
  let live = [...table.services];
  const eps = new Map(table.services.map((s) => [flowServiceKey(s), s.endpoints]));
  yield { name: "first sync", live, eps, flows: table.flows };
  for (const step of table.then ?? []) {
    for (const key of step.deleteServices ?? []) {
      if (!live.some((s) => flowServiceKey(s) === key)) throw new Error(`${table.name}: no Service ${key}`);
      live = live.filter((s) => flowServiceKey(s) !== key);
    }
    for (const [key, list] of Object.entries(step.setEndpoints ?? {})) {
      if (!eps.has(key)) throw new Error(`${table.name}: step ${step.name}: no Service ${key}`);
      eps.set(key, list);
    }
    const liveNow = live.map((s) => ({ ...s, endpoints: eps.get(flowServiceKey(s))! }));
    yield { name: `step ${step.name}`, live: liveNow, eps: new Map(eps), flows: step.flows };
  }
}

/** The model's state of each step, traced. */
function runTableOnModel(table: FlowTable): void {
  for (const st of steps(table)) {
    const view = kernelViewOf(stateOf(table, st.live, st.eps), familyOf(table));
    assert.deepEqual(checkFlows(table, st.live, view, st.flows, true), [], `${table.name}: ${st.name}`);
  }
}

/** The provider over a simulated kernel: a full sync, then each step as a partial or a full sync. */
async function runTableOnProvider(table: FlowTable, partial: boolean): Promise<void> {
  const { backend, kernel } = providerOf(table);
  let first = true;
  for (const st of steps(table)) {
    await backend.sync(proxyStateOf(table, st.live, st.eps), { full: first || !partial });
    first = false;
    assert.deepEqual(
      checkFlows(table, st.live, kernel.view(), st.flows, false),
      [],
      `${table.name}: ${st.name} (provider, ${partial ? "partial" : "full"} syncs)`,
    );
  }
  assert.equal(await backend.checkDrift(), null, `${table.name}: the kernel drifted from the last sync`);
}

const groups = new Map<string, FlowTable[]>();
for (const t of FLOW_TABLES) groups.set(t.group, [...(groups.get(t.group) ?? []), t]);
describe("shared packet-flow tables, IPVS mode", () => {
  for (const [group, tables] of groups) {
    describe(group, () => {
      for (const t of tables) {
        it(t.name, async () => {
          runTableOnModel(t);
          await runTableOnProvider(t, true);
          await runTableOnProvider(t, false);
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
      `IPVS flow tables: ${FLOW_TABLES.length} tables, ${counts.run} flows run, ${counts.skipped} skipped`,
    );
    for (const [reason, n] of skipsUsed) console.log(`  skipped ${n}: ${reason}`);
    assert.equal(counts.run + counts.skipped, total);
    assert.deepEqual(IPVS_MODE_SKIPS.map((s) => s.reason).filter((r) => !skipsUsed.has(r)), []);
  });
});
