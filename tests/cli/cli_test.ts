/**
 * The command line end to end, as an operator meets it: spawns `deno run -A main.ts` and the compiled
 * binary (dist/edgeproxy, or $EDGEPROXY_BIN), checking exit codes, stdout and the one-line errors.
 * The binary variant is skipped, saying so, when no binary has been built (run `bash compile.sh`).
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parse } from "yaml";
import pkg from "../../package.json" with { type: "json" };
import { defaultConfig } from "../../lib/config/defaults.ts";
import { configToYAML } from "../../lib/config/write.ts";

const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));
const BINARY = process.env.EDGEPROXY_BIN
  ? resolve(process.env.EDGEPROXY_BIN)
  : join(ROOT, "dist", "edgeproxy");

interface Variant {
  name: string;
  cmd: string;
  prefix: string[];
  skip: string | false;
}

const VARIANTS: Variant[] = [
  {
    name: "deno run main.ts",
    cmd: join(ROOT, "node_modules/.bin/deno"),
    prefix: ["run", "-A", join(ROOT, "main.ts")],
    skip: false,
  },
  {
    name: "compiled binary",
    cmd: BINARY,
    prefix: [],
    skip: existsSync(BINARY) ? false : `no compiled binary at ${BINARY} (run "bash compile.sh" first)`,
  },
];

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

function run(v: Variant, args: string[], cwd: string): Promise<Run> {
  return new Promise((done) => {
    execFile(
      v.cmd,
      [...v.prefix, ...args],
      { cwd, timeout: 60_000, maxBuffer: 16 << 20, env: { ...process.env, NO_COLOR: "1" } },
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
      assert.equal(r.stdout, `edgeproxy ${pkg.version} (matches kube-proxy v1.34, iptables mode)\n`);
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

    it("--proxy-mode=ipvs: exit 1 with one line", async () => {
      for (const mode of ["ipvs", "nftables", "kernelspace"]) {
        const r = await run(v, [`--proxy-mode=${mode}`], dir);
        assert.equal(r.code, 1);
        assert.deepEqual(errLines(r), [`edgeproxy implements only --proxy-mode=iptables (got "${mode}")`]);
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
