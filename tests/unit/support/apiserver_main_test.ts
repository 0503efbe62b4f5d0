import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { createInterface } from "node:readline";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { parse as parseYaml } from "yaml";

const ENTRY = new URL("../../support/apiserver_main.ts", import.meta.url).pathname;

/** Runs apiserver_main.ts under the runtime running this test. */
function spawnMain(args: string[]) {
  const isBun = "Bun" in globalThis;
  const argv = isBun ? ["run", ENTRY, ...args] : ["run", "-A", ENTRY, ...args];
  return spawn(process.execPath, argv, { stdio: ["pipe", "pipe", "pipe"] });
}

test("apiserver_main: writes kubeconfig/ca.crt/token, seeds manifests, answers control commands", async () => {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-apiserver-main-"));
  const seed = join(dir, "seed.yaml");
  await writeFile(
    seed,
    [
      "apiVersion: v1",
      "kind: Node",
      "metadata: {name: edge-1}",
      "---",
      "apiVersion: v1",
      "kind: Service",
      "metadata: {name: web, namespace: default}",
      "spec: {clusterIP: 10.96.0.20, ports: [{port: 80}]}",
      "",
    ].join("\n"),
  );
  const child = spawnMain(["--port", "0", "--dir", dir, "--seed", seed, "--user", "tokenFile"]);
  let stderr = "";
  child.stderr!.on("data", (d) => stderr += d);
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const nextLine = async () => {
    const r = await lines.next();
    if (r.done) throw new Error(`apiserver_main exited: ${stderr}`);
    return JSON.parse(r.value);
  };
  const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));
  try {
    const ready = await nextLine();
    assert.equal(ready.ready, true);
    assert.match(ready.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    for (const f of ["kubeconfig", "ca.crt", "token", "client.crt", "client.key"]) {
      assert.ok(existsSync(join(dir, f)), f);
    }
    const kc = parseYaml(await readFile(join(dir, "kubeconfig"), "utf8"));
    assert.equal(kc.clusters[0].cluster.server, ready.url);
    assert.equal(kc.clusters[0].cluster["certificate-authority"], join(dir, "ca.crt"));
    assert.equal(kc.users[0].user.tokenFile, join(dir, "token"));
    assert.equal((await readFile(join(dir, "token"), "utf8")).trim(), ready.token);

    const cmd = async (c: unknown) => {
      child.stdin!.write(JSON.stringify(c) + "\n");
      return await nextLine();
    };
    const svcs = await cmd({ op: "list", kind: "services" });
    assert.deepEqual(svcs.items.map((s: { metadata: { name: string } }) => s.metadata.name), ["web"]);
    assert.equal((await cmd({ op: "list", kind: "nodes" })).items.length, 1);
    const created = await cmd({
      op: "create",
      kind: "services",
      object: { metadata: { name: "dns", namespace: "kube-system" }, spec: { clusterIP: "10.96.0.10" } },
    });
    assert.equal(created.ok, true);
    assert.equal(created.object.kind, "Service");
    const rv = await cmd({ op: "rv" });
    assert.equal(rv.resourceVersion, created.object.metadata.resourceVersion);
    const applied = await cmd({
      op: "apply",
      object: {
        apiVersion: "v1",
        kind: "Service",
        metadata: { name: "dns", namespace: "kube-system" },
        spec: {},
      },
    });
    assert.equal(Number(applied.object.metadata.resourceVersion), Number(rv.resourceVersion) + 1);
    assert.deepEqual(await cmd({ op: "fault", name: "failNext", args: [1, 503] }), { ok: true });
    const bad = await cmd({ op: "fault", name: "nope" });
    assert.equal(bad.ok, false);
    assert.match(bad.error, /unknown fault "nope"/);
    const missing = await cmd({ op: "remove", kind: "nodes", name: "ghost" });
    assert.equal(missing.ok, false);
    assert.match(missing.error, /not found/);
  } finally {
    child.kill("SIGTERM");
    await exited;
    await rm(dir, { recursive: true, force: true });
  }
});
