/**
 * Setup errors are found before the host is touched: the compiled agent (not --dry-run) in a fresh network
 * namespace with a broken apiserver setup must exit 1 with one stderr line naming the file and the
 * problem, having written no sysctl (route_localnet stays 0) and created no KUBE-* chain.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NetnsScope, netnsUnavailableReason } from "../support/netns.ts";
import { agentBinaryMissingReason, EDGEPROXY_BINARY } from "../support/e2e_agent.ts";

const skip = netnsUnavailableReason() || agentBinaryMissingReason();
if (skip) console.log(`SKIP tests/e2e/agent_setup_errors_test.ts: ${skip}`);

describe("apiserver setup errors stop the agent before it touches the host", { skip }, () => {
  const scope = new NetnsScope("setuperr");
  let dir = "";
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "edgeproxy-setuperr-"));
  });
  after(async () => {
    await scope.cleanup();
    await rm(dir, { recursive: true, force: true });
  });

  it("missing kubeconfig, no current context, CA with insecure-skip-tls-verify, no apiserver", {
    timeout: 120_000,
  }, async () => {
    const ca = join(dir, "ca.crt");
    await writeFile(ca, "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n");
    const noContext = join(dir, "no-context");
    await writeFile(noContext, "clusters: [{name: k, cluster: {server: https://127.0.0.1:6443}}]\n");
    const caInsecure = join(dir, "ca-insecure");
    await writeFile(
      caInsecure,
      `current-context: c\nclusters: [{name: k, cluster: {server: https://127.0.0.1:6443, ` +
        `certificate-authority: ${ca}, insecure-skip-tls-verify: true}}]\n` +
        "contexts: [{name: c, context: {cluster: k}}]\n",
    );
    const cases: Array<[string[], RegExp]> = [
      [["--kubeconfig", join(dir, "nope")], /: file not found$/],
      [["--kubeconfig", noContext], /: current-context: not set$/],
      [["--kubeconfig", caInsecure], /insecure flag is not allowed$/],
      [[], /^no apiserver configured: /],
    ];
    for (const [args, re] of cases) {
      const ns = await scope.create(`c${cases.findIndex((c) => c[0] === args)}`);
      // A fresh namespace: route_localnet 0 and an empty ruleset, which the agent would change first.
      const before = await ns.execOk(["cat", "/proc/sys/net/ipv4/conf/all/route_localnet"]);
      assert.equal(before.trim(), "0");
      const res = await ns.exec([
        "env",
        "-u",
        "KUBECONFIG",
        "-u",
        "KUBERNETES_SERVICE_HOST",
        "-u",
        "KUBERNETES_SERVICE_PORT",
        EDGEPROXY_BINARY,
        "--hostname-override=n1",
        ...args,
      ], { timeoutMs: 30_000 });
      const what = args.join(" ") || "(no apiserver)";
      assert.equal(res.code, 1, `${what}: ${res.stderr}`);
      const lines = res.stderr.split("\n").filter((l) => l !== "");
      assert.equal(lines.length, 1, `${what}: one line, got:\n${res.stderr}`);
      assert.match(lines[0], re, what);
      assert.doesNotMatch(lines[0], /internal error/);
      assert.equal(
        (await ns.execOk(["cat", "/proc/sys/net/ipv4/conf/all/route_localnet"])).trim(),
        "0",
        `${what}: route_localnet was written`,
      );
      const save = await ns.execOk(["iptables-save"]);
      assert.doesNotMatch(save, /KUBE-/, `${what}: a KUBE-* chain was created`);
    }
  });
});
