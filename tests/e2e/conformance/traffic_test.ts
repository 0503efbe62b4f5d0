/**
 * Conformance over real traffic, once per proxy mode: dist/edgeproxy --proxy-mode=<mode> runs inside a
 * "node" network namespace against the in-process test apiserver, and every backend-neutral flow table of
 * tests/support/flows (the same data the unit tracer runs) is replayed with real TCP and UDP from pods, the
 * node, and external clients (tests/support/e2e_flows.ts maps the tables onto the topology of
 * tests/support/e2e_cluster.ts). Each table is applied, then its steps (endpoints removed, Services deleted)
 * as partial syncs; a table's settings (masquerade-all, no local detector, nodeport addresses, localhost
 * NodePorts) restart the agent with the matching flags. Plus what the tables cannot say: health-check node
 * ports, and that the agent synced without a failure.
 *
 * A mode is one entry of MODES: its name and how a table's settings become flags. A mode the binary refuses
 * (`--proxy-mode=<mode> --version` fails) is skipped with the binary's message.
 * Needs root, `ip netns` and dist/edgeproxy (`bash compile.sh`).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { addAddress } from "../../support/netns.ts";
import {
  createE2eCluster,
  E2E_ADDRS as A,
  type E2eCluster,
  e2eUnavailableReason,
} from "../../support/e2e_cluster.ts";
import { EDGEPROXY_BINARY } from "../../support/e2e_agent.ts";
import { e2eEndpointSlice, e2eService } from "../../support/e2e_objects.ts";
import { httpGetIn } from "../../support/e2e_http.ts";
import { pollUntil } from "../../support/e2e_poll.ts";
import {
  type E2eFlowHosts,
  type FlowSemantics,
  mapCIDR,
  runE2eTable,
  SyncBarrier,
} from "../../support/e2e_flows.ts";
import { FLOW_TABLES, type FlowConfig } from "../../support/flows/index.ts";
import type { Flow } from "../../support/flows/types.ts";

/** A proxy mode under test. */
interface ProxyMode {
  readonly name: string;
  /** The agent flags for a table's settings (the topology's cluster CIDR is already set). */
  readonly configArgs: (config: FlowConfig) => string[];
  /** Why the mode does not run a flow (what it cannot express), or null. */
  readonly skipFlow?: (f: Flow) => string | null;
  /** Flags of a variant of the mode (e.g. the userspace mode's portals), and its label. */
  readonly variant?: { readonly label: string; readonly args: readonly string[] };
  /** Where the mode's traffic semantics differ from the tables' kernel expectations. */
  readonly semantics?: FlowSemantics;
}

/** The userspace mode: a proxy in the process, so endpoints see the node and nothing is rejected by the kernel. */
const USERSPACE_SEMANTICS: FlowSemantics = { sourceAlwaysNode: true, closeInsteadOfReject: true };

const userspaceArgs = (c: FlowConfig): string[] => [
  // Which sources are pods (external destinations from pods use all endpoints, as in the kernel modes).
  ...(c.localDetector === "none" ? ["--cluster-cidr="] : []),
  ...(c.nodePortAddresses?.length
    ? [`--nodeport-addresses=${c.nodePortAddresses.map(mapCIDR).join(",")}`]
    : []),
  ...(c.localhostNodePorts === false ? ["--iptables-localhost-nodeports=false"] : []),
];

