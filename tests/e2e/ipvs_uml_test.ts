/**
 * The IPVS Provider against a real IPVS kernel: inside a user-mode-linux guest (tests/support/uml.ts),
 * tests/support/ipvs_uml_driver.ts programs IPVS, ipsets, iptables (legacy) and kube-ipvs0 through
 * lib/proxy/ipvs and sends real TCP traffic from a client namespace to endpoints in another: ClusterIP
 * and NodePort round-robin, UDP, externalIP and load-balancer VIP with externalTrafficPolicy=Local, ClientIP affinity, partial sync with graceful termination, no endpoints,
 * drift detection and repair, service deletion and --cleanup. Skipped with the reason when UML cannot run.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { runInUml, umlSkipReason } from "../support/uml.ts";

const skip = await umlSkipReason();
if (skip) console.log(`ipvs_uml_test: skipped: ${skip}`);

describe("IPVS mode in a user-mode-linux kernel", { skip: skip ?? false }, () => {
  // The guest's own bound plus boot, not the runner's 120 s default.
  it(
    "programs IPVS, ipsets, iptables and kube-ipvs0 and carries real traffic",
    { timeout: 300_000 },
    async () => {
      const r = await runInUml(
        `cd ${process.cwd()} && ${process.execPath} run ${
          /bun/.test(process.execPath) ? "" : "-A "
        }tests/support/ipvs_uml_driver.ts`,
        {
          timeoutMs: 240_000,
        },
      );
      const results = new Map<string, unknown>();
      for (const line of r.output.split("\n")) {
        const m = /^RESULT (\S+) (.*)$/.exec(line);
        if (m) results.set(m[1], JSON.parse(m[2]));
      }
      const detail = `${r.output.slice(-4000)}\n--- console ---\n${r.console.slice(-2000)}`;
      assert.equal(r.code, 0, detail);
      console.log(
        `uml boot ${r.bootMs} ms, whole run ${r.totalMs} ms, first sync ${results.get("firstSyncMs")} ms`,
      );
      const get = (k: string) => {
        assert.ok(results.has(k), `no result ${k}\n${detail}`);
        return results.get(k);
      };
      const ipvsadm = get("ipvsadm") as string;
      assert.match(ipvsadm, /^-A -t 10\.96\.0\.10:80 -s rr$/m);
      assert.match(ipvsadm, /^-a -t 10\.96\.0\.10:80 -r 10\.99\.0\.2:8080 -m -w 1$/m);
      assert.match(ipvsadm, /^-a -t 10\.96\.0\.10:80 -r 10\.99\.0\.3:8080 -m -w 1$/m);
      assert.match(ipvsadm, /^-A -t 10\.98\.0\.1:30080 -s rr$/m, "NodePort on every node address");
      assert.match(ipvsadm, /^-A -t 10\.99\.0\.1:30080 -s rr$/m);
      const ipsets = get("ipsets") as string;
      assert.match(ipsets, /^add KUBE-CLUSTER-IP 10\.96\.0\.10,tcp:80$/m);
      assert.match(ipsets, /^add KUBE-NODE-PORT-TCP 30080$/m);
      assert.match(ipsets, /^add KUBE-LOOP-BACK 10\.99\.0\.2,tcp:8080,10\.99\.0\.2$/m);
      assert.match(ipsets, /^add KUBE-IPVS-IPS 10\.96\.0\.10$/m);
      assert.equal((get("dummy") as string).trim(), "10.96.0.10/32");

      // rr: strictly alternating over both endpoints.
      const cip = get("clusterIP") as string[];
      assert.deepEqual([...new Set(cip)].sort(), ["pod1", "pod2"], `ClusterIP answers: ${cip}`);
      for (let i = 1; i < cip.length; i++) assert.notEqual(cip[i], cip[i - 1], `round robin: ${cip}`);
      assert.deepEqual([...new Set(get("nodePort") as string[])].sort(), ["pod1", "pod2"]);
      assert.equal(get("resyncUnchanged"), true);

      assert.match(get("affinityIpvsadm") as string, /^-A -t 10\.96\.0\.10:80 -s rr -p 300$/m);
      const aff = get("affinity") as string[];
      assert.equal(new Set(aff).size, 1, `affinity: ${aff}`);
      assert.ok(aff[0] === "pod1" || aff[0] === "pod2");

      const graceful = get("gracefulIpvsadm") as string;
      assert.match(graceful, /-r 10\.99\.0\.2:8080 -m -w 1/);
      assert.match(graceful, /-r 10\.99\.0\.3:8080 -m -w 0/, "removed endpoint kept with weight 0");
      assert.deepEqual(get("afterRemoval"), ["pod1", "pod1", "pod1", "pod1"]);

      assert.doesNotMatch(
        get("drainedIpvsadm") as string,
        /10\.99\.0\.9/,
        "never-used endpoint deleted at once",
      );
      assert.deepEqual(get("terminating"), [
        "10.96.0.10:80/TCP/10.99.0.3:8080",
        "10.98.0.1:30080/TCP/10.99.0.3:8080",
      ], "the used one still drains where it served");
      // Endpoints that served connections drain with weight 0; none takes new connections.
      assert.doesNotMatch(get("noEndpointsIpvsadm") as string, /-w [1-9]/);
      assert.match(get("noEndpointsIpvsadm") as string, /^-A -t 10\.96\.0\.10:80/m);
      for (const a of get("noEndpoints") as string[]) {
        assert.ok(a === "refused" || a === "timeout", `no endpoints: ${a}`);
      }

      assert.match(get("drift") as string, /10\.96\.0\.10:80\/TCP is missing/);
      assert.equal(get("repaired"), null);
      assert.equal((get("repairedTraffic") as string[]).length, 2);
      assert.ok((get("repairedTraffic") as string[]).every((a) => a === "pod1" || a === "pod2"));

      assert.equal(get("emptyIpvsadm"), "");
      assert.equal(get("emptyDummy"), "");
      const udp = get("udp") as string[];
      assert.deepEqual([...new Set(udp)].sort(), ["pod1", "pod2"], `UDP answers: ${udp}`);
      // eTP=Local: external addresses reach only the local endpoint; the ClusterIP still reaches both.
      assert.deepEqual(get("externalIPLocal"), ["pod1", "pod1", "pod1", "pod1"]);
      assert.deepEqual(get("lbLocal"), ["pod1", "pod1", "pod1", "pod1"]);
      assert.deepEqual([...new Set(get("edgeClusterIP") as string[])].sort(), ["pod1", "pod2"]);
      assert.equal(
        (get("dummyEdge") as string).trim(),
        ["10.96.0.10/32", "10.96.0.20/32", "10.96.0.30/32", "10.97.0.5/32", "10.97.0.6/32"].join("\n"),
      );

      const c = get("cleanup") as {
        code: number;
        ipvs: string;
        dummy: boolean;
        sets: string;
        chains: string;
      };
      assert.deepEqual(c, { code: 0, ipvs: "", dummy: true, sets: "", chains: "0" });
    },
  );
});
