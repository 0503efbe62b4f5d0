/**
 * Runs the backend-neutral flow tables (tests/support/flows) over real traffic in an e2e cluster
 * (tests/support/e2e_cluster.ts): each table's Services and EndpointSlices go into the test apiserver, every
 * flow is sent from a host of the sender's kind, and the echo replies show which endpoint answered and which
 * source address it saw. The tables' addresses are mapped onto the topology:
 *
 * - local endpoints → the first local pods (one pod per distinct address), remote endpoints → addresses of
 *   the remote pod (one per distinct address); every endpoint port is the echo port;
 * - senders: pod → a local pod that is no endpoint; endpoint → that endpoint's pod; node / localhost → the
 *   node namespace; external / external-blocked → the client / denied client;
 * - the node's address → the node IP, its subnet in CIDRs → the node's subnet; Service IPs stay as they are.
 *
 * What the topology cannot express is skipped and reported (IPv6 tables, the node's other addresses, a sender
 * using a load-balancer IP, SCTP, `accept` — a listener on the node, checked by the health-check tests).
 * Outcomes: `dnat` — every reply from an expected endpoint, each of them seen, the source preserved (the
 * sender's address) or masqueraded (the node's address towards that endpoint); `reject` — refused (TCP
 * reset or ICMP unreachable); `drop` — no answer; `none` — never an endpoint's answer.
 */
import type { EndpointSlice, Service } from "../../lib/k8s/objects.ts";
import { E2E_ADDRS as A, E2E_REMOTE_NODE, type E2eCluster, type E2ePod } from "./e2e_cluster.ts";
import { e2eEndpointSlice, e2eService } from "./e2e_objects.ts";
import { pollUntil } from "./e2e_poll.ts";
import { udpRequestSeeingRejects } from "./e2e_udp.ts";
import type { EchoResult } from "./echo_server.ts";
import type { Netns } from "./netns.ts";
import {
  type Flow,
  type FlowEndpoint,
  type FlowService,
  flowServiceKey,
  type FlowTable,
  NODE_IP,
  NODE_IP_ALT,
  NODE_IPV6,
  NODE_IPV6_ALT,
  THIS_NODE,
} from "./flows/index.ts";

/** The node's subnet in the tables' address plan, and in the topology. */
const TABLE_NODE_SUBNET = "192.168.0.0/24";
const E2E_NODE_SUBNET = "192.168.50.0/24";

/** The hosts a table runs on. */
export interface E2eFlowHosts {
  readonly cluster: E2eCluster;
  /** Local pods that serve as endpoints (one per distinct local endpoint address of a table). */
  readonly endpointPods: readonly E2ePod[];
  /** The "pod" sender: a local pod that no table uses as an endpoint. */
  readonly senderPod: E2ePod;
  /** Addresses of the remote pod (one per distinct remote endpoint address of a table). */
  readonly remoteIPs: readonly string[];
}

/** Who answers at a mapped endpoint address, and the node address it sees when masqueraded. */
interface Owner {
  readonly id: string;
  readonly masqueradedAs: string;
}

/** A table mapped onto the topology. */
export interface E2eFlowPlan {
  readonly table: FlowTable;
  /** Table address → topology address (endpoints and the node). */
  readonly ips: ReadonlyMap<string, string>;
  readonly owners: ReadonlyMap<string, Owner>;
}

/** Maps a table onto the hosts, or says why it cannot run there. */
export function planTable(table: FlowTable, hosts: E2eFlowHosts): E2eFlowPlan | string {
  if ((table.config?.family ?? "IPv4") !== "IPv4") return "IPv6 table (the e2e topology is IPv4-only)";
  const ips = new Map<string, string>([[NODE_IP, A.nodeIP]]);
  const owners = new Map<string, Owner>();
  let local = 0;
  let remote = 0;
  const all: FlowEndpoint[] = table.services.flatMap((s) => s.endpoints);
  for (const step of table.then ?? []) all.push(...Object.values(step.setEndpoints ?? {}).flat());
  for (const e of all) {
    if (ips.has(e.ip)) continue;
    if (e.node === THIS_NODE) {
      const pod = hosts.endpointPods[local++];
      if (pod === undefined) return `more than ${hosts.endpointPods.length} local endpoints`;
      ips.set(e.ip, pod.ip);
      owners.set(pod.ip, { id: pod.id, masqueradedAs: A.podGateway });
    } else {
      const ip = hosts.remoteIPs[remote++];
      if (ip === undefined) return `more than ${hosts.remoteIPs.length} remote endpoints`;
      ips.set(e.ip, ip);
      owners.set(ip, { id: hosts.cluster.remotePod.id, masqueradedAs: A.remotePodGateway });
    }
  }
  return { table, ips, owners };
}

