import { describe, it } from "node:test";
import assert from "node:assert/strict";
import type { Service } from "../../../lib/k8s/objects.ts";
import {
  EMPTY_LIST,
  formatValue,
  objectRef,
  servicePortsFromService,
} from "../../../lib/proxy/service_port.ts";
import type { IPFamily, ServicePortInfo } from "../../../lib/proxy/types.ts";

type Spec = NonNullable<Service["spec"]>;

function svc(ns: string, name: string, spec: Spec, status?: Service["status"]): Service {
  return { metadata: { namespace: ns, name }, spec, ...(status ? { status } : {}) };
}

/** Runs servicePortsFromService and collects warnings. */
function build(s: Service, family: IPFamily = "IPv4"): { ports: ServicePortInfo[]; warnings: string[] } {
  const warnings: string[] = [];
  const ports = servicePortsFromService(s, family, (m) => warnings.push(m));
  return { ports, warnings };
}

describe("servicePortsFromService: fields", () => {
  it("builds one ServicePortInfo per port with upstream defaults", () => {
    const { ports, warnings } = build(svc("ns1", "svc1", {
      clusterIP: "172.30.0.41",
      ports: [{ name: "p80", port: 80, protocol: "TCP" }, {
        name: "dns",
        port: 53,
        protocol: "UDP",
        nodePort: 3053,
      }],
    }));
    assert.deepEqual(warnings, []);
    assert.deepEqual(ports, [{
      name: { namespace: "ns1", name: "svc1", port: "p80", protocol: "TCP" },
      clusterIP: "172.30.0.41",
      port: 80,
      protocol: "TCP",
      nodePort: 0,
      externalIPs: [],
      loadBalancerVIPs: [],
      loadBalancerSourceRanges: [],
      stickyMaxAgeSeconds: 0,
      externalPolicyLocal: false,
      internalPolicyLocal: false,
      healthCheckNodePort: 0,
    }, {
      name: { namespace: "ns1", name: "svc1", port: "dns", protocol: "UDP" },
      clusterIP: "172.30.0.41",
      port: 53,
      protocol: "UDP",
      nodePort: 3053,
      externalIPs: [],
      loadBalancerVIPs: [],
      loadBalancerSourceRanges: [],
      stickyMaxAgeSeconds: 0,
      externalPolicyLocal: false,
      internalPolicyLocal: false,
      healthCheckNodePort: 0,
    }]);
  });

  it("shares the address lists among a Service's ports, and one frozen empty list among all", () => {
    const ports = [{ name: "a", port: 80 }, { name: "b", port: 81 }];
    const plain = build(svc("ns1", "svc1", { clusterIP: "172.30.0.41", ports })).ports;
    const other = build(svc("ns1", "svc2", { clusterIP: "172.30.0.42", ports })).ports;
    for (const p of [...plain, ...other]) {
      assert.equal(p.externalIPs, EMPTY_LIST);
      assert.equal(p.loadBalancerVIPs, EMPTY_LIST);
      assert.equal(p.loadBalancerSourceRanges, EMPTY_LIST);
    }
    assert.ok(Object.isFrozen(EMPTY_LIST) && EMPTY_LIST.length === 0);
    const lb = build(svc("ns1", "svc3", {
      type: "LoadBalancer",
      clusterIP: "172.30.0.43",
      externalIPs: ["100.100.0.1"],
      loadBalancerSourceRanges: ["192.0.2.0/24"],
      ports: [{ name: "a", port: 80, nodePort: 30080 }, { name: "b", port: 81, nodePort: 30081 }],
    }, { loadBalancer: { ingress: [{ ip: "100.64.0.1" }] } })).ports;
    assert.deepEqual(lb[0].externalIPs, ["100.100.0.1"]);
    assert.deepEqual(lb[0].loadBalancerVIPs, ["100.64.0.1"]);
    assert.deepEqual(lb[0].loadBalancerSourceRanges, ["192.0.2.0/24"]);
    assert.equal(lb[1].externalIPs, lb[0].externalIPs);
    assert.equal(lb[1].loadBalancerVIPs, lb[0].loadBalancerVIPs);
    assert.equal(lb[1].loadBalancerSourceRanges, lb[0].loadBalancerSourceRanges);
  });

  it('defaults the protocol to TCP and an unnamed port to ""', () => {
    const { ports } = build(svc("ns1", "svc1", { clusterIP: "172.30.0.41", ports: [{ port: 80 }] }));
    assert.equal(ports.length, 1);
    assert.equal(ports[0].protocol, "TCP");
    assert.deepEqual(ports[0].name, { namespace: "ns1", name: "svc1", port: "", protocol: "TCP" });
  });

  it("normalises IPs with leading zeros, as upstream TestBadIPs", () => {
    const { ports, warnings } = build(svc("ns1", "svc1", {
      type: "LoadBalancer",
      clusterIP: "172.30.0.041",
      externalIPs: ["192.168.099.022"],
      loadBalancerSourceRanges: ["203.0.113.000/025"],
      ports: [{ name: "p80", port: 80, protocol: "TCP", nodePort: 3001 }],
    }, { loadBalancer: { ingress: [{ ip: "1.2.3.004" }] } }));
    assert.deepEqual(warnings, []);
    assert.equal(ports[0].clusterIP, "172.30.0.41");
    assert.deepEqual(ports[0].externalIPs, ["192.168.99.22"]);
    assert.deepEqual(ports[0].loadBalancerVIPs, ["1.2.3.4"]);
    assert.deepEqual(ports[0].loadBalancerSourceRanges, ["203.0.113.0/25"]);
  });

  it("skips headless and ExternalName Services silently", () => {
    for (
      const spec of [
        { clusterIP: "None", ports: [{ name: "rpc", port: 1234, protocol: "UDP" }] },
        { clusterIP: "None" },
        { clusterIP: "", ports: [{ port: 80 }] },
        { ports: [{ port: 80 }] },
        {
          type: "ExternalName",
          clusterIP: "172.30.55.4",
          externalName: "foo2.bar.com",
          ports: [{ port: 1235 }],
        },
      ] satisfies Spec[]
    ) {
      const { ports, warnings } = build(svc("somewhere-else", "headless", spec));
      assert.deepEqual(ports, [], JSON.stringify(spec));
      assert.deepEqual(warnings, [], JSON.stringify(spec));
    }
  });

  it("takes the cluster IP from clusterIPs when clusterIP is unset", () => {
    const { ports } = build(svc("ns1", "svc1", { clusterIPs: ["172.30.0.9"], ports: [{ port: 80 }] }));
    assert.equal(ports[0].clusterIP, "172.30.0.9");
  });
});

