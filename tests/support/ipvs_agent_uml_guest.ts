/**
 * The compiled agent in IPVS mode, end to end. Runs INSIDE a user-mode-linux guest whose kernel has IPVS,
 * ipset and IPv4 iptables (tests/e2e/ipvs_agent_uml_test.ts starts it there; it is not a test file of its
 * own, the host kernel has no IPVS): dist/edgeproxy --proxy-mode ipvs runs in the "node" namespace of
 * tests/support/e2e_cluster.ts against the in-process test apiserver, and real TCP and UDP goes from pods
 * and an external client. Proves: /proxyMode and the deprecation warning; kube-ipvs0, virtual servers,
 * ipsets; ClusterIP and NodePort round robin, TCP and UDP; masquerade of NodePort traffic and none for
 * pod-to-ClusterIP; an endpoint change as a partial sync (the removed real server takes no new
 * connections); drift repair (a deleted virtual server, also while one of its real servers drains, and a
 * ClusterIP taken off kube-ipvs0) within 2 × syncPeriod; a LoadBalancer with loadBalancerSourceRanges (an
 * allowed and a denied client) and externalTrafficPolicy=Local; an externalIP; internalTrafficPolicy=Local;
 * ClientIP affinity; graceful termination (an established connection to a removed endpoint is still served
 * while new ones go elsewhere); a restart with zero failed requests; `--cleanup`.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createE2eCluster, E2E_ADDRS as A, type E2eCluster } from "./e2e_cluster.ts";
import { e2eEndpointSlice, e2eService } from "./e2e_objects.ts";
import { httpGetIn } from "./e2e_http.ts";
import { pollUntil } from "./e2e_poll.ts";
import { runAgentOnce } from "./e2e_agent.ts";
import type { EchoResult } from "./echo_server.ts";
import type { Netns } from "./netns.ts";
import type { E2ePod } from "./e2e_cluster.ts";
import { rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";

const ECHO = 8080;
const SVC_IP = "10.96.0.10";
const NODE_PORT = 30080;
const NODE_PORT_UDP = 30053;
const SYNC_PERIOD_S = 3;
const IPVS = [
  "--proxy-mode",
  "ipvs",
  "--ipvs-sync-period",
  `${SYNC_PERIOD_S}s`,
  "--ipvs-min-sync-period",
  "0s",
];
/** Port of the held-connection servers (graceful termination). */
const HOLD = 8081;
const LB_SVC_IP = "10.96.0.20";
const LB_IP = "192.0.2.100";
const LB_NODE_PORT = 30082;
const LB_HC_NODE_PORT = 30083;
const EXT_SVC_IP = "10.96.0.30";
const EXTERNAL_IP = "192.0.2.30";
const STICKY_SVC_IP = "10.96.0.40";
const HOLD_SVC_IP = "10.96.0.50";
/** The guest has one slow CPU: every step gets generous time. */
const READY_MS = 120_000;

function ids(rs: readonly EchoResult[]): string[] {
  return rs.map((r) => (typeof r === "object" && r !== null && "id" in r ? r.id : JSON.stringify(r)));
}

/** argv that runs `code` with this runtime (Deno: `deno eval`, Bun: `bun -e`). */
function evalArgv(code: string): string[] {
  const isDeno = typeof (globalThis as { Deno?: unknown }).Deno !== "undefined";
  return isDeno ? [process.execPath, "eval", code] : [process.execPath, "-e", code];
}

/**
 * A TCP server that keeps connections open: it answers the connect and every line received with the echo
 * server's JSON reply (so echoRequest reads it too). Prints "ready".
 */
function heldServerCode(id: string, port: number): string {
  return `import("node:net").then(({ createServer }) => {
  createServer((s) => {
    s.on("error", () => {});
    const reply = () => s.write(JSON.stringify({ id: ${
    JSON.stringify(id)
  }, remote: s.remoteAddress + ":" + s.remotePort, proto: "tcp" }) + "\\n");
    reply();
    s.on("data", (d) => { for (const c of d.toString()) if (c === "\\n") reply(); });
  }).listen(${port}, "0.0.0.0", () => console.log("ready"));
});`;
}

