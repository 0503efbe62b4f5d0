/**
 * Runs inside a user-mode-linux guest (tests/e2e/ipvs_uml_test.ts starts it): drives the IPVS Provider
 * (lib/proxy/ipvs/backend.ts) against the guest's real IPVS, ipset and iptables, with endpoints in one
 * network namespace and a client in another, and prints one `RESULT <name> <json>` line per step for the
 * test to check. Topology: cli (10.98.0.2) ─ root (10.98.0.1 | 10.99.0.1) ─ ep (10.99.0.2, 10.99.0.3),
 * an echo server on each endpoint address, port 8080.
 */
import { execFileSync, spawn } from "node:child_process";
import { IpvsBackend } from "../../lib/proxy/ipvs/backend.ts";
import { createIpvsHost } from "../../lib/proxy/ipvs/host.ts";
import { cleanupIpvs, ipvsSysctls } from "../../lib/proxy/ipvs/mode.ts";
import { createIptablesRunner, type IptablesRunner } from "../../lib/proxy/iptables/runner.ts";
import { newNodePortAddresses } from "../../lib/proxy/nodeport_addresses.ts";
import { ServicePortMap } from "../../lib/proxy/service_change_tracker.ts";
import { EndpointsMap } from "../../lib/proxy/endpoints_change_tracker.ts";
import { detectLocalByCIDR } from "../../lib/proxy/local_detect.ts";
import type { ProxyState } from "../../lib/proxy/provider.ts";
import { type EndpointInfo, type ServicePortInfo, servicePortKey } from "../../lib/proxy/types.ts";
import { ensureSysctl, ProcSysctl } from "../../lib/host/sysctl.ts";
import { makeEndpoint, makeServicePort, TEST_NODE_NAME } from "./tracer.ts";

const RUNTIME = process.execPath;
/** `run` arguments for a script under this runtime (Deno needs -A, Bun takes none). */
const RUN: string[] = /bun/.test(RUNTIME) ? ["run"] : ["run", "-A"];
const sh = (cmd: string) => execFileSync("/bin/sh", ["-c", cmd], { encoding: "utf8" });
const result = (name: string, value: unknown) => console.log(`RESULT ${name} ${JSON.stringify(value)}`);

sh(`
set -e
ip netns add ep; ip netns add cli
ip link add vep type veth peer name eth0 netns ep
ip link add vcli type veth peer name eth0 netns cli
ip addr add 10.99.0.1/24 dev vep; ip link set vep up
ip addr add 10.98.0.1/24 dev vcli; ip link set vcli up
ip -n ep addr add 10.99.0.2/24 dev eth0; ip -n ep addr add 10.99.0.3/24 dev eth0
ip -n ep link set eth0 up; ip -n ep link set lo up; ip -n ep route add default via 10.99.0.1
ip -n cli addr add 10.98.0.2/24 dev eth0; ip -n cli link set eth0 up; ip -n cli link set lo up
ip -n cli route add default via 10.98.0.1
`);
const servers = ["10.99.0.2", "10.99.0.3"].map((ip, i) =>
  spawn("ip", [
    "netns",
    "exec",
    "ep",
    RUNTIME,
    ...RUN,
    "tests/support/echo_server.ts",
    "--id",
    `pod${i + 1}`,
    "--port",
    "8080",
    "--host",
    ip,
  ], {
    stdio: ["ignore", "pipe", "inherit"],
  })
);
await Promise.all(servers.map((s) => new Promise((r) => s.stdout!.once("data", r))));

const sysctl = new ProcSysctl();
for (const [n, v] of ipvsSysctls({ ipvs: { strictARP: false } } as never, null)) {
  await ensureSysctl(sysctl, n, v);
}

// Debian unstable's UML kernel has no IPv4 iptables of either kind (UML_IPTABLES=none, see uml.ts): there
// the iptables payload is recorded, not applied; IPVS NAT needs no iptables for the traffic below.
const realRunner = await createIptablesRunner({ family: "IPv4" });
const iptablesPayloads: string[] = [];
const iptables: IptablesRunner = process.env.UML_IPTABLES === "none"
  ? {
    ...realRunner,
    restore: (p) => Promise.resolve(void iptablesPayloads.push(typeof p === "string" ? p : [...p].join(""))),
    save: () => Promise.resolve(""),
    exec: () => Promise.resolve({ code: 0, stdout: "", stderr: "" }),
  }
  : realRunner;
result("iptables", process.env.UML_IPTABLES ?? "unknown");

const backend = new IpvsBackend({
  family: "IPv4",
  nodeName: TEST_NODE_NAME,
  host: createIpvsHost(),
  iptables,
  scheduler: "rr",
  excludeCIDRs: [],
  masqueradeAll: false,
  masqueradeBit: 14,
  nodePortAddresses: newNodePortAddresses("IPv4", []),
  primaryNodeIP: () => "10.98.0.1",
  preferSameTrafficDistribution: true,
  log: { info: () => {}, warn: (m) => console.error(m), debug: (m) => console.error(m) },
});

function state(svcs: [ServicePortInfo, EndpointInfo[]][], changed: string[] = []): ProxyState {
  const services = new ServicePortMap();
  const endpoints = new EndpointsMap();
  for (const [s, eps] of svcs) {
    services.set(servicePortKey(s.name), s);
    if (eps.length) endpoints.set(servicePortKey(s.name), eps);
  }
  return {
    family: "IPv4",
    services,
    endpoints,
    changedServices: new Set(changed),
    nodeLabels: {},
    localDetection: detectLocalByCIDR("10.99.0.0/24"),
  };
}

function ask(host: string, port: number, count: number): string[] {
  return askProto(host, port, count, "tcp");
}

