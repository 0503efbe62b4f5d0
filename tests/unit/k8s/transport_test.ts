/**
 * The request helper: headers, Status errors, 401 credential refresh (token file and exec plugin), rate
 * limiting, timeouts, refused connections, pagination with an expiring continue token, bounded response
 * bodies, and the Starting event.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { chmod, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startTestApiserver, type TestApiserver } from "../../support/apiserver.ts";
import { loadRestConfig } from "../../../lib/k8s/kubeconfig.ts";
import { staticCredentials } from "../../../lib/k8s/credentials.ts";
import type { RestConfig } from "../../../lib/k8s/rest_config.ts";
import {
  ApiError,
  ApiTransport,
  isExpired,
  isTooLargeResourceVersion,
  listAll,
  NetworkError,
  USER_AGENT,
} from "../../../lib/k8s/transport.ts";
import { reduceObject } from "../../../lib/k8s/reduce.ts";
import type { KubeObject } from "../../../lib/k8s/store.ts";
import { MAX_API_MESSAGE_BYTES, MessageTooLargeError } from "../../../lib/k8s/bounded_read.ts";
import { ApiStats } from "../../../lib/k8s/stats.ts";
import { recordStartingEvent, startingEvent } from "../../../lib/k8s/events.ts";

let srv: TestApiserver;
let dir = "";
before(async () => {
  srv = await startTestApiserver({ bookmarkIntervalMs: 0 });
  dir = await mkdtemp(join(tmpdir(), "edgeproxy-transport-"));
});
after(async () => {
  await srv.close();
  await rm(dir, { recursive: true, force: true });
});

async function transportFor(
  user: "token" | "tokenFile" | "clientCert",
  extra: Partial<ConstructorParameters<typeof ApiTransport>[0]> = {},
) {
  const kc = join(dir, `kc-${user}-${Math.random()}`);
  await srv.writeKubeconfig(kc, { user });
  const config = await loadRestConfig({ kubeconfig: kc, env: {} });
  return new ApiTransport({ config, qps: -1, ...extra });
}

/** A plain-HTTP fake that records headers and answers from a script. */
async function fakeServer(
  handler: (req: http.IncomingMessage, res: http.ServerResponse) => void,
): Promise<{ url: string; close: () => Promise<void>; seen: http.IncomingHttpHeaders[] }> {
  const seen: http.IncomingHttpHeaders[] = [];
  const s = http.createServer((req, res) => {
    seen.push(req.headers);
    handler(req, res);
  });
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", () => r()));
  const port = (s.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () =>
      new Promise<void>((r) => {
        s.closeAllConnections?.();
        s.close(() => r());
      }),
  };
}

function cfg(server: string, authorization?: string): RestConfig {
  return {
    server,
    insecureSkipTlsVerify: false,
    credentials: staticCredentials(authorization ? { authorization } : {}, "test"),
    source: "test",
  };
}

