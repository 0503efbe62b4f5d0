/**
 * Reflector edge cases a real apiserver does not produce on demand, against a small scripted node:http fake:
 * malformed list items and watch lines, a watch that goes silent (before or after its headers), a
 * server that closes every watch at once, and LISTs at a resourceVersion the server cannot serve.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { staticCredentials } from "../../../lib/k8s/credentials.ts";
import { ApiTransport, type Logger } from "../../../lib/k8s/transport.ts";
import { ApiStats } from "../../../lib/k8s/stats.ts";
import { Reflector } from "../../../lib/k8s/reflector.ts";
import { type ResourceEventHandler, SERVICES_RESOURCE } from "../../../lib/k8s/resource.ts";
import { type KubeObject, objectKey } from "../../../lib/k8s/store.ts";

type WatchMode = "stream" | "silent" | "no-headers" | "close";

class FakeApi {
  items: unknown[] = [];
  rv = "100";
  watchMode: WatchMode = "stream";
  lists = 0;
  /** The query of every LIST, in order. */
  listQueries: URLSearchParams[] = [];
  /** An error answer (status, Status body) for a LIST, or undefined to serve it. */
  listError: (q: URLSearchParams) => [number, unknown] | undefined = () => undefined;
  watches = 0;
  open = new Set<http.ServerResponse>();
  #server = http.createServer((req, res) => this.#handle(req, res));
  url = "";

  async start(): Promise<this> {
    await new Promise<void>((r) => this.#server.listen(0, "127.0.0.1", () => r()));
    this.url = `http://127.0.0.1:${(this.#server.address() as { port: number }).port}`;
    return this;
  }

  #handle(req: http.IncomingMessage, res: http.ServerResponse): void {
    const q = new URL(req.url!, "http://x").searchParams;
    if (q.get("watch") !== "true") {
      this.lists++;
      this.listQueries.push(q);
      const err = this.listError(q);
      if (err) {
        res.writeHead(err[0], { "Content-Type": "application/json" });
        res.end(JSON.stringify(err[1]));
        return;
      }
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(
        JSON.stringify({
          kind: "ServiceList",
          apiVersion: "v1",
          metadata: { resourceVersion: this.rv },
          items: this.items,
        }),
      );
      return;
    }
    this.watches++;
    if (this.watchMode === "no-headers") {
      this.open.add(res);
      res.on("close", () => this.open.delete(res));
      return;
    }
    if (this.watchMode === "close") {
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end();
      return;
    }
    res.writeHead(200, { "Content-Type": "application/json", "Transfer-Encoding": "chunked" });
    res.flushHeaders();
    this.open.add(res);
    res.on("close", () => this.open.delete(res));
  }

  push(line: string): void {
    for (const r of this.open) r.write(line + "\n");
  }

  async close(): Promise<void> {
    for (const r of this.open) r.destroy();
    this.#server.closeAllConnections?.();
    await new Promise<void>((r) => this.#server.close(() => r()));
  }
}

class Rec implements ResourceEventHandler<KubeObject> {
  events: string[] = [];
  synced = 0;
  onAdd(o: KubeObject) {
    this.events.push(`add ${objectKey(o)}`);
  }
  onUpdate(_: KubeObject, o: KubeObject) {
    this.events.push(`update ${objectKey(o)}`);
  }
  onDelete(o: KubeObject) {
    this.events.push(`delete ${objectKey(o)}`);
  }
  onSynced() {
    this.synced++;
  }
}

function logger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  return {
    lines,
    debug: (m) => lines.push(`D ${m}`),
    info: (m) => lines.push(`I ${m}`),
    warn: (m) => lines.push(`W ${m}`),
    error: (m) => lines.push(`E ${m}`),
  };
}