const mapIP = (plan: E2eFlowPlan, ip: string) => plan.ips.get(ip) ?? ip;

/** A CIDR of the table in the topology (the node's subnet moves; other ranges stay). */
export function mapCIDR(cidr: string): string {
  return cidr === TABLE_NODE_SUBNET ? E2E_NODE_SUBNET : cidr;
}

/** The Service and EndpointSlice a table's Service becomes. */
export function e2eObjects(
  plan: E2eFlowPlan,
  svc: FlowService,
  eps: readonly FlowEndpoint[],
  hosts: E2eFlowHosts,
): { service: Service; slice: EndpointSlice } {
  const lb = (svc.loadBalancerIPs ?? []).length > 0;
  const nodePorts = svc.ports.some((p) => (p.nodePort ?? 0) !== 0);
  const name = (p: FlowService["ports"][number]) => p.name ?? "p80";
  const service = e2eService({
    name: svc.name,
    namespace: svc.namespace,
    type: lb ? "LoadBalancer" : nodePorts ? "NodePort" : "ClusterIP",
    clusterIP: svc.clusterIP,
    ports: svc.ports.map((p) => ({
      name: name(p),
      port: p.port,
      targetPort: hosts.cluster.echoPort,
      protocol: p.protocol ?? "TCP",
      ...((p.nodePort ?? 0) !== 0 ? { nodePort: p.nodePort } : {}),
    })),
    externalIPs: svc.externalIPs,
    loadBalancerIngress: svc.loadBalancerIPs,
    loadBalancerSourceRanges: svc.loadBalancerSourceRanges?.map(mapCIDR),
    externalTrafficPolicy: svc.externalTrafficPolicy,
    internalTrafficPolicy: svc.internalTrafficPolicy,
    sessionAffinityTimeoutSeconds: svc.sessionAffinitySeconds,
    healthCheckNodePort: svc.healthCheckNodePort,
  });
  const slice = e2eEndpointSlice({
    service: svc.name,
    namespace: svc.namespace,
    ports: svc.ports.map((p) => ({
      name: name(p),
      port: hosts.cluster.echoPort,
      protocol: p.protocol ?? "TCP",
    })),
    endpoints: eps.map((e) => ({
      ip: mapIP(plan, e.ip),
      nodeName: e.node === THIS_NODE ? hosts.cluster.nodeName : E2E_REMOTE_NODE,
      ready: e.ready,
      serving: e.serving,
      terminating: e.terminating,
    })),
  });
  return { service, slice };
}

interface Sender {
  readonly ns: Netns;
  readonly ip: string;
}

function sender(plan: E2eFlowPlan, f: Flow, hosts: E2eFlowHosts): Sender | string {
  const c = hosts.cluster;
  switch (f.from.kind) {
    case "pod":
      return { ns: hosts.senderPod.ns, ip: hosts.senderPod.ip };
    case "endpoint": {
      const ip = mapIP(plan, f.from.ip);
      const pod = c.localPods.find((p) => p.ip === ip);
      return pod === undefined ? `endpoint ${f.from.ip} is no local pod` : { ns: pod.ns, ip };
    }
    case "node":
      return { ns: c.node, ip: A.nodeIP };
    case "localhost":
      return { ns: c.node, ip: "127.0.0.1" };
    case "external":
      return { ns: c.client, ip: A.client };
    case "external-blocked":
      return { ns: c.deniedClient, ip: A.deniedClient };
    case "lb-ip":
      return "no host here sends from a load-balancer IP";
  }
}

/** The node's other addresses: the topology's node has one address. */
const UNMAPPED_NODE_ADDRESSES = new Set([NODE_IP_ALT, NODE_IPV6, NODE_IPV6_ALT]);

function describeResults(rs: readonly EchoResult[]): string {
  return rs.map((r) =>
    typeof r === "object" && r !== null && "id" in r
      ? `${r.id}@${r.remote.replace(/:\d+$/, "")}`
      : JSON.stringify(r)
  ).join(", ");
}

/**
 * How a proxy mode's traffic semantics differ from the kernel modes' (the tables' expectations), for modes
 * that proxy in a process: the endpoint then always sees the node's address, and "reject" is a connection
 * accepted and closed at once (TCP) or no answer (UDP). A mode never changes which endpoints answer.
 */
export interface FlowSemantics {
  /** The endpoint sees the node's address for every flow (a `preserved` source is the node's too). */
  readonly sourceAlwaysNode?: boolean;
  /** `reject` / `drop`: closed at once without a reply (TCP) or no answer (UDP) instead of a kernel verdict. */
  readonly closeInsteadOfReject?: boolean;
  /** Flows this mode cannot express, by a reason; return null to run the flow. */
  readonly skip?: (f: Flow) => string | null;
}

