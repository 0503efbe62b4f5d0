/**
 * A whole edge "cluster" in network namespaces for end-to-end tests of the compiled agent, created with
 * one call and torn down with one call:
 *
 *   client 203.0.113.2 ──┐                       ┌── pod1 10.244.1.2   (echo "pod1", local)
 *   denied 198.51.100.2 ─┼── node (edgeproxy) ───┼── pod2 10.244.1.3   (echo "pod2", local)
 *   lan sink 192.168.50.1┘   node IP 192.168.50.2├── pod3 10.244.1.4   (echo "pod3", local)
 *                            pods 10.244.1.0/24  └── remote 10.244.2.2 (echo "remote", on another node)
 *
 * - node: the agent runs here with its own iptables; ip_forward=1; the node IP 192.168.50.2 is on the
 *   link to "lan", a sink namespace that is the node's default route and drops what it gets (so a Service
 *   IP without rules goes nowhere, as on a real node). Pods hang off point-to-point veths as routed CNIs
 *   attach them (a /32 route per pod, no IPv4 on the node side; the pods' gateway 10.244.1.1 is on the
 *   node's lo), so the node routes every pod packet and conntrack sees both directions (no bridge, no
 *   br_netfilter needed).
 * - client / denied: external clients routed via the node (default route), in two source ranges so
 *   loadBalancerSourceRanges can allow one and deny the other.
 * - remote: a pod of another node (nodeName ≠ this node) in 10.244.2.0/24, routed via the node.
 * - The test apiserver runs in the test process on 127.0.0.1; inside the node namespace the agent reaches
 *   it at https://127.0.0.1:6443 through tests/support/tcp_to_unix.ts and a unix socket (the test
 *   certificate covers 127.0.0.1). `apiserverLink.cut()` severs that path (a network partition).
 *
 *   const c = await createE2eCluster({ prefix: "tr" });   // starts the agent unless agent: false
 *   c.apiserver.create("services", e2eService({...}));
 *   await c.request(c.client, { host: "10.96.0.10", port: 80 });
 *   await c.teardown();                                    // in after(); safe to call twice
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import type { ChildProcess } from "node:child_process";
import {
  addAddress,
  addRoute,
  enableForwarding,
  IP_BIN,
  type Netns,
  NetnsScope,
  netnsUnavailableReason,
  runOk,
  setSysctls,
} from "./netns.ts";
import { echoRequest, type EchoResult, runtimeArgv, startEchoServer } from "./echo_server.ts";
import { type Bridge, serveUnixToTcp } from "./socket_bridge.ts";
import { startTestApiserver, type TestApiserver, type TestApiserverOptions } from "./apiserver.ts";
import {
  agentBinaryMissingReason,
  type AgentExit,
  type E2eAgent,
  EDGEPROXY_BINARY,
  startAgentProcess,
} from "./e2e_agent.ts";
import { e2eNode } from "./e2e_objects.ts";
import { httpGetIn } from "./e2e_http.ts";
import { pollUntil } from "./e2e_poll.ts";

/** Fixed addresses of the topology (only ever configured inside the namespaces it creates). */
export const E2E_ADDRS = {
  /** The node's InternalIP (on its link to the lan sink). */
  nodeIP: "192.168.50.2",
  /** The lan sink: the node's default gateway, which silently drops everything. */
  lanGateway: "192.168.50.1",
  /** The external client and the node's address on its link. */
  client: "203.0.113.2",
  clientGateway: "203.0.113.1",
  /** A second external client, outside the client's range (for loadBalancerSourceRanges denial). */
  deniedClient: "198.51.100.2",
  deniedClientGateway: "198.51.100.1",
  /** --cluster-cidr. */
  clusterCIDR: "10.244.0.0/16",
  /** This node's podCIDR and the node's address towards its pods (the masquerade source towards them). */
  podCIDR: "10.244.1.0/24",
  podGateway: "10.244.1.1",
  /** The "other node" pod network and the node's address towards it. */
  remotePodCIDR: "10.244.2.0/24",
  remotePodGateway: "10.244.2.1",
  remotePod: "10.244.2.2",
  /** Where the agent finds the apiserver inside the node namespace. */
  apiserverInNode: "127.0.0.1:6443",
  healthz: "127.0.0.1:10256",
  metrics: "127.0.0.1:10249",
} as const;