describe("servicePortsFromService: dual-stack family filtering", () => {
  const dual = svc("ns1", "dual", {
    type: "LoadBalancer",
    clusterIP: "172.30.0.1",
    clusterIPs: ["172.30.0.1", "FD00:0010:0000::0001"],
    ipFamilies: ["IPv4", "IPv6"],
    externalIPs: ["192.168.99.11", "2001:db8::11", "192.168.99.11"],
    loadBalancerSourceRanges: ["203.0.113.0/25", "2001:db8:1::/48", " 198.51.100.0/24 "],
    ports: [{ name: "p80", port: 80, nodePort: 30080 }],
  }, { loadBalancer: { ingress: [{ ip: "1.2.3.4" }, { ip: "2001:db8::1:2" }] } });

  it("gives the IPv4 proxier only IPv4 addresses", () => {
    const { ports, warnings } = build(dual, "IPv4");
    assert.deepEqual(warnings, []);
    assert.equal(ports[0].clusterIP, "172.30.0.1");
    assert.deepEqual(ports[0].externalIPs, ["192.168.99.11"]);
    assert.deepEqual(ports[0].loadBalancerVIPs, ["1.2.3.4"]);
    assert.deepEqual(ports[0].loadBalancerSourceRanges, ["203.0.113.0/25", "198.51.100.0/24"]);
  });

  it("gives the IPv6 proxier only IPv6 addresses, normalised", () => {
    const { ports, warnings } = build(dual, "IPv6");
    assert.deepEqual(warnings, []);
    assert.equal(ports[0].clusterIP, "fd00:10::1");
    assert.deepEqual(ports[0].externalIPs, ["2001:db8::11"]);
    assert.deepEqual(ports[0].loadBalancerVIPs, ["2001:db8::1:2"]);
    assert.deepEqual(ports[0].loadBalancerSourceRanges, ["2001:db8:1::/48"]);
  });

  it("gives nothing to the proxier of a family the Service lacks, without a warning", () => {
    const { ports, warnings } = build(
      svc("ns1", "v4only", { clusterIP: "172.30.0.2", ports: [{ port: 80 }] }),
      "IPv6",
    );
    assert.deepEqual(ports, []);
    assert.deepEqual(warnings, []);
  });
});