async function waitFor(what: string, cond: () => boolean, timeoutMs = 5000): Promise<void> {
  const t0 = Date.now();
  while (!cond()) {
    if (Date.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function setup(fake: FakeApi, timings = {}) {
  const log = logger();
  const stats = new ApiStats();
  const transport = new ApiTransport({
    config: {
      server: fake.url,
      insecureSkipTlsVerify: false,
      credentials: staticCredentials({}, "none"),
      source: "fake",
    },
    qps: -1,
    stats,
    log,
  });
  const rec = new Rec();
  const r = new Reflector<KubeObject>({
    transport,
    spec: SERVICES_RESOURCE,
    handler: rec,
    log,
    stats,
    timings: { backoff: { initialMs: 20, maxMs: 100 }, shortWatchMs: 200, watchdogMs: 60_000, ...timings },
  });
  r.start();
  return {
    log,
    stats,
    rec,
    r,
    async stop() {
      await r.stop();
      transport.close();
      await fake.close();
    },
  };
}

const svc = (name: string, rv: string) => ({
  kind: "Service",
  apiVersion: "v1",
  metadata: { name, namespace: "ns", resourceVersion: rv },
});

describe("reflector with malformed input", () => {
  it("skips malformed list items and objects, logging the resource; a garbled line resumes the watch", {
    timeout: 30_000,
  }, async () => {
    const fake = await new FakeApi().start();
    fake.items = [
      { metadata: { name: "good", namespace: "ns", resourceVersion: "1" } },
      { metadata: { namespace: "ns", resourceVersion: "2" } },
      { kind: "Pod", metadata: { name: "pod", namespace: "ns", resourceVersion: "3" } },
      "not an object",
    ];
    const h = setup(fake);
    try {
      await h.r.synced;
      assert.deepEqual(h.rec.events, ["add ns/good"]);
      assert.equal(h.rec.synced, 1);
      await waitFor("watch", () => fake.open.size === 1);
      fake.push('{"type":"ADDED"}');
      fake.push(
        JSON.stringify({ type: "ADDED", object: { kind: "Pod", metadata: { name: "p", namespace: "ns" } } }),
      );
      fake.push(
        JSON.stringify({ type: "MODIFIED", object: { kind: "Service", metadata: { namespace: "ns" } } }),
      );
      fake.push(JSON.stringify({ type: "SOMETHING", object: {} }));
      fake.push(JSON.stringify({ type: "BOOKMARK", object: { kind: "Service", metadata: {} } }));
      fake.push(JSON.stringify({ type: "ADDED", object: svc("after", "101") }));
      await waitFor("valid event after bad objects", () => h.rec.events.length === 2);
      assert.deepEqual(h.rec.events, ["add ns/good", "add ns/after"]);
      assert.equal(fake.watches, 1, "the watch was not restarted by bad objects");
      assert.equal(h.r.lastResourceVersion, "101");
      // Garbled lines lose the event they carried: the watch ends and resumes from the last good rv.
      fake.push("this is not json");
      await waitFor("the watch to resume", () => fake.watches === 2 && fake.open.size === 1);
      fake.push("[1,2,3]");
      await waitFor("the watch to resume again", () => fake.watches === 3 && fake.open.size === 1);
      fake.push(JSON.stringify({ type: "ADDED", object: svc("later", "102") }));
      await waitFor("an event on the resumed watch", () => h.rec.events.length === 3);
      assert.equal(h.r.lastResourceVersion, "102");
      const warns = h.log.lines.filter((l) => l.startsWith("W ") && l.includes("skipping malformed"));
      assert.equal(warns.length, 10, warns.join("\n"));
      assert.ok(warns.every((l) => /^W (list|watch) services: /.test(l)));
      assert.ok(warns.some((l) => l.includes("metadata.name is missing")));
      assert.ok(warns.some((l) => l.includes('kind is "Pod", want Service')));
      assert.ok(warns.some((l) => l.includes("line is not JSON")));
      assert.equal(h.stats.snapshot().resources.services.malformed, 10);
    } finally {
      await h.stop();
    }
  });

  it("a handler that throws is logged and does not stop the stream", { timeout: 30_000 }, async () => {
    const fake = await new FakeApi().start();
    const h = setup(fake);
    let calls = 0;
    h.rec.onAdd = (o) => {
      calls++;
      if (objectKey(o) === "ns/boom") throw new Error("handler bug");
      h.rec.events.push(`add ${objectKey(o)}`);
    };
    try {
      await h.r.synced;
      await waitFor("watch", () => fake.open.size === 1);
      fake.push(JSON.stringify({ type: "ADDED", object: svc("boom", "101") }));
      fake.push(JSON.stringify({ type: "ADDED", object: svc("fine", "102") }));
      await waitFor("second add", () => h.rec.events.includes("add ns/fine"));
      assert.equal(calls, 2);
      assert.ok(h.log.lines.some((l) => l.startsWith("E services add ns/boom: handler threw: handler bug")));
    } finally {
      await h.stop();
    }
  });
});

describe("reflector watchdog and short watches", () => {
  for (const mode of ["silent", "no-headers"] as const) {
    it(
      `reconnects a watch that goes silent (${mode}) after the watchdog limit`,
      { timeout: 30_000 },
      async () => {
        const fake = await new FakeApi().start();
        fake.watchMode = mode;
        const h = setup(fake, { watchdogMs: 150 });
        try {
          await h.r.synced;
          await waitFor("a second watch", () => fake.watches >= 2, 3000);
          assert.ok(
            h.log.lines.some((l) => l.includes("watch silent for 150 ms (watchdog)")),
            h.log.lines.join("\n"),
          );
          assert.equal(fake.lists, 1, "a stalled watch resumes without relisting");
          fake.watchMode = "stream";
          await waitFor("a streaming watch", () => fake.open.size >= 1);
          await waitFor("stalled connections closed", () => fake.open.size === 1);
          fake.push(JSON.stringify({ type: "ADDED", object: svc("x", "101") }));
          await waitFor("event", () => h.rec.events.includes("add ns/x"));
        } finally {
          await h.stop();
        }
      },
    );
  }

  it("backs off when every watch closes at once with nothing received", { timeout: 30_000 }, async () => {
    const fake = await new FakeApi().start();
    fake.watchMode = "close";
    const h = setup(fake, { backoff: { initialMs: 100, maxMs: 400, jitter: 0 } });
    try {
      await h.r.synced;
      await new Promise((r) => setTimeout(r, 800));
      // 100 + 200 + 400 ms of backoff: at most 4 watches in 800 ms, not hundreds
      assert.ok(fake.watches >= 2 && fake.watches <= 5, `${fake.watches} watches`);
      assert.ok(h.log.lines.some((l) => l.includes("very short watch")));
    } finally {
      await h.stop();
    }
  });
});

describe("reflector LISTs at a resourceVersion the server cannot serve", () => {
  const answers: Array<[string, number, unknown]> = [
    ["410 Expired", 410, {
      kind: "Status",
      apiVersion: "v1",
      status: "Failure",
      message: "too old resource version: 100 (120)",
      reason: "Expired",
      code: 410,
    }],
    ["Too large resource version", 504, {
      kind: "Status",
      apiVersion: "v1",
      status: "Failure",
      message: "Too large resource version: 100, current: 90",
      reason: "Timeout",
      details: { causes: [{ reason: "ResourceVersionTooLarge", message: "Too large resource version" }] },
      code: 504,
    }],
  ];
  for (const [what, code, body] of answers) {
    it(`a relist answered ${what} is retried at once as a consistent read, as client-go does`, {
      timeout: 30_000,
    }, async () => {
      const fake = await new FakeApi().start();
      fake.items = [svc("a", "90")];
      fake.listError = (q) => q.get("resourceVersion") === "100" ? [code, body] : undefined;
      const h = setup(fake, { pageSize: 7 });
      try {
        await h.r.synced;
        await waitFor("watch", () => fake.open.size === 1);
        await new Promise((r) => setTimeout(r, 300)); // a 410 right after a list is backed off (shortWatchMs)
        fake.items = [svc("a", "90"), svc("b", "110")];
        fake.rv = "110";
        fake.push(
          JSON.stringify({ type: "ERROR", object: { kind: "Status", code: 410, reason: "Expired" } }),
        );
        await waitFor("b through the relist", () => h.rec.events.includes("add ns/b"));
        const q = fake.listQueries.map((p) => [p.get("resourceVersion"), p.get("limit")]);
        assert.deepEqual(q, [
          ["0", "7"], // the first list, from the watch cache
          ["100", null], // the last resourceVersion seen, unpaged: the watch cache serves it
          [null, "7"], // a consistent read, paged
        ]);
        assert.ok(
          h.log.lines.some((l) =>
            l.startsWith(`I list services: resourceVersion 100 unavailable (GET services (list): ${code} `) &&
            l.endsWith("; listing again with a consistent read")
          ),
          h.log.lines.join("\n"),
        );
        assert.deepEqual(h.log.lines.filter((l) => l.startsWith("W ")), [], "no failure, no backoff");
        // The next relist goes back to the last resourceVersion seen.
        fake.listError = () => undefined;
        await waitFor("watch", () => fake.open.size === 1);
        await new Promise((r) => setTimeout(r, 300));
        fake.push(
          JSON.stringify({ type: "ERROR", object: { kind: "Status", code: 410, reason: "Expired" } }),
        );
        await waitFor("another relist", () => fake.lists === 4);
        assert.equal(fake.listQueries[3].get("resourceVersion"), "110");
      } finally {
        await h.stop();
      }
    });
  }
});
