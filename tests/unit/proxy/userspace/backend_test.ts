import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import * as net from "node:net";
import * as dgram from "node:dgram";
import { UserspaceBackend } from "../../../../lib/proxy/userspace/backend.ts";
import type { ServiceAddressHost } from "../../../../lib/proxy/userspace/interface_addresses.ts";
import { portalJumps } from "../../../../lib/proxy/userspace/portals.ts";
import type { ProxyState } from "../../../../lib/proxy/provider.ts";
import { ServicePortMap } from "../../../../lib/proxy/service_change_tracker.ts";
import { EndpointsMap } from "../../../../lib/proxy/endpoints_change_tracker.ts";
import { NO_LOCAL_DETECTION } from "../../../../lib/proxy/local_detect.ts";
import { servicePortKey } from "../../../../lib/proxy/types.ts";
import type { EndpointInfo, ServicePortInfo } from "../../../../lib/proxy/types.ts";
import {
  makeEndpoint,
  makeServicePort,
  type ServicePortFixture,
  TEST_NODE_NAME,
} from "../../../support/tracer.ts";

// Loopback: every 127.0.0.0/8 address is local, so the fake address host only records.
class FakeAddresses implements ServiceAddressHost {
  readonly device = "lo";
  synced: string[][] = [];
  sync(_f: unknown, a: ReadonlySet<string>): Promise<void> {
    this.synced.push([...a].sort());
    return Promise.resolve();
  }
  removeAll(): Promise<void> {
    return Promise.resolve();
  }
  nodeAddresses(): Promise<string[]> {
    return Promise.resolve(["127.0.0.1"]);
  }
}

const quiet = { warn: () => {}, debug: () => {} };
const cleanups: (() => Promise<void> | void)[] = [];
after(async () => {
  for (const c of cleanups.reverse()) await c();
});

/** A TCP server that answers each connection with its name, then echoes until the client's FIN. */
async function namedServer(name: string): Promise<number> {
  const server = net.createServer({ allowHalfOpen: true }, (s) => {
    s.write(`${name}\n`);
    s.on("data", (d) => s.write(d));
    s.on("end", () => s.end(`bye-${name}\n`));
    s.on("error", () => {});
  });
  await new Promise<void>((r) => server.listen({ host: "127.0.0.1", port: 0 }, r));
  cleanups.push(() => new Promise<void>((r) => server.close(() => r())));
  return (server.address() as net.AddressInfo).port;
}

async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen({ host: "127.0.0.1", port: 0 }, r));
  const p = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return p;
}

function state(svcs: [ServicePortInfo, EndpointInfo[]][]): ProxyState {
  const services = new ServicePortMap();
  const endpoints = new EndpointsMap();
  for (const [svc, eps] of svcs) {
    const k = servicePortKey(svc.name);
    services.set(k, svc);
    if (eps.length > 0) endpoints.set(k, eps);
  }
  return {
    family: "IPv4",
    services,
    endpoints,
    changedServices: new Set(services.keys()),
    nodeLabels: {},
    localDetection: NO_LOCAL_DETECTION,
  };
}

function backend(extra: Partial<ConstructorParameters<typeof UserspaceBackend>[0]> = {}) {
  const b = new UserspaceBackend({
    family: "IPv4",
    nodeName: TEST_NODE_NAME,
    log: quiet,
    steering: { kind: "none", addresses: new FakeAddresses() },
    nodePortAddresses: ["127.0.0.0/8"],
    closeGraceMs: 200,
    ...extra,
  });
  cleanups.push(() => b.close());
  return b;
}

/** Connects, reads the first line (the backend's name), keeps the socket open. */
function connect(
  host: string,
  port: number,
): Promise<{ sock: net.Socket; first: string; text: () => string }> {
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host, port, allowHalfOpen: true });
    let buf = "";
    sock.on("data", (d) => {
      buf += d.toString();
      const nl = buf.indexOf("\n");
      if (nl >= 0 && !resolved) {
        resolved = true;
        resolve({ sock, first: buf.slice(0, nl), text: () => buf });
      }
    });
    let resolved = false;
    sock.on("error", reject);
    const closed = () => {
      if (!resolved) reject(new Error(`closed before a line (got ${JSON.stringify(buf)})`));
    };
    sock.on("end", closed);
    sock.on("close", closed);
  });
}

