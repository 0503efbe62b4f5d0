/**
 * The log lines of a real run, as an operator's journald sees them: `--dry-run` on the example site,
 * under `deno run main.ts`, `bun main.ts` and the compiled binary (skipped, saying so, when
 * dist/edgeproxy has not been built). Every stderr line is klog text (klog's own header regex) or, with
 * --logging-format=json, a JSON object with component-base's keys; -v=1 adds upstream's FLAG lines.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import pkg from "../../package.json" with { type: "json" };
import { FLAGS } from "../../lib/cli/flags.ts";
import { KLOG_HEADER, klogTestRegex } from "../support/klog_lines.ts";
import { type CliVariant, cliVariants, ROOT } from "../support/cli_variants.ts";

const SITE = join(ROOT, "examples", "edge-site");

const VARIANTS = cliVariants("deno", "bun", "compiled");

function run(v: CliVariant, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(
      v.cmd,
      [...v.prefix, ...args],
      { cwd: ROOT, timeout: 60_000, maxBuffer: 16 << 20, env: { ...process.env, NO_COLOR: "1" } },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
        done({ code, stdout: String(stdout), stderr: String(stderr) });
      },
    );
  });
}

const DRY_RUN = ["--dry-run", "--manifests", SITE, "--hostname-override", "edge-node-1"];

/** The line of main.ts that logs "Version info". */
const VERSION_LINE = readFileSync(join(ROOT, "main.ts"), "utf8").split("\n")
  .findIndex((l) => l.includes('"Version info"')) + 1;

for (const v of VARIANTS) {
  if (v.skip) console.log(`SKIP edgeproxy logs (${v.name}): ${v.skip}`);
  describe(`edgeproxy logs (${v.name})`, { skip: v.skip }, () => {
    it("text: every stderr line is klog's format; Version info and, at -v=1, sorted FLAG lines", async () => {
      const r = await run(v, [...DRY_RUN, "-v=1"]);
      assert.equal(r.code, 0, r.stderr);
      const lines = r.stderr.split("\n").filter((l) => l !== "");
      assert.ok(lines.length > FLAGS.length, r.stderr);
      const parsed = lines.map((l) => {
        const m = KLOG_HEADER.exec(l);
        assert.ok(m, `not a klog line: ${l}`);
        assert.match(l, klogTestRegex(m[9]));
        return { severity: m[1], file: m[9], line: Number(m[10]), body: m[11] };
      });
      // Every source tag names a real file of the project (never klog's "???").
      for (const p of parsed) assert.match(`${p.file}:${p.line}`, /^[a-z_]+\.ts:[1-9]\d*$/);

      const flags = parsed.filter((p) => p.body.startsWith("FLAG: "));
      assert.equal(flags.length, FLAGS.length);
      const names = flags.map((p) => /^FLAG: --([a-z0-9-]+)="/.exec(p.body)![1]);
      assert.deepEqual(names, [...names].sort());
      assert.ok(flags.every((p) => p.severity === "I" && p.file === "print_flags.ts"));
      assert.ok(flags.some((p) => p.body === 'FLAG: --hostname-override="edge-node-1"'));
      assert.ok(flags.some((p) => p.body === 'FLAG: --v="1"'));
      assert.ok(flags.some((p) => p.body === 'FLAG: --iptables-sync-period="30s"'));

      const version = parsed.find((p) => p.body.startsWith('"Version info"'));
      assert.ok(version, r.stderr);
      assert.equal(version.body, `"Version info" version="${pkg.version}" upstream="v1.34"`);
      assert.equal(`${version.file}:${version.line}`, `main.ts:${VERSION_LINE}`);
      // FLAG lines come first, as upstream prints them before running.
      assert.ok(parsed.indexOf(flags[flags.length - 1]) < parsed.indexOf(version));
    });

    it("text at -v=0: no FLAG lines, still Version info", async () => {
      const r = await run(v, DRY_RUN);
      assert.equal(r.code, 0, r.stderr);
      assert.doesNotMatch(r.stderr, /FLAG: /);
      assert.match(r.stderr, /^I\d{4} [\d:.]+ +\d+ main\.ts:\d+\] "Version info" /m);
    });

    it("json: every stderr line is an object with ts (ms), caller, msg and v", async () => {
      const before = Date.now();
      const r = await run(v, [...DRY_RUN, "-v=1", "--logging-format=json"]);
      assert.equal(r.code, 0, r.stderr);
      const lines = r.stderr.split("\n").filter((l) => l !== "").map((l) => JSON.parse(l));
      assert.ok(lines.length > FLAGS.length);
      for (const o of lines) {
        assert.deepEqual(Object.keys(o).slice(0, 3), ["ts", "caller", "msg"], JSON.stringify(o));
        assert.ok(o.ts >= before - 1000 && o.ts <= Date.now() + 1000, `ts in ms: ${o.ts}`);
        assert.match(o.caller, /^[a-z_.-]+\/[a-z_]+\.ts:[1-9]\d*$|^main\.ts:[1-9]\d*$/);
        if (!("err" in o)) assert.equal(typeof o.v, "number");
      }
      const flag = lines.find((o) => o.msg === 'FLAG: --v="1"');
      assert.equal(flag?.v, 1);
      const version = lines.find((o) => o.msg === "Version info");
      assert.deepEqual(version && [version.v, version.version, version.upstream], [0, pkg.version, "v1.34"]);
    });
  });
}
