import { describe, it } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import type { ServerLogger } from "../../../lib/server/logger.ts";
import { serviceHealthBody, ServiceHealthServer } from "../../../lib/server/service_health.ts";

/** Another process's listener, holding a loopback port (or, with `port`, that port). */
async function blocker(host = "127.0.0.1", port = 0): Promise<{ port: number; close(): Promise<void> }> {
  const srv = net.createServer((s) => s.destroy());
  await new Promise<void>((resolve, reject) => {
    srv.once("error", reject);
    srv.listen(port, host, () => resolve());
  });
  const bound = (srv.address() as net.AddressInfo).port;
  return { port: bound, close: () => new Promise<void>((r) => srv.close(() => r())) };
}

/** A free loopback port: bind 0, read it, release it. */
async function freePort(): Promise<number> {
  const b = await blocker();
  await b.close();
  return b.port;
}

function recorder() {
  const lines: string[] = [];
  const logger: ServerLogger = {
    error: (m) => void lines.push(`error ${m}`),
    warn: (m) => void lines.push(`warn ${m}`),
    info: (m) => void lines.push(`info ${m}`),
    debug: () => {},
  };
  return { lines, logger };
}

async function probe(url: string) {
  const r = await fetch(url);
  return { status: r.status, headers: r.headers, body: await r.text() };
}

