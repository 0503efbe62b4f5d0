/**
 * The command line end to end, as an operator meets it: spawns `deno run -A main.ts` and the compiled
 * binary (dist/edgeproxy, or $EDGEPROXY_BIN), checking exit codes, stdout and the one-line errors.
 * The binary variant is skipped, saying so, when no binary has been built (run `bash compile.sh`).
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parse } from "yaml";
import pkg from "../../package.json" with { type: "json" };
import { defaultConfig } from "../../lib/config/defaults.ts";
import { configToYAML } from "../../lib/config/write.ts";
import { type CliVariant, cliVariants } from "../support/cli_variants.ts";

const VARIANTS = cliVariants("deno", "compiled");

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** The environment the CLI runs with: ours without anything that would point it at an apiserver. */
function cliEnv(extra: Record<string, string> = {}): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = { ...process.env, NO_COLOR: "1", ...extra };
  for (const k of ["KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"]) {
    if (!(k in extra)) delete env[k];
  }
  return env;
}

function run(
  v: CliVariant,
  args: string[],
  cwd: string,
  extraEnv: Record<string, string> = {},
): Promise<Run> {
  return new Promise((done) => {
    execFile(
      v.cmd,
      [...v.prefix, ...args],
      { cwd, timeout: 60_000, maxBuffer: 16 << 20, env: cliEnv(extraEnv) },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
        done({ code, stdout: String(stdout), stderr: String(stderr) });
      },
    );
  });
}

/** stderr without Deno's RUST_BACKTRACE noise (not produced by edgeproxy). */
function errLines(r: Run): string[] {
  return r.stderr.split("\n").filter((l) => l !== "");
}

const HEAD = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";

