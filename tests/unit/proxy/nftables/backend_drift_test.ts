/**
 * The nftables drift fingerprint and version check, pure parts (lib/proxy/nftables/drift.ts, version.ts):
 * fixed-chain rule counts from a full sync's transaction, the reads of one check (one command per nft
 * process: nft 1.0.6 fails a batch of two `list chain`s), rule and element counts parsed from nft's
 * output, and `nft --version`.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  compareMapSizes,
  compareRuleCounts,
  driftReads,
  fixedChainRules,
  mapSizes,
  parseChainRuleCounts,
  parseMapSizes,
} from "../../../../lib/proxy/nftables/drift.ts";
import { nftVersionProblem, parseNftVersion } from "../../../../lib/proxy/nftables/version.ts";
import { renderNFTablesFullSync } from "../../../../lib/proxy/nftables/render/render.ts";
import { nftFakeProxierInput } from "../../../support/nft_fixtures.ts";
import { makeEndpoint, makeServicePort } from "../../../support/tracer.ts";
import { servicePortKey } from "../../../../lib/proxy/types.ts";

describe("nftables drift fingerprint", () => {
  const svc = makeServicePort("ns1", "svc1", { clusterIP: "172.30.0.41" });
  const full = renderNFTablesFullSync({
    ...nftFakeProxierInput(),
    services: [svc],
    endpoints: new Map([[servicePortKey(svc.name), [makeEndpoint("10.180.0.1", 80)]]]),
  });

  it("counts the fixed chains' rules of a full sync, never per-service chains", () => {
    const counts = fixedChainRules(full.transaction);
    assert.equal(counts.get("services"), 2);
    assert.equal(counts.get("nat-prerouting"), 1);
    assert.equal(counts.get("masquerading"), 3);
    assert.ok(![...counts.keys()].some((c) => c.includes("/")), [...counts.keys()].join(" "));
  });

  it("reads the services chain and the dispatch maps, one command per nft process", () => {
    const expected = fixedChainRules(full.transaction);
    assert.deepEqual([...mapSizes(full.state.elements)], [["service-ips", 1], ["service-nodeports", 0]]);
    const reads = driftReads("ip", expected);
    assert.deepEqual(reads.chains, ["services"]);
    assert.deepEqual(reads.batches, [
      "list chain ip kube-proxy services\n",
      "list map ip kube-proxy service-ips\n",
      "list map ip kube-proxy service-nodeports\n",
    ]);
  });

  it("counts map elements in nft list map output", () => {
    const out = [
      "table ip kube-proxy {",
      "\tmap service-ips {",
      "\t\ttype ipv4_addr . inet_proto . inet_service : verdict",
      '\t\tcomment "ClusterIP, ExternalIP and LoadBalancer IP traffic"',
      "\t\telements = { 172.30.0.0 . tcp . 80 : goto service-A-ns/a/tcp/p80,",
      "\t\t\t     172.30.0.1 . tcp . 80 : goto service-B-ns/b/tcp/p80 }",
      "\t}",
      "}",
      "table ip kube-proxy {",
      "\tmap service-nodeports {",
      "\t\ttype inet_proto . inet_service : verdict",
      "\t}",
      "}",
    ].join("\n");
    const sizes = parseMapSizes(out);
    assert.deepEqual([...sizes], [["service-ips", 2], ["service-nodeports", 0]]);
    assert.deepEqual(compareMapSizes(new Map([["service-ips", 2], ["service-nodeports", 1]]), sizes), [
      "map service-nodeports has 0 elements, expected 1",
    ]);
  });

  it("parses rule counts from nft -a output and names the differences", () => {
    const out = [
      "table ip kube-proxy {",
      "\tchain services { # handle 3",
      "\t\tip daddr . meta l4proto . th dport vmap @service-ips # handle 5",
      "\t}",
      "}",
      "table ip kube-proxy {",
      "\tchain nat-prerouting { # handle 9",
      "\t\ttype nat hook prerouting priority dstnat; policy accept;",
      "\t}",
      "}",
    ].join("\n");
    const listed = parseChainRuleCounts(out);
    assert.deepEqual([...listed], [["services", 1], ["nat-prerouting", 0]]);
    assert.deepEqual(
      compareRuleCounts(new Map([["nat-prerouting", 1], ["services", 2], ["masquerading", 3]]), listed),
      [
        "chain masquerading is missing",
        "chain nat-prerouting has 0 rules, expected 1",
        "chain services has 1 rules, expected 2",
      ],
    );
  });
});

describe("nft version", () => {
  it("accepts 1.0.1 and later, rejects older and unparsable output with one line", () => {
    assert.deepEqual(parseNftVersion("nftables v1.0.6 (Lester Gooch #5)")?.parts, [1, 0, 6]);
    assert.equal(nftVersionProblem("nftables v1.0.6 (Lester Gooch #5)"), null);
    assert.equal(nftVersionProblem("nftables v1.0.1 (Fearless Fosdick #3)"), null);
    assert.equal(
      nftVersionProblem("nftables v0.9.8 (E.D.S.)"),
      "nft v0.9.8 is too old: nftables mode needs nft v1.0.1 or later",
    );
    assert.match(String(nftVersionProblem("garbage")), /^nft --version: cannot parse "garbage"$/);
  });
});