describe("service health-check node ports", () => {
  it("the body is upstream's tab-indented template", () => {
    assert.equal(
      serviceHealthBody("ns", "svc", 2, true),
      '{\n\t"service": {\n\t\t"namespace": "ns",\n\t\t"name": "svc"\n\t},\n\t"localEndpoints": 2,\n\t"serviceProxyHealthy": true\n}',
    );
  });

  it("flips 200 ↔ 503 as local endpoints come and go, and with proxy health", async () => {
    let healthy = true;
    const port = await freePort();
    const shs = new ServiceHealthServer({
      nodeIPs: ["127.0.0.1"],
      proxyHealthy: () => healthy,
      logger: recorder().logger,
    });
    try {
      await shs.syncServices(new Map([["default/web", port]]));
      assert.deepEqual(
        shs.listening(),
        new Map([["default/web", { port, addresses: [`127.0.0.1:${port}`] }]]),
      );
      const url = `http://127.0.0.1:${port}/any/path`;

      let r = await probe(url);
      assert.equal(r.status, 503, "no local endpoints yet");
      assert.equal(r.headers.get("content-type"), "application/json");
      assert.equal(r.headers.get("x-content-type-options"), "nosniff");
      assert.equal(r.headers.get("x-load-balancing-endpoint-weight"), "0");
      assert.equal(r.body, serviceHealthBody("default", "web", 0, true));

      shs.syncEndpoints(new Map([["default/web", 2], ["other/unknown", 5]]));
      r = await probe(url);
      assert.equal(r.status, 200);
      assert.equal(r.headers.get("x-load-balancing-endpoint-weight"), "2");
      assert.equal(
        r.body,
        '{\n\t"service": {\n\t\t"namespace": "default",\n\t\t"name": "web"\n\t},\n\t"localEndpoints": 2,\n\t"serviceProxyHealthy": true\n}',
      );

      healthy = false;
      r = await probe(url);
      assert.equal(r.status, 503, "endpoints but an unhealthy proxy");
      assert.equal(r.body, serviceHealthBody("default", "web", 2, false));
      healthy = true;

      shs.syncEndpoints(new Map()); // absent → 0
      r = await probe(url);
      assert.equal(r.status, 503);
      assert.equal(r.headers.get("x-load-balancing-endpoint-weight"), "0");

      shs.syncEndpoints(new Map([["default/web", 1]]));
      assert.equal((await probe(url)).status, 200);
    } finally {
      await shs.stop();
    }
  });

  it("opens, keeps, moves and closes listeners as Services change", async () => {
    const [p1, p2, p3] = [await freePort(), await freePort(), await freePort()];
    const shs = new ServiceHealthServer({
      nodeIPs: ["127.0.0.1"],
      proxyHealthy: () => true,
      logger: recorder().logger,
    });
    try {
      await shs.syncServices(new Map([["a/one", p1], ["b/two", p2]]));
      shs.syncEndpoints(new Map([["a/one", 1], ["b/two", 1]]));
      assert.equal((await probe(`http://127.0.0.1:${p1}/`)).status, 200);
      assert.equal((await probe(`http://127.0.0.1:${p2}/`)).status, 200);

      // b/two moves to p3; a/one is untouched and keeps its endpoint count.
      await shs.syncServices(new Map([["a/one", p1], ["b/two", p3]]));
      assert.equal((await probe(`http://127.0.0.1:${p1}/`)).status, 200, "unchanged service keeps its state");
      await assert.rejects(fetch(`http://127.0.0.1:${p2}/`), "old port closed");
      const moved = await probe(`http://127.0.0.1:${p3}/`);
      assert.equal(
        moved.status,
        200,
        "a reopened listener starts from the last reported endpoint count",
      );
      assert.match(moved.body, /"name": "two"/);

      await shs.syncServices(new Map([["b/two", p3]]));
      await assert.rejects(fetch(`http://127.0.0.1:${p1}/`), "removed service closed");
      assert.deepEqual([...shs.listening().keys()], ["b/two"]);
    } finally {
      await shs.stop();
    }
    await assert.rejects(fetch(`http://127.0.0.1:${p3}/`), "stop closes everything");
    assert.equal(shs.listening().size, 0);
  });

  it("listens on every node IP (dual family on loopback)", async () => {
    const port = await freePort();
    const shs = new ServiceHealthServer({
      nodeIPs: ["127.0.0.1", "::1"],
      proxyHealthy: () => true,
      logger: recorder().logger,
    });
    try {
      await shs.syncServices(new Map([["ns/dual", port]]));
      shs.syncEndpoints(new Map([["ns/dual", 3]]));
      assert.deepEqual(shs.listening().get("ns/dual")!.addresses, [`127.0.0.1:${port}`, `[::1]:${port}`]);
      assert.equal((await probe(`http://127.0.0.1:${port}/`)).status, 200);
      const v6 = await probe(`http://[::1]:${port}/`);
      assert.equal(v6.status, 200);
      assert.equal(v6.headers.get("x-load-balancing-endpoint-weight"), "3");
    } finally {
      await shs.stop();
    }
  });

  it("a port conflict is logged, not kept, and retried on the next sync", async () => {
    const b = await blocker();
    const { lines, logger } = recorder();
    const okPort = await freePort();
    const shs = new ServiceHealthServer({
      nodeIPs: ["127.0.0.1"],
      proxyHealthy: () => true,
      hostname: "node-a",
      logger,
    });
    try {
      await shs.syncServices(new Map([["ns/busy", b.port], ["ns/fine", okPort]]));
      assert.deepEqual([...shs.listening().keys()], ["ns/fine"], "the conflict does not block the others");
      const err = lines.find((l) => l.startsWith("error"))!;
      assert.equal(
        err,
        `error node node-a failed to start healthcheck "ns/busy" on port ${b.port}: cannot listen on 127.0.0.1:${b.port}: address already in use (EADDRINUSE)`,
      );
      // Still taken: retried and failing again.
      await shs.syncServices(new Map([["ns/busy", b.port], ["ns/fine", okPort]]));
      assert.equal(lines.filter((l) => l.includes('"ns/busy"')).length, 2);
      await b.close();
      await shs.syncServices(new Map([["ns/busy", b.port], ["ns/fine", okPort]]));
      assert.deepEqual([...shs.listening().keys()], ["ns/busy", "ns/fine"]);
      shs.syncEndpoints(new Map([["ns/busy", 1]]));
      assert.equal((await probe(`http://127.0.0.1:${b.port}/`)).status, 200);
    } finally {
      await shs.stop();
      await b.close().catch(() => {});
    }
  });

  it("a partial bind (second address taken) closes the first, so nothing half-open is kept", async () => {
    const port = await freePort();
    const b6 = await blocker("::1", port);
    const { lines, logger } = recorder();
    const shs = new ServiceHealthServer({ nodeIPs: ["127.0.0.1", "::1"], proxyHealthy: () => true, logger });
    try {
      await shs.syncServices(new Map([["ns/half", port]]));
      assert.equal(shs.listening().size, 0);
      assert.ok(
        lines.some((l) => l.includes(`cannot listen on [::1]:${port}: address already in use`)),
        lines.join("\n"),
      );
      await assert.rejects(fetch(`http://127.0.0.1:${port}/`), "the IPv4 listener was closed again");
    } finally {
      await shs.stop();
      await b6.close();
    }
  });

  it("bad keys and ports are logged and skipped; syncs after stop do nothing", async () => {
    const { lines, logger } = recorder();
    const shs = new ServiceHealthServer({ nodeIPs: ["127.0.0.1"], proxyHealthy: () => true, logger });
    await shs.syncServices(new Map([["no-slash", 30000], ["ns/zero", 0], ["ns/big", 70000]]));
    assert.equal(shs.listening().size, 0);
    assert.equal(lines.filter((l) => l.startsWith("error")).length, 3);
    assert.ok(lines.some((l) => l.includes('service key "no-slash" is not "namespace/name"')));
    assert.ok(lines.some((l) => l.includes('"ns/big" has healthCheckNodePort 70000')));
    await shs.stop();
    const port = await freePort();
    await shs.syncServices(new Map([["ns/late", port]]));
    assert.equal(shs.listening().size, 0);
    await assert.rejects(fetch(`http://127.0.0.1:${port}/`));
  });
});

describe("ServiceHealthServer: endpoints reported before a listener opens", () => {
  it("a listener that opens after syncEndpoints starts from the reported count", async () => {
    const server = new ServiceHealthServer({ proxyHealthy: () => true, nodeIPs: ["127.0.0.1"] });
    try {
      const port = await freePort();
      const opened = server.syncServices(new Map([["ns/lb", port]]));
      // Same sync: the counts arrive while the listener is still being opened.
      server.syncEndpoints(new Map([["ns/lb", 2]]));
      await opened;
      const res = await fetch(`http://127.0.0.1:${port}/`);
      assert.equal(res.status, 200);
      assert.equal(JSON.parse(await res.text()).localEndpoints, 2);
    } finally {
      await server.stop();
    }
  });
});
