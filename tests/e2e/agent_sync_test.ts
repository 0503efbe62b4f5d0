/**
 * End to end, whole agent, over time: dist/edgeproxy in a "node" network namespace follows changes from
 * the test apiserver with partial syncs (traffic follows within seconds), repairs a foreign flush of its
 * nat KUBE-SERVICES chain within 2 × --iptables-sync-period, serves /healthz and /metrics inside the
 * namespace, leaves its rules in place on SIGTERM, and `--cleanup` removes them (twice, exit 0 both times).
 * Topology: tests/support/e2e_cluster.ts. Needs root, `ip netns` and dist/edgeproxy (`bash compile.sh`).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  createE2eCluster,
  E2E_ADDRS as A,
  type E2eCluster,
  type E2ePod,
  e2eUnavailableReason,
} from "../support/e2e_cluster.ts";
import { e2eEndpointSlice, e2eService } from "../support/e2e_objects.ts";
import { runAgentOnce } from "../support/e2e_agent.ts";
import { httpGetIn } from "../support/e2e_http.ts";
import { pollUntil } from "../support/e2e_poll.ts";
import type { EchoResult } from "../support/echo_server.ts";

const skip = e2eUnavailableReason();
if (skip !== "") console.log(`SKIP tests/e2e/agent_sync_test.ts: ${skip}`);

const ECHO = 8080;
const SYNC_PERIOD_MS = 5000;
/** "Traffic follows within a couple of seconds" of an apiserver change. */
const FOLLOW_MS = 5000;
const DYN = "10.96.0.20";
const DYN2 = "10.96.0.21";

function ids(rs: readonly EchoResult[]): string[] {
  return rs.map((r) => (typeof r === "string" ? r : "id" in r ? r.id : JSON.stringify(r)));
}

/** The value of one sample (`name{labels}` exactly as exposed, e.g. `x{ip_family="IPv4"}`), or null. */
function sample(text: string, series: string): number | null {
  for (const line of text.split("\n")) {
    if (line.startsWith(series + " ")) return Number(line.slice(series.length + 1).trim().split(" ")[0]);
  }
  return null;
}

