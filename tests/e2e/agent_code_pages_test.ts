/**
 * The compiled agent gives back the executable's start-up pages once the lists are stored and again once its
 * first full sync is done (lib/runtime/code_pages.ts): its resident file pages drop, and it keeps serving and
 * programming. Runs a
 * private copy of dist/edgeproxy (pages of a binary another process maps are not dropped) in its own
 * network namespace on the example site (--manifests, no apiserver).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { copyFile, mkdtemp, open, readFile, rm } from "node:fs/promises";
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

describe(
  "agent: start-up code paged out after the first sync (compiled binary)",
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
      scope = new NetnsScope("agpg");
      ns = await scope.create("node");
      agent = startAgentProcess(
        scope,
        ns,
        ["--manifests", SITE, "--hostname-override", "edge-node-1", "--config", CONFIG, "--state-dir", ""],
        binary,
      );
    });

    after(async () => {
      await agent?.stop();
      await scope?.cleanup();
      if (dir) await rm(dir, { recursive: true, force: true });
    });

    it("logs the drops (lists stored, first sync done), its resident file pages fall, and it still answers and programs", async () => {
      const deadline = Date.now() + 30_000;
      const drops = () => [...agent.logs().matchAll(PAGED_OUT)];
      while (Date.now() < deadline && agent.exit() === null && drops().length < 2) {
        await new Promise((r) => setTimeout(r, 100));
      }
      const found = drops();
      assert.deepEqual(found.map((m) => m[1]), ["lists stored", "first sync done"], agent.tail());
      for (const m of found) assert.ok(Number(m[3]) < Number(m[2]), m[0]);
      const [before, after] = [Number(found[1][2]), Number(found[1][3])];
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
      assert.equal(drops().length, 2, "twice per process");
    });
  },
);
