/**
 * The agent speaks whatever HTTP version the apiserver offers by ALPN: HTTP/2 when offered (as a real
 * kube-apiserver does, and the e2e cluster's default), HTTP/1.1 when the server speaks only that. For each
 * server: the compiled agent in poll mode starts, programs a Service, follows an added endpoint with real
 * traffic, and every request the apiserver recorded used the expected version.
 * Needs root, `ip netns` and dist/edgeproxy (`bash compile.sh`).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  createE2eCluster,
  type E2eCluster,
  type E2ePod,
  e2eUnavailableReason,
} from "../support/e2e_cluster.ts";
import { e2eEndpointSlice, e2eService } from "../support/e2e_objects.ts";
import { pollUntil } from "../support/e2e_poll.ts";
import type { EchoResult } from "../support/echo_server.ts";

const skip = e2eUnavailableReason();
if (skip !== "") console.log(`SKIP tests/e2e/agent_apiserver_protocol_test.ts: ${skip}`);

const ECHO = 8080;
const IP = "10.96.0.30";
/** Poll mode's promise: a change reaches the kernel within the interval + 1 s (traffic gets a margin). */
const FOLLOW_MS = 2000 + 1000 + 2000;

const SERVERS = [
  { label: "an apiserver offering HTTP/2", http2: true, version: "2.0" },
  { label: "an HTTP/1.1-only apiserver (ALPN fallback)", http2: false, version: "1.1" },
] as const;

for (const server of SERVERS) {
  describe(`edgeproxy e2e: ${server.label}`, { skip: skip || undefined }, () => {
    let c: E2eCluster;
    let pod1: E2ePod;
    let pod2: E2ePod;
    const slice = (pods: E2ePod[]) =>
      e2eEndpointSlice({
        service: "proto",
        ports: [{ name: "http", port: ECHO }],
        endpoints: pods.map((p) => ({ ip: p.ip, nodeName: p.nodeName })),
      });
    const probe = async (count: number) =>
      (await c.request(c.client, { host: IP, port: 80, count, timeoutMs: 1000 })).map((r: EchoResult) =>
        typeof r === "object" && r !== null && "id" in r ? r.id : JSON.stringify(r)
      );

    before(async () => {
      c = await createE2eCluster({
        prefix: server.http2 ? "ph2" : "ph1",
        agent: false,
        apiserver: { http2: server.http2 },
      });
      [pod1, pod2] = c.localPods;
      c.apiserver.create(
        "services",
        e2eService({ name: "proto", clusterIP: IP, ports: [{ name: "http", port: 80, targetPort: ECHO }] }),
      );
      c.apiserver.create("endpointslices", slice([pod1]));
      await c.startAgent({ extraArgs: ["--api-mode=poll", "--poll-interval=2s"] });
    }, { timeout: 60_000 });

    after(async () => {
      await c?.teardown();
    }, { timeout: 30_000 });

    it(`programs a Service and follows a change; every request used HTTP/${server.version}`, {
      timeout: 60_000,
    }, async () => {
      const fail = (e: unknown) => {
        throw new Error(`${(e as Error).message}\nagent log:\n${c.agent?.tail(30)}`);
      };
      await pollUntil(() => probe(1), (r) => r[0] === pod1.id, { timeoutMs: FOLLOW_MS, what: "the Service" })
        .catch(fail);
      c.apiserver.update("endpointslices", slice([pod1, pod2]));
      await pollUntil(
        () => probe(8),
        (r) => r.includes(pod2.id) && r.every((x) => x === pod1.id || x === pod2.id),
        { timeoutMs: FOLLOW_MS, what: "the added endpoint to receive traffic" },
      ).catch(fail);
      const reqs = c.apiserver.requests;
      const versions = [...new Set(reqs.map((r) => r.httpVersion))];
      console.log(
        `${reqs.length} requests (${reqs.filter((r) => r.watch).length} watches), versions ${versions}`,
      );
      assert.ok(reqs.some((r) => r.watch), "the agent watched");
      assert.deepEqual(versions, [server.version], `every request over HTTP/${server.version}`);
      assert.equal(c.agent!.exit(), null, "the agent runs on");
    });
  });
}