describe("edgeproxy agent e2e: syncing, repair, servers and cleanup", { skip: skip || undefined }, () => {
  let c: E2eCluster;
  let pod1: E2ePod;
  let pod2: E2ePod;
  let pod3: E2ePod;

  const slice = (service: string, pods: E2ePod[]) =>
    e2eEndpointSlice({
      service,
      ports: [{ name: "http", port: ECHO }],
      endpoints: pods.map((p) => ({ ip: p.ip, nodeName: p.nodeName })),
    });
  const service = (name: string, clusterIP: string) =>
    e2eService({ name, clusterIP, ports: [{ name: "http", port: 80, targetPort: ECHO }] });
  const metrics = async () => {
    const m = await httpGetIn(c.node, `http://${A.metrics}/metrics`);
    assert.equal(m.status, 200, `metrics: ${m.curlError}`);
    return m.body;
  };
  /** `count` TCP requests from the client to ip:80; the ids that answered (or "timeout"/"refused"). */
  const probe = async (ip: string, count: number, timeoutMs = 1000) =>
    ids(await c.request(c.client, { host: ip, port: 80, count, timeoutMs }));

  before(async () => {
    c = await createE2eCluster({ prefix: "agsy", agent: false });
    [pod1, pod2, pod3] = c.localPods;
    c.apiserver.create("services", service("dyn", DYN));
    c.apiserver.create("endpointslices", slice("dyn", [pod1]));
    await c.startAgent({ syncPeriod: `${SYNC_PERIOD_MS / 1000}s` });
    await pollUntil(() => probe(DYN, 1), (r) => r[0] === "pod1", {
      timeoutMs: 15000,
      what: "the initial rules to be programmed",
    }).catch((e) => {
      throw new Error(`${(e as Error).message}\nagent log:\n${c.agent?.tail()}`);
    });
  }, { timeout: 60_000 });

  after(async () => {
    await c?.teardown();
  }, { timeout: 30_000 });

  it("partial syncs: an added endpoint, a removed endpoint and a new Service are followed within seconds", async () => {
    const before = await metrics();
    const partial = 'kubeproxy_sync_partial_proxy_rules_duration_seconds_count{ip_family="IPv4"}';
    const full = 'kubeproxy_sync_full_proxy_rules_duration_seconds_count{ip_family="IPv4"}';
    // A labelled histogram has no series before its first observation: no partial sync yet means 0.
    const partialBefore = sample(before, partial) ?? 0;
    const fullBefore = sample(before, full);
    assert.ok(fullBefore !== null && fullBefore >= 1, `the first sync is a full one:\n${before}`);

    c.apiserver.update("endpointslices", slice("dyn", [pod1, pod2]));
    await pollUntil(
      () => probe(DYN, 8),
      (r) => r.includes("pod2") && r.every((x) => x === "pod1" || x === "pod2"),
      {
        timeoutMs: FOLLOW_MS,
        what: "an added endpoint (pod2) to receive traffic",
      },
    );

    c.apiserver.update("endpointslices", slice("dyn", [pod2]));
    await pollUntil(() => probe(DYN, 6), (r) => r.every((x) => x === "pod2"), {
      timeoutMs: FOLLOW_MS,
      what: "a removed endpoint (pod1) to stop receiving traffic",
    });
    assert.deepEqual(await probe(DYN, 6), Array(6).fill("pod2"), "pod1 stays out");

    c.apiserver.create("services", service("dyn2", DYN2));
    c.apiserver.create("endpointslices", slice("dyn2", [pod3]));
    await pollUntil(() => probe(DYN2, 1, 500), (r) => r[0] === "pod3", {
      timeoutMs: FOLLOW_MS,
      what: "a new Service to receive traffic",
    });

    c.apiserver.remove("services", "e2e", "dyn2");
    c.apiserver.remove("endpointslices", "e2e", "dyn2-e2e");
    await pollUntil(() => probe(DYN2, 1, 500), (r) => r[0] === "timeout", {
      timeoutMs: FOLLOW_MS,
      what: "a deleted Service to stop receiving traffic",
    });
    assert.deepEqual(await probe(DYN, 2), ["pod2", "pod2"], "the other Service is untouched");

    const afterText = await metrics();
    assert.ok(
      sample(afterText, partial)! >= partialBefore + 4,
      `four changes, each awaited, need at least four partial syncs: ${partial} ${partialBefore} → ${
        sample(afterText, partial)
      }`,
    );
    assert.equal(sample(afterText, full), fullBefore, "no full resync was needed for these changes");
  });

  it("a foreign flush of nat KUBE-SERVICES is repaired within 2 × syncPeriod", async () => {
    assert.deepEqual(await probe(DYN, 1), ["pod2"]);
    await c.node.execOk(["iptables", "-w", "5", "-t", "nat", "-F", "KUBE-SERVICES"]);
    const flushedAt = Date.now();
    const flushed = await c.node.execOk(["iptables", "-w", "5", "-t", "nat", "-S", "KUBE-SERVICES"]);
    assert.equal(flushed.trim(), "-N KUBE-SERVICES", "the flush emptied the chain");
    const { value } = await pollUntil(() => probe(DYN, 1, 500), (r) => r[0] === "pod2", {
      timeoutMs: 2 * SYNC_PERIOD_MS,
      intervalMs: 250,
      what: "traffic to come back after the flush",
    }).catch((e) => {
      throw new Error(`${(e as Error).message}\nagent log:\n${c.agent?.tail()}`);
    });
    assert.deepEqual(value, ["pod2"]);
    assert.ok(Date.now() - flushedAt <= 2 * SYNC_PERIOD_MS + 1000, "repaired within 2 × syncPeriod");
    assert.match(c.agent!.logs(), /rules changed outside edgeproxy/, "the repair is logged with its reason");
    const rules = await c.iptablesSave("nat");
    assert.match(rules, /-A KUBE-SERVICES .*"e2e\/dyn:http cluster IP"/);
    assert.match(rules, /-A KUBE-SERVICES .*kubernetes service nodeports/);
  });

  it("edgeproxy_drift_repairs_total counts the repair", async () => {
    const text = await metrics();
    assert.ok((sample(text, 'edgeproxy_drift_repairs_total{ip_family="IPv4"}') ?? 0) >= 1, text);
  });

  it("/healthz, /livez and /metrics answer inside the node namespace only", async () => {
    const h = await httpGetIn(c.node, `http://${A.healthz}/healthz`);
    assert.equal(h.status, 200, `${h.curlError} ${h.body}`);
    assert.match(h.headers["content-type"] ?? "", /application\/json/);
    const body = JSON.parse(h.body);
    assert.equal(typeof body.lastUpdated, "string");
    assert.equal(typeof body.currentTime, "string");
    assert.equal(body.nodeEligible, true);
    const l = await httpGetIn(c.node, `http://${A.healthz}/livez`);
    assert.equal(l.status, 200, `${l.curlError} ${l.body}`);

    const text = await metrics();
    const last = sample(text, 'kubeproxy_sync_proxy_rules_last_timestamp_seconds{ip_family="IPv4"}');
    assert.ok(last !== null && last > Date.now() / 1000 - 120, `a recent sync timestamp: ${last}`);
    const natRules = sample(text, 'kubeproxy_sync_proxy_rules_iptables_total{ip_family="IPv4",table="nat"}');
    assert.ok(natRules !== null && natRules > 0, "nat rules counted");
    assert.match(text, /^# TYPE kubeproxy_sync_proxy_rules_duration_seconds histogram$/m);

    // Bound to 127.0.0.1: not reachable at the node IP.
    const outside = await httpGetIn(c.client, `http://${A.nodeIP}:${A.metrics.split(":")[1]}/metrics`, {
      timeoutMs: 1500,
    });
    assert.equal(outside.status, 0, "metrics must not answer on the node IP");
  });

  it("SIGTERM leaves the rules in place; --cleanup removes every chain and exits 0, twice", async () => {
    const exit = await c.stopAgent();
    assert.deepEqual(exit, { code: 0, signal: null }, c.agent!.tail());
    assert.deepEqual(await probe(DYN, 1), ["pod2"], "traffic still flows with the agent stopped");
    assert.match(await c.iptablesSave(), /KUBE-SERVICES/);

    // What is left with a KUBE- name, except KUBE-FIREWALL and its INPUT/OUTPUT jumps, which kube-proxy
    // shares with kubelet and never removes (upstream CleanupLeftovers).
    const leftovers = (save: string) =>
      save.split("\n").filter((l) =>
        l.includes("KUBE-") && !/^(:KUBE-FIREWALL |-A (INPUT|OUTPUT|KUBE-FIREWALL) )/.test(l)
      );
    for (const round of [1, 2]) {
      const r = await runAgentOnce(c.node, ["--cleanup", "-v=2"]);
      assert.equal(r.code, 0, `--cleanup round ${round}: ${r.stderr}`);
      assert.deepEqual(leftovers(await c.iptablesSave()), [], `round ${round}: IPv4 rules left`);
      assert.deepEqual(
        leftovers(await c.node.execOk(["ip6tables-save"])),
        [],
        `round ${round}: IPv6 rules left`,
      );
    }
    assert.deepEqual(await probe(DYN, 1, 800), ["timeout"], "no Service rules anymore");
  });
});