function svc(name: string, f: Partial<ServicePortFixture>) {
  return makeServicePort("ns", name, { clusterIP: "127.0.0.1", ...f });
}

describe("UserspaceBackend (TCP over loopback)", () => {
  it("round-robins connections across endpoints and splices with half-close", async () => {
    const [a, b] = [await namedServer("a"), await namedServer("b")];
    const port = await freePort();
    const be = backend();
    const s = svc("rr", { clusterIP: "127.0.0.61", portNumber: port });
    await be.sync(state([[s, [makeEndpoint("127.0.0.1", a), makeEndpoint("127.0.0.1", b)]]]), { full: true });
    const names: string[] = [];
    for (let i = 0; i < 4; i++) {
      const c = await connect("127.0.0.61", port);
      names.push(c.first);
      c.sock.destroy();
    }
    assert.deepEqual(names, ["a", "b", "a", "b"]);

    // Half-close: the client's FIN reaches the backend, whose reply still comes back.
    const c = await connect("127.0.0.61", port);
    c.sock.write("ping\n");
    c.sock.end();
    await new Promise((r) => c.sock.on("close", r));
    assert.match(c.text(), /^a\nping\nbye-a\n$/);
    const counters = be.counters().get(servicePortKey(s.name))!;
    assert.equal(counters.connections, 5);
    assert.ok(counters.bytesIn >= 5 && counters.bytesOut > 10);
  });

  it("closes a connection at once when the service port has no endpoints", async () => {
    const port = await freePort();
    const be = backend();
    await be.sync(state([[svc("none", { clusterIP: "127.0.0.62", portNumber: port }), []]]), { full: true });
    const t0 = Date.now();
    await assert.rejects(connect("127.0.0.62", port), /closed before a line|ECONNRESET/);
    assert.ok(Date.now() - t0 < 1000);
  });

  it("retries a refused dial on the next endpoint and backs the dead one off", async () => {
    const a = await namedServer("a");
    const dead = await freePort();
    const port = await freePort();
    const be = backend();
    const s = svc("retry", { clusterIP: "127.0.0.63", portNumber: port });
    await be.sync(state([[s, [makeEndpoint("127.0.0.1", a), makeEndpoint("127.0.0.1", dead)]]]), {
      full: true,
    });
    const names: string[] = [];
    for (let i = 0; i < 4; i++) {
      const c = await connect("127.0.0.63", port);
      names.push(c.first);
      c.sock.destroy();
    }
    assert.deepEqual(names, ["a", "a", "a", "a"]);
    // One failed dial only: afterwards round robin skips the backed-off endpoint.
    assert.equal(be.counters().get(servicePortKey(s.name))!.dialErrors, 1);
  });

  it("keeps an open connection across an endpoint change; new connections use the new set", async () => {
    const [a, b] = [await namedServer("a"), await namedServer("b")];
    const port = await freePort();
    const be = backend();
    const s = svc("chg", { clusterIP: "127.0.0.64", portNumber: port });
    await be.sync(state([[s, [makeEndpoint("127.0.0.1", a)]]]), { full: true });
    const open = await connect("127.0.0.64", port);
    assert.equal(open.first, "a");
    await be.sync(state([[s, [makeEndpoint("127.0.0.1", b)]]]), { full: false });
    const fresh = await connect("127.0.0.64", port);
    assert.equal(fresh.first, "b");
    fresh.sock.destroy();
    open.sock.write("still\n");
    open.sock.end();
    await new Promise((r) => open.sock.on("close", r));
    assert.equal(open.text(), "a\nstill\nbye-a\n");
  });

  it("node ports listen on the node-port addresses; a removed service stops accepting", async () => {
    const a = await namedServer("a");
    const [port, nodePort] = [await freePort(), await freePort()];
    const be = backend();
    const s = svc("np", { clusterIP: "127.0.0.65", portNumber: port, nodePort });
    await be.sync(state([[s, [makeEndpoint("127.0.0.1", a)]]]), { full: true });
    assert.deepEqual([...be.listeners().keys()].sort(), [
      `TCP/127.0.0.1:${nodePort}`,
      `TCP/127.0.0.65:${port}`,
    ]);
    const c = await connect("127.0.0.1", nodePort);
    assert.equal(c.first, "a");
    await be.sync(state([]), { full: true });
    await assert.rejects(connect("127.0.0.65", port), /ECONNREFUSED/);
    // The open connection is closed after the grace period (200 ms here).
    await new Promise((r) => c.sock.on("end", r));
  });
});