/**
 * Requests that reach every owner of a random choice among `endpointOwners` (one entry per endpoint; several
 * endpoints may share an owner) but with odds below one in a million: the rarest owner's share p needs
 * n ≥ ln(1e-6) / ln(1 − p) (2 equal owners: 20; 3 endpoints on 2 owners: 35 — 16 requests missed the rarer one
 * once in ~650 runs).
 */
export function requestsToReachAll(endpointOwners: readonly string[]): number {
  const per = new Map<string, number>();
  for (const o of endpointOwners) per.set(o, (per.get(o) ?? 0) + 1);
  const p = Math.min(...per.values()) / endpointOwners.length;
  return Math.ceil(Math.log(1e-6) / Math.log(1 - p));
}

/** Sends one flow and checks its outcome: "" when it holds, else what went wrong; `skip` when not expressible. */
export async function runE2eFlow(
  plan: E2eFlowPlan,
  f: Flow,
  hosts: E2eFlowHosts,
  semantics: FlowSemantics = {},
): Promise<{ skip: string } | { failure: string }> {
  const modeSkip = semantics.skip?.(f) ?? null;
  if (modeSkip !== null) return { skip: modeSkip };
  const protocol = f.to.protocol ?? "TCP";
  if (protocol === "SCTP") return { skip: "SCTP (no SCTP echo server)" };
  if ("verdict" in f.expect && f.expect.verdict === "accept") {
    return { skip: "accept (a listener on the node: see the health-check tests)" };
  }
  const from = sender(plan, f, hosts);
  if (typeof from === "string") return { skip: from };
  if (UNMAPPED_NODE_ADDRESSES.has(f.to.ip) || f.to.ip.includes(":")) {
    return { skip: `destination ${f.to.ip} (another node address)` };
  }
  const host = mapIP(plan, f.to.ip);
  const proto = protocol === "UDP" ? "udp" : "tcp";
  const e = f.expect;
  const what = `${proto} ${from.ip} -> ${host}:${f.to.port}`;
  if ("dnat" in e) {
    const owners = e.dnat.map((ep) => {
      const ip = ep.startsWith("[") ? ep.slice(1, ep.indexOf("]")) : ep.slice(0, ep.lastIndexOf(":"));
      return plan.owners.get(mapIP(plan, ip));
    });
    if (owners.some((o) => o === undefined)) {
      return { failure: `${what}: an expected endpoint is not in the table` };
    }
    const ids = new Set(owners.map((o) => o!.id));
    const count = f.sticky ? 12 : ids.size === 1 ? 2 : requestsToReachAll(owners.map((o) => o!.id));
    // One request first: a broken flow fails fast instead of timing out `count` times.
    const first = await hosts.cluster.request(from.ns, { host, port: f.to.port, proto, timeoutMs: 2000 });
    const rest = typeof first[0] === "object" && "id" in first[0]
      ? await hosts.cluster.request(from.ns, {
        host,
        port: f.to.port,
        proto,
        count: count - 1,
        timeoutMs: 2000,
      })
      : [];
    const rs = [...first, ...rest];
    const problems: string[] = [];
    for (const r of rs) {
      if (typeof r !== "object" || r === null || !("id" in r)) {
        problems.push(`no reply (${JSON.stringify(r)})`);
        continue;
      }
      const owner = owners.find((o) => o!.id === r.id);
      if (owner === undefined) {
        problems.push(`answered by ${r.id}, not one of ${[...ids].join(", ")}`);
        continue;
      }
      const seen = r.remote.replace(/:\d+$/, "");
      const want = e.source === "preserved" && !semantics.sourceAlwaysNode ? from.ip : owner.masqueradedAs;
      if (seen !== want) problems.push(`${r.id} saw ${seen}, expected ${e.source} (${want})`);
    }
    const answered = new Set(rs.flatMap((r) => (typeof r === "object" && "id" in r ? [r.id] : [])));
    if (f.sticky) {
      if (answered.size > 1) problems.push(`ClientIP affinity, yet answered by ${[...answered].join(", ")}`);
    } else if (problems.length === 0 && answered.size !== ids.size) {
      problems.push(`${count} requests reached only ${[...answered].join(", ")} of ${[...ids].join(", ")}`);
    }
    return {
      failure: problems.length === 0
        ? ""
        : `${what}: ${[...new Set(problems)].join("; ")} [${describeResults(rs)}]`,
    };
  }
  const rs = proto === "udp" && e.verdict !== "none"
    ? await udpRequestSeeingRejects(from.ns, { host, port: f.to.port, timeoutMs: 1000 })
    : await hosts.cluster.request(from.ns, { host, port: f.to.port, proto, timeoutMs: 1000 });
  const r = rs[0];
  const closed = typeof r === "object" && r !== null && "error" in r && r.error === "closed without reply";
  const ok = semantics.closeInsteadOfReject && (e.verdict === "reject" || e.verdict === "drop")
    ? (proto === "tcp" ? closed || r === "refused" : r === "timeout")
    : e.verdict === "reject"
    ? r === "refused"
    : e.verdict === "drop"
    ? r === "timeout"
    : r === "refused" || r === "timeout";
  return { failure: ok ? "" : `${what}: expected ${e.verdict}, got ${describeResults(rs)}` };
}

