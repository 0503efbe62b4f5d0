import { after, test } from "node:test";
import assert from "node:assert/strict";
import {
  startTestApiserver,
  type TestApiserver,
  type TestApiserverOptions,
} from "../../support/apiserver.ts";
import { removeSharedCertsDir, sharedCertsDir, TestHttpClient } from "../../support/apiserver_client.ts";
import { PROXY_LABEL_SELECTOR } from "../../../lib/k8s/objects.ts";

after(removeSharedCertsDir);

async function withServer(
  opts: TestApiserverOptions,
  fn: (s: TestApiserver, c: TestHttpClient) => void | Promise<void>,
): Promise<void> {
  const s = await startTestApiserver({ tlsDir: await sharedCertsDir(), ...opts });
  const c = new TestHttpClient(s);
  try {
    await fn(s, c);
  } finally {
    c.close();
    await s.close();
  }
}

const svc = (ns: string, name: string, labels?: Record<string, string>) => ({
  metadata: { name, namespace: ns, ...(labels ? { labels } : {}) },
  spec: { clusterIP: "10.96.0.10", ports: [{ port: 80, protocol: "TCP" }] },
});

test("LIST returns a typed list sorted by namespace/name, items without kind/apiVersion", async () => {
  await withServer({}, async (s, c) => {
    s.create("services", svc("b", "x"));
    s.create("services", svc("a", "z"));
    s.create("services", svc("a", "y"));
    const { status, body } = await c.getJson("/api/v1/services");
    assert.equal(status, 200);
    assert.equal(body.kind, "ServiceList");
    assert.equal(body.apiVersion, "v1");
    assert.equal(body.metadata.resourceVersion, s.resourceVersion());
    assert.equal(body.metadata.continue, undefined);
    assert.deepEqual(
      body.items.map((i: { metadata: { namespace: string; name: string } }) =>
        `${i.metadata.namespace}/${i.metadata.name}`
      ),
      ["a/y", "a/z", "b/x"],
    );
    for (const i of body.items) {
      assert.equal(i.kind, undefined);
      assert.equal(i.apiVersion, undefined);
      assert.match(i.metadata.uid, /^[0-9a-f-]{36}$/);
      assert.match(i.metadata.creationTimestamp, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    }
    const ns = await c.getJson("/api/v1/namespaces/a/services");
    assert.deepEqual(ns.body.items.map((i: { metadata: { name: string } }) => i.metadata.name), ["y", "z"]);
    const es = await c.getJson("/apis/discovery.k8s.io/v1/endpointslices");
    assert.equal(es.body.kind, "EndpointSliceList");
    assert.equal(es.body.apiVersion, "discovery.k8s.io/v1");
  });
});

test("resourceVersion is one global increasing counter across kinds; no-op updates keep it", async () => {
  await withServer({}, (s) => {
    const rv0 = Number(s.resourceVersion());
    const a = s.create("services", svc("ns", "a"));
    const n = s.create("nodes", { metadata: { name: "n1" } });
    assert.equal(Number(a.metadata?.resourceVersion), rv0 + 1);
    assert.equal(Number(n.metadata?.resourceVersion), rv0 + 2);
    assert.equal(n.kind, "Node");
    s.update("services", svc("ns", "a"));
    assert.equal(Number(s.resourceVersion()), rv0 + 2, "identical update is a no-op");
    s.update("services", { ...svc("ns", "a"), spec: { clusterIP: "10.96.0.11" } });
    assert.equal(Number(s.resourceVersion()), rv0 + 3);
    assert.throws(() => s.update("services", svc("ns", "missing")), /not found/);
    assert.throws(() => s.create("services", svc("ns", "a")), /already exists/);
    assert.throws(() => s.remove("nodes", "", "missing"), /not found/);
    s.remove("nodes", "", "n1");
    assert.equal(s.list("nodes").length, 0);
  });
});

test("pagination: limit/continue walk one consistent snapshot, remainingItemCount without selectors", async () => {
  await withServer({}, async (s, c) => {
    for (const n of ["a", "b", "c", "d", "e"]) s.create("services", svc("ns", n));
    const p1 = await c.getJson("/api/v1/services?limit=2");
    assert.equal(p1.body.items.length, 2);
    assert.equal(p1.body.metadata.remainingItemCount, 3);
    const snapRv = p1.body.metadata.resourceVersion;
    // Changes after the first page must not show in later pages (the list is a snapshot).
    s.remove("services", "ns", "d");
    s.create("services", svc("ns", "cc"));
    const p2 = await c.getJson(
      `/api/v1/services?limit=2&continue=${encodeURIComponent(p1.body.metadata.continue)}`,
    );
    assert.equal(p2.status, 200);
    assert.equal(p2.body.metadata.resourceVersion, snapRv);
    const p3 = await c.getJson(
      `/api/v1/services?limit=2&continue=${encodeURIComponent(p2.body.metadata.continue)}`,
    );
    assert.equal(p3.body.metadata.continue, undefined);
    const names = [...p1.body.items, ...p2.body.items, ...p3.body.items].map((i) => i.metadata.name);
    assert.deepEqual(names, ["a", "b", "c", "d", "e"]);
    // With a selector the apiserver does not report remainingItemCount.
    const sel = await c.getJson(
      `/api/v1/services?limit=1&labelSelector=${encodeURIComponent(PROXY_LABEL_SELECTOR)}`,
    );
    assert.ok(sel.body.metadata.continue);
    assert.equal(sel.body.metadata.remainingItemCount, undefined);
  });
});

test("a continue token expires with 410 Expired after compaction", async () => {
  await withServer({}, async (s, c) => {
    for (const n of ["a", "b", "c"]) s.create("services", svc("ns", n));
    const p1 = await c.getJson("/api/v1/services?limit=1");
    s.create("services", svc("ns", "d"));
    s.faults.compact();
    const p2 = await c.getJson(
      `/api/v1/services?limit=1&continue=${encodeURIComponent(p1.body.metadata.continue)}`,
    );
    assert.equal(p2.status, 410);
    assert.equal(p2.body.kind, "Status");
    assert.equal(p2.body.reason, "Expired");
    assert.equal(p2.body.code, 410);
    assert.match(p2.body.message, /continue parameter is too old/);
    const bad = await c.getJson("/api/v1/services?continue=notatoken");
    assert.equal(bad.status, 400);
  });
});

test("resourceVersion semantics: 0 ignores limit, Exact reads history, too old → 410, too new → 504", async () => {
  await withServer({}, async (s, c) => {
    for (const n of ["a", "b", "c"]) s.create("services", svc("ns", n));
    const rvAfter3 = s.resourceVersion();
    s.create("services", svc("ns", "d"));
    const any = await c.getJson("/api/v1/services?resourceVersion=0&limit=1");
    assert.equal(any.body.items.length, 4, "resourceVersion=0 is served from the watch cache, limit ignored");
    assert.equal(any.body.metadata.continue, undefined);
    const exact = await c.getJson(`/api/v1/services?resourceVersion=${rvAfter3}&resourceVersionMatch=Exact`);
    assert.equal(exact.status, 200);
    assert.equal(exact.body.metadata.resourceVersion, rvAfter3);
    assert.deepEqual(exact.body.items.map((i: { metadata: { name: string } }) => i.metadata.name), [
      "a",
      "b",
      "c",
    ]);
    const notOlder = await c.getJson(
      `/api/v1/services?resourceVersion=${rvAfter3}&resourceVersionMatch=NotOlderThan`,
    );
    assert.equal(notOlder.body.items.length, 4);
    assert.equal(notOlder.body.metadata.resourceVersion, s.resourceVersion());
    s.faults.compact();
    const old = await c.getJson(`/api/v1/services?resourceVersion=${rvAfter3}&resourceVersionMatch=Exact`);
    assert.equal(old.status, 410);
    assert.equal(old.body.reason, "Expired");
    const future = await c.getJson(`/api/v1/services?resourceVersion=${Number(s.resourceVersion()) + 50}`);
    assert.equal(future.status, 504);
    assert.equal(future.body.reason, "Timeout");
    assert.equal(future.body.details.causes[0].reason, "ResourceVersionTooLarge");
  });
});

test("query validation answers 400 Status as the apiserver does", async () => {
  await withServer({}, async (_s, c) => {
    for (
      const q of [
        "resourceVersionMatch=Exact",
        "resourceVersion=0&resourceVersionMatch=Exact",
        "resourceVersion=1&resourceVersionMatch=Bogus",
        "limit=x",
        "watch=maybe",
        "resourceVersion=abc",
        "sendInitialEvents=true",
        "watch=1&resourceVersionMatch=NotOlderThan&resourceVersion=1",
        "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
      ]
    ) {
      const r = await c.getJson(`/api/v1/services?${q}`);
      assert.equal(r.status, 400, q);
      assert.equal(r.body.kind, "Status", q);
      assert.equal(r.body.reason, "BadRequest", q);
      assert.equal(r.body.code, 400, q);
    }
  });
});

test("label and field selectors filter lists; bad syntax and unknown fields are 400", async () => {
  await withServer({}, async (s, c) => {
    s.create("services", svc("ns", "plain"));
    s.create("services", svc("ns", "other-proxy", { "service.kubernetes.io/service-proxy-name": "cilium" }));
    s.create("services", svc("ns", "headless", { "service.kubernetes.io/headless": "" }));
    s.create("services", svc("kube-system", "dns", { app: "dns", tier: "infra" }));
    const names = async (q: string) => {
      const r = await c.getJson(`/api/v1/services?${q}`);
      assert.equal(r.status, 200, `${q}: ${JSON.stringify(r.body)}`);
      return r.body.items.map((i: { metadata: { name: string } }) => i.metadata.name);
    };
    const ls = (sel: string) => `labelSelector=${encodeURIComponent(sel)}`;
    assert.deepEqual(await names(ls(PROXY_LABEL_SELECTOR)), ["dns", "plain"]);
    assert.deepEqual(await names(ls("app")), ["dns"]);
    assert.deepEqual(await names(ls("app=dns,tier==infra")), ["dns"]);
    assert.deepEqual(await names(ls("app!=dns")), ["headless", "other-proxy", "plain"]);
    assert.deepEqual(await names(ls("tier in (infra, web)")), ["dns"]);
    assert.deepEqual(await names(ls("tier notin (infra)")), ["headless", "other-proxy", "plain"]);
    assert.deepEqual(await names("fieldSelector=metadata.namespace%3Dkube-system"), ["dns"]);
    assert.deepEqual(await names("fieldSelector=metadata.name!%3Dplain,metadata.namespace%3Dns"), [
      "headless",
      "other-proxy",
    ]);
    s.create("nodes", { metadata: { name: "edge-1" } });
    s.create("nodes", { metadata: { name: "edge-2" } });
    const nodes = await c.getJson("/api/v1/nodes?fieldSelector=metadata.name%3Dedge-2");
    assert.deepEqual(nodes.body.items.map((i: { metadata: { name: string } }) => i.metadata.name), [
      "edge-2",
    ]);
    for (
      const q of [ls("a b"), ls("a in b"), ls("a in ()"), ls("a,"), ls("-a"), "fieldSelector=spec.foo%3Db"]
    ) {
      const r = await c.getJson(`/api/v1/services?${q}`);
      assert.equal(r.status, 400, q);
      assert.equal(r.body.reason, "BadRequest");
    }
    const unknownField = await c.getJson("/api/v1/nodes?fieldSelector=metadata.namespace%3Dx");
    assert.equal(unknownField.status, 400);
    assert.match(unknownField.body.message, /field label not supported: metadata.namespace/);
  });
});

test("GET of one object, 404 Status for missing objects and unknown paths, 405 for writes", async () => {
  await withServer({}, async (s, c) => {
    s.create("nodes", { metadata: { name: "edge-1", labels: { "topology.kubernetes.io/zone": "z1" } } });
    const n = await c.getJson("/api/v1/nodes/edge-1");
    assert.equal(n.status, 200);
    assert.equal(n.body.kind, "Node");
    assert.equal(n.body.apiVersion, "v1");
    assert.equal(n.body.metadata.labels["topology.kubernetes.io/zone"], "z1");
    const missing = await c.getJson("/api/v1/nodes/nope");
    assert.equal(missing.status, 404);
    assert.equal(missing.body.reason, "NotFound");
    assert.equal(missing.body.message, 'nodes "nope" not found');
    assert.deepEqual(missing.body.details, { name: "nope", kind: "nodes" });
    for (
      const p of [
        "/api/v1/pods",
        "/apis/foo/v1/bars",
        "/api/v1/namespaces/x/nodes",
        "/api/v1/services/x",
        "/nope",
      ]
    ) {
      const r = await c.getJson(p);
      assert.equal(r.status, 404, p);
      assert.equal(r.body.kind, "Status", p);
    }
    const post = await c.fetch("/api/v1/namespaces/default/services", { method: "POST", body: "{}" });
    assert.equal(post.status, 405);
    assert.equal((await post.json()).reason, "MethodNotAllowed");
    const del = await c.fetch("/api/v1/nodes/edge-1", { method: "DELETE" });
    assert.equal(del.status, 405);
    await del.body?.cancel();
  });
});

test("discovery and health endpoints; /healthz and /version need no credentials", async () => {
  await withServer({}, async (s, c) => {
    const anon = new TestHttpClient(s, { token: null });
    try {
      const h = await anon.fetch("/healthz");
      assert.equal(h.status, 200);
      assert.equal(await h.text(), "ok");
      const v = await anon.getJson("/version");
      assert.equal(v.body.major, "1");
      assert.match(v.body.gitVersion, /^v1\.\d+\./);
      assert.equal((await anon.getJson("/api")).status, 401);
    } finally {
      anon.close();
    }
    const api = await c.getJson("/api");
    assert.deepEqual(api.body.versions, ["v1"]);
    const apis = await c.getJson("/apis");
    assert.deepEqual(apis.body.groups.map((g: { name: string }) => g.name), [
      "discovery.k8s.io",
      "events.k8s.io",
      "networking.k8s.io",
    ]);
    const res = await c.getJson("/apis/discovery.k8s.io/v1");
    assert.equal(res.body.resources[0].name, "endpointslices");
  });
});

test("events POSTed to core/v1 and events.k8s.io/v1 are stored", async () => {
  await withServer({}, async (s, c) => {
    const core = await c.fetch("/api/v1/namespaces/default/events", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        metadata: { generateName: "edge-1." },
        involvedObject: { kind: "Node", name: "edge-1" },
        reason: "Starting",
        message: "Starting edgeproxy.",
        type: "Normal",
      }),
    });
    assert.equal(core.status, 201);
    const created = await core.json();
    assert.match(created.metadata.name, /^edge-1\.[a-z0-9]+$/);
    const ev2 = await c.fetch("/apis/events.k8s.io/v1/namespaces/default/events", {
      method: "POST",
      body: JSON.stringify({ metadata: { name: "e2" }, reason: "Starting", regarding: { kind: "Node" } }),
    });
    assert.equal(ev2.status, 201);
    await ev2.body?.cancel();
    const bad = await c.fetch("/api/v1/namespaces/default/events", { method: "POST", body: "{not json" });
    assert.equal(bad.status, 400);
    await bad.body?.cancel();
    const wrongNs = await c.fetch("/api/v1/namespaces/default/events", {
      method: "POST",
      body: JSON.stringify({ metadata: { name: "x", namespace: "other" } }),
    });
    assert.equal(wrongNs.status, 400);
    await wrongNs.body?.cancel();
    const evs = s.events();
    assert.equal(evs.length, 2);
    assert.deepEqual(evs.map((e) => [e.apiVersion, e.kind, e.reason]), [
      ["v1", "Event", "Starting"],
      ["events.k8s.io/v1", "Event", "Starting"],
    ]);
  });
});