describe("UserspaceBackend: who may use an external address, and which endpoints they reach", () => {
  it("loadBalancerSourceRanges: a client outside the ranges is closed at once, one inside is proxied", async () => {
    const a = await namedServer("a");
    const port = await freePort();
    const be = backend();
    const mk = (ranges: string[]) =>
      svc("ranged", {
        clusterIP: "127.0.0.67",
        portNumber: port,
        loadBalancerVIPs: ["127.0.0.68"],
        loadBalancerSourceRanges: ranges,
      });
    await be.sync(state([[mk(["10.0.0.0/8"]), [makeEndpoint("127.0.0.1", a)]]]), { full: true });
    await assert.rejects(connect("127.0.0.68", port), /closed before a line|ECONNRESET/);
    assert.equal((await connect("127.0.0.67", port)).first, "a", "the cluster IP is not guarded");
    await be.sync(state([[mk(["127.0.0.0/8"]), [makeEndpoint("127.0.0.1", a)]]]), { full: false });
    assert.equal((await connect("127.0.0.68", port)).first, "a");
  });

  it("eTP=Local: the node's own connections to an external address use every endpoint", async () => {
    const [a, b] = [await namedServer("a"), await namedServer("b")];
    const port = await freePort();
    const s = svc("etp", {
      clusterIP: "127.0.0.69",
      portNumber: port,
      externalIPs: ["127.0.0.70"],
      externalPolicyLocal: true,
    });
    const eps = [makeEndpoint("127.0.0.1", a), makeEndpoint("127.0.0.1", b, { nodeName: TEST_NODE_NAME })];
    // The client is 127.0.0.1, the node itself: the cluster endpoints, as upstream's KUBE-EXT short-circuit.
    const ext = backend();
    await ext.sync(state([[s, eps]]), { full: true });
    const seen: string[] = [];
    for (let i = 0; i < 4; i++) seen.push((await connect("127.0.0.70", port)).first);
    assert.deepEqual(seen, ["a", "b", "a", "b"]);
    await ext.close();
  });
});

describe("UserspaceBackend (UDP over loopback)", () => {
  it("forwards datagrams per client session and replies from the service address", async () => {
    const echo = dgram.createSocket("udp4");
    await new Promise<void>((r) => echo.bind(0, "127.0.0.1", r));
    echo.on("message", (m, r) => echo.send(Buffer.concat([Buffer.from("echo:"), m]), r.port, r.address));
    cleanups.push(() => new Promise<void>((r) => echo.close(() => r())));
    const port = await freePort();
    const be = backend({ udpIdleTimeoutMs: 1000 });
    const s = svc("udp", { clusterIP: "127.0.0.66", portNumber: port, protocol: "UDP" });
    await be.sync(state([[s, [makeEndpoint("127.0.0.1", echo.address().port)]]]), { full: true });
    const client = dgram.createSocket("udp4");
    cleanups.push(() => new Promise<void>((r) => client.close(() => r())));
    const reply = new Promise<[string, dgram.RemoteInfo]>((r) =>
      client.once("message", (m, ri) => r([m.toString(), ri]))
    );
    client.send("hi", port, "127.0.0.66");
    const [text, from] = await reply;
    assert.equal(text, "echo:hi");
    assert.equal(from.address, "127.0.0.66");
    assert.equal(from.port, port);
  });
});