/**
 * The IPv6 side of a dual-stack topology (`ipv6: true`): the node, the lan sink, the client and the local
 * pods get these beside their IPv4 addresses. Pods are attached as routed CNIs do it for IPv6 (Calico): a
 * /128 on the pod, a /128 route to it on the node, and the node's link-local `fe80::1` on each pod veth as
 * the pods' gateway. The remote pod and the denied client stay IPv4-only.
 */
export const E2E_ADDRS6 = {
  nodeIP: "fd00:50::2",
  lanGateway: "fd00:50::1",
  client: "fd00:203::2",
  clientGateway: "fd00:203::1",
  clusterCIDR: "fd00:244::/48",
  podCIDR: "fd00:244:1::/64",
  /** The pods' gateway: the node side of every pod veth. */
  podGateway: "fe80::1",
} as const;

/** The IPv6 address of local pod `i` (0-based) in a dual-stack topology. */
export function e2ePodIPv6(i: number): string {
  return `fd00:244:1::${i + 2}`;
}

/** nodeName of the remote endpoint (any name other than the proxied node's). */
export const E2E_REMOTE_NODE = "edge-node-2";

/** A pod: its namespace, its address, the echo server id and the node it runs on. */
export interface E2ePod {
  readonly id: string;
  readonly ip: string;
  readonly nodeName: string;
  readonly ns: Netns;
}

/** How to run the agent (everything else: see `E2eCluster.agentArgs`). */
export interface E2eAgentOptions {
  /** --iptables-sync-period (default "5s"). */
  readonly syncPeriod?: string;
  /** --iptables-min-sync-period (default "0s"). */
  readonly minSyncPeriod?: string;
  /** --state-dir (default "": no state cache). */
  readonly stateDir?: string;
  /** -v (default 2). */
  readonly verbosity?: number;
  /** Appended after the defaults (a later scalar flag wins, as in pflag). */
  readonly extraArgs?: readonly string[];
  /**
   * Wait until the agent has synced once (see `E2eCluster.waitAgentReady`; default true). Pass false when
   * it cannot sync yet, e.g. started with the apiserver link cut and no state cache.
   */
  readonly waitReady?: boolean;
  /** Default dist/edgeproxy. */
  readonly binary?: string;
}

/** Options of createE2eCluster. */
export interface E2eClusterOptions {
  /** Namespace name prefix (names are `<prefix>-<pid>-<random>-<role>`; default "e2e"). */
  readonly prefix?: string;
  /** The proxied node's name (default "edge-node-1"). */
  readonly nodeName?: string;
  /** Local pods, 1-8 (default 3). */
  readonly localPods?: number;
  /** Port the echo servers listen on, TCP and UDP (default 8080). */
  readonly echoPort?: number;
  /** Options of the in-process test apiserver. */
  readonly apiserver?: TestApiserverOptions;
  /** Whether to create the Node object (default true). */
  readonly createNode?: boolean;
  /** Start the agent at once with these options (default {}), or not (false). */
  readonly agent?: false | E2eAgentOptions;
  /** Dual-stack: add the IPv6 addresses of {@link E2E_ADDRS6} (default false: IPv4 only). */
  readonly ipv6?: boolean;
}

/** The path between the agent and the apiserver, which a test can cut and restore. */
export interface ApiserverLink {
  /** Whether the link is up. */
  readonly up: boolean;
  /** Severs it: open connections are reset, new ones are closed at once (a network partition). */
  cut(): Promise<void>;
  /** Restores it. */
  restore(): Promise<void>;
}

