/**
 * The compiled agent gives back the executable's start-up pages once its first full sync is done, and on a
 * large cluster (4000 Services + EndpointSlices or more) already once the lists are stored
 * (lib/runtime/code_pages.ts, lib/app/agent.ts): its resident file pages drop, and it keeps serving and
 * programming. Runs a private copy of dist/edgeproxy (pages of a binary another process maps are not
 * dropped) in its own network namespace, on the example site and on a generated 2000-Service site
 * (--manifests, no apiserver).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { copyFile, mkdir, mkdtemp, open, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  agentBinaryMissingReason,
  type E2eAgent,
  EDGEPROXY_BINARY,
  startAgentProcess,
} from "../support/e2e_agent.ts";
import { httpGetIn } from "../support/e2e_http.ts";
import { e2eEndpointSlice, e2eService } from "../support/e2e_objects.ts";
import { type Netns, NetnsScope, netnsUnavailableReason } from "../support/netns.ts";

const SITE = fileURLToPath(new URL("../../examples/edge-site", import.meta.url));
const CONFIG = fileURLToPath(new URL("../../examples/kube-proxy-config.yaml", import.meta.url));
const PAGED_OUT =
  /paged out the executable's start-up code \((lists stored|first sync done)\): resident file pages ([\d.]+) → ([\d.]+) MiB/g;

const skip = netnsUnavailableReason() || agentBinaryMissingReason();

async function rssFileMiB(pid: number): Promise<number> {
  const m = /^RssFile:\s+(\d+) kB/m.exec(await readFile(`/proc/${pid}/status`, "utf8"));
  assert.ok(m, `no RssFile for ${pid}`);
  return Number(m[1]) / 1024;
}

/** A copy of the example site's Nodes plus `services` ClusterIP Services with one endpoint each. */
async function largeSite(dir: string, services: number): Promise<string> {
  const site = join(dir, "site");
  await mkdir(site);
  await copyFile(join(SITE, "00-nodes.yaml"), join(site, "00-nodes.yaml"));
  const items: unknown[] = [];
  for (let i = 0; i < services; i++) {
    const name = `svc${i}`;
    const ip = (base: number) => `10.${base}.${((i + 1) >> 8) & 255}.${(i + 1) & 255}`;
    items.push({
      apiVersion: "v1",
      kind: "Service",
      ...e2eService({ name, clusterIP: ip(96), ports: [{ port: 80 }] }),
    });
    items.push({
      apiVersion: "discovery.k8s.io/v1",
      kind: "EndpointSlice",
      ...e2eEndpointSlice({
        service: name,
        ports: [{ port: 8080 }],
        endpoints: [{ ip: ip(180), nodeName: "edge-node-2" }],
      }),
    });
  }
  // JSON is YAML: one List document.
  await writeFile(join(site, "10-many.yaml"), JSON.stringify({ apiVersion: "v1", kind: "List", items }));
  return site;
}

function pageOutCase(name: string, services: number, expected: readonly string[]): void {
  describe(
    `agent: start-up code paged out (compiled binary, ${name})`,
    { skip: skip || false },
    () => {
      let scope: NetnsScope;
      let ns: Netns;
      let agent: E2eAgent;
      let dir = "";

      before(async () => {
        dir = await mkdtemp(join(tmpdir(), "edgeproxy-pages-"));
        const binary = join(dir, "edgeproxy");
        await copyFile(EDGEPROXY_BINARY, binary);
        const f = await open(binary, "r+");
        await f.sync(); // written back: clean pages, which the kernel can drop
        await f.close();
        const site = services === 0 ? SITE : await largeSite(dir, services);
        scope = new NetnsScope("agpg");
        ns = await scope.create("node");
        agent = startAgentProcess(
          scope,
          ns,
          ["--manifests", site, "--hostname-override", "edge-node-1", "--config", CONFIG, "--state-dir", ""],
          binary,
        );
      });

      after(async () => {
        await agent?.stop();
        await scope?.cleanup();
        if (dir) await rm(dir, { recursive: true, force: true });
      });

      it(`logs the drops (${expected.join(", ")}), its resident file pages fall, and it still answers and programs`, async () => {
        const deadline = Date.now() + 60_000;
        const drops = () => [...agent.logs().matchAll(PAGED_OUT)];
        while (Date.now() < deadline && agent.exit() === null && drops().length < expected.length) {
          await new Promise((r) => setTimeout(r, 100));
        }
        // Nothing more follows (a third drop would show here).
        await new Promise((r) => setTimeout(r, 500));
        const found = drops();
        assert.deepEqual(found.map((m) => m[1]), expected, agent.tail());
        for (const m of found) assert.ok(Number(m[3]) < Number(m[2]), m[0]);
        const last = found[found.length - 1];
        const [before, after] = [Number(last[2]), Number(last[3])];
        // Most of what start-up paged in is dropped (measured: ~50 → ~11 MiB).
        assert.ok(after < before / 2, `resident file pages ${before} → ${after} MiB`);
        assert.ok((await rssFileMiB(agent.pid)) < before, "the kernel's own count agrees");

        // Code paged back in on demand: the health and metrics servers answer, the rules are in place.
        const healthz = await httpGetIn(ns, "http://127.0.0.1:10256/healthz", { timeoutMs: 5000 });
        assert.equal(healthz.status, 200, healthz.body);
        const metrics = await httpGetIn(ns, "http://127.0.0.1:10249/metrics", { timeoutMs: 5000 });
        assert.match(
          metrics.body,
          /^kubeproxy_sync_proxy_rules_last_timestamp_seconds\{ip_family="IPv4"\} [1-9]/m,
        );
        const rules = await ns.exec(["iptables-save", "-t", "nat"]);
        assert.match(rules.stdout, /-A KUBE-SERVICES .* -j KUBE-SVC-/);
        if (services > 0) {
          const svcRules = rules.stdout.split("\n").filter((l) =>
            /^-A KUBE-SERVICES .* -j KUBE-SVC-/.test(l)
          );
          assert.equal(svcRules.length, services);
        }
        assert.equal(drops().length, expected.length, "no more than that per process");
      });
    },
  );
}

// A small site: the page-out waits for the first sync (paging out before it only slows the start).
pageOutCase("example site", 0, ["first sync done"]);
// A large one: already once the lists are stored, ahead of the first sync's memory peak.
pageOutCase("2000 Services", 2000, ["lists stored", "first sync done"]);
