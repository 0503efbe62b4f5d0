/**
 * Stale UDP flow cleanup against the real kernel, inside a throwaway network namespace: a client sends
 * through a DNAT rule (as a KUBE-SEP rule would) to a UDP echo. The endpoint is then replaced, and the
 * flow is shown to stick to the old endpoint until the reconciler deletes it, while an unrelated flow
 * survives. Needs root, iproute2, iptables-restore and conntrack; skipped otherwise.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { type ServicePortEndpoints, StaleFlowReconciler } from "../../lib/proxy/conntrack/cleanup.ts";
import { CliConntrackRunner, findConntrackBinary } from "../../lib/proxy/conntrack/runner.ts";
import type { ConntrackFlow } from "../../lib/proxy/conntrack/flow.ts";
import type { EndpointInfo, ServicePortInfo } from "../../lib/proxy/types.ts";

const run = promisify(execFile);

const conntrackBin = findConntrackBinary();
const ipBin = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"].find((p) => existsSync(p));
const restoreBin = ["/usr/sbin/iptables-restore", "/sbin/iptables-restore"].find((p) => existsSync(p));
const skip = process.getuid?.() !== 0
  ? "needs root (network namespaces, iptables, conntrack)"
  : conntrackBin === null
  ? "conntrack (conntrack-tools) is not installed"
  : ipBin === undefined
  ? "ip (iproute2) is not installed"
  : restoreBin === undefined
  ? "iptables-restore is not installed"
  : false;

if (skip) console.warn(`conntrack cleanup e2e skipped: ${skip}`);

const ECHO = fileURLToPath(new URL("../support/udp_echo_for_conntrack.ts", import.meta.url));

/** argv that runs a TS file with the runtime running this test. */
function tsArgv(script: string, ...args: string[]): string[] {
  return "Deno" in globalThis
    ? [process.execPath, "run", "-A", script, ...args]
    : [process.execPath, script, ...args];
}

const ns = `edgect-${process.pid}-${Math.floor(Math.random() * 1e6)}`;
const inNs = (argv: string[]) => [ipBin!, "netns", "exec", ns, ...argv];

async function sh(argv: string[], input?: string): Promise<string> {
  if (input === undefined) return (await run(argv[0], argv.slice(1))).stdout;
  return await new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), { stdio: ["pipe", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d) => (out += d));
    child.stderr.on("data", (d) => (err += d));
    child.on("error", reject);
    child.on(
      "close",
      (code) => (code === 0 ? resolve(out) : reject(new Error(`${argv.join(" ")}: ${code}: ${err}`))),
    );
    child.stdin.end(input);
  });
}

/** Programs the namespace's nat OUTPUT chain: service IP:53/udp → endpoint (one DNAT per service). */
async function programDNAT(rules: Array<[string, string]>): Promise<void> {
  const lines = ["*nat", ":OUTPUT ACCEPT [0:0]"];
  for (const [vip, backend] of rules) {
    lines.push(`-A OUTPUT -d ${vip}/32 -p udp -m udp --dport 53 -j DNAT --to-destination ${backend}`);
  }
  lines.push("COMMIT", "");
  await sh(inNs([restoreBin!]), lines.join("\n"));
}

/** Sends one datagram from 10.0.0.1:<srcPort> and returns the echo line. */
async function send(srcPort: number, vip: string): Promise<string> {
  const argv = inNs(tsArgv(ECHO, "send", "10.0.0.1", String(srcPort), vip, "53"));
  const { stdout } = await run(argv[0], argv.slice(1));
  return stdout.trim();
}

function svc(name: string, clusterIP: string): ServicePortInfo {
  return {
    name: { namespace: "e2e", name, port: "dns", protocol: "UDP" },
    clusterIP,
    port: 53,
    protocol: "UDP",
    nodePort: 0,
    externalIPs: [],
    loadBalancerVIPs: [],
    loadBalancerSourceRanges: [],
    stickyMaxAgeSeconds: 0,
    externalPolicyLocal: false,
    internalPolicyLocal: false,
    healthCheckNodePort: 0,
  };
}

function ep(ip: string): EndpointInfo {
  return {
    ip,
    port: 5353,
    endpoint: `${ip}:5353`,
    isLocal: true,
    ready: true,
    serving: true,
    terminating: false,
    zoneHints: null,
    nodeHints: null,
    nodeName: "node",
    zone: "",
  };
}

const svcA = svc("a", "10.96.0.10");
const svcB = svc("b", "10.96.0.11");

function toA(f: ConntrackFlow): boolean {
  return f.origDst === "10.96.0.10" && f.origDstPort === 53;
}
function toB(f: ConntrackFlow): boolean {
  return f.origDst === "10.96.0.11" && f.origDstPort === 53;
}