for (const v of VARIANTS) {
  if (v.skip) console.log(`SKIP edgeproxy CLI (${v.name}): ${v.skip}`);
  describe(`edgeproxy CLI (${v.name})`, { skip: v.skip }, () => {
    const dir = mkdtempSync(join(tmpdir(), "edgeproxy-cli-"));
    after(() => rmSync(dir, { recursive: true, force: true }));

    it("--version prints the version line", async () => {
      const r = await run(v, ["--version"], dir);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(
        r.stdout,
        `edgeproxy ${pkg.version} (matches kube-proxy v1.34; iptables, nftables, userspace and ipvs modes)\n`,
      );
      const raw = await run(v, ["-v=2", "--version=raw"], dir);
      assert.equal(raw.stdout, `${pkg.version}\n`);
    });

    it("--help prints grouped flags with defaults", async () => {
      for (const flag of ["--help", "-h"]) {
        const r = await run(v, [flag], dir);
        assert.equal(r.code, 0, r.stderr);
        assert.match(r.stdout, /^edgeproxy .*\n/);
        assert.match(r.stdout, /\niptables proxier:\n/);
        assert.match(r.stdout, /--iptables-sync-period duration/);
        assert.match(r.stdout, /\(default 15m0s\)/);
        assert.match(r.stdout, /\nedgeproxy:\n/);
      }
    });

    it("--write-config-to writes the defaults, and the file round-trips through --config", async () => {
      const a = join(dir, "a.yaml");
      const b = join(dir, "b.yaml");
      const r1 = await run(v, ["--write-config-to", a], dir);
      assert.equal(r1.code, 0, r1.stderr);
      assert.equal(r1.stdout, "");
      assert.equal(readFileSync(a, "utf8"), configToYAML(defaultConfig()));
      const r2 = await run(v, ["--config", a, "--write-config-to", b], dir);
      assert.equal(r2.code, 0, r2.stderr);
      assert.equal(readFileSync(b, "utf8"), readFileSync(a, "utf8"));
    });

    it("flags given with --write-config-to are in the file and load back unchanged", async () => {
      const a = join(dir, "flags.yaml");
      const b = join(dir, "flags2.yaml");
      const args = [
        "--cluster-cidr=10.244.0.0/16,fd00:10:244::/56",
        "--nodeport-addresses=10.0.0.0/8",
        "--nodeport-addresses=fd00::/64",
        "--masquerade-all",
        "--iptables-sync-period=1h30m",
        "--feature-gates=WatchListClient=false,APIResponseCompression=true",
        "--hostname-override=Edge-01",
        "-v=3",
      ];
      const r1 = await run(v, [...args, "--write-config-to", a], dir);
      assert.equal(r1.code, 0, r1.stderr);
      const doc = parse(readFileSync(a, "utf8"));
      assert.equal(doc.clusterCIDR, "10.244.0.0/16,fd00:10:244::/56");
      assert.deepEqual(doc.nodePortAddresses, ["10.0.0.0/8", "fd00::/64"]);
      assert.equal(doc.iptables.masqueradeAll, true);
      assert.equal(doc.iptables.syncPeriod, "1h30m0s");
      assert.deepEqual(Object.keys(doc.featureGates), ["APIResponseCompression", "WatchListClient"]);
      assert.equal(doc.hostnameOverride, "edge-01");
      assert.equal(doc.logging.verbosity, 3);
      const r2 = await run(v, ["--config", a, "--write-config-to", b], dir);
      assert.equal(r2.code, 0, r2.stderr);
      assert.equal(readFileSync(b, "utf8"), readFileSync(a, "utf8"));
    });

    it("a bad config file: exit 1, one line on stderr naming the file and the field", async () => {
      const f = join(dir, "bad.yaml");
      writeFileSync(f, HEAD + "iptables:\n  masqueradeBit: 40\n");
      const r = await run(v, ["--config", f], dir);
      assert.equal(r.code, 1);
      assert.equal(r.stdout, "");
      assert.deepEqual(errLines(r), [
        `invalid config ${f}: iptables.masqueradeBit: must be within the range [0, 31] (got 40)`,
      ]);
      const g = join(dir, "typo.yaml");
      writeFileSync(g, HEAD + "conntrack:\n  tcpEstablishedTimeout: 1 day\n");
      const r2 = await run(v, ["--config", g], dir);
      assert.equal(r2.code, 1);
      assert.equal(errLines(r2).length, 1);
      assert.match(
        errLines(r2)[0],
        /^invalid config .*typo\.yaml: conntrack\.tcpEstablishedTimeout: not a valid duration/,
      );
    });

    it("--proxy-mode=kernelspace (Windows) or unknown: exit 1 with one line", async () => {
      for (const mode of ["kernelspace", "ebpf"]) {
        const r = await run(v, [`--proxy-mode=${mode}`], dir);
        assert.equal(r.code, 1);
        assert.deepEqual(errLines(r), [
          `edgeproxy implements only --proxy-mode=iptables|nftables|userspace|ipvs (got "${mode}")`,
        ]);
      }
    });

    it("unknown flags and bad values: exit 1 with pflag's message", async () => {
      const r = await run(v, ["--no-such-flag"], dir);
      assert.equal(r.code, 1);
      assert.deepEqual(errLines(r), ["unknown flag: --no-such-flag"]);
      const q = await run(v, ["--kube-api-qps", "fast"], dir);
      assert.equal(q.code, 1);
      assert.deepEqual(errLines(q), [
        'invalid argument "fast" for "--kube-api-qps" flag: strconv.ParseFloat: parsing "fast": invalid syntax',
      ]);
    });

    it("apiserver setup errors: exit 1, one line naming the file and the problem, no internal error", {
      timeout: 120_000,
    }, async () => {
      const ca = join(dir, "ca.crt");
      writeFileSync(ca, "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n");
      const kc = (name: string, text: string) => {
        const p = join(dir, name);
        writeFileSync(p, text);
        return p;
      };
      const noContext = kc(
        "kc-no-context",
        "clusters: [{name: k, cluster: {server: https://127.0.0.1:6443}}]\n" +
          "contexts: [{name: c, context: {cluster: k}}]\n",
      );
      const caInsecure = kc(
        "kc-ca-insecure",
        `current-context: c\nclusters: [{name: k, cluster: {server: https://127.0.0.1:6443, ` +
          `certificate-authority: ${ca}, insecure-skip-tls-verify: true}}]\n` +
          "contexts: [{name: c, context: {cluster: k}}]\n",
      );
      const bomb = join(dir, "bomb.yaml");
      writeFileSync(
        bomb,
        HEAD + "a: &a [x, x, x, x, x, x, x, x, x]\n" +
          ["b", "c", "d", "e", "f", "g"].map((n, i) =>
            `${n}: &${n} [${Array(9).fill(`*${"abcdefg"[i]}`).join(", ")}]\n`
          ).join(""),
      );
      const cases: Array<[string, string[], RegExp]> = [
        [
          "missing kubeconfig",
          ["--kubeconfig", join(dir, "nope")],
          new RegExp(`^kubeconfig ${join(dir, "nope")}: file not found$`),
        ],
        ["unreadable kubeconfig", ["--kubeconfig", dir], new RegExp(`^kubeconfig ${dir}: is a directory$`)],
        [
          "no current context",
          ["--kubeconfig", noContext],
          new RegExp(`^kubeconfig ${noContext}: current-context: not set$`),
        ],
        ["no apiserver configured", [], /^no apiserver configured: give --kubeconfig or --master/],
        [
          "YAML alias bomb in --config",
          ["--config", bomb],
          new RegExp(`^invalid config ${bomb}: document: too many YAML alias expansions`),
        ],
        [
          "CA with insecure-skip-tls-verify",
          ["--kubeconfig", caInsecure],
          new RegExp(
            `^kubeconfig ${caInsecure}: clusters\\[0\\]\\.cluster\\.insecure-skip-tls-verify: ` +
              "specifying a root certificates file with the insecure flag is not allowed$",
          ),
        ],
      ];
      for (const [what, args, re] of cases) {
        // --dry-run: the host is never touched even by a build that would get the order wrong.
        const r = await run(v, ["--dry-run", "--hostname-override=n1", ...args], dir);
        assert.equal(r.code, 1, `${what}: ${r.stderr}`);
        assert.equal(r.stdout, "", what);
        const lines = errLines(r);
        assert.equal(lines.length, 1, `${what}: exactly one line, got:\n${r.stderr}`);
        assert.match(lines[0], re, what);
        assert.doesNotMatch(lines[0], /internal error/, what);
      }
    });

    it("SIGTERM while an exec credential plugin hangs: exit 0 within 5 s, no plugin process left", {
      timeout: 120_000,
    }, async () => {
      const pids = join(dir, "plugin.pids");
      const plugin = join(dir, "hang-plugin.sh");
      writeFileSync(plugin, `#!/bin/sh\nsleep 100000 &\necho "$$ $!" > "${pids}"\nwait\n`);
      chmodSync(plugin, 0o755);
      const kc = join(dir, "kc-exec");
      writeFileSync(
        kc,
        "current-context: c\nclusters: [{name: k, cluster: {server: https://127.0.0.1:1}}]\n" +
          "contexts: [{name: c, context: {cluster: k, user: u}}]\n" +
          `users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: ${plugin}}}}]\n`,
      );
      rmSync(pids, { force: true });
      const child = spawn(v.cmd, [...v.prefix, "--dry-run", "--hostname-override=n1", "--kubeconfig", kc], {
        cwd: dir,
        env: cliEnv(),
        stdio: ["ignore", "pipe", "pipe"],
      });
      let stderr = "";
      child.stderr!.on("data", (b) => (stderr += String(b)));
      child.stdout!.resume();
      const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
      let procs: number[] = [];
      for (let i = 0; i < 600 && procs.length !== 2; i++) {
        await new Promise((r) => setTimeout(r, 50));
        const t = existsSync(pids) ? readFileSync(pids, "utf8").trim().split(" ") : [];
        if (t.length === 2) procs = t.map(Number);
      }
      assert.equal(procs.length, 2, `the plugin never started:\n${stderr}`);
      await new Promise((r) => setTimeout(r, 300)); // the agent is now waiting for the plugin
      const t0 = Date.now();
      process.kill(child.pid!, "SIGTERM");
      const killer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      const code = await exited;
      clearTimeout(killer);
      const took = Date.now() - t0;
      assert.equal(code, 0, `exit code after SIGTERM:\n${stderr}`);
      assert.ok(took < 5_000, `exited ${took} ms after SIGTERM`);
      const alive = (pid: number) => {
        try {
          const st = readFileSync(`/proc/${pid}/stat`, "utf8");
          return !st.slice(st.lastIndexOf(")") + 2).startsWith("Z");
        } catch {
          return false;
        }
      };
      for (const pid of procs) assert.ok(!alive(pid), `plugin process ${pid} still runs`);
    });

    it("a deprecated flag warns on stderr and still works", async () => {
      const f = join(dir, "dep.yaml");
      const r = await run(v, ["--metrics-port=0", "--write-config-to", f, "--logging-format=json"], dir);
      assert.equal(r.code, 0, r.stderr);
      const lines = errLines(r).map((l) => JSON.parse(l));
      // Kubernetes' JSON schema has no level: a warning is an info entry at v=0, as klog hands it to logr.
      assert.equal(lines[0].v, 0);
      assert.match(lines[0].msg, /^Flag --metrics-port has been deprecated/);
      assert.equal(lines[1].msg, "Wrote configuration");
    });
  });
}