const MODES: readonly ProxyMode[] = [
  {
    name: "iptables",
    configArgs: (c) => [
      ...(c.masqueradeAll ? ["--masquerade-all=true"] : []),
      // An empty --cluster-cidr leaves --detect-local-mode=ClusterCIDR without a CIDR: no detector.
      ...(c.localDetector === "none" ? ["--cluster-cidr="] : []),
      ...(c.nodePortAddresses?.length
        ? [`--nodeport-addresses=${c.nodePortAddresses.map(mapCIDR).join(",")}`]
        : []),
      ...(c.localhostNodePorts === false ? ["--iptables-localhost-nodeports=false"] : []),
    ],
  },
  {
    name: "nftables",
    configArgs: (c) => [
      ...(c.masqueradeAll ? ["--masquerade-all=true"] : []),
      ...(c.localDetector === "none" ? ["--cluster-cidr="] : []),
      ...(c.nodePortAddresses?.length
        ? [`--nodeport-addresses=${c.nodePortAddresses.map(mapCIDR).join(",")}`]
        : []),
    ],
    // Upstream's nftables mode does not support NodePorts on localhost (no route_localnet).
    skipFlow: (f) =>
      (f.from.kind === "localhost" || f.to.ip.startsWith("127.")) && "dnat" in f.expect
        ? "localhost NodePorts: not supported in nftables mode (as upstream)"
        : null,
  },
  ...(["none", "iptables"] as const).map((portals) => ({
    name: "userspace",
    configArgs: userspaceArgs,
    variant: { label: `portals=${portals}`, args: [`--userspace-portals=${portals}`, "--udp-timeout=2s"] },
    semantics: USERSPACE_SEMANTICS,
  })),
];

/** "" when the binary accepts --proxy-mode=<mode>, else its complaint. */
function modeRefusedReason(mode: string): string {
  const r = spawnSync(EDGEPROXY_BINARY, [`--proxy-mode=${mode}`, "--version"], { encoding: "utf8" });
  if (r.error) return `${EDGEPROXY_BINARY}: ${r.error.message}`;
  return r.status === 0 ? "" : `the binary refuses --proxy-mode=${mode}: ${(r.stderr || r.stdout).trim()}`;
}

const FAILURE_LOG = /iptables-restore failed|internal error|sync failed/;

