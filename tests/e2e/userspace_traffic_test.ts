/**
 * End to end, `--proxy-mode=userspace`: dist/edgeproxy runs inside the "node" namespace against the test
 * apiserver; real TCP and UDP from pods, the external client and the node go through the proxy process.
 * Userspace semantics: the endpoint always sees the node as the source (the proxy dials it), and a Service
 * without endpoints closes the connection at once (no kernel REJECT).
 * Topology: tests/support/e2e_cluster.ts. Needs root, `ip netns` and dist/edgeproxy (`bash compile.sh`).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  createE2eCluster,
  E2E_ADDRS as A,
  type E2eCluster,
  type E2ePod,
  e2eUnavailableReason,
} from "../support/e2e_cluster.ts";
import { e2eEndpointSlice, e2eService, type E2eServicePort } from "../support/e2e_objects.ts";
import { httpGetIn } from "../support/e2e_http.ts";
import { pollUntil } from "../support/e2e_poll.ts";
import { runAgentOnce } from "../support/e2e_agent.ts";
import type { EchoResult } from "../support/echo_server.ts";
import type { Netns } from "../support/netns.ts";

const skip = e2eUnavailableReason();
if (skip !== "") console.log(`SKIP tests/e2e/userspace_traffic_test.ts: ${skip}`);

const ECHO = 8080;
const HTTP: E2eServicePort = { name: "http", port: 80, targetPort: ECHO };
const DNS: E2eServicePort = { name: "dns", port: 53, targetPort: ECHO, protocol: "UDP" };
const SLICE = [{ name: "http", port: ECHO }, { name: "dns", port: ECHO, protocol: "UDP" as const }];

const IP = {
  web: "10.96.0.10",
  np: "10.96.0.11",
  spread: "10.96.0.15",
  sticky: "10.96.0.16",
  empty: "10.96.0.17",
  bulk: "10.96.0.18",
  external: "192.0.2.20",
};
const NP = { tcp: 30080, udp: 30053, empty: 30083 };

/** "pod1@10.244.1.1" per result, or the failure as JSON. */
function seen(rs: readonly EchoResult[]): string[] {
  return rs.map((r) =>
    typeof r === "object" && r !== null && "id" in r
      ? `${r.id}@${r.remote.replace(/:\d+$/, "")}`
      : JSON.stringify(r)
  );
}