/** A running topology. */
export interface E2eCluster {
  readonly scope: NetnsScope;
  readonly apiserver: TestApiserver;
  readonly nodeName: string;
  readonly node: Netns;
  readonly client: Netns;
  readonly deniedClient: Netns;
  readonly lan: Netns;
  readonly localPods: readonly E2ePod[];
  readonly remotePod: E2ePod;
  readonly echoPort: number;
  /** Temp directory of this cluster (kubeconfig, unix socket); removed by teardown. */
  readonly dir: string;
  /** kubeconfig the agent uses (server https://127.0.0.1:6443). */
  readonly kubeconfig: string;
  readonly apiserverLink: ApiserverLink;
  /** The agent started last (running or ended), or null. */
  readonly agent: E2eAgent | null;
  /** The agent's command line (after the binary) for these options. */
  agentArgs(opts?: E2eAgentOptions): string[];
  /** Starts the agent inside the node namespace (stops a running one first). */
  startAgent(opts?: E2eAgentOptions): Promise<E2eAgent>;
  /** Stops the running agent with SIGTERM (null when none runs). */
  stopAgent(): Promise<AgentExit | null>;
  /**
   * Waits until /healthz answers 200, the first IPv4 sync shows in the metrics (both only when the servers
   * are at the topology's addresses) and nat KUBE-SERVICES (nftables mode: chain `services`) exists; fails at once if the agent exits.
   */
  waitAgentReady(timeoutMs?: number): Promise<void>;
  /** Echo requests from inside `from` (see echoRequest). */
  request(
    from: Netns,
    opts: { host: string; port: number; proto?: "tcp" | "udp"; timeoutMs?: number; count?: number },
  ): Promise<EchoResult[]>;
  /** `iptables-save [-t table]` inside the node namespace. */
  iptablesSave(table?: "nat" | "filter" | "mangle"): Promise<string>;
  /** Stops everything and deletes every namespace and file; safe to call twice, never throws. */
  teardown(): Promise<void>;
}

/** "" when e2e cluster tests can run here (root, ip netns, dist/edgeproxy), else a skip reason. */
export function e2eUnavailableReason(binary: string = EDGEPROXY_BINARY): string {
  return netnsUnavailableReason() || agentBinaryMissingReason(binary);
}

/** The value a flag gets from an argv: its last `--flag value` or `--flag=value`, or undefined. */
function lastFlagValue(args: readonly string[], flag: string): string | undefined {
  let v: string | undefined;
  for (let i = 0; i < args.length; i++) {
    if (args[i] === flag && i + 1 < args.length) v = args[i + 1];
    else if (args[i].startsWith(`${flag}=`)) v = args[i].slice(flag.length + 1);
  }
  return v;
}

const TCP_TO_UNIX = fileURLToPath(new URL("./tcp_to_unix.ts", import.meta.url));