/** A client that connects, prints the first reply, waits for file `go`, sends a line on the same connection and prints that reply. */
function heldClientCode(host: string, port: number, go: string): string {
  return `Promise.all([import("node:net"), import("node:fs")]).then(([{ connect }, { existsSync }]) => {
  const s = connect(${port}, ${JSON.stringify(host)});
  let buf = "";
  let n = 0;
  s.on("error", (e) => { console.log("error " + e.message); process.exit(1); });
  s.on("end", () => { console.log("error closed"); process.exit(1); });
  s.on("data", (d) => {
    buf += d.toString();
    for (let i = buf.indexOf("\\n"); i >= 0; i = buf.indexOf("\\n")) {
      console.log("reply " + buf.slice(0, i));
      buf = buf.slice(i + 1);
      if (++n === 2) process.exit(0);
      const t = setInterval(() => { if (existsSync(${
    JSON.stringify(go)
  })) { clearInterval(t); s.write("again\\n"); } }, 100);
    }
  });
});`;
}

function remotes(rs: readonly EchoResult[]): string[] {
  return rs.map((r) => (typeof r === "object" && r !== null && "remote" in r ? r.remote : JSON.stringify(r)));
}

describe("edgeproxy agent e2e in a user-mode-linux kernel: --proxy-mode ipvs", () => {
  let c: E2eCluster;

  const ask = async (from: Netns, host: string, port: number, count = 1, proto: "tcp" | "udp" = "tcp") =>
    await c.request(from, { host, port, proto, count, timeoutMs: 3000 });
  const slice = (pods: readonly { ip: string }[]) =>
    e2eEndpointSlice({
      service: "web",
      ports: [{ name: "http", port: ECHO }, { name: "dns", port: ECHO, protocol: "UDP" }],
      endpoints: pods.map((p) => ({ ip: p.ip, nodeName: c.nodeName })),
    });
  /** A one-port (TCP 80 → ECHO) EndpointSlice of Service `service`, each pod on its own node. */
  const httpSlice = (service: string, pods: readonly E2ePod[]) =>
    e2eEndpointSlice({
      service,
      ports: [{ name: "http", port: ECHO }],
      endpoints: pods.map((p) => ({ ip: p.ip, nodeName: p.nodeName })),
    });
  /** Starts a process in `ns` and resolves with the "reply" ids it prints, in order (see heldClientCode). */
  const heldConnection = (from: E2ePod, host: string, port: number, go: string) => {
    const child = c.scope.spawn(from.ns, evalArgv(heldClientCode(host, port, go)));
    const replies: string[] = [];
    let out = "";
    let err = "";
    const waiters: (() => void)[] = [];
    child.stderr!.on("data", (b: Buffer) => (err += b.toString()));
    child.stdout!.on("data", (b: Buffer) => {
      out += b.toString();
      for (let i = out.indexOf("\n"); i >= 0; i = out.indexOf("\n")) {
        const line = out.slice(0, i);
        out = out.slice(i + 1);
        const m = /^reply (.*)$/.exec(line);
        replies.push(m ? (JSON.parse(m[1]) as { id: string }).id : line);
        waiters.splice(0).forEach((w) => w());
      }
    });
    child.once("exit", () => waiters.splice(0).forEach((w) => w()));
    const nth = (k: number) =>
      new Promise<string>((resolve, reject) => {
        const check = () => {
          if (replies.length > k) resolve(replies[k]);
          else if (child.exitCode !== null) {
            reject(new Error(`held connection: ${replies.join("; ")} ${err.trim()}`));
          } else waiters.push(check);
        };
        check();
      });
    const first = nth(0);
    const second = nth(1);
    // Awaited later; a rejection before then must not count as unhandled.
    first.catch(() => {});
    second.catch(() => {});
    return { first, second };
  };
  const start = async () => {
    await c.startAgent({ verbosity: 4, extraArgs: IPVS, waitReady: false });
    await c.waitAgentReady(READY_MS);
  };
  const ipvsSave = () => c.node.execOk(["ipvsadm", "-Sn"]);
  const dummy = async () =>
    (await c.node.execOk(["ip", "-4", "-o", "addr", "show", "dev", "kube-ipvs0"])).split("\n")
      .map((l) => /inet (\S+)/.exec(l)?.[1]).filter((a): a is string => !!a).sort();
  /** Runs `f`; a failure carries the agent's log tail. */
  const withLog = async <T>(f: () => Promise<T>): Promise<T> => {
    try {
      return await f();
    } catch (e) {
      throw new Error(`${(e as Error).message}\nagent log:\n${c.agent?.tail(80)}`);
    }
  };
  /** Polls until the agent's log from `from` on matches `re` (klog flushes every few seconds). */
  const logged = (from: number, re: RegExp) =>
    withLog(() =>
      pollUntil(() => Promise.resolve(c.agent!.logs().slice(from)), (l) => re.test(l), {
        timeoutMs: 15_000,
        intervalMs: 250,
        what: `agent log ${re}`,
      })
    );
  /** Polls until a pod reaches the ClusterIP again; returns the time it took. */
  const repaired = async (what: string) =>
    (await withLog(() =>
      pollUntil(
        async () => ids(await ask(c.localPods[2].ns, SVC_IP, 80)),
        (r) => r[0] === c.localPods[0].id || r[0] === c.localPods[1].id,
        {
          timeoutMs: 2 * SYNC_PERIOD_S * 1000 + 5000,
          intervalMs: 200,
          what: `${what} repaired within 2 × syncPeriod`,
        },
      )
    )).elapsedMs;

  before(async () => {
    c = await createE2eCluster({ prefix: "ipvs", agent: false });
    c.apiserver.create(
      "services",
      e2eService({
        name: "web",
        type: "NodePort",
        clusterIP: SVC_IP,
        ports: [
          { name: "http", port: 80, targetPort: ECHO, nodePort: NODE_PORT },
          { name: "dns", port: 53, targetPort: ECHO, protocol: "UDP", nodePort: NODE_PORT_UDP },
        ],
      }),
    );
    c.apiserver.create("endpointslices", slice([c.localPods[0], c.localPods[1]]));
    for (const p of c.localPods.slice(0, 2)) {
      const child = c.scope.spawn(p.ns, evalArgv(heldServerCode(p.id, HOLD)));
      await new Promise<void>((resolve, reject) => {
        let err = "";
        child.stderr!.on("data", (b: Buffer) => (err += b.toString()));
        child.stdout!.on("data", (b: Buffer) => b.toString().includes("ready") && resolve());
        child.once("exit", (code) => reject(new Error(`held server ${p.id} exited ${code}: ${err.trim()}`)));
      });
    }
  }, { timeout: READY_MS });

  after(async () => {
    await c?.teardown();
  }, { timeout: 60_000 });

  it("starts in ipvs mode: /proxyMode, the deprecation warning, kube-ipvs0, virtual servers, ipsets", async () => {
    await start();
    assert.equal((await httpGetIn(c.node, `http://${A.metrics}/proxyMode`)).body, "ipvs");
    assert.match(c.agent!.logs(), /The ipvs proxier is now deprecated/);
    assert.deepEqual(await dummy(), [`${SVC_IP}/32`]);
    const vs = await ipvsSave();
    assert.match(vs, new RegExp(`^-A -t ${SVC_IP}:80 -s rr$`, "m"), vs);
    assert.match(vs, new RegExp(`^-A -u ${SVC_IP}:53 -s rr$`, "m"), vs);
    assert.match(vs, new RegExp(`^-A -t ${A.nodeIP.replaceAll(".", "\\.")}:${NODE_PORT} -s rr$`, "m"), vs);
    for (const p of c.localPods.slice(0, 2)) {
      assert.match(vs, new RegExp(`^-a -t ${SVC_IP}:80 -r ${p.ip}:${ECHO} -m -w 1$`, "m"), vs);
    }
    const sets = await c.node.execOk(["ipset", "save"]);
    assert.match(sets, new RegExp(`^add KUBE-CLUSTER-IP ${SVC_IP},tcp:80$`, "m"), sets);
    assert.match(sets, new RegExp(`^add KUBE-NODE-PORT-TCP ${NODE_PORT}$`, "m"), sets);
    assert.match(await c.iptablesSave("nat"), /-A KUBE-SERVICES .*--match-set KUBE-CLUSTER-IP dst,dst/);
  });

  it("ClusterIP and NodePort round robin, TCP and UDP", async () => {
    const [pod1, pod2, pod3] = c.localPods;
    const both = [pod1.id, pod2.id].sort();
    const cip = ids(await ask(pod3.ns, SVC_IP, 80, 6));
    assert.deepEqual([...new Set(cip)].sort(), both, `ClusterIP: ${cip}`);
    for (let i = 1; i < cip.length; i++) assert.notEqual(cip[i], cip[i - 1], `rr: ${cip}`);
    const udp = ids(await ask(pod3.ns, SVC_IP, 53, 4, "udp"));
    assert.deepEqual([...new Set(udp)].sort(), both, `ClusterIP UDP: ${udp}`);
    const np = ids(await ask(c.client, A.nodeIP, NODE_PORT, 4));
    assert.deepEqual([...new Set(np)].sort(), both, `NodePort: ${np}`);
    const npu = ids(await ask(c.client, A.nodeIP, NODE_PORT_UDP, 4, "udp"));
    assert.deepEqual([...new Set(npu)].sort(), both, `NodePort UDP: ${npu}`);
  });

  it("masquerades NodePort traffic from outside, not pod-to-ClusterIP traffic", async () => {
    const fromClient = remotes(await ask(c.client, A.nodeIP, NODE_PORT, 2));
    for (const r of fromClient) {
      assert.ok(!r.startsWith(`${A.client}:`), `NodePort from the client must be masqueraded: ${fromClient}`);
      assert.match(r, /^\d+\.\d+\.\d+\.\d+:\d+$/, `NodePort from the client: ${fromClient}`);
    }
    const pod3 = c.localPods[2];
    const fromPod = remotes(await ask(pod3.ns, SVC_IP, 80, 2));
    for (const r of fromPod) {
      assert.ok(r.startsWith(`${pod3.ip}:`), `pod → ClusterIP keeps its source: ${fromPod}`);
    }
  });

  it("an endpoint change is a partial sync; the removed real server takes no new connections", async () => {
    const [pod1, pod2, pod3] = c.localPods;
    const from = c.agent!.logs().length;
    c.apiserver.update("endpointslices", slice([pod1]));
    await pollUntil(
      async () => ids(await ask(pod3.ns, SVC_IP, 80, 4)),
      (r) => r.every((x) => x === pod1.id),
      { timeoutMs: 20_000, intervalMs: 200, what: "pod1 only" },
    );
    const log = (await logged(from, /partial sync of IPv4 rules took \d+ms/)).value;
    assert.doesNotMatch(log, /full resync|sync of IPv4 rules failed/, log);
    const vs = await ipvsSave();
    assert.doesNotMatch(vs, new RegExp(`-r ${pod2.ip}:${ECHO} -m -w [1-9]`), vs);
    assert.deepEqual(ids(await ask(c.client, A.nodeIP, NODE_PORT, 4)), Array(4).fill(pod1.id));
    c.apiserver.update("endpointslices", slice([pod1, pod2]));
    await pollUntil(
      async () => ids(await ask(pod3.ns, SVC_IP, 80, 6)),
      (r) => r.includes(pod1.id) && r.includes(pod2.id),
      { timeoutMs: 20_000, intervalMs: 200, what: "both endpoints again" },
    );
  });

  it("drift: a deleted virtual server and a ClusterIP taken off kube-ipvs0 are repaired", async () => {
    const from = c.agent!.logs().length;
    await c.node.execOk(["ipvsadm", "-D", "-t", `${SVC_IP}:80`]);
    const t1 = await repaired("deleted virtual server");
    await c.node.execOk(["ip", "addr", "del", `${SVC_IP}/32`, "dev", "kube-ipvs0"]);
    const t2 = await repaired("ClusterIP off kube-ipvs0");
    console.log(`drift repaired after ${t1} / ${t2} ms (syncPeriod ${SYNC_PERIOD_S} s)`);
    await logged(
      from,
      new RegExp(`full resync of IPv4 rules: .*IPVS virtual server ${SVC_IP}:80/TCP is missing`),
    );
    await logged(from, new RegExp(`full resync of IPv4 rules: .*${SVC_IP} is missing from kube-ipvs0`));
    assert.match(await ipvsSave(), new RegExp(`^-A -t ${SVC_IP}:80 -s rr$`, "m"));
    assert.deepEqual(await dummy(), [`${SVC_IP}/32`]);
    assert.doesNotMatch(c.agent!.logs(), /sync of IPv4 rules failed|drift check .* failed/);
  });

  it("drift: a virtual server deleted while one of its real servers drains is repaired", async () => {
    const [pod1, pod2, pod3] = c.localPods;
    // pod2 served connections (TIME_WAIT entries in IPVS): removed, it stays with weight 0 to drain.
    c.apiserver.update("endpointslices", slice([pod1]));
    await withLog(() =>
      pollUntil(() => ipvsSave(), (vs) => new RegExp(`-r ${pod2.ip}:${ECHO} -m -w 0`).test(vs), {
        timeoutMs: 20_000,
        what: `${pod2.ip} draining with weight 0`,
      })
    );
    const from = c.agent!.logs().length;
    await c.node.execOk(["ipvsadm", "-D", "-t", `${SVC_IP}:80`]);
    const t = await repaired("virtual server deleted while draining");
    console.log(`drift (draining real server) repaired after ${t} ms`);
    // Whichever reads the kernel first finds it: the drift check, or a partial sync deleting drained real
    // servers, which hands over to a full sync at once (lib/proxy/ipvs/backend.ts). Both log it as drift.
    await logged(
      from,
      new RegExp(
        `full resync of IPv4 rules: (.*IPVS virtual server ${SVC_IP}:80/TCP is missing|` +
          `IPVS virtual server -t ${SVC_IP}:80 \\(draining real servers\\) is missing)`,
      ),
    );
    assert.doesNotMatch(c.agent!.logs().slice(from), /sync of IPv4 rules failed/);
    assert.deepEqual(ids(await ask(pod3.ns, SVC_IP, 80, 3)), Array(3).fill(pod1.id));
    assert.doesNotMatch(c.agent!.logs().slice(from), /drift check .* failed/);
    c.apiserver.update("endpointslices", slice([pod1, pod2]));
    await pollUntil(
      async () => ids(await ask(pod3.ns, SVC_IP, 80, 6)),
      (r) => r.includes(pod1.id) && r.includes(pod2.id),
      { timeoutMs: 20_000, intervalMs: 200, what: "both endpoints again" },
    );
  });

  it("LoadBalancer with loadBalancerSourceRanges and externalTrafficPolicy=Local: allowed client reaches the local endpoint only, with its source kept; denied client gets nothing", async () => {
    const [pod1, , pod3] = c.localPods;
    c.apiserver.create(
      "services",
      e2eService({
        name: "lb",
        type: "LoadBalancer",
        clusterIP: LB_SVC_IP,
        ports: [{ name: "http", port: 80, targetPort: ECHO, nodePort: LB_NODE_PORT }],
        loadBalancerIngress: [LB_IP],
        loadBalancerSourceRanges: [`${A.client.split(".").slice(0, 3).join(".")}.0/24`],
        externalTrafficPolicy: "Local",
        healthCheckNodePort: LB_HC_NODE_PORT,
      }),
    );
    c.apiserver.create("endpointslices", httpSlice("lb", [pod1, c.remotePod]));
    const lb =
      (await withLog(() =>
        pollUntil(async () => await ask(c.client, LB_IP, 80, 4), (r) => ids(r).every((x) => x === pod1.id), {
          timeoutMs: 20_000,
          intervalMs: 300,
          what: `LB ${LB_IP}: the local endpoint only`,
        })
      )).value;
    for (const r of remotes(lb)) assert.ok(r.startsWith(`${A.client}:`), `eTP=Local keeps the source: ${r}`);
    const denied = await c.request(c.deniedClient, { host: LB_IP, port: 80, count: 2, timeoutMs: 1500 });
    for (const r of denied) {
      assert.ok(
        typeof r === "string" || !("id" in r),
        `a denied client must get no reply: ${JSON.stringify(denied)}`,
      );
    }
    // Cluster traffic is not restricted by the external policy: the remote endpoint serves it too.
    const inside = await pollUntil(
      async () => ids(await ask(pod3.ns, LB_SVC_IP, 80, 6)),
      (r) => r.includes(c.remotePod.id),
      {
        timeoutMs: 10_000,
        intervalMs: 300,
        what: "ClusterIP of the LB service reaches the remote endpoint",
      },
    );
    assert.ok(inside.value.every((x) => x === pod1.id || x === c.remotePod.id), `${inside.value}`);
  });

  it("externalIP (externalTrafficPolicy=Cluster) and internalTrafficPolicy=Local", async () => {
    const [, pod2, pod3] = c.localPods;
    // The EndpointSlice first, so that no sync sees the Service without its endpoints.
    c.apiserver.create("endpointslices", httpSlice("ext", [pod2, c.remotePod]));
    c.apiserver.create(
      "services",
      e2eService({
        name: "ext",
        clusterIP: EXT_SVC_IP,
        ports: [{ name: "http", port: 80, targetPort: ECHO }],
        externalIPs: [EXTERNAL_IP],
        internalTrafficPolicy: "Local",
      }),
    );
    const ext = await withLog(() =>
      pollUntil(
        async () => ids(await ask(c.client, EXTERNAL_IP, 80, 6)),
        // A batch that straddles the sync may hold a refusal: wait for one that reached only endpoints.
        (r) =>
          r.includes(pod2.id) && r.includes(c.remotePod.id) &&
          r.every((x) => x === pod2.id || x === c.remotePod.id),
        { timeoutMs: 20_000, intervalMs: 300, what: `externalIP ${EXTERNAL_IP}: both endpoints` },
      )
    );
    assert.ok(ext.value.every((x) => x === pod2.id || x === c.remotePod.id), `${ext.value}`);
    assert.deepEqual(
      ids(await ask(pod3.ns, EXT_SVC_IP, 80, 6)),
      Array(6).fill(pod2.id),
      "iTP=Local: local endpoint only",
    );
  });

  it("ClientIP affinity: every connection of a client goes to the same endpoint (IPVS persistence)", async () => {
    const [pod1, pod2, pod3] = c.localPods;
    c.apiserver.create(
      "services",
      e2eService({
        name: "sticky",
        clusterIP: STICKY_SVC_IP,
        ports: [{ name: "http", port: 80, targetPort: ECHO }],
        sessionAffinityTimeoutSeconds: 60,
      }),
    );
    c.apiserver.create("endpointslices", httpSlice("sticky", [pod1, pod2]));
    await withLog(() =>
      pollUntil(
        async () => ids(await ask(pod3.ns, STICKY_SVC_IP, 80)),
        (r) => r[0] === pod1.id || r[0] === pod2.id,
        { timeoutMs: 20_000, intervalMs: 300, what: `${STICKY_SVC_IP}:80 served` },
      )
    );
    const r = ids(await ask(pod3.ns, STICKY_SVC_IP, 80, 8));
    assert.equal(new Set(r).size, 1, `one endpoint for every connection: ${r}`);
    assert.ok(r[0] === pod1.id || r[0] === pod2.id, `${r}`);
    const vs = await ipvsSave();
    assert.match(vs, new RegExp(`^-A -t ${STICKY_SVC_IP}:80 -s rr -p 60$`, "m"), vs);
  });

  it("graceful termination: an established connection to a removed endpoint keeps working, new ones go elsewhere", async () => {
    const [pod1, pod2, pod3] = c.localPods;
    c.apiserver.create(
      "services",
      e2eService({
        name: "hold",
        clusterIP: HOLD_SVC_IP,
        ports: [{ name: "http", port: 80, targetPort: HOLD }],
      }),
    );
    const holdSlice = (pods: readonly E2ePod[]) =>
      e2eEndpointSlice({
        service: "hold",
        ports: [{ name: "http", port: HOLD }],
        endpoints: pods.map((p) => ({ ip: p.ip, nodeName: c.nodeName })),
      });
    c.apiserver.create("endpointslices", holdSlice([pod1, pod2]));
    await withLog(() =>
      pollUntil(
        async () => ids(await ask(pod3.ns, HOLD_SVC_IP, 80)),
        (r) => r[0] === pod1.id || r[0] === pod2.id,
        {
          timeoutMs: 20_000,
          intervalMs: 300,
          what: `${HOLD_SVC_IP}:80 served`,
        },
      )
    );
    const go = join(process.env.TMPDIR ?? tmpdir(), `ipvs-hold-go-${process.pid}`);
    const held = heldConnection(pod3, HOLD_SVC_IP, 80, go);
    const first = await held.first;
    const [kept, other] = first === pod1.id ? [pod1, pod2] : [pod2, pod1];
    c.apiserver.update("endpointslices", holdSlice([other]));
    await withLog(() =>
      pollUntil(
        async () => ids(await ask(pod3.ns, HOLD_SVC_IP, 80, 4)),
        (r) => r.every((x) => x === other.id),
        { timeoutMs: 20_000, intervalMs: 300, what: `new connections to ${other.id} only` },
      )
    );
    // The removed real server stays, with weight 0, while the held connection is active.
    const draining = await ipvsSave();
    writeFileSync(go, "");
    try {
      assert.equal(
        await held.second,
        kept.id,
        "the established connection is still served by the removed endpoint",
      );
    } finally {
      rmSync(go, { force: true });
    }
    assert.match(
      draining,
      new RegExp(`^-a -t ${HOLD_SVC_IP}:80 -r ${kept.ip}:${HOLD} -m -w 0$`, "m"),
      draining,
    );
  });

  it("an agent restart fails no request", async () => {
    let stop = false;
    let sent = 0;
    const failed: string[] = [];
    const ok = new Set(c.localPods.slice(0, 2).map((p) => p.id));
    const loop = (async () => {
      while (!stop) {
        const [r] = ids(await ask(c.client, A.nodeIP, NODE_PORT));
        sent++;
        if (!ok.has(r)) failed.push(r);
      }
    })();
    await new Promise((r) => setTimeout(r, 500));
    await start();
    await new Promise((r) => setTimeout(r, 2000));
    stop = true;
    await loop;
    assert.deepEqual(failed, [], `${failed.length} of ${sent} requests failed`);
    assert.ok(sent >= 3, `only ${sent} requests`);
  });

  it("--cleanup removes the virtual servers, kube-ipvs0, the ipsets and the chains", async () => {
    await c.stopAgent();
    const r = await runAgentOnce(c.node, ["--cleanup", ...IPVS], { timeoutMs: 120_000 });
    assert.equal(r.code, 0, r.stderr + r.stdout);
    assert.equal((await ipvsSave()).trim(), "");
    assert.notEqual(
      (await c.node.exec(["ip", "link", "show", "kube-ipvs0"])).code,
      0,
      "kube-ipvs0 must be gone",
    );
    assert.doesNotMatch(await c.node.execOk(["ipset", "save"]), /KUBE-/);
    assert.doesNotMatch(await c.iptablesSave("nat"), /KUBE-/);
    assert.doesNotMatch(await c.iptablesSave("filter"), /KUBE-(?!FIREWALL)/);
  });
});