for (const portals of ["none", "iptables"] as const) {
  describe(
    `edgeproxy userspace mode e2e (--userspace-portals=${portals})`,
    { skip: skip || undefined },
    () => {
      let c: E2eCluster;
      let pods: readonly E2ePod[];
      const args = ["--proxy-mode=userspace", `--userspace-portals=${portals}`, "--udp-timeout=2s"];

      async function ask(
        from: Netns,
        host: string,
        port: number,
        o: { count?: number; proto?: "tcp" | "udp" } = {},
      ) {
        return seen(
          await c.request(from, { host, port, proto: o.proto, count: o.count ?? 1, timeoutMs: 2000 }),
        );
      }

      async function startAndWait(): Promise<void> {
        await c.startAgent({ extraArgs: args, waitReady: false });
        await pollUntil(
          () => c.request(c.client, { host: IP.sticky, port: 80, timeoutMs: 1000 }),
          (rs) => typeof rs[0] === "object" && rs[0] !== null && "id" in rs[0],
          { timeoutMs: 20000, what: "the userspace listeners to answer" },
        ).catch((e) => {
          throw new Error(`${(e as Error).message}\nagent log:\n${c.agent?.tail()}`);
        });
      }

      before(async () => {
        c = await createE2eCluster({ prefix: `us${portals.slice(0, 2)}`, agent: false });
        pods = c.localPods;
        const local = (p: { ip: string }) => ({ ip: p.ip, nodeName: c.nodeName });
        const remote = { ip: c.remotePod.ip, nodeName: c.remotePod.nodeName };
        const add = (
          svc: Parameters<typeof e2eService>[0],
          endpoints: { ip: string; nodeName: string }[] | null,
        ) => {
          c.apiserver.create("services", e2eService(svc));
          if (endpoints) {
            c.apiserver.create(
              "endpointslices",
              e2eEndpointSlice({ service: svc.name, ports: SLICE, endpoints }),
            );
          }
        };
        add({ name: "web", clusterIP: IP.web, ports: [HTTP, DNS], externalIPs: [IP.external] }, [
          local(pods[0]),
        ]);
        add({
          name: "np",
          type: "NodePort",
          clusterIP: IP.np,
          ports: [{ ...HTTP, nodePort: NP.tcp }, { ...DNS, nodePort: NP.udp }],
        }, [local(pods[1]), remote]);
        const all = [local(pods[0]), local(pods[1]), local(pods[2]), remote];
        add({ name: "spread", clusterIP: IP.spread, ports: [HTTP, DNS] }, all);
        add({ name: "sticky", clusterIP: IP.sticky, ports: [HTTP], sessionAffinityTimeoutSeconds: 600 }, all);
        add({
          name: "empty",
          type: "NodePort",
          clusterIP: IP.empty,
          ports: [{ ...HTTP, nodePort: NP.empty }, DNS],
        }, null);
        await startAndWait();
      }, { timeout: 90_000 });

      after(async () => {
        await c?.teardown();
      }, { timeout: 30_000 });

      it("ClusterIP, TCP and UDP, from a pod, the client and the node: the endpoint sees the node", async () => {
        for (const from of [pods[1].ns, c.client, c.node]) {
          assert.deepEqual(await ask(from, IP.web, 80, { count: 2 }), [
            `pod1@${A.podGateway}`,
            `pod1@${A.podGateway}`,
          ]);
          assert.deepEqual(await ask(from, IP.web, 53, { proto: "udp" }), [`pod1@${A.podGateway}`]);
        }
      });

      it("externalIP, TCP and UDP, from the client", async () => {
        assert.deepEqual(await ask(c.client, IP.external, 80), [`pod1@${A.podGateway}`]);
        assert.deepEqual(await ask(c.client, IP.external, 53, { proto: "udp" }), [`pod1@${A.podGateway}`]);
      });

      it("NodePort, TCP and UDP, from the client: round robin over a local and a remote endpoint", async () => {
        const tcp = await ask(c.client, A.nodeIP, NP.tcp, { count: 4 });
        assert.deepEqual(
          new Set(tcp),
          new Set([`pod2@${A.podGateway}`, `remote@${A.remotePodGateway}`]),
          `${tcp}\nlisteners:\n${(await c.node.exec(["ss", "-ltn"])).stdout}\naddrs:\n${
            (await c.node.exec(["ip", "-4", "-o", "addr"])).stdout
          }`,
        );
        assert.equal(tcp[0] === tcp[1], false, `round robin alternates: ${tcp}`);
        const udp = await ask(c.client, A.nodeIP, NP.udp, { proto: "udp", count: 2 });
        for (const u of udp) assert.match(u, /^(pod2|remote)@/);
      });

      it("round robin: 8 connections hit each of 4 endpoints twice, in turn", async () => {
        const got = (await ask(c.client, IP.spread, 80, { count: 8 })).map((s) => s.split("@")[0]);
        assert.deepEqual(got.slice(4), got.slice(0, 4), `${got}`);
        assert.deepEqual(new Set(got), new Set(["pod1", "pod2", "pod3", "remote"]));
      });

      it("session affinity ClientIP: one endpoint for every connection of a client", async () => {
        const sticky = await ask(c.client, IP.sticky, 80, { count: 8 });
        assert.equal(new Set(sticky).size, 1, `${sticky}`);
      });

      it("no endpoints: TCP closed at once (no REJECT); UDP dropped", async () => {
        const t0 = Date.now();
        assert.deepEqual(await c.request(c.client, { host: IP.empty, port: 80 }), [{
          error: "closed without reply",
        }]);
        assert.deepEqual(await c.request(c.client, { host: A.nodeIP, port: NP.empty }), [{
          error: "closed without reply",
        }]);
        assert.ok(Date.now() - t0 < 5000);
        assert.deepEqual(
          await c.request(c.client, { host: IP.empty, port: 53, proto: "udp", timeoutMs: 800 }),
          ["timeout"],
        );
      });

      it("an endpoint change: new connections go to the new set", async () => {
        c.apiserver.update(
          "endpointslices",
          e2eEndpointSlice({
            service: "web",
            ports: SLICE,
            endpoints: [{ ip: pods[2].ip, nodeName: c.nodeName }],
          }),
        );
        await pollUntil(() => ask(c.client, IP.web, 80), (r) => r[0] === `pod3@${A.podGateway}`, {
          timeoutMs: 10000,
          what: "web to move to pod3",
        });
        assert.deepEqual(
          await ask(c.client, IP.web, 80, { count: 3 }),
          Array(3).fill(`pod3@${A.podGateway}`),
        );
      });

      it("/proxyMode is userspace and the per-service-port metrics count", async () => {
        const mode = await httpGetIn(c.node, `http://${A.metrics}/proxyMode`);
        assert.equal(mode.body, "userspace");
        const m = await httpGetIn(c.node, `http://${A.metrics}/metrics`);
        assert.match(
          m.body,
          /edgeproxy_userspace_connections_total\{ip_family="IPv4",service_port="e2e\/sticky:http\/TCP"\} [1-9]/,
        );
        assert.match(
          m.body,
          /edgeproxy_userspace_no_endpoints_total\{ip_family="IPv4",service_port="e2e\/empty:http\/TCP"\} [1-9]/,
        );
      });

      it("bulk TCP: 64 MiB each way through the proxy arrive whole (the splice worker's path) and are counted", async () => {
        // A sink-and-source in pod1: reads until the client's FIN, answers with as many bytes and the count.
        const server = [
          "import socket",
          "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)",
          "s.bind(('0.0.0.0', 9100)); s.listen(4); print('ready', flush=True)",
          "while True:",
          "  c, _ = s.accept(); n = 0",
          "  while True:",
          "    b = c.recv(1 << 20)",
          "    if not b: break",
          "    n += len(b)",
          "  c.sendall(bytes(n)); c.sendall(f'{n}\\n'.encode()); c.close()",
        ].join("\n");
        const sink = c.scope.spawn(pods[0].ns, ["python3", "-c", server]);
        await new Promise<void>((resolve) => sink.stdout!.once("data", () => resolve()));
        c.apiserver.create("services", e2eService({ name: "bulk", clusterIP: IP.bulk, ports: [HTTP] }));
        c.apiserver.create(
          "endpointslices",
          e2eEndpointSlice({
            service: "bulk",
            ports: [{ name: "http", port: 9100 }],
            endpoints: [{ ip: pods[0].ip, nodeName: c.nodeName }],
          }),
        );
        const total = 64 << 20;
        const client = [
          "import socket, sys",
          `s = socket.create_connection(('${IP.bulk}', 80), timeout=20)`,
          "chunk = bytes(1 << 20)",
          `for _ in range(${total >> 20}): s.sendall(chunk)`,
          "s.shutdown(socket.SHUT_WR); got = bytearray()",
          "while True:",
          "  b = s.recv(1 << 20)",
          "  if not b: break",
          "  got += b",
          `print(len(got), got[${total}:].decode().strip())`,
        ].join("\n");
        const counted = async () => {
          const m = await httpGetIn(c.node, `http://${A.metrics}/metrics`);
          const value = (direction: string) => {
            const line = m.body.split("\n").find((l) =>
              l.startsWith(`edgeproxy_userspace_bytes_total{direction="${direction}",`) &&
              l.includes('service_port="e2e/bulk:http/TCP"')
            );
            return Number(line?.split(" ")[1] ?? 0);
          };
          return { in: value("in"), out: value("out") };
        };
        const r = await pollUntil(
          () => c.client.exec(["python3", "-c", client], { timeoutMs: 30000 }),
          (x) => x.code === 0,
          { timeoutMs: 20000, intervalMs: 500, what: "the bulk service to answer" },
        );
        const [len, count] = r.value.stdout.trim().split(" ");
        assert.equal(count, String(total), "the endpoint got every byte");
        assert.equal(Number(len), total + `${total}\n`.length, "every byte of the answer came back");
        // Counted as they pass (at least once a second from the splice worker, and at the end).
        const bytes = await pollUntil(counted, (n) => n.in >= total && n.out >= total + `${total}\n`.length, {
          timeoutMs: 5000,
          what: "the bytes to be counted",
        });
        console.log(`userspace (${portals}) bulk: counted ${JSON.stringify(bytes.value)}`);
        // The compiled agent (Bun) relayed it in the kernel: the splice worker started inside the binary.
        const m = await httpGetIn(c.node, `http://${A.metrics}/metrics`);
        const spliced = Number(
          /^edgeproxy_userspace_kernel_spliced_connections_total (\d+)$/m.exec(m.body)?.[1] ?? "NaN",
        );
        assert.ok(spliced >= 1, `connections relayed by splice(2): ${spliced}`);
      });

      it("open files: raised to upstream's 64000 without lowering a higher limit, or one warning", () => {
        const agent = c.agent!;
        const nofile = (pid: number | "self") => {
          const line = readFileSync(`/proc/${pid}/limits`, "utf8").split("\n").find((l) =>
            l.startsWith("Max open files")
          )!;
          const [soft, hard] = line.split(/\s{2,}/).slice(1, 3).map((v) =>
            v === "unlimited" ? Infinity : Number(v)
          );
          return { soft, hard };
        };
        // The agent inherits this process's hard limit; raising it needs CAP_SYS_RESOURCE.
        const inherited = nofile("self").hard;
        const capEff = /CapEff:\s+([0-9a-f]+)/.exec(readFileSync("/proc/self/status", "utf8"))![1];
        const canRaise = (BigInt(`0x${capEff}`) >> 24n) & 1n;
        const warned = agent.tail(100000).split("\n").filter((l) =>
          l.includes("failed to set open file handler limit to 64000")
        );
        if (inherited >= 64000 || canRaise === 1n) {
          assert.deepEqual(nofile(agent.pid), {
            soft: Math.max(64000, inherited),
            hard: Math.max(64000, inherited),
          });
          assert.deepEqual(warned, []);
        } else {
          assert.deepEqual(nofile(agent.pid), { soft: inherited, hard: inherited });
          assert.equal(warned.length, 1, agent.tail());
          assert.match(warned[0], /^W.*setrlimit: EPERM; open files limit is \d+ \(hard \d+\)/);
        }
      });

      it(
        portals === "none"
          ? "drift: a service address deleted from its interface is back within 2 × syncPeriod"
          : "drift: the portal jumps deleted from PREROUTING and OUTPUT are back within 2 × syncPeriod",
        async () => {
          assert.deepEqual(await ask(c.client, IP.web, 80), [`pod3@${A.podGateway}`]);
          if (portals === "none") {
            // kube-userspace0, or lo where the kernel has no dummy driver.
            const show = await c.node.exec(["ip", "-4", "-o", "addr", "show", "to", `${IP.web}/32`]);
            const dev = show.stdout.split(/\s+/)[1];
            assert.ok(dev, `${IP.web} is on no interface: ${show.stdout}${show.stderr}`);
            const r = await c.node.exec(["ip", "addr", "del", `${IP.web}/32`, "dev", dev]);
            assert.equal(r.code, 0, r.stderr);
          } else {
            for (const [chain, target] of [["PREROUTING", "CONTAINER"], ["OUTPUT", "HOST"]]) {
              const comment = "handle ClusterIPs; NOTE: this must be before the NodePort rules";
              const r = await c.node.exec([
                "iptables",
                "-t",
                "nat",
                "-D",
                chain,
                ...["-m", "comment", "--comment", comment, "-j", `KUBE-PORTALS-${target}`],
              ]);
              assert.equal(r.code, 0, r.stderr);
            }
          }
          const gone = await ask(c.client, IP.web, 80);
          if (gone[0] === `pod3@${A.podGateway}`) {
            // The agent's periodic check (every 5 s) may have repaired the drift between the deletion and
            // this request (a process start away under load): then what was deleted must be back already.
            const present = portals === "none"
              ? (await c.node.exec(["ip", "-4", "-o", "addr", "show", "to", `${IP.web}/32`])).stdout
                .trim() !== ""
              : (await c.node.exec(["iptables", "-t", "nat", "-S", "PREROUTING"])).stdout.includes(
                "-j KUBE-PORTALS-CONTAINER",
              ) &&
                (await c.node.exec(["iptables", "-t", "nat", "-S", "OUTPUT"])).stdout.includes(
                  "-j KUBE-PORTALS-HOST",
                );
            assert.ok(present, "traffic flowed while what the operator deleted was still missing");
          }
          const back = await pollUntil(
            () => ask(c.client, IP.web, 80),
            (r) => r[0] === `pod3@${A.podGateway}`,
            {
              timeoutMs: 2 * 5000,
              intervalMs: 200,
              what: "traffic to come back after the drift (syncPeriod 5s)",
            },
          );
          console.log(`userspace (${portals}) drift repaired after ${back.elapsedMs} ms`);
        },
      );

      it("agent restart: the listeners come back and traffic flows", async () => {
        await c.stopAgent();
        await startAndWait();
        assert.deepEqual(await ask(c.client, IP.web, 80), [`pod3@${A.podGateway}`]);
        assert.deepEqual(await ask(c.client, A.nodeIP, NP.udp, { proto: "udp" }).then((r) => r.length), 1);
      });

      it("offline restart: killed, restarted with the apiserver unreachable, it serves from the state cache", async () => {
        const stateDir = await mkdtemp(join(tmpdir(), "edgeproxy-us-state-"));
        try {
          await c.stopAgent();
          await c.startAgent({ extraArgs: args, stateDir, waitReady: false });
          const file = join(stateDir, "state.json");
          await pollUntil(() => stat(file).then(() => true, () => false), (x) => x, {
            timeoutMs: 15_000,
            what: "state.json to be written",
          });
          await new Promise((r) => setTimeout(r, 500)); // the cache writer catches up with the last sync
          await c.agent!.stop("SIGKILL");
          await c.apiserverLink.cut();
          try {
            const dead = await ask(c.client, IP.web, 80);
            assert.notDeepEqual(dead, [`pod3@${A.podGateway}`], "no listener while the agent is down");
            await c.startAgent({
              extraArgs: [...args, "--cache-start-deadline", "1s"],
              stateDir,
              waitReady: false,
            });
            const back = await pollUntil(
              () => ask(c.client, IP.web, 80),
              (r) => r[0] === `pod3@${A.podGateway}`,
              {
                timeoutMs: 15_000,
                intervalMs: 100,
                what: `traffic from the state cache\n${c.agent?.tail()}`,
              },
            );
            console.log(`userspace (${portals}) served from the cache ${back.elapsedMs} ms after the start`);
            assert.deepEqual(
              await ask(c.client, A.nodeIP, NP.udp, { proto: "udp" }).then((r) => r.length),
              1,
            );
          } finally {
            await c.apiserverLink.restore();
          }
        } finally {
          await rm(stateDir, { recursive: true, force: true });
        }
      });

      it(
        portals === "none" ? "wrote no netfilter rule" : "wrote the portal chains, no KUBE-SERVICES",
        async () => {
          const nat = await c.iptablesSave("nat");
          assert.doesNotMatch(nat, /KUBE-SERVICES/, nat);
          if (portals === "none") assert.doesNotMatch(nat, /KUBE-PORTALS|KUBE-NODEPORT/, nat);
          else {
            assert.match(nat, /-A PREROUTING .*-j KUBE-PORTALS-CONTAINER/, nat);
            assert.match(
              nat,
              /-A KUBE-NODEPORT-CONTAINER .*--dport 30080 -j DNAT --to-destination 192\.168\.50\.2:\d+/,
              nat,
            );
          }
          assert.equal(c.agent?.exit(), null, `agent exited: ${c.agent?.tail()}`);
        },
      );

      it(
        "service addresses on lo or kube-userspace0 are left by SIGTERM and removed by a switch to iptables mode and by --cleanup",
        { skip: portals !== "none" || undefined },
        async () => {
          const serviceAddresses = async () => {
            const out = (await c.node.exec(["ip", "-4", "-o", "addr", "show"])).stdout;
            return out.split("\n").filter((l) => l.includes(` ${IP.web}/32 `) || l.includes(`${IP.np}/32`));
          };
          await c.stopAgent();
          assert.equal(
            (await serviceAddresses()).length,
            2,
            "SIGTERM keeps them (traffic survives a restart)",
          );
          await c.startAgent({ extraArgs: [] }); // iptables mode: removes the other modes' leftovers
          assert.deepEqual(await serviceAddresses(), []);
          await c.stopAgent();
          await c.startAgent({ extraArgs: args, waitReady: false });
          await pollUntil(serviceAddresses, (a) => a.length === 2, {
            timeoutMs: 15_000,
            what: "the addresses",
          });
          await c.stopAgent();
          const r = await runAgentOnce(c.node, ["--cleanup"]);
          assert.equal(r.code, 0, r.stderr);
          assert.deepEqual(await serviceAddresses(), []);
          const lo = (await c.node.exec(["ip", "-4", "-o", "addr", "show", "dev", "lo"])).stdout;
          assert.match(lo, /inet 127\.0\.0\.1\/8/, "lo keeps its own addresses");
        },
      );
    },
  );
}