describe("servicePortsFromService: load balancers, affinity, policies", () => {
  it("programs only VIP-mode LB ingresses", () => {
    const { ports } = build(
      svc("ns1", "lb", { type: "LoadBalancer", clusterIP: "172.30.0.3", ports: [{ port: 80 }] }, {
        loadBalancer: {
          ingress: [{ ip: "1.2.3.4", ipMode: "Proxy" }, { ip: "5.6.7.8", ipMode: "VIP" }, {
            ip: "9.10.11.12",
          }, {
            hostname: "lb.example.com",
          }],
        },
      }),
    );
    assert.deepEqual(ports[0].loadBalancerVIPs, ["5.6.7.8", "9.10.11.12"]);
  });

  it("trims source ranges and drops invalid ones with a warning naming the Service", () => {
    const { ports, warnings } = build(svc("ns1", "lb", {
      type: "LoadBalancer",
      clusterIP: "172.30.0.3",
      loadBalancerSourceRanges: [" 203.0.113.0/25", "garbage", "192.168.0.0/24"],
      ports: [{ port: 80 }],
    }));
    assert.deepEqual(ports[0].loadBalancerSourceRanges, ["203.0.113.0/25", "192.168.0.0/24"]);
    assert.deepEqual(warnings, [
      'ignoring spec.loadBalancerSourceRanges[1] of Service ns1/lb: not a valid CIDR (got "garbage")',
    ]);
  });

  it("defaults the ClientIP affinity timeout to 10800 seconds", () => {
    const base = { clusterIP: "172.30.0.4", ports: [{ port: 80 }] };
    assert.equal(
      build(svc("ns1", "a", { ...base, sessionAffinity: "ClientIP" })).ports[0].stickyMaxAgeSeconds,
      10800,
    );
    assert.equal(
      build(svc("ns1", "a", {
        ...base,
        sessionAffinity: "ClientIP",
        sessionAffinityConfig: { clientIP: { timeoutSeconds: 300 } },
      })).ports[0].stickyMaxAgeSeconds,
      300,
    );
    assert.equal(
      build(svc("ns1", "a", {
        ...base,
        sessionAffinity: "None",
        sessionAffinityConfig: { clientIP: { timeoutSeconds: 300 } },
      })).ports[0].stickyMaxAgeSeconds,
      0,
    );
  });

  it("rejects an out-of-range affinity timeout", () => {
    const { ports, warnings } = build(svc("ns1", "a", {
      clusterIP: "172.30.0.4",
      sessionAffinity: "ClientIP",
      sessionAffinityConfig: { clientIP: { timeoutSeconds: 86401 } },
      ports: [{ port: 80 }],
    }));
    assert.deepEqual(ports, []);
    assert.deepEqual(warnings, [
      "skipping Service ns1/a: spec.sessionAffinityConfig.clientIP.timeoutSeconds: must be 1-86400 (got 86401)",
    ]);
  });

  it("sets externalPolicyLocal only for externally accessible Services", () => {
    const local = (spec: Spec) =>
      build(
        svc("ns1", "p", {
          clusterIP: "172.30.0.5",
          externalTrafficPolicy: "Local",
          ports: [{ port: 80 }],
          ...spec,
        }),
      )
        .ports[0];
    assert.equal(local({ type: "NodePort" }).externalPolicyLocal, true);
    assert.equal(local({ type: "LoadBalancer" }).externalPolicyLocal, true);
    assert.equal(local({ type: "ClusterIP" }).externalPolicyLocal, false);
    assert.equal(local({ type: "ClusterIP", externalIPs: ["192.168.99.11"] }).externalPolicyLocal, true);
    assert.equal(local({ type: "NodePort", externalTrafficPolicy: "Cluster" }).externalPolicyLocal, false);
    assert.equal(local({ internalTrafficPolicy: "Local" }).internalPolicyLocal, true);
    assert.equal(local({}).internalPolicyLocal, false);
  });

  it("keeps healthCheckNodePort only for eTP=Local LoadBalancers", () => {
    const hc = (spec: Spec) => {
      const r = build(
        svc("ns1", "hc", { clusterIP: "172.30.0.6", ports: [{ port: 80, nodePort: 30080 }], ...spec }),
      );
      return { port: r.ports[0]?.healthCheckNodePort, warnings: r.warnings };
    };
    assert.deepEqual(
      hc({ type: "LoadBalancer", externalTrafficPolicy: "Local", healthCheckNodePort: 30000 }),
      {
        port: 30000,
        warnings: [],
      },
    );
    assert.deepEqual(hc({ type: "NodePort", externalTrafficPolicy: "Local", healthCheckNodePort: 30000 }), {
      port: 0,
      warnings: [],
    });
    assert.deepEqual(
      hc({ type: "LoadBalancer", externalTrafficPolicy: "Cluster", healthCheckNodePort: 30000 }),
      {
        port: 0,
        warnings: [],
      },
    );
    const missing = hc({ type: "LoadBalancer", externalTrafficPolicy: "Local" });
    assert.equal(missing.port, 0);
    assert.equal(missing.warnings.length, 1);
    assert.match(missing.warnings[0], /^Service ns1\/hc: spec\.healthCheckNodePort: missing/);
    const bad = hc({ type: "LoadBalancer", externalTrafficPolicy: "Local", healthCheckNodePort: 70000 });
    assert.equal(bad.port, undefined);
    assert.deepEqual(bad.warnings, [
      "skipping Service ns1/hc: spec.healthCheckNodePort: must be 1-65535 (got 70000)",
    ]);
  });
});