describe("ApiTransport", () => {
  it("sends Accept, User-Agent and Authorization, and parses JSON", { timeout: 30_000 }, async () => {
    const f = await fakeServer((_q, r) => {
      r.writeHead(200, { "Content-Type": "application/json" });
      r.end('{"kind":"ServiceList","items":[],"metadata":{"resourceVersion":"7"}}');
    });
    const t = new ApiTransport({ config: cfg(f.url, "Bearer xyz") });
    try {
      const body = await t.request<{ kind: string }>({
        path: "/api/v1/services",
        verb: "list",
        resource: "services",
      });
      assert.equal(body.kind, "ServiceList");
      assert.equal(f.seen[0].accept, "application/json");
      assert.equal(f.seen[0]["user-agent"], USER_AGENT);
      assert.match(USER_AGENT, /^edgeproxy\/\d+\.\d+\.\d+/);
      assert.equal(f.seen[0].authorization, "Bearer xyz");
    } finally {
      t.close();
      await f.close();
    }
  });

  it("turns error answers into ApiError {code, reason, message}, also for non-Status bodies", {
    timeout: 30_000,
  }, async () => {
    const t = await transportFor("token");
    try {
      await assert.rejects(
        t.request({ path: "/api/v1/namespaces/default/services/nope", verb: "get", resource: "services" }),
        (e: unknown) => {
          assert.ok(e instanceof ApiError);
          assert.equal(e.code, 404);
          assert.equal(e.reason, "NotFound");
          assert.match(e.message, /services "nope" not found/);
          return true;
        },
      );
      srv.faults.failNext(1, 429);
      await assert.rejects(
        t.request({ path: "/api/v1/services", verb: "list", resource: "services" }),
        (e: unknown) => {
          assert.ok(e instanceof ApiError);
          assert.equal(e.code, 429);
          assert.equal(e.retryAfterMs, 1000);
          return true;
        },
      );
    } finally {
      t.close();
    }
    const f = await fakeServer((_q, r) => {
      r.writeHead(502);
      r.end("<html>bad gateway</html>");
    });
    const t2 = new ApiTransport({ config: cfg(f.url) });
    try {
      await assert.rejects(t2.request({ path: "/x", verb: "get", resource: "services" }), (e: unknown) => {
        assert.ok(e instanceof ApiError);
        assert.equal(e.code, 502);
        assert.match(e.message, /bad gateway/);
        return true;
      });
    } finally {
      t2.close();
      await f.close();
    }
  });

  it("re-reads a rotated token file after a 401 and retries once at once", { timeout: 30_000 }, async () => {
    const tokenFile = join(dir, "rotating-token");
    await writeFile(tokenFile, "stale-token");
    const kc = join(dir, "kc-rot");
    await writeFile(
      kc,
      `current-context: c
clusters: [{name: k, cluster: {server: "${srv.url}", certificate-authority: "${srv.caFile}"}}]
users: [{name: u, user: {tokenFile: "${tokenFile}"}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
`,
    );
    const stats = new ApiStats();
    const t = new ApiTransport({ config: await loadRestConfig({ kubeconfig: kc }), qps: -1, stats });
    try {
      await assert.rejects(
        t.request({ path: "/api/v1/services", verb: "list", resource: "services" }),
        /401/,
      );
      await writeFile(tokenFile, srv.token); // the kubelet rotated the projected token
      const n = srv.requests.length;
      await t.request({ path: "/api/v1/services", verb: "list", resource: "services" });
      assert.deepEqual(srv.requests.slice(n).map((r) => r.status), [401, 200], "one 401, then the new token");
      const rows = stats.snapshot().requests.filter((r) => r.verb === "list");
      assert.deepEqual(rows.map((r) => `${r.code}:${r.count}`), ["200:1", "401:2"]);
    } finally {
      t.close();
    }
  });

  it("re-runs an exec plugin after a 401", { timeout: 30_000 }, async () => {
    const counter = join(dir, "exec-count");
    const plugin = join(dir, "plugin.sh");
    await writeFile(
      plugin,
      `#!/bin/sh
n=$(cat "${counter}" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "${counter}"
if [ "$n" = 1 ]; then tok=wrong; else tok="${srv.token}"; fi
printf '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"%s"}}' "$tok"
`,
    );
    await chmod(plugin, 0o755);
    const kc = join(dir, "kc-exec");
    await writeFile(
      kc,
      `current-context: c
clusters: [{name: k, cluster: {server: "${srv.url}", certificate-authority: "${srv.caFile}"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: "${plugin}", interactiveMode: Never}}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
`,
    );
    const t = new ApiTransport({ config: await loadRestConfig({ kubeconfig: kc }), qps: -1 });
    try {
      const n = srv.requests.length;
      await t.request({ path: "/api/v1/services", verb: "list", resource: "services" });
      assert.deepEqual(srv.requests.slice(n).map((r) => r.status), [401, 200]);
    } finally {
      t.close();
    }
  });

  it("authenticates with a client certificate from the kubeconfig", { timeout: 30_000 }, async () => {
    const t = await transportFor("clientCert");
    try {
      const list = await t.request<{ kind: string }>({
        path: "/api/v1/nodes",
        verb: "list",
        resource: "nodes",
      });
      assert.equal(list.kind, "NodeList");
    } finally {
      t.close();
    }
  });

  it("rate-limits with the token bucket (burst, then qps)", { timeout: 30_000 }, async () => {
    const t = await transportFor("token", { qps: 20, burst: 2 });
    try {
      const t0 = performance.now();
      await Promise.all(
        Array.from(
          { length: 6 },
          () => t.request({ path: "/api/v1/nodes", verb: "list", resource: "nodes" }),
        ),
      );
      const took = performance.now() - t0;
      assert.ok(took >= 150, `6 requests at qps 20 burst 2 took ${took.toFixed(0)} ms, expected >= 200`);
    } finally {
      t.close();
    }
  });

  it(
    "times out slow answers and reports refused connections as NetworkError",
    { timeout: 30_000 },
    async () => {
      const t = await transportFor("token", { requestTimeoutMs: 100 });
      try {
        srv.faults.slow(400);
        await assert.rejects(
          t.request({ path: "/api/v1/nodes", verb: "list", resource: "nodes" }),
          (e: unknown) => {
            assert.ok(e instanceof NetworkError && e.timedOut, String(e));
            return true;
          },
        );
        srv.faults.slow(0);
        await srv.faults.down();
        await assert.rejects(
          t.request({ path: "/api/v1/nodes", verb: "list", resource: "nodes" }),
          (e: unknown) => {
            assert.ok(e instanceof NetworkError && e.refused, String(e));
            return true;
          },
        );
      } finally {
        srv.faults.slow(0);
        await srv.faults.up();
        t.close();
      }
    },
  );

  it(
    "listAll pages with limit/continue and restarts when the continue token expires",
    { timeout: 30_000 },
    async () => {
      for (let i = 0; i < 7; i++) {
        srv.create("services", {
          metadata: { name: `page-${i}`, namespace: "pg" },
        });
      }
      const t = await transportFor("token");
      try {
        const all = await listAll<{ metadata: { name: string } }>(t, {
          path: "/api/v1/namespaces/pg/services",
          resource: "services",
          limit: 3,
        });
        assert.equal(all.items.length, 7);
        assert.equal(all.pages, 3);
        assert.equal(all.resourceVersion, srv.resourceVersion());

        // expire the continue token between page 1 and page 2 by compacting from a fake clock-less hook:
        // wrap request so the compaction happens right after the first page
        const orig = t.request.bind(t);
        let calls = 0;
        t.request = (async (o: Parameters<typeof orig>[0]) => {
          const r = await orig(o);
          if (++calls === 1) {
            srv.create("services", { metadata: { name: "page-new", namespace: "pg" } });
            srv.faults.compact();
          }
          return r;
        }) as typeof t.request;
        const again = await listAll<{ metadata: { name: string } }>(t, {
          path: "/api/v1/namespaces/pg/services",
          resource: "services",
          limit: 3,
        });
        assert.equal(again.items.length, 8, "restarted list sees one consistent snapshot");
        assert.deepEqual(
          again.items.map((i) => i.metadata.name),
          [...again.items.map((i) => i.metadata.name)].sort(),
        );
        assert.equal(again.pages, 1 + 3, "one page, 410 on continue, then three pages");
      } finally {
        t.close();
      }
    },
  );
});

