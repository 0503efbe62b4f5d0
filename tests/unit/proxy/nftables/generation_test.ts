/**
 * Foreign-commit tracking from the kernel's nftables generation id (lib/proxy/nftables/generation.ts,
 * lib/runtime/nft_netlink.ts): our commits account for their own step, anything else counts; the
 * GETGEN request and NEWGEN reply bytes; and, under Bun as root, the real id in a scratch network
 * namespace with the backend's drift check over real nft: nothing read while only we commit; after a
 * foreign commit the fingerprint read by name through netlink (no nft): no drift for a commit elsewhere,
 * a flushed map, a flushed `services` chain and `nft flush ruleset` found; and the netlink reads
 * themselves against nft's view.
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { accessSync, constants } from "node:fs";
import { NftGenerationTracker } from "../../../../lib/proxy/nftables/generation.ts";
import {
  getGenRequest,
  netlinkMessages,
  nftRequest,
  openNftNetlink,
  parseNewGen,
  setElementsIn,
} from "../../../../lib/runtime/nft_netlink.ts";
import { NetnsScope, netnsUnavailableReason } from "../../../support/netns.ts";
import { NftablesBackend } from "../../../../lib/proxy/nftables/backend.ts";
import { nftablesHost } from "../../../../lib/proxy/nftables/host.ts";
import { createNftRunner } from "../../../../lib/proxy/nftables/runner.ts";
import { createKubeProxyMetrics } from "../../../../lib/metrics/kubeproxy.ts";
import { Registry } from "../../../../lib/metrics/registry.ts";
import { makeEndpoint, makeServicePort } from "../../../support/tracer.ts";
import { ServicePortMap } from "../../../../lib/proxy/service_change_tracker.ts";
import { EndpointsMap } from "../../../../lib/proxy/endpoints_change_tracker.ts";
import { servicePortKey } from "../../../../lib/proxy/types.ts";
import { detectLocalByCIDR } from "../../../../lib/proxy/local_detect.ts";

describe("NftGenerationTracker", () => {
  it("our commits do not count; a step by anyone else does, around or between them", async () => {
    let gen = 7;
    const t = new NftGenerationTracker({ read: () => gen });
    assert.equal(await t.foreignCommits(), 0);
    await t.commit(() => Promise.resolve(gen++));
    await t.commit(() => Promise.resolve()); // an empty commit does not move the id
    assert.equal(await t.foreignCommits(), 0);
    gen++; // between our commits
    await t.commit(() => Promise.resolve(gen++));
    assert.equal(await t.foreignCommits(), 1);
    await t.commit(() => Promise.resolve(gen += 2)); // during ours
    assert.equal(await t.foreignCommits(), 2);
    gen++;
    assert.equal(await t.foreignCommits(), 3);
    assert.equal(await t.foreignCommits(), 3);
  });

  it("a failed commit that moved the id counts; a failing source makes the count unknown, then moved", async () => {
    let gen = 1;
    let broken = false;
    const t = new NftGenerationTracker({
      read: () => {
        if (broken) throw new Error("recv failed");
        return gen;
      },
    });
    assert.equal(await t.foreignCommits(), 0);
    await assert.rejects(t.commit(() => Promise.reject(new Error("nft failed"))));
    assert.equal(await t.foreignCommits(), 0);
    await assert.rejects(t.commit(() => {
      gen++;
      return Promise.reject(new Error("nft failed"));
    }));
    assert.equal(await t.foreignCommits(), 1);
    broken = true;
    assert.equal(await t.foreignCommits(), null);
    broken = false;
    assert.equal(await t.foreignCommits(), 2);
  });

  it("the id wraps past 2^32 - 1 to 1, as the kernel's does", async () => {
    let gen = 0xffffffff;
    const t = new NftGenerationTracker({ read: () => gen });
    await t.foreignCommits();
    await t.commit(() => Promise.resolve(gen = 1));
    assert.equal(await t.foreignCommits(), 0);
  });
});

describe("nftables netlink request and reply bytes", () => {
  it("a filtered dump request: nfgenmsg for the family, NUL-terminated names padded to 4 bytes", () => {
    const req = nftRequest(7, 0x300, 9, 2, [[1, "kube-proxy"], [2, "services"]]);
    assert.deepEqual([...req.subarray(0, 20)], [
      52,
      0,
      0,
      0,
      7,
      0x0a,
      1,
      3,
      9,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      2,
      0,
      0,
      0,
    ]);
    assert.deepEqual([...req.subarray(20, 24)], [15, 0, 1, 0]);
    assert.equal(new TextDecoder().decode(req.subarray(24, 35)), "kube-proxy\0");
    assert.deepEqual([...req.subarray(35, 40)], [0, 13, 0, 2, 0]);
    assert.equal(new TextDecoder().decode(req.subarray(40, 49)), "services\0");
    assert.equal(req.length, 52);
  });

  it("counts the NFTA_LIST_ELEMs of a NEWSETELEM message and walks a buffer of messages", () => {
    const elem = [8, 0, 1, 0x80, 4, 0, 1, 0]; // NFTA_LIST_ELEM (nested) holding an empty attribute
    const list = [4 + 3 * elem.length, 0, 3, 0x80, ...elem, ...elem, ...elem]; // NFTA_SET_ELEM_LIST_ELEMENTS
    const table = [8, 0, 1, 0, 0x74, 0, 0, 0]; // NFTA_SET_ELEM_LIST_TABLE "t"
    const payload = [2, 0, 0, 0, ...table, ...list];
    const msg = [16 + payload.length, 0, 0, 0, 12, 0x0a, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, ...payload];
    const done = [20, 0, 0, 0, 3, 0, 2, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    const msgs = netlinkMessages(new Uint8Array([...msg, ...done]));
    assert.deepEqual(msgs.map((m) => m.type), [(10 << 8) | 12, 3]);
    assert.equal(setElementsIn(msgs[0].payload), 3);
  });
});

describe("NFT_MSG_GETGEN bytes", () => {
  it("asks with a 20-byte nfnetlink request and reads NFTA_GEN_ID in network byte order", () => {
    assert.deepEqual(
      [...getGenRequest(5)],
      [20, 0, 0, 0, 0x10, 0x0a, 1, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    );
    const reply = new Uint8Array([
      ...[44, 0, 0, 0, 0x0f, 0x0a, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0], // nlmsghdr: NEWGEN
      ...[0, 0, 0, 0x2a], // nfgenmsg
      ...[8, 0, 2, 0, 0, 0, 0x30, 0x39], // NFTA_GEN_PROC_PID
      ...[8, 0, 1, 0, 0, 0, 0x01, 0x02], // NFTA_GEN_ID = 258
      ...[8, 0, 3, 0, 0x6e, 0x66, 0x74, 0], // NFTA_GEN_PROC_NAME "nft"
    ]);
    assert.equal(parseNewGen(reply), 258);
    const error = new Uint8Array([36, 0, 0, 0, 2, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    assert.throws(() => parseNewGen(error), /nftables generation: the kernel answered errno 1/);
    assert.throws(() => parseNewGen(reply.subarray(0, 20)), /no NFTA_GEN_ID/);
  });
});

const NFT = "/usr/sbin/nft";
const isBun = typeof (globalThis as { Bun?: unknown }).Bun !== "undefined";
function unavailable(): string {
  if (!isBun) return "the generation id is read through bun:ffi (Bun only)";
  try {
    accessSync(NFT, constants.X_OK);
  } catch {
    return `${NFT} not found`;
  }
  return netnsUnavailableReason();
}
const skip = unavailable();

describe("the generation id and the drift check, real kernel", { skip: skip || undefined }, () => {
  const scope = new NetnsScope("nftgen");
  after(() => scope.cleanup());

  it("moves once per commit in its own namespace only", async () => {
    const ns = await scope.create("a");
    const other = await scope.create("b");
    const reader = (await openNftNetlink({ netnsPath: `/var/run/netns/${ns.name}` }))!;
    try {
      const g0 = reader.read();
      await ns.execOk([NFT, "add", "table", "ip", "t"]);
      assert.equal(reader.read(), g0 + 1);
      await other.execOk([NFT, "add", "table", "ip", "t"]);
      await ns.execOk([NFT, "list", "ruleset"]);
      assert.equal(reader.read(), g0 + 1);
    } finally {
      reader.close();
    }
  });

  it("netlink reads: table and chain existence, a chain's rules, a set's elements", async () => {
    const ns = await scope.create("reads");
    const reader = (await openNftNetlink({ netnsPath: `/var/run/netns/${ns.name}` }))!;
    try {
      assert.equal(reader.tableExists("ip", "t"), false);
      assert.equal(reader.elementCount("ip", "t", "s"), null);
      const elements = Array.from({ length: 3000 }, (_, i) => `10.${i >> 8}.${i & 255}.1`).join(", ");
      await ns.execOk([NFT, "-f", "-"], {
        input: [
          "add table ip t",
          "add chain ip t c",
          "add rule ip t c counter",
          "add rule ip t c counter",
          "add rule ip t c counter",
          "add set ip t s { type ipv4_addr ; }",
          `add element ip t s { ${elements} }`,
          "add map ip t m { type ipv4_addr : verdict ; }",
          "",
        ].join("\n"),
      });
      assert.equal(reader.tableExists("ip", "t"), true);
      assert.equal(reader.tableExists("ip6", "t"), false);
      assert.equal(reader.chainExists("ip", "t", "c"), true);
      assert.equal(reader.chainExists("ip", "t", "d"), false);
      assert.equal(reader.ruleCount("ip", "t", "c"), 3);
      assert.equal(reader.ruleCount("ip", "t", "d"), 0);
      assert.equal(reader.elementCount("ip", "t", "s"), 3000);
      assert.equal(reader.elementCount("ip", "t", "m"), 0);
      assert.equal(reader.elementCount("ip", "t", "x"), null);
    } finally {
      reader.close();
    }
  });

  it("drift check: nothing read while only we commit; netlink reads after a foreign commit find each drift", async () => {
    const ns = await scope.create("drift");
    const reader = (await openNftNetlink({ netnsPath: `/var/run/netns/${ns.name}` }))!;
    const runner = createNftRunner([...ns.prefix, NFT]);
    let reads = 0;
    const counted = {
      ...runner,
      read: (c: string) => {
        reads++;
        return runner.read(c);
      },
    };
    const backend = new NftablesBackend({
      family: "IPv4",
      nodeName: "node-1",
      host: nftablesHost(counted, "IPv4", new NftGenerationTracker(reader), reader),
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
    for (let i = 0; i < 3; i++) {
      const svc = makeServicePort("ns", `svc${i}`, { clusterIP: `172.30.0.${i + 1}`, nodePort: 30000 + i });
      services.set(servicePortKey(svc.name), svc);
      endpoints.set(servicePortKey(svc.name), [makeEndpoint(`10.1.0.${i + 1}`, 80)]);
    }
    const state = (changed: string[]) => ({
      family: "IPv4" as const,
      services,
      endpoints,
      changedServices: new Set(changed),
      nodeLabels: {},
      localDetection: detectLocalByCIDR("10.0.0.0/8"),
    });
    try {
      await backend.sync(state([]), { full: true });
      const k0 = [...services.keys()][0];
      endpoints.set(k0, [makeEndpoint("10.1.0.9", 80)]);
      await backend.sync(state([k0]), { full: false });
      assert.equal(await backend.checkDrift(), null);
      assert.equal(reads, 0, "an untouched ruleset is not read");

      // A foreign commit elsewhere: the check reads our table by name through netlink (no nft), no drift.
      await ns.execOk([NFT, "add", "table", "inet", "firewall"]);
      assert.equal(await backend.checkDrift(), null);
      assert.equal(await backend.checkDrift(), null);
      assert.equal(reads, 0);

      await ns.execOk([NFT, "flush", "map", "ip", "kube-proxy", "service-ips"]);
      assert.match(String(await backend.checkDrift()), /map service-ips has 0 elements, expected 3/);
      await backend.sync(state([]), { full: true });
      assert.equal(await backend.checkDrift(), null);
      await ns.execOk([NFT, "flush", "chain", "ip", "kube-proxy", "services"]);
      assert.match(String(await backend.checkDrift()), /chain services has 0 rules, expected 2/);
      await backend.sync(state([]), { full: true });
      await ns.execOk([NFT, "flush", "ruleset"]);
      assert.match(String(await backend.checkDrift()), /table ip kube-proxy is gone/);
      assert.equal(reads, 0, "every read went through netlink");
    } finally {
      reader.close();
    }
  });
});
