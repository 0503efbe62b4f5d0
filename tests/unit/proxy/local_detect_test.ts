import { test } from "node:test";
import assert from "node:assert/strict";
import type { Node } from "../../../lib/k8s/objects.ts";
import {
  localDetectionChooser,
  localDetectionFor,
  NO_LOCAL_DETECTION,
  nodePodCIDRs,
} from "../../../lib/proxy/local_detect.ts";
import { iptablesLocalDetector } from "../../../lib/proxy/iptables/local_detector.ts";

test("the core decides local-traffic detection as plain data, per family", () => {
  const dual = { mode: "ClusterCIDR" as const, clusterCIDR: "10.0.0.1/8, fd00:10::/64" };
  assert.deepEqual(localDetectionFor("IPv4", dual), {
    detection: { kind: "cidr", cidr: "10.0.0.0/8" },
    warning: null,
  });
  assert.deepEqual(localDetectionFor("IPv6", dual).detection, { kind: "cidr", cidr: "fd00:10::/64" });
  assert.deepEqual(
    localDetectionFor("IPv4", { mode: "NodeCIDR", nodePodCIDRs: ["10.244.1.0/24"] }).detection,
    {
      kind: "cidr",
      cidr: "10.244.1.0/24",
    },
  );
  assert.deepEqual(
    localDetectionFor("IPv6", { mode: "BridgeInterface", bridgeInterface: "cbr0" }).detection,
    {
      kind: "iface",
      name: "cbr0",
    },
  );
  assert.deepEqual(
    localDetectionFor("IPv4", { mode: "InterfaceNamePrefix", interfaceNamePrefix: "cali" }).detection,
    { kind: "prefix", prefix: "cali" },
  );
  assert.deepEqual(localDetectionFor("IPv4", { mode: "" }), { detection: NO_LOCAL_DETECTION, warning: null });
  const v4only = localDetectionFor("IPv6", { mode: "ClusterCIDR", clusterCIDR: "10.0.0.0/8" });
  assert.deepEqual(v4only.detection, { kind: "none" });
  assert.match(v4only.warning ?? "", /no IPv6 CIDR given/);
  const bad = localDetectionFor("IPv4", { mode: "BridgeInterface", bridgeInterface: "" });
  assert.deepEqual(bad.detection, { kind: "none" });
  assert.match(bad.warning ?? "", /invalid bridge interface name ""/);
});

test("the iptables backend renders each kind of detection into its match arguments", () => {
  assert.deepEqual(iptablesLocalDetector({ kind: "cidr", cidr: "10.0.0.0/8" }), {
    implemented: true,
    ifLocal: ["-s", "10.0.0.0/8"],
    ifNotLocal: ["!", "-s", "10.0.0.0/8"],
  });
  assert.deepEqual(iptablesLocalDetector({ kind: "iface", name: "cbr0" }), {
    implemented: true,
    ifLocal: ["-i", "cbr0"],
    ifNotLocal: ["!", "-i", "cbr0"],
  });
  assert.deepEqual(iptablesLocalDetector({ kind: "prefix", prefix: "veth" }), {
    implemented: true,
    ifLocal: ["-i", "veth+"],
    ifNotLocal: ["!", "-i", "veth+"],
  });
  assert.deepEqual(iptablesLocalDetector({ kind: "none" }), {
    implemented: false,
    ifLocal: [],
    ifNotLocal: [],
  });
});

test("a chooser logs each warning once; in NodeCIDR mode only once the Node is known", () => {
  const warnings: string[] = [];
  const choose = localDetectionChooser("IPv6", { mode: "NodeCIDR" }, (m) => warnings.push(m));
  assert.deepEqual(choose(null), { kind: "none" });
  assert.deepEqual(warnings, []);
  const v4node = { metadata: { name: "n" }, spec: { podCIDR: "10.244.1.0/24" } } as Node;
  choose(v4node);
  choose(v4node);
  assert.deepEqual(warnings, [
    "IPv6: detect-local-mode NodeCIDR: no IPv6 CIDR given; local traffic detection disabled",
  ]);
  const dual = { metadata: { name: "n" }, spec: { podCIDRs: ["10.244.1.0/24", "fd00:1::/64"] } } as Node;
  assert.deepEqual(choose(dual), { kind: "cidr", cidr: "fd00:1::/64" });

  const shared = new Set<string>();
  const w2: string[] = [];
  localDetectionChooser(
    "IPv4",
    { mode: "BridgeInterface", bridgeInterface: "bad/name" },
    (m) => w2.push(m),
    shared,
  )(
    null,
  );
  localDetectionChooser(
    "IPv4",
    { mode: "BridgeInterface", bridgeInterface: "bad/name" },
    (m) => w2.push(m),
    shared,
  )(
    null,
  );
  assert.equal(w2.length, 1);
  assert.match(w2[0], /^IPv4: local traffic detector: invalid bridge interface name "bad\/name"$/);
});

test("a Node's pod CIDRs: spec.podCIDRs, else spec.podCIDR, else none", () => {
  assert.deepEqual(nodePodCIDRs(null), []);
  assert.deepEqual(nodePodCIDRs({ spec: { podCIDR: "10.0.1.0/24" } } as Node), ["10.0.1.0/24"]);
  assert.deepEqual(nodePodCIDRs({ spec: { podCIDR: "x", podCIDRs: ["10.0.2.0/24"] } } as Node), [
    "10.0.2.0/24",
  ]);
});