describe("ApiTransport body limits", () => {
  it("refuses a response body over the limit (streamed or announced) with one error naming it", {
    timeout: 30_000,
  }, async () => {
    const big = "x".repeat(3 * 1024 * 1024);
    let sent = 0;
    const fake = await fakeServer((req, res) => {
      if (req.url?.startsWith("/announced")) {
        // Content-Length above the limit: refused before the body is read
        res.writeHead(200, { "Content-Type": "application/json", "Content-Length": String(big.length + 2) });
        res.end(`"${big}"`);
        return;
      }
      if (req.url?.startsWith("/error")) {
        // a huge error page: only its start is read, the Status code still comes through
        res.writeHead(500, { "Content-Type": "text/plain" });
        res.end(big);
        return;
      }
      res.writeHead(200, { "Content-Type": "application/json", "Transfer-Encoding": "chunked" });
      const chunk = "x".repeat(64 * 1024);
      res.write('"');
      const pump = () => {
        while (sent < 64 * 1024 * 1024) {
          sent += chunk.length;
          if (!res.write(chunk)) return void res.once("drain", pump);
        }
        res.end('"');
      };
      pump();
    });
    const t = new ApiTransport({ config: cfg(fake.url), qps: -1, maxResponseBytes: 2 * 1024 * 1024 });
    try {
      await assert.rejects(
        t.request({ path: "/streamed", verb: "list", resource: "services" }),
        (e: unknown) =>
          e instanceof MessageTooLargeError &&
          e.message === "GET services (list): response body is larger than the limit of 2 MiB; dropped it",
      );
      assert.ok(sent < 64 * 1024 * 1024, `stopped reading early (${sent} bytes sent)`);
      await assert.rejects(
        t.request({ path: "/announced", verb: "list", resource: "services" }),
        MessageTooLargeError,
      );
      await assert.rejects(
        t.request({ path: "/error", verb: "list", resource: "services" }),
        (e: unknown) => e instanceof ApiError && e.code === 500 && e.message.length < 1000,
      );
      // per request limit (listAll's maxPageBytes)
      await assert.rejects(
        listAll(t, { path: "/announced", resource: "services", maxPageBytes: 1024 }),
        /larger than the limit of 1024 bytes/,
      );
      assert.equal(MAX_API_MESSAGE_BYTES, 64 * 1024 * 1024);
    } finally {
      t.close();
      await fake.close();
    }
  });
});