describe("UserspaceBackend: drift check and closing", () => {
  it("portals=none: a service address gone from the interface is drift; the next sync adds it again", async () => {
    const added: string[][] = [];
    let missing: string[] = [];
    const addresses: ServiceAddressHost = {
      device: "kube-userspace0",
      sync: (_f, a) => (added.push([...a].sort()), Promise.resolve()),
      removeAll: () => Promise.resolve(),
      nodeAddresses: () => Promise.resolve(["127.0.0.1"]),
      missing: () => Promise.resolve(missing),
    };
    const be = backend({ steering: { kind: "none", addresses } });
    const s = svc("d", { clusterIP: "127.0.0.70", portNumber: await freePort() });
    await be.sync(state([[s, [makeEndpoint("127.0.0.1", await namedServer("a"))]]]), { full: true });
    assert.equal(await be.checkDrift(), null);
    missing = ["127.0.0.70"];
    assert.equal(await be.checkDrift(), "service addresses missing from kube-userspace0: 127.0.0.70");
  });

  it("iptables portals: a deleted portal rule or jump is drift; a full sync writes the rules and jumps again", async () => {
    let nat = "";
    let jumps = 0;
    const restored: string[] = [];
    const be = backend({
      steering: {
        kind: "iptables",
        listenIP: () => "127.0.0.1",
        restore: (p) => (restored.push(p), Promise.resolve()),
        ensureJumps: () => (jumps++, Promise.resolve()),
        save: () => Promise.resolve(nat),
      },
    });
    const s = svc("d", { clusterIP: "10.96.0.70", portNumber: 80 });
    const st = state([[s, [makeEndpoint("127.0.0.1", await namedServer("a"))]]]);
    await be.sync(st, { full: true });
    const jumpLines = portalJumps().map((j) => `-A ${j.chain} ${j.args.join(" ")}`);
    const kernel = (payload: string) =>
      [...payload.split("\n").filter((l) => l.startsWith(":KUBE") || l.startsWith("-A ")), ...jumpLines].join(
        "\n",
      );
    nat = kernel(restored[0]);
    assert.equal(await be.checkDrift(), null);
    nat = nat.split("\n").filter((l) => !l.startsWith("-A KUBE-PORTALS-CONTAINER")).join("\n");
    assert.match((await be.checkDrift())!, /KUBE-PORTALS-CONTAINER has 0 rules, 1 written/);
    nat = kernel(restored[0]).split("\n").filter((l) => !l.startsWith("-A OUTPUT")).join("\n");
    assert.match((await be.checkDrift())!, /jump from OUTPUT/);
    await be.sync(st, { full: true }); // what the proxier does on drift
    assert.equal(jumps, 2);
    assert.equal(restored[1], restored[0]);
  });

  it("a removed UDP service port ends its sessions at once (upstream), whatever the grace period", async () => {
    const echo = dgram.createSocket("udp4");
    await new Promise<void>((r) => echo.bind(0, "127.0.0.1", r));
    echo.on("message", (m, r) => echo.send(m, r.port, r.address));
    cleanups.push(() => new Promise<void>((r) => echo.close(() => r())));
    const port = await freePort();
    const be = backend({ udpIdleTimeoutMs: 5000, closeGraceMs: 10_000 });
    const s = svc("u", { clusterIP: "127.0.0.71", portNumber: port, protocol: "UDP" });
    await be.sync(state([[s, [makeEndpoint("127.0.0.1", echo.address().port)]]]), { full: true });
    const client = dgram.createSocket("udp4");
    cleanups.push(() => new Promise<void>((r) => client.close(() => r())));
    const reply = new Promise((r) => client.once("message", r));
    client.send("hi", port, "127.0.0.71");
    await reply;
    const t0 = Date.now();
    await be.sync(state([]), { full: true });
    await be.close();
    assert.ok(Date.now() - t0 < 1000, `closing took ${Date.now() - t0} ms`);
  });
});