describe("servicePortsFromService: validation", () => {
  it("skips a bad port with one warning and keeps the others", () => {
    const { ports, warnings } = build(svc("ns1", "svc1", {
      clusterIP: "172.30.0.41",
      ports: [
        { name: "big", port: 70000 },
        { name: "ok", port: 80 },
        { name: "np", port: 81, nodePort: 70000 },
        { name: "icmp", port: 82, protocol: "ICMP" },
        { name: "frac", port: 80.5 },
        { name: "ok", port: 8080 },
        { name: "str", port: "80" as unknown as number },
      ],
    }));
    assert.deepEqual(ports.map((p) => p.name.port), ["ok"]);
    assert.deepEqual(warnings, [
      "skipping spec.ports[0] of Service ns1/svc1: spec.ports[0].port: must be 1-65535 (got 70000)",
      "skipping spec.ports[2] of Service ns1/svc1: spec.ports[2].nodePort: must be 1-65535 (got 70000)",
      'skipping spec.ports[3] of Service ns1/svc1: spec.ports[3].protocol: must be TCP, UDP or SCTP (got "ICMP")',
      "skipping spec.ports[4] of Service ns1/svc1: spec.ports[4].port: must be 1-65535 (got 80.5)",
      'skipping spec.ports[5] of Service ns1/svc1: spec.ports[5].name: duplicate port "ok"/TCP',
      'skipping spec.ports[6] of Service ns1/svc1: spec.ports[6].port: must be 1-65535 (got "80")',
    ]);
  });

  it("names the field of a port that is not an object, or whose name or protocol is not a string", () => {
    const { ports, warnings } = build(svc("ns1", "svc1", {
      clusterIP: "172.30.0.41",
      ports: [
        7 as unknown as { port: number },
        { name: 5 as unknown as string, port: 80 },
        { name: "p", port: 81, protocol: ["TCP"] as unknown as "TCP" },
        { name: "Bad_Name", port: 82 },
        { name: "ok", port: 83, protocol: null as unknown as "TCP" },
      ],
    }));
    assert.deepEqual(ports.map((p) => [p.name.port, p.protocol]), [["ok", "TCP"]]);
    assert.deepEqual(warnings, [
      "skipping spec.ports[0] of Service ns1/svc1: spec.ports[0]: must be an object (got 7)",
      "skipping spec.ports[1] of Service ns1/svc1: spec.ports[1].name: must be a string (got 5)",
      'skipping spec.ports[2] of Service ns1/svc1: spec.ports[2].protocol: must be a string (got ["TCP"])',
      'skipping spec.ports[3] of Service ns1/svc1: spec.ports[3].name: must be a DNS label (got "Bad_Name")',
    ]);
  });

  it("names the clusterIPs entry that is bad, and reads clusterIP when clusterIPs is empty", () => {
    const bad = build(svc("ns1", "svc1", { clusterIPs: ["172.30.0.41", "fd00::zz"], ports: [{ port: 80 }] }));
    assert.deepEqual(bad.ports, []);
    assert.deepEqual(bad.warnings, [
      'skipping Service ns1/svc1: spec.clusterIPs[1]: not a valid IP address (got "fd00::zz")',
    ]);
    const special = build(svc("ns1", "svc1", { clusterIPs: ["127.0.0.1"], ports: [{ port: 80 }] }));
    assert.match(
      special.warnings[0],
      /^skipping Service ns1\/svc1: spec\.clusterIPs\[0\]: may not be in the loopback/,
    );
    const primary = build(
      svc("ns1", "svc1", { clusterIP: "172.30.0.41", clusterIPs: [], ports: [{ port: 80 }] }),
    );
    assert.deepEqual(primary.ports.map((p) => p.clusterIP), ["172.30.0.41"]);
    const headless = build(
      svc("ns1", "svc1", { clusterIP: "10.0.0.1", clusterIPs: ["None"], ports: [{ port: 80 }] }),
    );
    assert.deepEqual(headless, { ports: [], warnings: [] });
  });

  it("skips a Service without spec, with a warning", () => {
    const { ports, warnings } = build({ metadata: { namespace: "ns1", name: "nospec" } });
    assert.deepEqual(ports, []);
    assert.deepEqual(warnings, ["skipping Service ns1/nospec: spec: missing"]);
  });

  it("skips a Service with a bad cluster IP", () => {
    const { ports, warnings } = build(
      svc("ns1", "svc1", { clusterIP: "172.30.0.300", ports: [{ port: 80 }] }),
    );
    assert.deepEqual(ports, []);
    assert.deepEqual(warnings, [
      'skipping Service ns1/svc1: spec.clusterIP: not a valid IP address (got "172.30.0.300")',
    ]);
  });

  it("never throws on malformed objects", () => {
    const garbage: unknown[] = [
      null,
      undefined,
      42,
      "svc",
      [],
      {},
      { metadata: null },
      { metadata: { namespace: "ns1", name: "x" }, spec: [] },
      { metadata: { namespace: "ns1", name: "x" }, spec: { clusterIP: 5, ports: [{ port: 80 }] } },
      { metadata: { namespace: "ns1", name: "x" }, spec: { clusterIP: "172.30.0.1", ports: "80" } },
      { metadata: { namespace: "ns1", name: "x" }, spec: { clusterIP: "172.30.0.1", ports: [null, 7, [1]] } },
      { metadata: { namespace: "ns1", name: "x" }, spec: { clusterIP: "172.30.0.1", externalIPs: 5 } },
      {
        metadata: { namespace: "ns1", name: "x" },
        spec: { clusterIP: "172.30.0.1" },
        status: { loadBalancer: 3 },
      },
      {
        metadata: { namespace: "ns1", name: "x" },
        spec: { clusterIP: "172.30.0.1", ports: [{ port: 80 }] },
        status: { loadBalancer: { ingress: [null, { ip: 5 }, { ip: "1.2.3.4", ipMode: 7 }] } },
      },
      {
        metadata: { namespace: "ns1", name: "x" },
        spec: {
          clusterIP: "172.30.0.1",
          sessionAffinity: "ClientIP",
          sessionAffinityConfig: 4,
          ports: [{ port: 1 }],
        },
      },
    ];
    for (const g of garbage) {
      for (const family of ["IPv4", "IPv6"] as const) {
        const warnings: string[] = [];
        assert.doesNotThrow(() => servicePortsFromService(g as Service, family, (m) => warnings.push(m)));
        for (const w of warnings) assert.ok(!w.includes("\n"), w);
      }
    }
  });
});