describe("listAll decodes item by item", () => {
  /** A Service as kubectl apply leaves it: most of its bytes are fields the proxy drops. */
  const applied = (ns: string, i: number) => ({
    metadata: {
      name: `svc-${String(i).padStart(4, "0")}`,
      namespace: ns,
      annotations: {
        "kubectl.kubernetes.io/last-applied-configuration": `{"kind":"Service","x":"${"y".repeat(200)}"}\n`,
        keep: "me",
      },
      managedFields: [{ manager: "kubectl", operation: "Update", fieldsV1: { "f:spec": { "f:ports": {} } } }],
    },
    spec: { ports: [{ port: 80 + (i % 7), protocol: "TCP" }], clusterIP: `10.96.${i >> 8}.${i & 255}` },
  });

  for (const [what, count] of [["plain", 20], ["gzip", 800]] as const) {
    it(
      `maps every item as it is decoded (${what} body, one response and pages)`,
      { timeout: 60_000 },
      async () => {
        const ns = `dec-${what}`;
        for (let i = 0; i < count; i++) srv.create("services", applied(ns, i));
        const want = srv.list("services").filter((o) => o.metadata?.namespace === ns).map((o) =>
          reduceObject(o)
        );
        const t = await transportFor("token");
        try {
          for (const limit of [0, 7]) {
            let calls = 0;
            const n = srv.requests.length;
            const got = await listAll<KubeObject>(t, {
              path: `/api/v1/namespaces/${ns}/services`,
              resource: "services",
              resourceVersion: limit === 0 ? "0" : undefined,
              limit,
              item: (raw) => (calls++, reduceObject(raw as KubeObject)),
            });
            const sent = srv.requests.slice(n);
            assert.equal(calls, count);
            assert.equal(got.items.length, count);
            assert.deepEqual(got.items, want);
            assert.equal(got.resourceVersion, srv.resourceVersion());
            assert.equal(got.pages, limit === 0 ? 1 : Math.ceil(count / limit));
            assert.ok(!JSON.stringify(got.items).includes("managedFields"));
            if (limit === 0) assert.equal(sent[0].gzip, what === "gzip", `the body was ${what}`);
          }
        } finally {
          t.close();
        }
      },
    );
  }

  it("keeps the Status errors: 410, Too large resource version, a server error's message", {
    timeout: 30_000,
  }, async () => {
    const t = await transportFor("token");
    try {
      const rv = Number(srv.resourceVersion()) + 1000;
      await assert.rejects(
        listAll(t, { path: "/api/v1/services", resource: "services", resourceVersion: String(rv), limit: 0 }),
        (e: unknown) =>
          isTooLargeResourceVersion(e) && (e as Error).message.includes("Too large resource version"),
      );
      srv.faults.failNext(1, 410);
      await assert.rejects(
        listAll(t, { path: "/api/v1/services", resource: "services" }),
        (e: unknown) => isExpired(e),
      );
      srv.faults.failNext(1, 500);
      await assert.rejects(
        listAll(t, { path: "/api/v1/services", resource: "services" }),
        (e: unknown) => e instanceof ApiError && e.code === 500 && /injected fault/.test(e.message),
      );
      srv.faults.truncateNextList();
      await assert.rejects(listAll(t, { path: "/api/v1/services", resource: "services" }), NetworkError);
      assert.ok((await listAll(t, { path: "/api/v1/services", resource: "services" })).items.length > 0);
    } finally {
      t.close();
    }
  });

  it("gives one clear line for bodies that are not JSON or not a List, and honours limits and aborts", {
    timeout: 30_000,
  }, async () => {
    const head = '{"kind":"ServiceList","apiVersion":"v1","metadata":{"resourceVersion":"9"},"items":[';
    const bodies: Record<string, string> = {
      "/bad-item": `${head}{"metadata":{"name":"a"}},\n{"metadata":{"name":oops}}]}`,
      "/garbage": `${head}{"metadata":{"name":"a"}}]} trailing`,
      "/cut": `${head}{"metadata":{"name":"a"}},{"metadata":`,
      "/status":
        '{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"m","code":410}',
      "/string": '"ServiceList"',
      "/null-items": '{"kind":"ServiceList","metadata":{"resourceVersion":"9"},"items":null}',
    };
    const fake = await fakeServer((req, res) => {
      const path = req.url!.split("?")[0];
      if (path === "/big" || path === "/stall") {
        // chunked: a list that goes on (past the limit) or stops sending after its first item
        res.writeHead(200, { "Content-Type": "application/json" });
        res.write(`${head}{"metadata":{"name":"first"}},`);
        if (path === "/big") {
          for (let i = 0; i < 2000; i++) {
            res.write(`{"metadata":{"name":"n-${i}","x":"${"z".repeat(1000)}"}},`);
          }
          res.end('{"metadata":{"name":"last"}}]}');
        }
        return;
      }
      res.writeHead(200, { "Content-Type": "application/json" });
      res.end(bodies[path]);
    });
    const t = new ApiTransport({ config: cfg(fake.url), qps: -1 });
    const list = (path: string, o: Partial<Parameters<typeof listAll>[1]> = {}) =>
      listAll(t, { path, resource: "services", ...o });
    const oneLine = (re: RegExp) => (e: unknown) =>
      e instanceof ApiError && e.reason === "InvalidResponse" && re.test(e.message) &&
      !e.message.includes("\n");
    try {
      await assert.rejects(
        list("/bad-item"),
        oneLine(
          /^GET services \(list\): response is not JSON: items\[1\]: .*: \{"metadata":\{"name":oops\}\}$/,
        ),
      );
      await assert.rejects(list("/garbage"), oneLine(/^GET services \(list\): response is not JSON: /));
      await assert.rejects(
        list("/cut"),
        oneLine(
          /^GET services \(list\): response is not JSON: the body ended inside the items array .*truncated/,
        ),
      );
      await assert.rejects(
        list("/status"),
        oneLine(/^list services: response has no metadata\.resourceVersion$/),
      );
      await assert.rejects(list("/string"), oneLine(/^list services: response is not a list$/));
      await assert.rejects(list("/null-items"), oneLine(/^list services: response is not a list$/));
      await assert.rejects(
        list("/big", { maxPageBytes: 1024 * 1024 }),
        (e: unknown) =>
          e instanceof MessageTooLargeError &&
          e.message === "GET services (list): response body is larger than the limit of 1 MiB; dropped it",
      );
      const ctl = new AbortController();
      const seen: string[] = [];
      const pending = list("/stall", {
        signal: ctl.signal,
        item: (raw) => {
          seen.push((raw as KubeObject).metadata!.name!);
          setTimeout(() => ctl.abort(new Error("stop")), 10);
          return raw;
        },
      });
      await assert.rejects(pending, /stop/);
      assert.deepEqual(seen, ["first"], "the item before the stall was decoded at once");
    } finally {
      t.close();
      await fake.close();
    }
  });
});