function waitForLine(child: ChildProcess, word: string, what: string, timeoutMs: number): Promise<void> {
  return new Promise((resolve, reject) => {
    let out = "";
    let err = "";
    const timer = setTimeout(
      () => reject(new Error(`${what} not ready after ${timeoutMs} ms: ${err.trim()}`)),
      timeoutMs,
    );
    child.stdout!.on("data", (b: Buffer) => {
      out += b.toString();
      if (out.includes(word)) {
        clearTimeout(timer);
        resolve();
      }
    });
    child.stderr!.on("data", (b: Buffer) => (err += b.toString()));
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited ${code}: ${err.trim()}`));
    });
  });
}

/**
 * A pod attached the way routed CNIs (Calico, Cilium native routing) do it: pod `eth0` ip/32 with a
 * link-scope route to the gateway and a default route via it; the node side of the veth has no IPv4 address,
 * only the /32 route to the pod. The gateway address lives on the node's `lo` (added once by the caller), so
 * the node answers ARP for it on every pod veth and uses it as its source towards pods (the masquerade
 * address pods see).
 */
async function plugPod(
  scope: NetnsScope,
  node: Netns,
  pod: Netns,
  nodeIf: string,
  ip: string,
  gw: string,
): Promise<void> {
  // NetnsScope.link addresses both ends; the node end's address goes again at once.
  await scope.link(pod, "eth0", `${ip}/32`, node, nodeIf, `${gw}/32`);
  await runOk([IP_BIN, "-n", node.name, "addr", "del", `${gw}/32`, "dev", nodeIf]);
  await runOk([IP_BIN, "-n", pod.name, "route", "add", gw, "dev", "eth0", "scope", "link"]);
  await addRoute(pod, "default", { via: gw });
  await addRoute(node, `${ip}/32`, { dev: nodeIf });
}

/** The IPv6 addresses and routes of a dual-stack topology (see {@link E2E_ADDRS6}). */
async function addIPv6(node: Netns, lan: Netns, client: Netns, pods: readonly Netns[]): Promise<void> {
  const A6 = E2E_ADDRS6;
  await addAddress(lan, "eth0", `${A6.lanGateway}/64`);
  await addAddress(node, "eth0", `${A6.nodeIP}/64`);
  await addRoute(node, "default", { via: A6.lanGateway });
  await addAddress(client, "eth0", `${A6.client}/64`);
  await addAddress(node, "vcli", `${A6.clientGateway}/64`);
  await addRoute(client, "default", { via: A6.clientGateway });
  for (let i = 0; i < pods.length; i++) {
    const nodeIf = `vpod${i + 1}`;
    await addAddress(node, nodeIf, `${A6.podGateway}/64`);
    await addAddress(pods[i], "eth0", `${e2ePodIPv6(i)}/128`);
    await runOk([
      IP_BIN,
      "-n",
      pods[i].name,
      "-6",
      "route",
      "add",
      "default",
      "via",
      A6.podGateway,
      "dev",
      "eth0",
    ]);
    await addRoute(node, `${e2ePodIPv6(i)}/128`, { dev: nodeIf });
  }
}

/**
 * Builds the topology, starts the echo servers, the test apiserver (with the Node object) and the bridge,
 * and (unless `agent: false`) the agent. On any failure everything created so far is removed again.
 */
export async function createE2eCluster(opts: E2eClusterOptions = {}): Promise<E2eCluster> {
  const nodeName = opts.nodeName ?? "edge-node-1";
  const podCount = opts.localPods ?? 3;
  if (!(podCount >= 1 && podCount <= 8)) throw new Error(`localPods must be 1-8, got ${podCount}`);
  const echoPort = opts.echoPort ?? 8080;
  const A = E2E_ADDRS;

  const scope = new NetnsScope(opts.prefix ?? "e2e");
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-e2e-"));
  let apiserver: TestApiserver | null = null;
  let bridge: Bridge | null = null;
  let agent: E2eAgent | null = null;
  let tornDown = false;

  const teardown = async () => {
    if (tornDown) return;
    tornDown = true;
    const steps: Array<() => Promise<unknown>> = [
      async () => agent && (await agent.stop("SIGTERM", 3000)),
      async () => bridge && (await bridge.close()),
      () => scope.cleanup(),
      async () => apiserver && (await apiserver.close()),
      () => rm(dir, { recursive: true, force: true }),
    ];
    for (const s of steps) {
      try {
        await s();
      } catch {
        // keep going: every later step must still run
      }
    }
  };

  try {
    // Namespaces and links.
    const node = await scope.create("node");
    const lan = await scope.create("lan");
    const client = await scope.create("cli");
    const deniedClient = await scope.create("deny");
    const remoteNs = await scope.create("remote");
    const podNs: Netns[] = [];
    for (let i = 0; i < podCount; i++) podNs.push(await scope.create(`pod${i + 1}`));

    await scope.link(lan, "eth0", `${A.lanGateway}/24`, node, "eth0", `${A.nodeIP}/24`);
    await addRoute(node, "default", { via: A.lanGateway });
    await scope.link(client, "eth0", `${A.client}/24`, node, "vcli", `${A.clientGateway}/24`);
    await addRoute(client, "default", { via: A.clientGateway });
    await scope.link(
      deniedClient,
      "eth0",
      `${A.deniedClient}/24`,
      node,
      "vdeny",
      `${A.deniedClientGateway}/24`,
    );
    await addRoute(deniedClient, "default", { via: A.deniedClientGateway });
    await scope.link(remoteNs, "eth0", `${A.remotePod}/24`, node, "vremote", `${A.remotePodGateway}/24`);
    await addRoute(remoteNs, "default", { via: A.remotePodGateway });
    await addAddress(node, "lo", `${A.podGateway}/32`);
    const localPods: E2ePod[] = [];
    for (let i = 0; i < podCount; i++) {
      const ip = `10.244.1.${i + 2}`;
      await plugPod(scope, node, podNs[i], `vpod${i + 1}`, ip, A.podGateway);
      localPods.push({ id: `pod${i + 1}`, ip, nodeName, ns: podNs[i] });
    }
    const remotePod: E2ePod = { id: "remote", ip: A.remotePod, nodeName: E2E_REMOTE_NODE, ns: remoteNs };
    if (opts.ipv6) await addIPv6(node, lan, client, podNs);
    await enableForwarding(node);
    // No reverse-path filtering (pods sit on /32 routes) and no ICMP redirects (they would eat the
    // per-host ICMP budget that REJECT answers need).
    await setSysctls(node, {
      "net.ipv4.conf.all.rp_filter": "0",
      "net.ipv4.conf.default.rp_filter": "0",
      "net.ipv4.conf.all.send_redirects": "0",
      "net.ipv4.conf.default.send_redirects": "0",
      // REJECT answers are ICMP errors: without this, the per-host ICMP rate limit swallows some of a burst.
      "net.ipv4.icmp_ratelimit": "0",
    });
    // The lan sink answers nothing it is not addressed to, and forwards nothing.
    await setSysctls(lan, { "net.ipv4.ip_forward": "0" });

    // Echo servers.
    await Promise.all([
      ...localPods.map((p) => startEchoServer(scope, p.ns, { id: p.id, port: echoPort })),
      startEchoServer(scope, remoteNs, { id: remotePod.id, port: echoPort }),
    ]);

    // Apiserver, Node object, kubeconfig and the bridge into the node namespace.
    // HTTP/2, as a real apiserver offers it (the agent speaks h2 when offered, like client-go).
    apiserver = await startTestApiserver({ http2: true, ...opts.apiserver });
    if (opts.createNode ?? true) {
      const n = e2eNode(nodeName, { podCIDR: A.podCIDR, internalIP: A.nodeIP });
      if (opts.ipv6) {
        n.spec!.podCIDRs = [A.podCIDR, E2E_ADDRS6.podCIDR];
        n.status!.addresses!.splice(1, 0, { type: "InternalIP", address: E2E_ADDRS6.nodeIP });
      }
      apiserver.create("nodes", n);
    }
    const kubeconfig = join(dir, "kubeconfig");
    await apiserver.writeKubeconfig(kubeconfig, { server: `https://${A.apiserverInNode}` });
    const sock = join(dir, "apiserver.sock");
    bridge = await serveUnixToTcp(sock, "127.0.0.1", apiserver.port);
    const [bridgeHost, bridgePort] = A.apiserverInNode.split(":");
    const inNode = scope.spawn(node, [...runtimeArgv(TCP_TO_UNIX), bridgeHost, bridgePort, sock]);
    await waitForLine(inNode, "listening", `tcp_to_unix in ${node.name}`, 20000);

    const srv = apiserver;
    let linkUp = true;
    const apiserverLink: ApiserverLink = {
      get up() {
        return linkUp;
      },
      cut: async () => {
        if (!linkUp) return;
        linkUp = false;
        await bridge?.close();
        bridge = null;
      },
      restore: async () => {
        if (linkUp) return;
        bridge = await serveUnixToTcp(sock, "127.0.0.1", srv.port);
        linkUp = true;
      },
    };

    const agentArgs = (o: E2eAgentOptions = {}): string[] => [
      "--kubeconfig",
      kubeconfig,
      "--hostname-override",
      nodeName,
      "--cluster-cidr",
      opts.ipv6 ? `${A.clusterCIDR},${E2E_ADDRS6.clusterCIDR}` : A.clusterCIDR,
      "--iptables-min-sync-period",
      o.minSyncPeriod ?? "0s",
      "--iptables-sync-period",
      o.syncPeriod ?? "5s",
      "--state-dir",
      o.stateDir ?? "",
      "--healthz-bind-address",
      A.healthz,
      "--metrics-bind-address",
      A.metrics,
      // nf_conntrack_max is global (read-only in a namespace) and raising it would also resize the host's
      // conntrack hash table: leave both alone.
      "--conntrack-max-per-core=0",
      `-v=${o.verbosity ?? 2}`,
      ...(o.extraArgs ?? []),
    ];

    const waitAgentReady = async (timeoutMs = 30000) => {
      const a = agent;
      if (!a) throw new Error("waitAgentReady: no agent started");
      // Only the servers still at the topology's addresses can be asked (extraArgs may move or disable them).
      const healthzOn = lastFlagValue(a.args, "--healthz-bind-address") === A.healthz;
      const metricsOn = lastFlagValue(a.args, "--metrics-bind-address") === A.metrics;
      const ready = pollUntil(
        async () => {
          if (a.exit()) return "exited";
          if (healthzOn) {
            const h = await httpGetIn(node, `http://${A.healthz}/healthz`, { timeoutMs: 1000 });
            if (h.status !== 200) return `healthz ${h.status || h.curlError}`;
          }
          if (metricsOn) {
            // /healthz is 200 from the start (as upstream's); the first sync shows in this gauge.
            const m = await httpGetIn(node, `http://${A.metrics}/metrics`, { timeoutMs: 1000 });
            if (
              !/^kubeproxy_sync_proxy_rules_last_timestamp_seconds\{ip_family="IPv4"\} [1-9]/m.test(m.body)
            ) {
              return `no IPv4 sync yet (metrics ${m.status || m.curlError})`;
            }
          }
          if (lastFlagValue(a.args, "--proxy-mode") === "nftables") {
            const nft = await node.exec(["nft", "list", "chain", "ip", "kube-proxy", "services"]);
            return nft.code === 0 ? "ready" : "no nft chain ip kube-proxy services yet";
          }
          const chain = await node.exec(["iptables", "-w", "5", "-t", "nat", "-S", "KUBE-SERVICES"]);
          return chain.code === 0 ? "ready" : "no nat KUBE-SERVICES yet";
        },
        (v) => v === "ready" || v === "exited",
        { timeoutMs, intervalMs: 150, what: `agent ready in ${node.name}` },
      );
      let outcome: string;
      try {
        outcome = (await ready).value;
      } catch (e) {
        throw new Error(`${(e as Error).message}\nagent log:\n${a.tail()}`);
      }
      if (outcome === "exited") {
        throw new Error(`agent exited ${JSON.stringify(a.exit())} before it was ready; log:\n${a.tail()}`);
      }
    };

    const cluster: E2eCluster = {
      scope,
      get apiserver() {
        return srv;
      },
      nodeName,
      node,
      client,
      deniedClient,
      lan,
      localPods,
      remotePod,
      echoPort,
      dir,
      kubeconfig,
      apiserverLink,
      get agent() {
        return agent;
      },
      agentArgs,
      startAgent: async (o: E2eAgentOptions = {}) => {
        if (agent && !agent.exit()) await agent.stop();
        agent = startAgentProcess(scope, node, agentArgs(o), o.binary);
        if (o.waitReady ?? true) await waitAgentReady();
        return agent;
      },
      stopAgent: async () => (agent && !agent.exit() ? await agent.stop() : null),
      waitAgentReady,
      request: (from, o) => echoRequest(from, o),
      iptablesSave: (table) => node.execOk(["iptables-save", ...(table ? ["-t", table] : [])]),
      teardown,
    };
    if (opts.agent !== false) await cluster.startAgent(opts.agent ?? {});
    return cluster;
  } catch (e) {
    await teardown();
    throw new Error(`createE2eCluster failed: ${(e as Error).message}`);
  }
}
