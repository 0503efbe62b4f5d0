/**
 * Edge autonomy, end to end: the agent (dist/edgeproxy) in a node namespace with a state cache. A reboot
 * while offline (SIGKILL, every chain flushed, the apiserver unreachable) must bring ClusterIP and NodePort
 * traffic back from the cache; the apiserver then returns with changes and the node converges without a
 * flush; a flush during an outage is repaired from memory. Topology: tests/support/e2e_cluster.ts.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  createE2eCluster,
  E2E_ADDRS as A,
  type E2eCluster,
  e2eUnavailableReason,
} from "../support/e2e_cluster.ts";
import { e2eEndpointSlice, e2eService } from "../support/e2e_objects.ts";
import { httpGetIn } from "../support/e2e_http.ts";
import { pollUntil } from "../support/e2e_poll.ts";
import type { EchoResult } from "../support/echo_server.ts";
import type { Netns } from "../support/netns.ts";

const skip = e2eUnavailableReason();
if (skip !== "") console.log(`SKIP tests/e2e/agent_edge_autonomy_test.ts: ${skip}`);

const ECHO = 8080;
const SVC_IP = "10.96.1.10";
const NEW_SVC_IP = "10.96.1.11";
const NODE_PORT = 30100;

function ids(rs: readonly EchoResult[]): string[] {
  return rs.map((r) => (typeof r === "object" && r !== null && "id" in r ? r.id : JSON.stringify(r)));
}

describe("edgeproxy e2e: edge autonomy (state cache, outages, reboot while offline)", {
  skip: skip || undefined,
}, () => {
  let c: E2eCluster;
  let stateDir: string;

  const ask = async (from: Netns, host: string, port: number, count = 4) =>
    ids(await c.request(from, { host, port, count, timeoutMs: 1500 }));
  const metric = async (name: string): Promise<number | null> => {
    const r = await httpGetIn(c.node, `http://${A.metrics}/metrics`);
    const m = r.body.match(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, "m"));
    return m ? Number(m[1]) : null;
  };
  const flushAll = async () => {
    // What a reboot leaves: empty tables. (Removes our chains and the jumps to them.)
    for (const t of ["nat", "filter", "mangle"]) {
      const r1 = await c.node.exec(["iptables", "-t", t, "-F"]);
      const r2 = await c.node.exec(["iptables", "-t", t, "-X"]);
      assert.equal(r1.code + r2.code, 0, `flushing ${t}: ${r1.stderr}${r2.stderr}`);
    }
  };

  before(async () => {
    stateDir = await mkdtemp(join(tmpdir(), "edgeproxy-state-"));
    c = await createE2eCluster({ prefix: "edge", agent: false });
    const [pod1, pod2] = c.localPods;
    c.apiserver.create(
      "services",
      e2eService({
        name: "web",
        type: "NodePort",
        clusterIP: SVC_IP,
        ports: [{ name: "http", port: 80, targetPort: ECHO, nodePort: NODE_PORT }],
      }),
    );
    c.apiserver.create(
      "endpointslices",
      e2eEndpointSlice({
        service: "web",
        ports: [{ name: "http", port: ECHO }],
        endpoints: [{ ip: pod1.ip, nodeName: c.nodeName }, { ip: pod2.ip, nodeName: c.nodeName }],
      }),
    );
    await c.startAgent({ stateDir, syncPeriod: "3s" });
  });

  after(async () => {
    await c?.teardown();
    if (stateDir) await rm(stateDir, { recursive: true, force: true });
  });

  it("writes the last-known state after syncing (mode 0600, this node's name)", async () => {
    const file = join(stateDir, "state.json");
    await pollUntil(() => stat(file).then(() => true, () => false), (x) => x, {
      timeoutMs: 15_000,
      what: "state.json to be written",
    });
    assert.equal((await stat(file)).mode & 0o777, 0o600);
    const header = JSON.parse((await readFile(file, "utf8")).split("\n")[0]);
    assert.equal(header.nodeName, c.nodeName);
    assert.match(await readFile(file, "utf8"), new RegExp(SVC_IP.replaceAll(".", "\\.")));
  });

  it("repairs a flush during an apiserver outage from memory", async () => {
    assert.deepEqual(new Set(await ask(c.client, A.nodeIP, NODE_PORT)).size > 0, true);
    await c.apiserverLink.cut();
    try {
      await flushAll();
      const back = await pollUntil(
        () => ask(c.client, A.nodeIP, NODE_PORT, 1),
        (r) => r[0]?.startsWith("pod"),
        {
          timeoutMs: 2 * 3000 + 5000,
          what: "NodePort traffic to come back after a flush while the apiserver is unreachable",
        },
      );
      console.log(`flush repaired during outage after ${back.elapsedMs} ms`);
    } finally {
      await c.apiserverLink.restore();
    }
  });

  it("comes back from the cache after a reboot while offline, then converges when the apiserver returns", async () => {
    const [pod1, pod2, pod3] = c.localPods;
    // Let the cache catch up with the current state, then "reboot": SIGKILL and empty tables.
    await new Promise((r) => setTimeout(r, 500));
    await c.agent!.stop("SIGKILL");
    await flushAll();
    await c.apiserverLink.cut();
    const dead = await ask(c.client, A.nodeIP, NODE_PORT, 1);
    assert.ok(!dead[0].startsWith("pod"), `traffic must be dead after the reboot, got ${dead}`);

    const started = Date.now();
    await c.startAgent({
      stateDir,
      syncPeriod: "3s",
      waitReady: false,
      extraArgs: ["--cache-start-deadline", "1s"],
    });
    const clusterIP = await pollUntil(() => ask(pod3.ns, SVC_IP, 80, 1), (r) => r[0]?.startsWith("pod"), {
      timeoutMs: 10_000,
      intervalMs: 100,
      what: "ClusterIP traffic from the state cache",
    });
    const nodePort = await pollUntil(
      () => ask(c.client, A.nodeIP, NODE_PORT, 1),
      (r) => r[0]?.startsWith("pod"),
      {
        timeoutMs: 10_000,
        intervalMs: 100,
        what: "NodePort traffic from the state cache",
      },
    );
    const fromStart = Date.now() - started;
    console.log(
      `offline restart: ClusterIP after ${clusterIP.elapsedMs} ms, NodePort after ${nodePort.elapsedMs} ms more, ` +
        `both working ${fromStart} ms after start ` +
        `(cache deadline 1000 ms)`,
    );
    // Served while the apiserver is still cut (each poll above is bounded): from the cache, not from a list.
    // How fast is a figure (printed), not an assertion: it depends on the machine's load.
    assert.equal(c.apiserverLink.up, false);
    assert.match(c.agent!.logs(), /from the state cache written/);
    assert.equal(await metric("edgeproxy_serving_from_cache"), 1);
    const hz = await httpGetIn(c.node, `http://${A.healthz}/healthz`);
    assert.equal(hz.status, 200);
    assert.equal(JSON.parse(hz.body).servingFromCache, true);

    // While offline, the cluster changes: pod2 leaves web, and a new Service appears.
    c.apiserver.update(
      "endpointslices",
      e2eEndpointSlice({
        service: "web",
        ports: [{ name: "http", port: ECHO }],
        endpoints: [{ ip: pod1.ip, nodeName: c.nodeName }],
      }),
    );
    c.apiserver.create(
      "services",
      e2eService({
        name: "new",
        clusterIP: NEW_SVC_IP,
        ports: [{ name: "http", port: 80, targetPort: ECHO }],
      }),
    );
    c.apiserver.create(
      "endpointslices",
      e2eEndpointSlice({
        service: "new",
        ports: [{ name: "http", port: ECHO }],
        endpoints: [{ ip: pod3.ip, nodeName: c.nodeName }],
      }),
    );
    await c.apiserverLink.restore();

    await pollUntil(() => ask(c.client, A.nodeIP, NODE_PORT, 6), (r) => r.every((x) => x === pod1.id), {
      timeoutMs: 20_000,
      what: `web to be served by ${pod1.id} only after the apiserver returned`,
    });
    await pollUntil(() => ask(pod1.ns, NEW_SVC_IP, 80, 1), (r) => r[0] === pod3.id, {
      timeoutMs: 20_000,
      what: "the Service created while offline to work",
    });
    // Serving from the cache ends once Services, EndpointSlices and the Node are all listed live again; each
    // reflector leaves its own outage backoff (at most 30 s), so the Node may come a little after the rest.
    await pollUntil(() => metric("edgeproxy_serving_from_cache"), (v) => v === 0, {
      timeoutMs: 35_000,
      what: "edgeproxy_serving_from_cache to drop to 0 once every kind is listed live",
    });
    assert.ok(!(await ask(c.client, A.nodeIP, NODE_PORT, 6)).includes(pod2.id));
    void pod2;
  });
});