/**
 * A mode-neutral "the agent has caught up" check: a barrier Service whose port and endpoint change with every
 * call, written after everything else; once traffic reaches the new port and endpoint, every earlier change
 * of both watch streams has been synced.
 */
export class SyncBarrier {
  private generation = 0;
  private created = false;
  constructor(
    private readonly hosts: E2eFlowHosts,
    private readonly clusterIP = "10.96.255.254",
  ) {}

  /** Writes the next barrier state and waits until traffic follows it. */
  async sync(timeoutMs = 20000): Promise<void> {
    const c = this.hosts.cluster;
    const g = ++this.generation;
    const port = 1000 + (g % 50000);
    const pod = this.hosts.endpointPods[g % 2];
    const service = e2eService({
      name: "conformance-barrier",
      clusterIP: this.clusterIP,
      ports: [{ name: "b", port, targetPort: c.echoPort }],
    });
    const slice = e2eEndpointSlice({
      service: "conformance-barrier",
      ports: [{ name: "b", port: c.echoPort }],
      endpoints: [{ ip: pod.ip, nodeName: c.nodeName }],
    });
    if (this.created) {
      c.apiserver.update("services", service);
      c.apiserver.update("endpointslices", slice);
    } else {
      c.apiserver.create("services", service);
      c.apiserver.create("endpointslices", slice);
      this.created = true;
    }
    await pollUntil(
      () => c.request(this.hosts.senderPod.ns, { host: this.clusterIP, port, timeoutMs: 500 }),
      (rs) => typeof rs[0] === "object" && "id" in rs[0] && rs[0].id === pod.id,
      { timeoutMs, intervalMs: 100, what: `the agent to sync barrier generation ${g}` },
    ).catch((e) => {
      throw new Error(`${(e as Error).message}\nagent log:\n${c.agent?.tail(30)}`);
    });
  }
}

/** Runs one table over real traffic (apply, barrier, flows; each step likewise; then removes its objects). */
export async function runE2eTable(
  table: FlowTable,
  hosts: E2eFlowHosts,
  barrier: SyncBarrier,
  /** A proxy mode's reason not to run a flow it does not express (an expectation is never changed). */
  modeSkip: (f: Flow) => string | null = () => null,
  semantics: FlowSemantics = {},
): Promise<{ failures: string[]; skipped: string[]; ran: number }> {
  const plan = planTable(table, hosts);
  if (typeof plan === "string") return { failures: [], skipped: [`whole table: ${plan}`], ran: 0 };
  const c = hosts.cluster;
  const live = new Map<string, FlowService>();
  for (const svc of table.services) {
    const { service, slice } = e2eObjects(plan, svc, svc.endpoints, hosts);
    c.apiserver.create("services", service);
    c.apiserver.create("endpointslices", slice);
    live.set(flowServiceKey(svc), svc);
  }
  const failures: string[] = [];
  const skipped: string[] = [];
  let ran = 0;
  const check = async (stage: string, flows: readonly Flow[]) => {
    await barrier.sync();
    for (const f of flows) {
      const why = modeSkip(f);
      const r = why !== null ? { skip: why } : await runE2eFlow(plan, f, hosts, semantics);
      if ("skip" in r) skipped.push(`${stage}${f.name}: ${r.skip}`);
      else {
        ran++;
        if (r.failure !== "") failures.push(`${stage}${JSON.stringify(f.name)}: ${r.failure}`);
      }
    }
  };
  try {
    await check("", table.flows);
    for (const step of table.then ?? []) {
      for (const key of step.deleteServices ?? []) {
        const svc = live.get(key)!;
        c.apiserver.remove("services", svc.namespace, svc.name);
        c.apiserver.remove("endpointslices", svc.namespace, `${svc.name}-e2e`);
        live.delete(key);
      }
      for (const [key, eps] of Object.entries(step.setEndpoints ?? {})) {
        const svc = live.get(key)!;
        c.apiserver.update("endpointslices", e2eObjects(plan, svc, eps, hosts).slice);
      }
      await check(`after ${step.name}: `, step.flows);
    }
  } finally {
    for (const svc of live.values()) {
      c.apiserver.remove("services", svc.namespace, svc.name);
      c.apiserver.remove("endpointslices", svc.namespace, `${svc.name}-e2e`);
    }
  }
  return { failures, skipped, ran };
}