describe("Starting event", () => {
  it("posts an events.k8s.io/v1 Event like upstream kube-proxy", { timeout: 30_000 }, async () => {
    const t = await transportFor("token");
    try {
      const ok = await recordStartingEvent(t, "edge-1", {
        hostname: "host-a",
        now: () => Date.parse("2025-03-01T10:00:00.123Z"),
      });
      assert.equal(ok, true);
      const ev = srv.events().find((e) =>
        (e as { regarding?: { name?: string } }).regarding?.name === "edge-1"
      ) as
        & Record<string, unknown>
        & { metadata: { namespace: string; name: string } };
      assert.ok(ev);
      assert.equal(ev.apiVersion, "events.k8s.io/v1");
      assert.equal(ev.metadata.namespace, "default");
      assert.match(ev.metadata.name, /^edge-1\.[0-9a-f]+$/);
      assert.equal(ev.reason, "Starting");
      assert.equal(ev.action, "StartKubeProxy");
      assert.equal(ev.note, "Starting kube-proxy.");
      assert.equal(ev.reportingController, "kube-proxy");
      assert.equal(ev.reportingInstance, "kube-proxy-host-a");
      assert.equal(ev.type, "Normal");
      assert.equal(ev.eventTime, "2025-03-01T10:00:00.123000Z");
      assert.deepEqual(ev.regarding, { kind: "Node", name: "edge-1", uid: "edge-1", namespace: "" });
    } finally {
      t.close();
    }
  });

  it("never fails the caller: errors are logged at debug", { timeout: 30_000 }, async () => {
    const lines: string[] = [];
    const log = { debug: (m: string) => lines.push(m), info() {}, warn() {}, error() {} };
    const t = await transportFor("token", { log });
    try {
      srv.faults.failNext(1, 500);
      assert.equal(await recordStartingEvent(t, "edge-1"), false);
      assert.equal(lines.length, 1);
      assert.match(lines[0], /Starting event for node edge-1 failed \(ignored\).*500/);
    } finally {
      t.close();
    }
    assert.equal(startingEvent("n", 0, "h").kind, "Event");
  });
});
