import { describe, it } from "node:test";
import assert from "node:assert/strict";
import * as net from "node:net";
import { UserspaceBackend } from "../../../../lib/proxy/userspace/backend.ts";
import {
  portalDrift,
  portalJumps,
  renderPortalCleanup,
  renderPortalRules,
} from "../../../../lib/proxy/userspace/portals.ts";
import { ServicePortMap } from "../../../../lib/proxy/service_change_tracker.ts";
import { EndpointsMap } from "../../../../lib/proxy/endpoints_change_tracker.ts";
import { NO_LOCAL_DETECTION } from "../../../../lib/proxy/local_detect.ts";
import { servicePortKey } from "../../../../lib/proxy/types.ts";
import { makeEndpoint, makeServicePort, TEST_NODE_NAME } from "../../../support/tracer.ts";

describe("renderPortalRules", () => {
  it("writes each destination to the CONTAINER and HOST chains, sorted, in one nat transaction", () => {
    const out = renderPortalRules("IPv4", [
      {
        servicePort: "ns/b:http",
        protocol: "UDP",
        ip: null,
        port: 30053,
        listenIP: "192.168.0.2",
        listenPort: 40001,
      },
      {
        servicePort: "ns/a:http",
        protocol: "TCP",
        ip: "10.96.0.1",
        port: 80,
        listenIP: "0.0.0.0",
        listenPort: 40000,
      },
    ]);
    assert.equal(
      out,
      [
        "*nat",
        ":KUBE-PORTALS-CONTAINER - [0:0]",
        ":KUBE-PORTALS-HOST - [0:0]",
        ":KUBE-NODEPORT-CONTAINER - [0:0]",
        ":KUBE-NODEPORT-HOST - [0:0]",
        '-A KUBE-PORTALS-CONTAINER -m comment --comment "ns/a:http" -p tcp -m tcp --dport 80 -d 10.96.0.1/32 -j REDIRECT --to-ports 40000',
        '-A KUBE-PORTALS-HOST -m comment --comment "ns/a:http" -p tcp -m tcp --dport 80 -d 10.96.0.1/32 -j REDIRECT --to-ports 40000',
        '-A KUBE-NODEPORT-CONTAINER -m comment --comment "ns/b:http" -p udp -m udp --dport 30053 -j DNAT --to-destination 192.168.0.2:40001',
        '-A KUBE-NODEPORT-HOST -m comment --comment "ns/b:http" -p udp -m udp --dport 30053 -j DNAT --to-destination 192.168.0.2:40001',
        "COMMIT",
        "",
      ].join("\n"),
    );
  });

  it("IPv6 uses /128 and bracketed DNAT targets; cleanup deletes the four chains", () => {
    const out = renderPortalRules("IPv6", [
      {
        servicePort: "ns/a",
        protocol: "TCP",
        ip: "fd00::1",
        port: 80,
        listenIP: "fd00::2",
        listenPort: 40000,
      },
    ]);
    assert.match(out, /-d fd00::1\/128 -j DNAT --to-destination \[fd00::2\]:40000/);
    assert.match(renderPortalCleanup(), /-X KUBE-PORTALS-CONTAINER\n.*\n.*\n-X KUBE-NODEPORT-HOST\nCOMMIT/);
    assert.deepEqual(portalJumps().map((j) => `${j.chain}→${j.args.at(-1)}`), [
      "PREROUTING→KUBE-PORTALS-CONTAINER",
      "OUTPUT→KUBE-PORTALS-HOST",
      "PREROUTING→KUBE-NODEPORT-CONTAINER",
      "OUTPUT→KUBE-NODEPORT-HOST",
    ]);
  });
});

