/**
 * lib/runtime/fetch_tls.ts on the running runtime (run under both deno test and bun test): the server
 * certificate is really verified against the given CA, client certificates are really presented, and
 * insecure-skip-tls-verify really skips verification.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startTestApiserver, type TestApiserver } from "../../support/apiserver.ts";
import { generateTestCerts, type TestCerts } from "../../support/certs.ts";
import { createTlsFetch, runtimeName, type TlsFetch } from "../../../lib/runtime/fetch_tls.ts";

let srv: TestApiserver;
let other: TestCerts;
let otherDir = "";

before(async () => {
  srv = await startTestApiserver({ bookmarkIntervalMs: 0 });
  otherDir = await mkdtemp(join(tmpdir(), "edgeproxy-otherca-"));
  other = await generateTestCerts(otherDir);
});
after(async () => {
  await srv.close();
  await rm(otherDir, { recursive: true, force: true });
});

async function status(
  f: TlsFetch,
  path = "/api/v1/services",
  headers: Record<string, string> = {},
): Promise<number> {
  try {
    const res = await f(srv.url + path, { headers });
    await res.body?.cancel();
    return res.status;
  } finally {
    f.close();
  }
}

describe(`createTlsFetch on ${runtimeName}`, () => {
  it("accepts the server with the right CA", { timeout: 30_000 }, async () => {
    const f = createTlsFetch({ caPem: srv.caPem });
    assert.equal(
      f.implementation,
      runtimeName === "bun" ? "bun" : runtimeName === "deno" ? "deno" : "node-https",
    );
    assert.equal(await status(f, "/api/v1/services", { Authorization: `Bearer ${srv.token}` }), 200);
  });

  it("rejects the server with a different CA, and with no CA", { timeout: 30_000 }, async () => {
    const wrong = createTlsFetch({ caPem: other.caPem });
    await assert.rejects(status(wrong, "/version"));
    const none = createTlsFetch({});
    assert.equal(none.implementation, "global");
    await assert.rejects(status(none, "/version"));
  });

  it(
    "presents the client certificate (the server authenticates it without a token)",
    { timeout: 30_000 },
    async () => {
      assert.equal(await status(createTlsFetch({ caPem: srv.caPem })), 401, "no token, no certificate");
      const withCert = createTlsFetch({
        caPem: srv.caPem,
        certPem: srv.certs.clientCertPem,
        keyPem: srv.certs.clientKeyPem,
      });
      assert.equal(await status(withCert), 200);
      // a certificate from another CA is not accepted
      const foreign = createTlsFetch({
        caPem: srv.caPem,
        certPem: other.clientCertPem,
        keyPem: other.clientKeyPem,
      });
      const code = await status(foreign).catch(() => 0);
      assert.notEqual(code, 200);
    },
  );

  it("skips verification only with insecureSkipVerify, still presenting a client certificate", {
    timeout: 30_000,
  }, async () => {
    assert.equal(await status(createTlsFetch({ insecureSkipVerify: true }), "/version"), 200);
    const f = createTlsFetch({
      insecureSkipVerify: true,
      certPem: srv.certs.clientCertPem,
      keyPem: srv.certs.clientKeyPem,
    });
    assert.equal(await status(f), 200);
  });

  it("streams a watch body and aborts it promptly (every implementation)", { timeout: 30_000 }, async () => {
    for (const opts of [{ caPem: srv.caPem }, { insecureSkipVerify: true }]) {
      const f = createTlsFetch(opts);
      const ctl = new AbortController();
      try {
        const res = await f(`${srv.url}/api/v1/services?watch=true`, {
          headers: { Authorization: `Bearer ${srv.token}` },
          signal: ctl.signal,
        });
        assert.equal(res.status, 200);
        const reader = res.body!.getReader();
        const pending = reader.read();
        srv.create("services", {
          metadata: { name: `w-${Math.random().toString(36).slice(2)}`, namespace: "default" },
        });
        const first = await pending;
        assert.match(new TextDecoder().decode(first.value), /"ADDED"/);
        const next = reader.read();
        ctl.abort();
        await assert.rejects(next);
      } finally {
        f.close();
      }
    }
  });

  it("refuses a certificate without its key", () => {
    assert.throws(() => createTlsFetch({ certPem: srv.certs.clientCertPem }), /needs its key/);
  });
});
