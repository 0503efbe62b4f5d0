/**
 * The compiled agent in IPVS mode, end to end. Runs INSIDE a user-mode-linux guest whose kernel has IPVS,
 * ipset and IPv4 iptables (tests/e2e/ipvs_agent_uml_test.ts starts it there; it is not a test file of its
 * own, the host kernel has no IPVS): dist/edgeproxy --proxy-mode ipvs runs in the "node" namespace of
 * tests/support/e2e_cluster.ts against the in-process test apiserver, and real TCP and UDP goes from pods
 * and an external client. Proves: /proxyMode and the deprecation warning; kube-ipvs0, virtual servers,
 * ipsets; ClusterIP and NodePort round robin, TCP and UDP; masquerade of NodePort traffic and none for
 * pod-to-ClusterIP; an endpoint change as a partial sync (the removed real server takes no new
 * connections); drift repair (a deleted virtual server, also while one of its real servers drains, and a
 * ClusterIP taken off kube-ipvs0) within 2 × syncPeriod; a restart with zero failed requests; `--cleanup`.
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
/** The guest has one slow CPU: every step gets generous time. */
const READY_MS = 120_000;

function ids(rs: readonly EchoResult[]): string[] {
  return rs.map((r) => (typeof r === "object" && r !== null && "id" in r ? r.id : JSON.stringify(r)));
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
    await logged(
      from,
      new RegExp(`full resync of IPv4 rules: .*IPVS virtual server ${SVC_IP}:80/TCP is missing`),
    );
    assert.deepEqual(ids(await ask(pod3.ns, SVC_IP, 80, 3)), Array(3).fill(pod1.id));
    assert.doesNotMatch(c.agent!.logs().slice(from), /drift check .* failed/);
    c.apiserver.update("endpointslices", slice([pod1, pod2]));
    await pollUntil(
      async () => ids(await ask(pod3.ns, SVC_IP, 80, 6)),
      (r) => r.includes(pod1.id) && r.includes(pod2.id),
      { timeoutMs: 20_000, intervalMs: 200, what: "both endpoints again" },
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