describe("servicePortsFromService: injection attempts", () => {
  const good = svc("ns1", "good", { clusterIP: "172.30.0.10", ports: [{ name: "http", port: 80 }] });
  const longName = "a".repeat(300);
  const bad: Array<[Service, RegExp]> = [
    [
      svc("ns1", 'svc" -j ACCEPT', { clusterIP: "172.30.0.11", ports: [{ port: 80 }] }),
      /metadata\.name: must be/,
    ],
    [
      svc("ns1", "svc1\n-A KUBE-SERVICES -j ACCEPT", { clusterIP: "172.30.0.12", ports: [{ port: 80 }] }),
      /\\n-A/,
    ],
    [
      svc("ns 1", "svc1", { clusterIP: "172.30.0.13", ports: [{ port: 80 }] }),
      /metadata\.namespace: must be/,
    ],
    [svc("ns1", longName, { clusterIP: "172.30.0.14", ports: [{ port: 80 }] }), /\(300 chars\)/],
    [
      svc("ns1", "svc2", { clusterIP: "172.30.0.15 -j ACCEPT", ports: [{ port: 80 }] }),
      /spec\.clusterIP: not a valid/,
    ],
    [
      svc("ns1", "svc3", { clusterIP: "172.30.0.16", ports: [{ name: "--dport 1 -j ACCEPT", port: 80 }] }),
      /spec\.ports\[0\]\.name: must be a DNS label \(got "--dport 1 -j ACCEPT"\)/,
    ],
    [
      svc("ns1", "svc4", { clusterIP: "172.30.0.17", ports: [{ port: 80, protocol: "tcp -j ACCEPT" }] }),
      /spec\.ports\[0\]\.protocol/,
    ],
  ];

  for (const [s, re] of bad) {
    it(`rejects ${objectRef(s.metadata?.namespace, s.metadata?.name).slice(0, 40)} with one warning`, () => {
      const warnings: string[] = [];
      const all = [good, s].flatMap((x) => servicePortsFromService(x, "IPv4", (m) => warnings.push(m)));
      assert.deepEqual(all.map((p) => `${p.name.namespace}/${p.name.name}:${p.name.port}`), [
        "ns1/good:http",
      ]);
      assert.equal(warnings.length, 1, warnings.join(" | "));
      assert.match(warnings[0], re);
      assert.ok(!warnings[0].includes("\n"), "the warning stays on one line");
      assert.ok(warnings[0].length < 400, "long values are truncated");
    });
  }

  it("drops injected list entries and keeps the Service", () => {
    const { ports, warnings } = build(svc("ns1", "lists", {
      type: "LoadBalancer",
      clusterIP: "172.30.0.20",
      externalIPs: ["192.168.99.11", "1.2.3.4 --dport 1 -j ACCEPT"],
      loadBalancerSourceRanges: ["0.0.0.0/0 -j ACCEPT", "203.0.113.0/25"],
      ports: [{ port: 80, nodePort: 30080 }],
    }, { loadBalancer: { ingress: [{ ip: "1.2.3.4\n-A KUBE-SERVICES -j ACCEPT" }, { ip: "5.6.7.8" }] } }));
    assert.equal(ports.length, 1);
    assert.deepEqual(ports[0].externalIPs, ["192.168.99.11"]);
    assert.deepEqual(ports[0].loadBalancerSourceRanges, ["203.0.113.0/25"]);
    assert.deepEqual(ports[0].loadBalancerVIPs, ["5.6.7.8"]);
    assert.deepEqual(warnings, [
      'ignoring spec.externalIPs[1] of Service ns1/lists: not a valid IP address (got "1.2.3.4 --dport 1 -j ACCEPT")',
      'ignoring spec.loadBalancerSourceRanges[0] of Service ns1/lists: not a valid CIDR (got "0.0.0.0/0 -j ACCEPT")',
      'ignoring status.loadBalancer.ingress[0] of Service ns1/lists: ip: not a valid IP address (got "1.2.3.4\\n-A KUBE-SERVICES -j ACCEPT")',
    ]);
  });

  it("formats object references and values safely for a log line", () => {
    assert.equal(objectRef("ns1", "svc1"), "ns1/svc1");
    assert.equal(objectRef("ns1", 'a"b'), 'ns1/"a\\"b"');
    assert.equal(objectRef(undefined, "x"), "<unset>/x");
    assert.equal(formatValue("x".repeat(100)), `"${"x".repeat(79)}...(100 chars)`);
  });
});