for (const mode of MODES) {
  const skip = e2eUnavailableReason() || modeRefusedReason(mode.name);
  if (skip !== "") {
    console.log(`SKIP tests/e2e/conformance/traffic_test.ts (--proxy-mode=${mode.name}): ${skip}`);
  }

  const label = mode.variant ? `${mode.name} (${mode.variant.label})` : mode.name;
  describe(`conformance, --proxy-mode=${label}: real traffic`, { skip: skip || undefined }, () => {
    let c: E2eCluster;
    let hosts: E2eFlowHosts;
    let barrier: SyncBarrier;
    let agentFlags: string | null = null;
    /** Problems found in the logs of agents that were replaced. */
    const agentProblems: string[] = [];

    const checkAgentLog = () => {
      const a = c.agent;
      if (a === null) return;
      if (a.exit() !== null) agentProblems.push(`agent ${agentFlags} exited: ${a.tail(20)}`);
      const bad = a.logs().split("\n").filter((l) => FAILURE_LOG.test(l));
      if (bad.length > 0) agentProblems.push(`agent ${agentFlags} logged: ${bad.slice(0, 5).join("\n")}`);
    };

    /** Runs the agent with the flags of these settings (restarting it when they differ). */
    const agentFor = async (config: FlowConfig) => {
      const extraArgs = [
        "--proxy-mode",
        mode.name,
        ...(mode.variant?.args ?? []),
        ...mode.configArgs(config),
      ];
      const key = extraArgs.join(" ");
      if (key === agentFlags && c.agent?.exit() === null) return;
      checkAgentLog();
      agentFlags = key;
      // Readiness is the barrier's traffic, not a backend's tables.
      await c.startAgent({ extraArgs, waitReady: false });
      await barrier.sync(30000);
    };

    before(async () => {
      c = await createE2eCluster({ prefix: "conf", agent: false, localPods: 5 });
      const remoteIPs = [A.remotePod, "10.244.2.3", "10.244.2.4", "10.244.2.5"];
      for (const ip of remoteIPs.slice(1)) await addAddress(c.remotePod.ns, "eth0", `${ip}/24`);
      hosts = { cluster: c, endpointPods: c.localPods.slice(0, 4), senderPod: c.localPods[4], remoteIPs };
      barrier = new SyncBarrier(hosts);
    }, { timeout: 60_000 });

    after(async () => {
      await c?.teardown();
    }, { timeout: 30_000 });

    for (const table of FLOW_TABLES) {
      it(`${table.group}: ${table.name}`, { timeout: 120_000 }, async () => {
        await agentFor(table.config ?? {});
        const r = await runE2eTable(table, hosts, barrier, mode.skipFlow, mode.semantics);
        for (const s of r.skipped) console.log(`  skipped: ${s}`);
        if (r.failures.length > 0) {
          // What an operator would look at: the agent's log and the node's ruleset at the time.
          const rules = await c.node.exec(["nft", "list", "ruleset"]);
          console.log(`agent log:\n${c.agent?.tail(40)}\nnft list ruleset:\n${rules.stdout}`);
        }
        assert.deepEqual(r.failures, [], `${r.failures.length} of ${r.ran} flows failed`);
      });
    }

    it("health-check node port of an externalTrafficPolicy=Local LoadBalancer: open, names its Service", async () => {
      await agentFor({});
      const [pod] = hosts.endpointPods;
      c.apiserver.create(
        "endpointslices",
        e2eEndpointSlice({
          service: "lb-local",
          ports: [{ name: "http", port: c.echoPort }],
          endpoints: [{ ip: pod.ip, nodeName: c.nodeName }, {
            ip: c.remotePod.ip,
            nodeName: c.remotePod.nodeName,
          }],
        }),
      );
      c.apiserver.create(
        "services",
        e2eService({
          name: "lb-local",
          type: "LoadBalancer",
          clusterIP: "10.96.0.12",
          ports: [{ name: "http", port: 80, targetPort: c.echoPort, nodePort: 30081 }],
          externalTrafficPolicy: "Local",
          healthCheckNodePort: 32001,
          loadBalancerIngress: ["192.0.2.10"],
        }),
      );
      await barrier.sync();
      // The listener opens asynchronously after the sync that found the Service: allow it a moment.
      const { value: h } = await pollUntil(
        () => httpGetIn(c.client, `http://${A.nodeIP}:32001/`),
        (a) => a.status === 200,
        { timeoutMs: 3000, what: "the health-check node port to answer 200" },
      );
      const body = JSON.parse(h.body);
      assert.deepEqual(body.service, { namespace: "e2e", name: "lb-local" });
      assert.equal(body.serviceProxyHealthy, true);
      assert.equal(body.localEndpoints, 1);
      assert.equal(h.headers["x-load-balancing-endpoint-weight"], "1");
      assert.equal(h.headers["content-type"], "application/json");
      assert.equal(h.headers["x-content-type-options"], "nosniff");
    });

    it("health-check node port counts the local endpoint (200) of a LoadBalancer added while running", async () => {
      const pod = hosts.endpointPods[1];
      // The EndpointSlice first, so that one sync sees the Service together with its endpoint.
      c.apiserver.create(
        "endpointslices",
        e2eEndpointSlice({
          service: "lb-hc",
          ports: [{ name: "http", port: c.echoPort }],
          endpoints: [{ ip: pod.ip, nodeName: c.nodeName }],
        }),
      );
      c.apiserver.create(
        "services",
        e2eService({
          name: "lb-hc",
          type: "LoadBalancer",
          clusterIP: "10.96.0.18",
          ports: [{ name: "http", port: 80, targetPort: c.echoPort, nodePort: 30084 }],
          externalTrafficPolicy: "Local",
          healthCheckNodePort: 32002,
          loadBalancerIngress: ["192.0.2.12"],
        }),
      );
      await pollUntil(() => c.request(c.client, { host: A.nodeIP, port: 30084, timeoutMs: 500 }), (r) => {
        const x = r[0];
        return typeof x === "object" && "id" in x && x.id === pod.id;
      }, { timeoutMs: 5000, what: "the new LoadBalancer to carry traffic" });
      for (const [port, name] of [[32002, "lb-hc"], [32001, "lb-local"]] as const) {
        const { value: h } = await pollUntil(
          () => httpGetIn(c.client, `http://${A.nodeIP}:${port}/`),
          (a) => a.status === 200,
          { timeoutMs: 3000, what: `the health check of ${name} to answer 200` },
        );
        assert.equal(JSON.parse(h.body).localEndpoints, 1);
        assert.equal(h.headers["x-load-balancing-endpoint-weight"], "1");
      }
    });

    it("every agent kept running and logged no sync failure", () => {
      checkAgentLog();
      assert.deepEqual(agentProblems, []);
    });
  });
}
