import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseManifestText, startManifestsSource } from "../../../lib/source/manifests.ts";
import type { ProxyHandlers } from "../../../lib/proxy/handlers.ts";
import type { EndpointSlice, Node, Service } from "../../../lib/k8s/objects.ts";

const SITE = new URL("../../../examples/edge-site", import.meta.url).pathname;

function ipv4ToInt(ip: string): number {
  return ip.split(".").reduce((n, o) => n * 256 + Number(o), 0);
}
const RANGES: Array<[string, number]> = [
  ["10.0.0.0", 8],
  ["192.0.2.0", 24],
  ["198.51.100.0", 24],
  ["203.0.113.0", 24],
];
const inAllowed = (ip: string) =>
  RANGES.some(([base, bits]) => (ipv4ToInt(ip) >>> (32 - bits)) === (ipv4ToInt(base) >>> (32 - bits)));

test("examples/edge-site loads through the manifests source without a warning", () => {
  const services: Service[] = [];
  const slices: EndpointSlice[] = [];
  const nodes: Node[] = [];
  const warnings: string[] = [];
  let synced = 0;
  const h: ProxyHandlers = {
    onServiceAdd: (s) => services.push(s),
    onServiceUpdate: () => assert.fail("update"),
    onServiceDelete: () => assert.fail("delete"),
    onServicesSynced: () => synced++,
    onEndpointSliceAdd: (s) => slices.push(s),
    onEndpointSliceUpdate: () => assert.fail("update"),
    onEndpointSliceDelete: () => assert.fail("delete"),
    onEndpointSlicesSynced: () => synced++,
    onNodeAdd: (n) => nodes.push(n),
    onNodeUpdate: () => assert.fail("update"),
    onNodeDelete: () => assert.fail("delete"),
    onNodeSynced: () => synced++,
  };
  const src = startManifestsSource(SITE, h, { nodeName: "edge-node-1", warn: (m) => warnings.push(m) });
  src.stop();
  assert.deepEqual(warnings, []);
  assert.equal(synced, 3);
  assert.deepEqual(nodes.map((n) => [n.metadata?.name, n.spec?.podCIDR]), [["edge-node-1", "10.244.1.0/24"]]);
  assert.equal(services.length, 7);
  assert.equal(slices.length, 7);
  // Every Service has its EndpointSlice, and every slice port name matches a Service port name.
  for (const s of services) {
    const slice = slices.find((e) =>
      e.metadata?.namespace === s.metadata?.namespace &&
      e.metadata?.labels?.["kubernetes.io/service-name"] === s.metadata?.name
    );
    assert.ok(slice, `slice for ${s.metadata?.name}`);
    for (const p of slice.ports ?? []) {
      assert.ok(s.spec?.ports?.some((sp) => sp.name === p.name && sp.protocol === p.protocol), `${p.name}`);
    }
  }
  const types = services.map((s) => s.spec?.type).sort();
  assert.deepEqual([...new Set(types)], ["ClusterIP", "LoadBalancer", "NodePort"]);
  const lb = services.find((s) => s.spec?.type === "LoadBalancer")!;
  assert.equal(lb.spec?.externalTrafficPolicy, "Local");
  assert.equal(lb.spec?.healthCheckNodePort, 32000);
  assert.ok(services.some((s) => (s.spec?.externalIPs ?? []).length > 0));
  assert.ok(services.some((s) => s.spec?.sessionAffinity === "ClientIP"));
  assert.ok(services.some((s) => s.spec?.ports?.some((p) => p.protocol === "UDP")));
  assert.ok(slices.some((e) => e.endpoints === null), "a Service without endpoints");
  const eps = slices.flatMap((e) => e.endpoints ?? []);
  assert.ok(eps.some((e) => e.nodeName === "edge-node-1") && eps.some((e) => e.nodeName === "edge-node-2"));
});

test("examples use only private and documentation address ranges", () => {
  const files = [
    ...readdirSync(SITE).filter((f) => /\.ya?ml$/.test(f)).map((f) => join(SITE, f)),
    new URL("../../../examples/kube-proxy-config.yaml", import.meta.url).pathname,
  ];
  let seen = 0;
  for (const f of files) {
    const text = readFileSync(f, "utf8");
    if (f.includes("edge-site")) assert.deepEqual(parseManifestText(text, f).errors, [], f);
    for (const m of text.matchAll(/\b(\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3})\b/g)) {
      seen++;
      if (m[1] === "0.0.0.0" || m[1] === "127.0.0.1") continue;
      assert.ok(inAllowed(m[1]), `${f}: ${m[1]}`);
    }
  }
  assert.ok(seen > 20);
});
