import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse as parseYaml } from "yaml";
import { startTestApiserver } from "../../support/apiserver.ts";
import { removeSharedCertsDir, sharedCertsDir, TestHttpClient } from "../../support/apiserver_client.ts";
import { generateTestCerts, issueClientCert } from "../../support/certs.ts";

after(removeSharedCertsDir);

test("bearer token: missing or wrong → 401 Status, right → 200", async () => {
  const s = await startTestApiserver({ tlsDir: await sharedCertsDir(), token: "s3cret" });
  const clients = [
    new TestHttpClient(s, { token: null }),
    new TestHttpClient(s, { token: "wrong" }),
    new TestHttpClient(s),
  ];
  try {
    for (const [i, want] of [[0, 401], [1, 401], [2, 200]] as const) {
      const r = await clients[i].getJson("/api/v1/services");
      assert.equal(r.status, want);
      if (want === 401) {
        assert.deepEqual(r.body, {
          kind: "Status",
          apiVersion: "v1",
          metadata: {},
          status: "Failure",
          message: "Unauthorized",
          reason: "Unauthorized",
          code: 401,
        });
      }
    }
    const lower = await clients[0].fetch("/api/v1/services", { headers: { authorization: "bearer s3cret" } });
    assert.equal(lower.status, 200, "the auth scheme is case-insensitive");
    await lower.body?.cancel();
    // Authentication comes before request parsing: no credentials + bad selector is still 401.
    assert.equal((await clients[0].getJson("/api/v1/services?labelSelector=a%20b")).status, 401);
  } finally {
    clients.forEach((c) => c.close());
    await s.close();
  }
});

test("client certificate CN=system:kube-proxy signed by the CA authenticates without a token", async () => {
  const s = await startTestApiserver({ tlsDir: await sharedCertsDir() });
  const c = new TestHttpClient(s, { clientCert: true });
  try {
    const r = await c.getJson("/api/v1/nodes");
    assert.equal(r.status, 200);
    assert.equal(r.body.kind, "NodeList");
  } finally {
    c.close();
    await s.close();
  }
});

// Bun's node:tls server socket has no getPeerCertificate(), so the test apiserver cannot read the CN there
// and accepts any client certificate the CA verified.
const isBun = "Bun" in globalThis;

test("a client certificate with another CN is refused (401)", {
  skip: isBun ? "Bun's node:tls cannot read the peer certificate's CN" : false,
}, async () => {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-apiserver-"));
  const s = await startTestApiserver({ tlsDir: dir });
  const other = await issueClientCert(s.certs, "system:node:intruder");
  const c = new TestHttpClient(s, { certPem: other.certPem, keyPem: other.keyPem });
  try {
    assert.equal((await c.getJson("/api/v1/nodes")).status, 401);
  } finally {
    c.close();
    await s.close();
    await rm(dir, { recursive: true, force: true });
  }
});

test("a client trusting another CA cannot connect (the server cert is checked)", async () => {
  const s = await startTestApiserver({ tlsDir: await sharedCertsDir() });
  const other = await generateTestCerts();
  const c = new TestHttpClient(s, { caPem: other.caPem });
  try {
    await assert.rejects(c.fetch("/healthz"));
  } finally {
    c.close();
    await s.close();
    await rm(other.dir, { recursive: true, force: true });
  }
});

test("tlsDir reuses certificates and token across restarts", async () => {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-apiserver-"));
  try {
    const a = await startTestApiserver({ tlsDir: dir });
    const { caPem, token, port } = a;
    await a.close();
    const b = await startTestApiserver({ tlsDir: dir, port });
    try {
      assert.equal(b.caPem, caPem);
      assert.equal(b.token, token);
      assert.equal(b.port, port);
      assert.equal((await readFile(join(dir, "token"), "utf8")).trim(), token);
      assert.equal(b.caFile, join(dir, "ca.crt"));
    } finally {
      await b.close();
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("writeKubeconfig: token, tokenFile, clientCert, embedded data", async () => {
  const s = await startTestApiserver({ tlsDir: await sharedCertsDir() });
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-kubeconfig-"));
  try {
    const load = async (opts: Parameters<typeof s.writeKubeconfig>[1]) => {
      const p = join(dir, "kubeconfig");
      await s.writeKubeconfig(p, opts);
      const cfg = parseYaml(await readFile(p, "utf8"));
      const ctx = cfg.contexts.find((x: { name: string }) => x.name === cfg["current-context"]).context;
      return {
        cluster: cfg.clusters.find((x: { name: string }) => x.name === ctx.cluster).cluster,
        user: cfg.users.find((x: { name: string }) => x.name === ctx.user).user,
      };
    };
    const t = await load(undefined);
    assert.equal(t.cluster.server, s.url);
    assert.equal(t.cluster["certificate-authority"], s.caFile);
    assert.deepEqual(t.user, { token: s.token });
    const tf = await load({ user: "tokenFile" });
    assert.equal((await readFile(tf.user.tokenFile, "utf8")).trim(), s.token);
    const cc = await load({ user: "clientCert" });
    assert.equal(await readFile(cc.user["client-certificate"], "utf8"), s.certs.clientCertPem);
    assert.equal(await readFile(cc.user["client-key"], "utf8"), s.certs.clientKeyPem);
    const em = await load({ user: "clientCert", embed: true, server: `https://localhost:${s.port}` });
    assert.equal(atob(em.cluster["certificate-authority-data"]), s.caPem);
    assert.equal(atob(em.user["client-certificate-data"]), s.certs.clientCertPem);
    assert.equal(em.cluster.server, `https://localhost:${s.port}`);
  } finally {
    await s.close();
    await rm(dir, { recursive: true, force: true });
  }
});