describe("conntrack cleanup in a network namespace", { skip }, () => {
  let echo: ChildProcess | null = null;
  let runner: CliConntrackRunner;

  before(async () => {
    await sh([ipBin!, "netns", "add", ns]);
    await sh([ipBin!, "-n", ns, "link", "set", "lo", "up"]);
    for (const a of ["10.0.0.1", "10.244.1.5", "10.244.1.6", "10.244.2.7"]) {
      await sh([ipBin!, "-n", ns, "addr", "add", `${a}/32`, "dev", "lo"]);
    }
    await sh([ipBin!, "-n", ns, "route", "add", "10.96.0.0/16", "dev", "lo"]);
    await programDNAT([["10.96.0.10", "10.244.1.5:5353"], ["10.96.0.11", "10.244.2.7:5353"]]);
    const argv = inNs(tsArgv(ECHO, "serve", "5353", "10.244.1.5", "10.244.1.6", "10.244.2.7"));
    const child = spawn(argv[0], argv.slice(1), { stdio: ["ignore", "pipe", "inherit"] });
    echo = child;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("udp echo did not start within 10s")), 10_000);
      child.stdout!.on("data", (d) => {
        if (String(d).includes("ready")) {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once("exit", (code) => reject(new Error(`udp echo exited early with ${code}`)));
    });
    runner = new CliConntrackRunner({ binary: conntrackBin!, commandPrefix: [ipBin!, "netns", "exec", ns] });
  });

  after(async () => {
    if (echo !== null && echo.exitCode === null) {
      const exited = new Promise((r) => echo!.once("exit", r));
      echo.kill("SIGTERM");
      await exited;
    }
    await sh([ipBin!, "netns", "del", ns]).catch(() => {});
  });

  it("removes the flow to a removed endpoint, keeps the unrelated one, and traffic moves on", async () => {
    // Two clients' flows through the DNAT rules; the echo answers as the service IP.
    assert.equal(await send(40001, "10.96.0.10"), "reply from 10.96.0.10:53 ping-40001");
    assert.equal(await send(40002, "10.96.0.11"), "reply from 10.96.0.11:53 ping-40002");

    const raw = await sh(inNs([conntrackBin!, "-L", "-p", "udp"]));
    assert.match(
      raw,
      /src=10\.0\.0\.1 dst=10\.96\.0\.10 sport=40001 dport=53 .*src=10\.244\.1\.5 dst=10\.0\.0\.1 sport=5353/,
    );

    let flows = await runner.listFlows("IPv4", "UDP");
    assert.deepEqual(flows.filter(toA).map((f) => `${f.replySrc}:${f.replySrcPort}`), ["10.244.1.5:5353"]);
    assert.deepEqual(flows.filter(toB).map((f) => `${f.replySrc}:${f.replySrcPort}`), ["10.244.2.7:5353"]);

    const reconciler = new StaleFlowReconciler(runner);
    const before: ServicePortEndpoints[] = [
      { servicePort: svcA, endpoints: [ep("10.244.1.5")] },
      { servicePort: svcB, endpoints: [ep("10.244.2.7")] },
    ];
    const nothing = await reconciler.reconcile("IPv4", before);
    assert.equal(nothing.entriesDeleted, 0, "nothing is stale yet");
    assert.equal(nothing.serviceFlows, 2);

    // Endpoint 10.244.1.5 is replaced by 10.244.1.6. The rules change, but the existing flow keeps its
    // DNAT: the same client still reaches the old endpoint.
    await programDNAT([["10.96.0.10", "10.244.1.6:5353"], ["10.96.0.11", "10.244.2.7:5353"]]);
    await send(40001, "10.96.0.10");
    flows = await runner.listFlows("IPv4", "UDP");
    assert.deepEqual(flows.filter(toA).map((f) => f.replySrc), ["10.244.1.5"], "stale flow sticks");

    const res = await reconciler.reconcile("IPv4", [
      { servicePort: svcA, endpoints: [ep("10.244.1.6")] },
      { servicePort: svcB, endpoints: [ep("10.244.2.7")] },
    ]);
    assert.equal(res.entriesDeleted, 1);
    assert.deepEqual(res.filters, [{
      family: "IPv4",
      protocol: "UDP",
      origDst: "10.96.0.10",
      origDstPort: 53,
      replySrc: "10.244.1.5",
      replySrcPort: 5353,
    }]);
    flows = await runner.listFlows("IPv4", "UDP");
    assert.deepEqual(flows.filter(toA), [], "the stale flow is gone");
    assert.deepEqual(flows.filter(toB).map((f) => f.replySrc), ["10.244.2.7"], "the unrelated flow stays");

    // The same client now goes to the new endpoint.
    assert.equal(await send(40001, "10.96.0.10"), "reply from 10.96.0.10:53 ping-40001");
    flows = await runner.listFlows("IPv4", "UDP");
    assert.deepEqual(flows.filter(toA).map((f) => f.replySrc), ["10.244.1.6"]);
  });

  it("removes the flows of a deleted service at the next cleanup", async () => {
    const reconciler = new StaleFlowReconciler(runner);
    await reconciler.reconcile("IPv4", [
      { servicePort: svcA, endpoints: [ep("10.244.1.6")] },
      { servicePort: svcB, endpoints: [ep("10.244.2.7")] },
    ]);
    assert.equal((await runner.listFlows("IPv4", "UDP")).filter(toB).length, 1);
    await programDNAT([["10.96.0.10", "10.244.1.6:5353"]]);
    const res = await reconciler.reconcile("IPv4", [{ servicePort: svcA, endpoints: [ep("10.244.1.6")] }]);
    assert.equal(res.entriesDeleted, 1);
    const flows = await runner.listFlows("IPv4", "UDP");
    assert.deepEqual(flows.filter(toB), []);
    assert.deepEqual(flows.filter(toA).map((f) => f.replySrc), ["10.244.1.6"]);
  });
});
