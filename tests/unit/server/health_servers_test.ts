import { describe, it } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { serveApp, type ServedApp, type ServeFn } from "../../../lib/runtime/serve.ts";
import { startHealthServers } from "../../../lib/server/health_servers.ts";
import type { ServerLogger } from "../../../lib/server/logger.ts";

/** Another process's listener, holding a loopback port. */
async function blocker(): Promise<{ port: number; close(): Promise<void> }> {
  const srv = net.createServer((s) => s.destroy());
  await new Promise<void>((resolve, reject) => {
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => resolve());
  });
  const port = (srv.address() as net.AddressInfo).port;
  return { port, close: () => new Promise<void>((r) => srv.close(() => r())) };
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

/** serveApp, recording every listener so a test can check none is left open. */
function trackingServe() {
  const open = new Set<ServedApp>();
  const serve: ServeFn = async (app, opts) => {
    const s = await serveApp(app, opts);
    const tracked: ServedApp = {
      hostname: s.hostname,
      port: s.port,
      close: async () => {
        open.delete(tracked);
        await s.close();
      },
    };
    open.add(tracked);
    return tracked;
  };
  return { open, serve };
}

const healthzApp = () => new Response("healthz-app");
const metricsApp = () => new Response("metrics-app");

async function until(cond: () => boolean, what: string, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) assert.fail(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

describe("startHealthServers", () => {
  it("starts both servers and serves each app", async () => {
    const { logger } = recorder();
    const hs = await startHealthServers({
      healthzBindAddress: "127.0.0.1:0",
      metricsBindAddress: "127.0.0.1:0",
      bindAddressHardFail: true,
      healthzApp,
      metricsApp,
      logger,
    });
    try {
      const h = hs.healthz()!, m = hs.metrics()!;
      assert.equal(await (await fetch(`http://127.0.0.1:${h.port}/`)).text(), "healthz-app");
      assert.equal(await (await fetch(`http://127.0.0.1:${m.port}/`)).text(), "metrics-app");
    } finally {
      await hs.close();
    }
    assert.equal(hs.healthz(), null);
  });

  it("an empty address disables that server", async () => {
    const t = trackingServe();
    const hs = await startHealthServers({
      healthzBindAddress: "",
      metricsBindAddress: "127.0.0.1:0",
      bindAddressHardFail: false,
      healthzApp,
      metricsApp,
      serve: t.serve,
      logger: recorder().logger,
    });
    assert.equal(hs.healthz(), null);
    assert.ok(hs.metrics());
    assert.equal(t.open.size, 1);
    await hs.close();
    assert.equal(t.open.size, 0);
  });

  it("hard fail: a taken port rejects with upstream's prefix and closes the other server", async () => {
    const b = await blocker();
    const t = trackingServe();
    try {
      await assert.rejects(
        startHealthServers({
          healthzBindAddress: `127.0.0.1:${b.port}`,
          metricsBindAddress: "127.0.0.1:0",
          bindAddressHardFail: true,
          healthzApp,
          metricsApp,
          serve: t.serve,
          logger: recorder().logger,
        }),
        new RegExp(
          `^Error: healthz server failed: cannot listen on 127\\.0\\.0\\.1:${b.port}: address already in use \\(EADDRINUSE\\)$`,
        ),
      );
      assert.equal(t.open.size, 0, "the metrics server that did start was closed");
      await assert.rejects(
        startHealthServers({
          healthzBindAddress: "",
          metricsBindAddress: `127.0.0.1:${b.port}`,
          bindAddressHardFail: true,
          healthzApp,
          metricsApp,
          serve: t.serve,
          logger: recorder().logger,
        }),
        /^Error: starting metrics server failed: cannot listen on 127\.0\.0\.1:\d+: address already in use/,
      );
    } finally {
      await b.close();
    }
  });

  it("without hard fail: logs, keeps running, and binds once the port is free", async () => {
    const b = await blocker();
    const { lines, logger } = recorder();
    const hs = await startHealthServers({
      healthzBindAddress: `127.0.0.1:${b.port}`,
      metricsBindAddress: "127.0.0.1:0",
      bindAddressHardFail: false,
      healthzApp,
      metricsApp,
      retryIntervalMs: 20,
      logger,
    });
    try {
      assert.equal(hs.healthz(), null);
      assert.ok(hs.metrics(), "the other server is unaffected");
      assert.match(
        lines.find((l) => l.startsWith("error"))!,
        /^error healthz server failed: cannot listen on .*; retrying every 0.02s$/,
      );
      await until(() => lines.filter((l) => l.startsWith("error")).length >= 2, "a second failed attempt");
      assert.equal(hs.healthz(), null);
      await b.close();
      await until(() => hs.healthz() !== null, "the retry to bind");
      const h = hs.healthz()!;
      assert.equal(h.port, b.port);
      assert.equal(await (await fetch(`http://127.0.0.1:${h.port}/`)).text(), "healthz-app");
    } finally {
      await hs.close();
      await b.close().catch(() => {});
    }
  });

  it("close() stops the retries", async () => {
    const b = await blocker();
    const { lines, logger } = recorder();
    const hs = await startHealthServers({
      healthzBindAddress: `127.0.0.1:${b.port}`,
      metricsBindAddress: "",
      bindAddressHardFail: false,
      healthzApp,
      metricsApp,
      retryIntervalMs: 10,
      logger,
    });
    await hs.close();
    const errorsAtClose = lines.length;
    await b.close();
    await new Promise((r) => setTimeout(r, 80));
    assert.equal(hs.healthz(), null);
    assert.equal(lines.length, errorsAtClose, "no attempt after close");
  });

  it("a malformed address is a configuration error whatever the hard-fail setting", async () => {
    await assert.rejects(
      startHealthServers({
        healthzBindAddress: "localhost:10256",
        metricsBindAddress: "",
        bindAddressHardFail: false,
        healthzApp,
        metricsApp,
        logger: recorder().logger,
      }),
      /^Error: healthzBindAddress: bind address "localhost:10256": host "localhost" is not an IP address/,
    );
  });
});
