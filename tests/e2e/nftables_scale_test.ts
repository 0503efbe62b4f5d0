/**
 * The nftables backend with the real nft and kernel at 1k Services (5 endpoints each) inside a network
 * namespace: the first (full) sync, a one-endpoint change as a partial sync, the drift check of the
 * untouched table (free under Bun, which reads the ruleset generation id; an nft table read elsewhere), the
 * check after a foreign commit to another table (a read by name through netlink under Bun, no drift), and the check after `services` is
 * flushed. Prints the figures (never a timed
 * assertion); asserts what must hold at any speed: the partial transaction stays small, the healthy
 * table shows no drift, the flushed one does. Needs root, `ip netns` and nft.
 * EDGEPROXY_NFT_SCALE sets the number of Services (default 1000).
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import { IP_BIN, type Netns, NetnsScope, netnsUnavailableReason } from "../support/netns.ts";
import { makeEndpoint, makeServicePort } from "../support/tracer.ts";
import { NftablesBackend } from "../../lib/proxy/nftables/backend.ts";
import { nftablesHost } from "../../lib/proxy/nftables/host.ts";
import { NftGenerationTracker } from "../../lib/proxy/nftables/generation.ts";
import { openNftNetlink } from "../../lib/runtime/nft_netlink.ts";
import { createNftRunner } from "../../lib/proxy/nftables/runner.ts";
import { openNftSession } from "../../lib/proxy/nftables/nft_session.ts";
import { createKubeProxyMetrics } from "../../lib/metrics/kubeproxy.ts";
import { Registry } from "../../lib/metrics/registry.ts";
import { detectLocalByCIDR } from "../../lib/proxy/local_detect.ts";
import { ServicePortMap } from "../../lib/proxy/service_change_tracker.ts";
import { EndpointsMap } from "../../lib/proxy/endpoints_change_tracker.ts";
import { servicePortKey } from "../../lib/proxy/types.ts";
import type { ProxyState } from "../../lib/proxy/provider.ts";

const skip = netnsUnavailableReason();
if (skip !== "") console.log(`SKIP tests/e2e/nftables_scale_test.ts: ${skip}`);
const N = Number(process.env.EDGEPROXY_NFT_SCALE ?? 1000);

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

describe(`nftables backend at ${N} Services (real nft)`, { skip: skip || undefined }, () => {
  const scope = new NetnsScope("nfts");
  let ns: Netns;
  before(async () => {
    ns = await scope.create("node");
  });
  after(async () => {
    await scope.cleanup();
  });

  it("first sync, one-endpoint change, drift check: figures", { timeout: 300_000 }, async () => {
    const prefix = [IP_BIN, "netns", "exec", ns.name];
    // Transactions through the session the agent uses (netlink batches under Bun, libnftables for what
    // they do not encode); EDGEPROXY_NFT_WRITER=libnftables: the session without netlink (the agent before
    // the netlink writer); =nft: one `nft -f -` per transaction.
    const writer = process.env.EDGEPROXY_NFT_WRITER ?? "session";
    const session = writer === "nft" ? null : await openNftSession({
      commandPrefix: prefix,
      netnsPath: `/var/run/netns/${ns.name}`,
      timeoutMs: 600_000,
      netlink: writer !== "libnftables",
    });
    const plain = createNftRunner([...prefix, "nft"]);
    // Each transaction's duration (the first sync's longest one holds the kernel longest).
    const txMs: number[] = [];
    const runner = {
      ...plain,
      run: async (tx: string | readonly string[]) => {
        const t0 = performance.now();
        await (session === null ? plain.run(tx) : session.run(tx));
        txMs.push(performance.now() - t0);
      },
    };
    const reader = await openNftNetlink({ netnsPath: `/var/run/netns/${ns.name}` });
    const backend = new NftablesBackend({
      family: "IPv4",
      nodeName: "node-1",
      host: nftablesHost(runner, "IPv4", reader === null ? null : new NftGenerationTracker(reader), reader),
      log: { info() {}, warn() {} },
      metrics: createKubeProxyMetrics(new Registry(), { mode: "nftables" }),
      masqueradeAll: false,
      masqueradeBit: 14,
      nodePortAddresses: [],
      preferSameTrafficDistribution: true,
      nodeIPs: () => ["192.168.0.2"],
      primaryNodeIP: () => "192.168.0.2",
    });
    const services = new ServicePortMap();
    const endpoints = new EndpointsMap();
    for (let i = 0; i < N; i++) {
      const svc = makeServicePort("ns", `svc${i}`, {
        clusterIP: `172.30.${i >> 8}.${i & 255}`,
        nodePort: 30000 + (i % 2700),
      });
      services.set(servicePortKey(svc.name), svc);
      endpoints.set(
        servicePortKey(svc.name),
        [1, 2, 3, 4, 5].map((j) => makeEndpoint(`10.${(i >> 8) + 1}.${i & 255}.${j}`, 80)),
      );
    }
    const state = (changed: string[]): ProxyState => ({
      family: "IPv4",
      services,
      endpoints,
      changedServices: new Set(changed),
      nodeLabels: {},
      localDetection: detectLocalByCIDR("10.0.0.0/8"),
    });

    let t = performance.now();
    const full = await backend.sync(state([]), { full: true });
    const firstMs = performance.now() - t;
    const firstTx = txMs.splice(0);

    const k0 = [...services.keys()][0];
    const partial: number[] = [];
    let bytes = 0;
    for (let r = 0; r < 9; r++) {
      endpoints.set(k0, [1, 2, 3, 4, 5 + (r % 2)].map((j) => makeEndpoint(`10.1.0.${j}`, 80)));
      t = performance.now();
      const out = await backend.sync(state([k0]), { full: false });
      partial.push(performance.now() - t);
      assert.equal(out.kind, "partial");
      bytes = Math.max(bytes, out.bytes);
    }
    assert.ok(bytes < 8192, `a one-endpoint change wrote ${bytes} bytes`);

    const drift: number[] = [];
    for (let r = 0; r < 9; r++) {
      t = performance.now();
      assert.equal(await backend.checkDrift(), null);
      drift.push(performance.now() - t);
    }
    await ns.execOk(["nft", "add", "table", "inet", "firewall"]);
    t = performance.now();
    assert.equal(await backend.checkDrift(), null);
    const foreignMs = performance.now() - t;
    await ns.execOk(["nft", "flush", "chain", "ip", "kube-proxy", "services"]);
    assert.match(String(await backend.checkDrift()), /chain services has 0 rules/);
    reader?.close();
    await session?.close();

    console.log(
      `nftables, ${N} Services x 5 endpoints (writer: ${session?.writer ?? "nft -f -"}${
        session === null ? "" : `, ${session.fallbacks} fallbacks`
      }): first sync ${firstMs.toFixed(0)} ms (${full.bytes} bytes, ${firstTx.length} transactions, max ${
        Math.max(...firstTx).toFixed(0)
      } ms); ` +
        `one-endpoint change sync->committed median ${median(partial).toFixed(1)} ms (${bytes} bytes); ` +
        `drift check median ${median(drift).toFixed(1)} ms ` +
        `(${reader === null ? "table read" : "generation id"}), after a foreign commit ${
          foreignMs.toFixed(0)
        } ms`,
    );
  });
});