test("requests are recorded with method, path, query, status and watch flag", async () => {
  await withServer({}, async (s, c) => {
    await c.getJson("/api/v1/nodes?fieldSelector=metadata.name%3Dx");
    await c.getJson("/api/v1/nope");
    const w = await c.watch("/api/v1/nodes?watch=true&timeoutSeconds=1");
    await w.close();
    assert.deepEqual(s.requests.map((r) => [r.method, r.path, r.query, r.status, r.watch]), [
      ["GET", "/api/v1/nodes", "fieldSelector=metadata.name%3Dx", 200, false],
      ["GET", "/api/v1/nope", "", 404, false],
      ["GET", "/api/v1/nodes", "watch=true&timeoutSeconds=1", 200, true],
    ]);
  });
});

test("large LIST responses are gzip-compressed when accepted; protobuf-only Accept gets 406", async () => {
  await withServer({}, async (s, c) => {
    for (let i = 0; i < 500; i++) {
      s.create("services", {
        metadata: { name: `s${i}`, namespace: "ns", annotations: { a: "x".repeat(300) } },
      });
    }
    const gz = await c.fetch("/api/v1/services", { headers: { "accept-encoding": "gzip" } });
    assert.equal(gz.headers.get("content-encoding"), "gzip");
    assert.equal((await gz.json()).items.length, 500, "fetch decompresses transparently");
    const plain = await c.fetch("/api/v1/services", { headers: { "accept-encoding": "identity" } });
    assert.equal(plain.headers.get("content-encoding"), null);
    assert.equal((await plain.json()).items.length, 500);
    const small = await c.fetch("/api/v1/nodes", { headers: { "accept-encoding": "gzip" } });
    assert.equal(small.headers.get("content-encoding"), null, "small responses stay uncompressed");
    await small.body?.cancel();
    const pb = await c.getJson("/api/v1/nodes", { accept: "application/vnd.kubernetes.protobuf" });
    assert.equal(pb.status, 406);
    assert.equal(pb.body.reason, "NotAcceptable");
    const both = await c.getJson("/api/v1/nodes", {
      accept: "application/vnd.kubernetes.protobuf, application/json",
    });
    assert.equal(both.status, 200);
  });
});

test("the store hands LIST pages its own objects (no copy per page), other readers copies", async () => {
  const { ObjectStore } = await import("../../support/apiserver_store.ts");
  const st = new ObjectStore(100);
  st.create("services", svc("a", "x"));
  st.create("services", svc("a", "y"));
  // A LIST page only serializes its items: copying every object for every page made paged lists
  // quadratic (seconds at 10k objects).
  assert.equal(st.list("services", false)[0], st.list("services", false)[0]);
  assert.equal(st.listAt("services", st.rv, false)![1], st.list("services", false)[1]);
  // Everyone else may mutate what they get.
  assert.notEqual(st.list("services")[0], st.list("services")[0]);
  assert.deepEqual(st.list("services"), st.list("services", false));
});
