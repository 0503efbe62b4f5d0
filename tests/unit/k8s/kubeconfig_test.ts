/** kubeconfig loading: merge rules, auth kinds, token rotation, exec plugins, in-cluster, --master, errors. */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { chmod, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Buffer } from "node:buffer";
import process from "node:process";
import { loadRestConfig } from "../../../lib/k8s/kubeconfig.ts";
import { mergeKubeconfigs } from "../../../lib/k8s/kubeconfig_merge.ts";
import { SERVICE_ACCOUNT_DIR } from "../../../lib/k8s/in_cluster.ts";
import { FileTokenCredentials } from "../../../lib/k8s/token_file_credentials.ts";
import { ExecCredentialProvider, parseExecCredential } from "../../../lib/k8s/exec_credential.ts";

const CA = "-----BEGIN CERTIFICATE-----\nMIIBfakeCA\n-----END CERTIFICATE-----\n";
const CERT = "-----BEGIN CERTIFICATE-----\nMIIBfakeCLIENT\n-----END CERTIFICATE-----\n";
const KEY = "-----BEGIN EC PRIVATE KEY-----\nMHcfakeKEY\n-----END EC PRIVATE KEY-----\n";
const b64 = (s: string) => Buffer.from(s).toString("base64");

let dir = "";
before(async () => {
  dir = await mkdtemp(join(tmpdir(), "edgeproxy-kc-"));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function file(name: string, text: string): Promise<string> {
  const p = join(dir, name);
  await mkdir(join(p, ".."), { recursive: true });
  await writeFile(p, text);
  return p;
}

describe("kubeconfig", () => {
  it("merges KUBECONFIG files with kubectl's rules and resolves paths against the defining file", {
    timeout: 30_000,
  }, async () => {
    await file("a/ca.crt", CA);
    await file("a/token", "file-token\n");
    const a = await file(
      "a/config",
      `
apiVersion: v1
kind: Config
clusters:
- name: prod
  cluster: {server: "https://first.example:6443", certificate-authority: ca.crt}
users:
- name: proxy
  user: {tokenFile: token}
contexts:
- name: main
  context: {cluster: prod, user: proxy}
`,
    );
    const b = await file(
      "b/config",
      `
current-context: main
clusters:
- name: prod
  cluster: {server: "https://second.example:6443"}
contexts:
- name: main
  context: {cluster: nope, user: nope}
- name: other
  context: {cluster: prod}
`,
    );
    const c = await file("c/config", "current-context: other\n");
    const cfg = await loadRestConfig({ env: { KUBECONFIG: `${a}:${join(dir, "missing")}:${b}:${c}` } });
    assert.equal(cfg.server, "https://first.example:6443", "first file wins per cluster name");
    assert.equal(cfg.caPem, CA, "relative certificate-authority is read next to the file that names it");
    assert.equal((await cfg.credentials.get()).authorization, "Bearer file-token");
    assert.match(cfg.source, /context main/, "current-context comes from the first file that sets it");
    assert.equal(cfg.insecureSkipTlsVerify, false);

    const m = mergeKubeconfigs([
      { file: "x", text: "current-context: one\nusers: [{name: u, user: {token: t1}}]" },
      { file: "y", text: "current-context: two\nusers: [{name: u, user: {token: t2}}, {name: v, user: {}}]" },
    ]);
    assert.equal(m.currentContext, "one");
    assert.equal(m.userList.find((u) => u.name === "u")?.token, "t1");
    assert.ok(m.userList.find((u) => u.name === "v"));
  });

  it("an explicit --kubeconfig is used alone and must exist; --master overrides the server", {
    timeout: 30_000,
  }, async () => {
    const p = await file(
      "explicit",
      `
current-context: c
clusters: [{name: k, cluster: {server: "https://10.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: abc, username: ignored}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
`,
    );
    const cfg = await loadRestConfig({
      kubeconfig: p,
      master: "https://override:8443/",
      env: { KUBECONFIG: "/nonexistent" },
    });
    assert.equal(cfg.server, "https://override:8443");
    assert.equal(cfg.insecureSkipTlsVerify, true);
    assert.equal((await cfg.credentials.get()).authorization, "Bearer abc");
    await assert.rejects(
      loadRestConfig({ kubeconfig: join(dir, "nope"), env: {} }),
      /kubeconfig .*nope: file not found/,
    );

    const onlyMaster = await loadRestConfig({ master: "http://127.0.0.1:8080", env: {} });
    assert.equal(onlyMaster.server, "http://127.0.0.1:8080");
    assert.deepEqual(await onlyMaster.credentials.get(), {});
  });

  it(
    "reads client-certificate-data / client-key-data and certificate-authority-data",
    { timeout: 30_000 },
    async () => {
      const p = await file(
        "embedded",
        `
current-context: c
clusters: [{name: k, cluster: {server: "https://h:6443", certificate-authority-data: ${b64(CA)}}}]
users: [{name: u, user: {client-certificate-data: ${b64(CERT)}, client-key-data: ${b64(KEY)}}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
`,
      );
      const cfg = await loadRestConfig({ kubeconfig: p });
      assert.equal(cfg.caPem, CA);
      const m = await cfg.credentials.get();
      assert.equal(m.certPem, CERT);
      assert.equal(m.keyPem, KEY);
      assert.equal(m.authorization, undefined);
      assert.equal(cfg.credentials.description, "client certificate");
    },
  );

  it("names the file and the field in errors", { timeout: 30_000 }, async () => {
    await file("e/client.crt", CERT);
    const missingKey = await file(
      "e/config",
      `
current-context: c
clusters: [{name: k, cluster: {server: "https://h"}}]
users: [{name: u, user: {client-certificate: client.crt, client-key: client.key}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
`,
    );
    await assert.rejects(
      loadRestConfig({ kubeconfig: missingKey }),
      (e: Error) =>
        e.message.startsWith(`kubeconfig ${missingKey}: users[0].user.client-key: file not found`),
    );
    const cases: Array<[string, RegExp]> = [
      ["clusters: {a: 1}", /: clusters: must be a list/],
      [
        "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]",
        /contexts\[0\]\.context\.cluster: no cluster named "k"/,
      ],
      ["current-context: c", /current-context: no context named "c"/],
      ["clusters: [{cluster: {server: x}}]", /clusters\[0\]\.name is missing/],
      [
        "current-context: c\nclusters: [{name: k, cluster: {}}]\ncontexts: [{name: c, context: {cluster: k}}]",
        /clusters\[0\]\.cluster\.server is missing/,
      ],
      [
        `current-context: c\nclusters: [{name: k, cluster: {server: h, insecure-skip-tls-verify: true, certificate-authority-data: ${
          b64(CA)
        }}}]\ncontexts: [{name: c, context: {cluster: k}}]`,
        /clusters\[0\]\.cluster\.insecure-skip-tls-verify: specifying a root certificates file with the insecure flag is not allowed/,
      ],
      [
        "current-context: c\nclusters: [{name: k, cluster: {server: h}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]",
        /contexts\[0\]\.context\.user: no user named "u"/,
      ],
      [
        "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n" +
        "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]",
        /not valid YAML: .*alias/i,
      ],
      [
        "current-context: c\nclusters: [{name: k, cluster: {server: h, certificate-authority-data: bm90IHBlbQ==}}]\n" +
        "contexts: [{name: c, context: {cluster: k}}]",
        /clusters\[0\]\.cluster\.certificate-authority-data: not base64-encoded PEM/,
      ],
      [
        "current-context: c\nclusters: [{name: k, cluster: {server: h}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n" +
        "users: [{name: u, user: {auth-provider: {name: gcp}}}]",
        /users\[0\]\.user\.auth-provider: "gcp": legacy auth providers are not supported; use an exec plugin/,
      ],
      [
        "current-context: c\nclusters: [{name: k, cluster: {server: h}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n" +
        "users: [{name: u, user: {exec: {command: x, apiVersion: client.authentication.k8s.io/v1alpha1}}}]",
        /users\[0\]\.user\.exec\.apiVersion: "client.authentication.k8s.io\/v1alpha1" is not supported/,
      ],
      ["a: [b", /not valid YAML/],
    ];
    for (const [i, [text, re]] of cases.entries()) {
      const p = await file(`bad${i}`, text);
      await assert.rejects(loadRestConfig({ kubeconfig: p }), (e: Error) => {
        assert.match(e.message, re);
        assert.ok(e.message.startsWith(`kubeconfig ${p}`), e.message);
        return true;
      });
    }
  });

  it(
    "re-reads a tokenFile after the refresh period and after invalidate(), keeping the old token on read errors",
    { timeout: 30_000 },
    async () => {
      const tok = await file("rot/token", "one\n");
      let now = 0;
      const c = new FileTokenCredentials(tok, {}, 60_000, () => now);
      assert.equal((await c.get()).authorization, "Bearer one");
      await writeFile(tok, "two\n");
      now = 59_000;
      assert.equal((await c.get()).authorization, "Bearer one", "cached within the refresh period");
      now = 60_001;
      assert.equal((await c.get()).authorization, "Bearer two", "rotated token picked up");
      await writeFile(tok, "three");
      c.invalidate();
      assert.equal((await c.get()).authorization, "Bearer three", "401 forces a re-read");
      await rm(tok);
      c.invalidate();
      assert.equal(
        (await c.get()).authorization,
        "Bearer three",
        "unreadable file: keep the last good token",
      );
      await assert.rejects(new FileTokenCredentials(join(dir, "none"), {}).get(), /file not found/);
    },
  );
});

describe("in-cluster configuration", () => {
  /** Runs `f` with the in-cluster variables set (client-node's loadFromCluster reads process.env). */
  async function withServiceEnv<T>(host: string | undefined, port: string | undefined, f: () => Promise<T>) {
    const saved = [process.env.KUBERNETES_SERVICE_HOST, process.env.KUBERNETES_SERVICE_PORT];
    const set = (k: string, v: string | undefined) =>
      v === undefined ? delete process.env[k] : (process.env[k] = v);
    set("KUBERNETES_SERVICE_HOST", host);
    set("KUBERNETES_SERVICE_PORT", port);
    try {
      return await f();
    } finally {
      set("KUBERNETES_SERVICE_HOST", saved[0]);
      set("KUBERNETES_SERVICE_PORT", saved[1]);
    }
  }

  it("uses KUBERNETES_SERVICE_HOST/PORT and the service-account dir, re-reading the token", {
    timeout: 30_000,
  }, async () => {
    const root = join(dir, "root");
    const sa = join(root, SERVICE_ACCOUNT_DIR);
    await file(`root${SERVICE_ACCOUNT_DIR}/token`, "sa-token-1");
    await file(`root${SERVICE_ACCOUNT_DIR}/ca.crt`, CA);
    let now = 0;
    const cfg = await withServiceEnv(
      "fd00::1",
      "443",
      () => loadRestConfig({ env: {}, inClusterRoot: root, now: () => now }),
    );
    assert.equal(cfg.server, "https://[fd00::1]:443");
    assert.equal(cfg.caPem, CA);
    assert.equal((await cfg.credentials.get()).authorization, "Bearer sa-token-1");
    await writeFile(join(sa, "token"), "sa-token-2");
    now = 61_000;
    assert.equal((await cfg.credentials.get()).authorization, "Bearer sa-token-2");

    const v4 = await withServiceEnv(
      "10.96.0.1",
      "8080",
      () => loadRestConfig({ env: {}, inClusterRoot: root }),
    );
    assert.equal(v4.server, "https://10.96.0.1:8080", "always https, as client-go");
    await withServiceEnv(undefined, undefined, () =>
      assert.rejects(
        loadRestConfig({ env: {}, inClusterRoot: root }),
        (e: Error) => {
          assert.match(e.message, /^no apiserver configured: .*KUBERNETES_SERVICE_HOST/);
          assert.equal(e.name, "KubeconfigError");
          return true;
        },
      ));
    await withServiceEnv("h", "1", () =>
      assert.rejects(
        loadRestConfig({ env: {}, inClusterRoot: join(dir, "nosa") }),
        /in-cluster configuration: file not found \(.*nosa\/var\/run\/secrets\/kubernetes.io\/serviceaccount\/ca.crt\)/,
      ));
  });
});

describe("exec credential plugins", () => {
  async function plugin(name: string, apiVersion: string, body: string): Promise<string> {
    const p = await file(
      `plugins/${name}`,
      `#!/bin/sh
n=$(cat "$COUNTER" 2>/dev/null || echo 0); n=$((n+1)); echo $n > "$COUNTER"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$COUNTER.info"
${body.replaceAll("APIVERSION", apiVersion)}
`,
    );
    await chmod(p, 0o755);
    return p;
  }

  it("runs a v1 plugin with its env, caches the token until expirationTimestamp and re-runs after a 401", {
    timeout: 30_000,
  }, async () => {
    const counter = join(dir, "count-v1");
    await plugin(
      "v1.sh",
      "client.authentication.k8s.io/v1",
      `printf '{"apiVersion":"APIVERSION","kind":"ExecCredential","status":{"token":"tok-%s-%s","expirationTimestamp":"2030-01-01T00:00:00Z"}}' "$n" "$GREETING"`,
    );
    const kc = await file(
      "plugins/kubeconfig",
      `
current-context: c
clusters: [{name: k, cluster: {server: "https://h:6443", certificate-authority-data: ${b64(CA)}}}]
contexts: [{name: c, context: {cluster: k, user: u}}]
users:
- name: u
  user:
    client-certificate-data: ${b64(CERT)}
    client-key-data: ${b64(KEY)}
    exec:
      apiVersion: client.authentication.k8s.io/v1
      command: ./v1.sh
      args: ["--flag"]
      env: [{name: GREETING, value: hi}, {name: COUNTER, value: "${counter}"}]
      provideClusterInfo: true
      interactiveMode: Never
`,
    );
    let now = Date.parse("2029-12-31T23:00:00Z");
    const cfg = await loadRestConfig({ kubeconfig: kc, now: () => now });
    const m1 = await cfg.credentials.get();
    assert.equal(m1.authorization, "Bearer tok-1-hi");
    assert.equal(m1.certPem, CERT, "the kubeconfig's static client cert still applies with an exec token");
    await Promise.all([cfg.credentials.get(), cfg.credentials.get()]);
    assert.equal((await readFile(counter, "utf8")).trim(), "1", "cached: ran once");
    const info = JSON.parse(await readFile(`${counter}.info`, "utf8"));
    assert.equal(info.apiVersion, "client.authentication.k8s.io/v1");
    assert.equal(info.kind, "ExecCredential");
    assert.equal(info.spec.interactive, false);
    assert.equal(info.spec.cluster.server, "https://h:6443");
    assert.equal(Buffer.from(info.spec.cluster["certificate-authority-data"], "base64").toString(), CA);

    cfg.credentials.invalidate(); // what the transport does on 401
    assert.equal((await cfg.credentials.get()).authorization, "Bearer tok-2-hi");
    now = Date.parse("2030-01-01T00:00:01Z");
    assert.equal((await cfg.credentials.get()).authorization, "Bearer tok-3-hi", "expired: ran again");
  });

  it("accepts v1beta1 and client certificates from the plugin", { timeout: 30_000 }, async () => {
    const counter = join(dir, "count-b1");
    const p = await plugin(
      "beta.sh",
      "client.authentication.k8s.io/v1beta1",
      `printf '{"apiVersion":"APIVERSION","kind":"ExecCredential","status":{"clientCertificateData":"%s","clientKeyData":"%s"}}' "$CERT" "$KEY"`,
    );
    const prov = new ExecCredentialProvider(
      {
        command: p,
        args: [],
        env: { COUNTER: counter, CERT: CERT.replaceAll("\n", "\\n"), KEY: KEY.replaceAll("\n", "\\n") },
        apiVersion: "client.authentication.k8s.io/v1beta1",
        provideClusterInfo: false,
        origin: "test plugin",
      },
      {
        cluster: { server: "https://h", insecureSkipTlsVerify: false },
        fallback: { certPem: "static", keyPem: "static" },
      },
    );
    const m = await prov.get();
    assert.equal(m.certPem, CERT);
    assert.equal(m.keyPem, KEY);
    assert.equal(m.authorization, undefined);
    assert.equal(JSON.parse(await readFile(`${counter}.info`, "utf8")).spec.cluster, undefined);
  });

  it(
    "reports failures with the kubeconfig field, exit status, stderr and install hint",
    { timeout: 30_000 },
    async () => {
      const failing = await plugin("fail.sh", "x", `echo "no credentials for you" >&2; exit 3`);
      const prov = (command: string, hint?: string) =>
        new ExecCredentialProvider(
          {
            command,
            args: [],
            env: { COUNTER: join(dir, "count-fail") },
            apiVersion: "client.authentication.k8s.io/v1",
            provideClusterInfo: false,
            installHint: hint,
            origin: "kubeconfig /k: users[0].user.exec",
          },
          { cluster: { server: "https://h", insecureSkipTlsVerify: false } },
        );
      await assert.rejects(
        prov(failing).get(),
        /users\[0\]\.user\.exec: running .*fail\.sh: exit status 3: no credentials for you/,
      );
      await assert.rejects(
        prov(join(dir, "absent"), "install it with apt").get(),
        /command not found\ninstall it with apt/,
      );
    },
  );

  /** True when no live process has this pid (a zombie waiting for its reaper counts as gone). */
  async function gone(pid: number): Promise<boolean> {
    try {
      const stat = await readFile(`/proc/${pid}/stat`, "utf8");
      return stat.slice(stat.lastIndexOf(")") + 2).startsWith("Z");
    } catch {
      return true;
    }
  }

  async function hangingPlugin(name: string): Promise<{ command: string; pids: string }> {
    const pids = join(dir, `${name}.pids`);
    const command = await file(
      `plugins/${name}`,
      `#!/bin/sh\nsleep 1000 &\necho "$$ $!" > "${pids}"\nwait\n`,
    );
    await chmod(command, 0o755);
    return { command, pids };
  }

  async function pidsOf(path: string): Promise<number[]> {
    for (let i = 0; i < 200; i++) {
      const text = await readFile(path, "utf8").catch(() => "");
      if (text.trim().split(" ").length === 2) return text.trim().split(" ").map(Number);
      await new Promise((r) => setTimeout(r, 20));
    }
    throw new Error(`${path}: plugin did not start`);
  }

  const execConfig = (command: string) => ({
    command,
    args: [],
    env: {},
    apiVersion: "client.authentication.k8s.io/v1",
    provideClusterInfo: false,
    origin: "kubeconfig /k: users[0].user.exec",
  });

  it("kills the process group of a plugin that exceeds its time limit, then backs off", {
    timeout: 30_000,
  }, async () => {
    const { command, pids } = await hangingPlugin("hang-timeout.sh");
    let now = 1_000_000;
    const prov = new ExecCredentialProvider(execConfig(command), {
      cluster: { server: "https://h", insecureSkipTlsVerify: false },
      timeoutMs: 500,
      now: () => now,
    });
    const t0 = Date.now();
    await assert.rejects(
      prov.get(),
      /running .*hang-timeout\.sh: timed out after 500 ms \(process group killed\)/,
    );
    assert.ok(Date.now() - t0 < 5_000, "bounded by the time limit");
    for (const pid of await pidsOf(pids)) assert.ok(await gone(pid), `plugin process ${pid} is gone`);
    await assert.rejects(prov.get(), /timed out/, "within the backoff: the last error, no new run");
    assert.equal(prov.runs, 1);
    now += 2_001; // past the first backoff step (1 s, up to 2 s with jitter)
    await rm(pids);
    await assert.rejects(prov.get(), /timed out/);
    assert.equal(prov.runs, 2, "after the backoff the plugin runs again");
  });

  it("close() kills a hanging plugin's process group and fails the waiting request at once", {
    timeout: 30_000,
  }, async () => {
    const { command, pids } = await hangingPlugin("hang-close.sh");
    const prov = new ExecCredentialProvider(execConfig(command), {
      cluster: { server: "https://h", insecureSkipTlsVerify: false },
    });
    const waiting = prov.get();
    const procs = await pidsOf(pids);
    const t0 = Date.now();
    prov.close();
    await assert.rejects(waiting, /credentials closed \(shutting down\)/);
    assert.ok(Date.now() - t0 < 2_000);
    for (const pid of procs) {
      for (let i = 0; i < 50 && !(await gone(pid)); i++) await new Promise((r) => setTimeout(r, 20));
      assert.ok(await gone(pid), `plugin process ${pid} is gone`);
    }
    await assert.rejects(prov.get(), /credentials closed/);
  });

  it("validates ExecCredential output", () => {
    const v1 = "client.authentication.k8s.io/v1";
    const ok = parseExecCredential(
      JSON.stringify({
        apiVersion: v1,
        kind: "ExecCredential",
        status: { token: "t", expirationTimestamp: "2030-01-01T00:00:00Z" },
      }),
      v1,
      "o",
    );
    assert.equal(ok.material.authorization, "Bearer t");
    assert.equal(ok.expiresAt, Date.parse("2030-01-01T00:00:00Z"));
    const bad: Array<[unknown, RegExp]> = [
      ["nope", /not JSON/],
      [{ apiVersion: v1, kind: "Other", status: { token: "t" } }, /kind is "Other"/],
      [
        {
          apiVersion: "client.authentication.k8s.io/v1beta1",
          kind: "ExecCredential",
          status: { token: "t" },
        },
        /apiVersion/,
      ],
      [{ apiVersion: v1, kind: "ExecCredential" }, /no status/],
      [{ apiVersion: v1, kind: "ExecCredential", status: {} }, /neither token nor clientCertificateData/],
      [
        { apiVersion: v1, kind: "ExecCredential", status: { clientCertificateData: "c" } },
        /both clientCertificateData and clientKeyData/,
      ],
      [
        { apiVersion: v1, kind: "ExecCredential", status: { token: "t", expirationTimestamp: "soon" } },
        /not RFC 3339/,
      ],
    ];
    for (const [out, re] of bad) {
      assert.throws(
        () => parseExecCredential(typeof out === "string" ? out : JSON.stringify(out), v1, "origin"),
        re,
      );
    }
  });
});