describe("UserspaceBackend with iptables portals", () => {
  it("one listener per service port and kind, the rules point at its port, one restore per sync", async () => {
    const backendSrv = net.createServer((s) => s.end("hello\n"));
    await new Promise<void>((r) => backendSrv.listen({ host: "127.0.0.1", port: 0 }, r));
    const epPort = (backendSrv.address() as net.AddressInfo).port;
    const restores: string[] = [];
    let jumps = 0;
    const b = new UserspaceBackend({
      family: "IPv4",
      nodeName: TEST_NODE_NAME,
      log: { warn: () => {}, debug: () => {} },
      steering: {
        kind: "iptables",
        listenIP: () => "127.0.0.1",
        restore: (p) => (restores.push(p), Promise.resolve()),
        ensureJumps: () => (jumps++, Promise.resolve()),
      },
      nodePortAddresses: [],
    });
    try {
      const svc = makeServicePort("ns", "web", {
        clusterIP: "10.96.0.9",
        nodePort: 30080,
        externalIPs: ["192.0.2.9"],
      });
      const services = new ServicePortMap([[servicePortKey(svc.name), svc]]);
      const endpoints = new EndpointsMap([[servicePortKey(svc.name), [makeEndpoint("127.0.0.1", epPort)]]]);
      const state = {
        family: "IPv4" as const,
        services,
        endpoints,
        changedServices: new Set<string>(),
        nodeLabels: {},
        localDetection: NO_LOCAL_DETECTION,
      };
      await b.sync(state, { full: true });
      await b.sync(state, { full: false });
      assert.equal(restores.length, 2);
      assert.equal(restores[0], restores[1], "same listeners, same ports");
      assert.equal(jumps, 1);
      const listeners = [...b.listeners().keys()].sort();
      assert.deepEqual(listeners, ["TCP/ns/web:p80/TCP/external", "TCP/ns/web:p80/TCP/internal"]);
      const ports = [
        ...restores[0].matchAll(/--dport (\d+) (?:-d (\S+) )?-j DNAT --to-destination 127\.0\.0\.1:(\d+)/g),
      ]
        .map((m) => [m[1], m[2] ?? "node", m[3]]);
      // cluster IP → internal listener; external IP and node port → the external listener.
      const internal = ports.find((p) => p[1] === "10.96.0.9/32")![2];
      const external = ports.find((p) => p[1] === "192.0.2.9/32")![2];
      assert.notEqual(internal, external);
      assert.equal(ports.find((p) => p[0] === "30080")![2], external);
      assert.equal(ports.length, 6);
      // The listener the rule names proxies to the endpoint.
      const text = await new Promise<string>((resolve, reject) => {
        let buf = "";
        const s = net.connect({ host: "127.0.0.1", port: Number(internal) });
        s.on("data", (d) => (buf += d));
        s.on("end", () => resolve(buf));
        s.on("error", reject);
      });
      assert.equal(text, "hello\n");
    } finally {
      await b.close();
      await new Promise<void>((r) => backendSrv.close(() => r()));
    }
  });
});

describe("portalDrift", () => {
  const payload = renderPortalRules("IPv4", [
    {
      servicePort: "ns/a:http",
      protocol: "TCP",
      ip: "10.96.0.1",
      port: 80,
      listenIP: "10.0.0.1",
      listenPort: 40000,
    },
    {
      servicePort: "ns/a:np",
      protocol: "TCP",
      ip: null,
      port: 30080,
      listenIP: "10.0.0.1",
      listenPort: 40001,
    },
  ]);
  // What iptables-save prints back: the chains, our rules (in its own spelling), the jumps.
  const jumps = portalJumps().map((j) =>
    `-A ${j.chain} ${j.args.map((a) => a.includes(" ") ? `"${a}"` : a).join(" ")}`
  );
  const saved = [
    "*nat",
    ":PREROUTING ACCEPT [0:0]",
    ...payload.split("\n").filter((l) => l.startsWith(":KUBE") || l.startsWith("-A ")),
    ...jumps,
    "COMMIT",
  ].join("\n");

  it("is null while the kernel holds every rule and jump", () => {
    assert.equal(portalDrift(payload, saved), null);
  });

  it("names a deleted jump, a deleted rule and a deleted chain", () => {
    const noJump = saved.split("\n").filter((l) => !l.startsWith("-A PREROUTING")).join("\n");
    assert.match(portalDrift(payload, noJump)!, /jump from PREROUTING to KUBE-PORTALS-CONTAINER is missing/);
    const rule = saved.split("\n").find((l) => l.startsWith("-A KUBE-PORTALS-HOST "))!;
    assert.match(
      portalDrift(payload, saved.replace(`${rule}\n`, ""))!,
      /KUBE-PORTALS-HOST has 0 rules, 1 written/,
    );
    const noChain = saved.split("\n").filter((l) =>
      !l.includes("KUBE-NODEPORT-HOST") || l.startsWith("-A OUTPUT")
    )
      .join("\n");
    assert.match(portalDrift(payload, noChain)!, /chain KUBE-NODEPORT-HOST is missing/);
  });
});