function askProto(host: string, port: number, count: number, proto: "tcp" | "udp"): string[] {
  const out = execFileSync("ip", [
    "netns",
    "exec",
    "cli",
    RUNTIME,
    ...RUN,
    "tests/support/echo_client.ts",
    "--host",
    host,
    "--port",
    String(port),
    "--count",
    String(count),
    "--timeout",
    "1500",
    "--proto",
    proto,
  ], { encoding: "utf8" });
  return (JSON.parse(out) as (string | { id?: string })[]).map((r) =>
    typeof r === "string" ? r : r.id ?? JSON.stringify(r)
  );
}

const web = makeServicePort("default", "web", { clusterIP: "10.96.0.10", nodePort: 30080 });
const eps = [makeEndpoint("10.99.0.2", 8080, { nodeName: TEST_NODE_NAME }), makeEndpoint("10.99.0.3", 8080)];
const t0 = performance.now();
await backend.sync(state([[web, eps]]), { full: true });
result("firstSyncMs", Math.round(performance.now() - t0));
result("ipvsadm", sh("ipvsadm -Sn"));
result("ipsets", sh("ipset save | grep -E '^add '"));
result("dummy", sh("ip -o -4 addr show dev kube-ipvs0 | awk '{print $4}'"));
result("clusterIP", ask("10.96.0.10", 80, 6));
result("nodePort", ask("10.98.0.1", 30080, 4));

// A second identical sync changes nothing in IPVS.
const before = sh("ipvsadm -Sn");
await backend.sync(state([[web, eps]]), { full: false });
result("resyncUnchanged", sh("ipvsadm -Sn") === before);

// Affinity: ClientIP → persistence; every request from the client goes to one endpoint.
const sticky = { ...web, stickyMaxAgeSeconds: 300 };
await backend.sync(state([[sticky, eps]], [servicePortKey(web.name)]), { full: false });
result("affinityIpvsadm", sh("ipvsadm -Sn | grep -- '-A'"));
result("affinity", ask("10.96.0.10", 80, 6));

// Partial sync: one endpoint removed → weight 0 (graceful), new connections go to the other.
await backend.sync(state([[web, [eps[0]]]], [servicePortKey(web.name)]), { full: false });
result("gracefulIpvsadm", sh("ipvsadm -Sn | grep -- '-a -t 10.96.0.10'"));
result("afterRemoval", ask("10.96.0.10", 80, 4));

// A removed endpoint that never had a connection is deleted at once (nothing to drain).
const unused = makeEndpoint("10.99.0.9", 8080);
await backend.sync(state([[web, [eps[0], unused]]], [servicePortKey(web.name)]), { full: false });
await backend.sync(state([[web, [eps[0]]]], [servicePortKey(web.name)]), { full: false });
result("drainedIpvsadm", sh("ipvsadm -Sn | grep -- '-a -t 10.96.0.10'"));
result("terminating", backend.terminating.map((t) => `${t.virtualServer}/${t.realServer}`).sort());

// No endpoints: the virtual server stays, with no real server (after drain); connections fail.
await backend.sync(state([[web, []]], [servicePortKey(web.name)]), { full: false });
await backend.checkDrift(); // deletes drained real servers
result("noEndpointsIpvsadm", sh("ipvsadm -Sn | grep -- '10.96.0.10'"));
result("noEndpoints", ask("10.96.0.10", 80, 2));

// Drift: a virtual server deleted behind our back is reported.
await backend.sync(state([[web, eps]], [servicePortKey(web.name)]), { full: false });
sh("ipvsadm -D -t 10.96.0.10:80");
result("drift", await backend.checkDrift());
await backend.sync(state([[web, eps]]), { full: true });
result("repaired", await backend.checkDrift());
result("repairedTraffic", ask("10.96.0.10", 80, 2));

// Service deleted: its virtual servers, set entries and kube-ipvs0 address go.
await backend.sync(state([]), { full: true });
result("emptyIpvsadm", sh("ipvsadm -Sn"));
result("emptyDummy", sh("ip -o -4 addr show dev kube-ipvs0"));

// UDP, externalIP and load-balancer VIP with externalTrafficPolicy=Local (pod1 is the local endpoint).
const dns = makeServicePort("default", "dns", { clusterIP: "10.96.0.20", protocol: "UDP", portNumber: 53 });
const edge = makeServicePort("default", "edge", {
  clusterIP: "10.96.0.30",
  externalIPs: ["10.97.0.5"],
  loadBalancerVIPs: ["10.97.0.6"],
  externalPolicyLocal: true,
});
const udpEps = eps.map((e) => ({ ...e }));
await backend.sync(state([[web, eps], [dns, udpEps], [edge, eps]]), { full: true });
result("udp", askProto("10.96.0.20", 53, 4, "udp"));
result("externalIPLocal", ask("10.97.0.5", 80, 4));
result("lbLocal", ask("10.97.0.6", 80, 4));
result("edgeClusterIP", ask("10.96.0.30", 80, 4));
result("dummyEdge", sh("ip -o -4 addr show dev kube-ipvs0 | awk '{print $4}' | sort"));

// --cleanup removes everything.
await backend.sync(state([[web, eps]]), { full: true });
const code = await cleanupIpvs({ info: () => {}, warn: (m) => console.error(m) });
result("cleanup", {
  code,
  ipvs: sh("ipvsadm -Sn"),
  dummy: sh("ip link show kube-ipvs0 2>&1 || true").includes("does not exist"),
  sets: sh("ipset list -n"),
  chains: process.env.UML_IPTABLES === "none"
    ? "0"
    : sh("iptables-save | grep -c -E '^:KUBE-' || true").trim(),
});
for (const s of servers) s.kill();
process.exit(0);
