/**
 * Order of actions on the command line (docs/flags.md): a syntax error is reported before --help is
 * honoured. Runs `deno run -A main.ts` and, when built, the compiled binary (dist/edgeproxy or $EDGEPROXY_BIN).
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));
const BINARY = process.env.EDGEPROXY_BIN
  ? resolve(process.env.EDGEPROXY_BIN)
  : join(ROOT, "dist", "edgeproxy");

const VARIANTS = [
  {
    name: "deno run main.ts",
    cmd: join(ROOT, "node_modules/.bin/deno"),
    prefix: ["run", "-A", join(ROOT, "main.ts")],
  },
  { name: "compiled binary", cmd: BINARY, prefix: [] as string[], skip: !existsSync(BINARY) },
];

function run(cmd: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(
      cmd,
      args,
      { cwd: tmpdir(), timeout: 60_000, env: { ...process.env, NO_COLOR: "1" } },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
        done({ code, stdout: String(stdout), stderr: String(stderr) });
      },
    );
  });
}

for (const v of VARIANTS) {
  describe(`edgeproxy syntax errors come before --help (${v.name})`, {
    skip: v.skip ? "no compiled binary" : false,
  }, () => {
    it("--bogus --help and --help --bogus: the syntax error, exit 1, no help", async () => {
      for (const args of [["--bogus", "--help"], ["--help", "--bogus"], ["-h", "--iptables-sync-period=x"]]) {
        const r = await run(v.cmd, [...v.prefix, ...args]);
        assert.equal(r.code, 1, `${args.join(" ")}: ${r.stdout}${r.stderr}`);
        assert.equal(r.stdout, "", args.join(" "));
        const lines = r.stderr.split("\n").filter((l) => l !== "");
        assert.equal(lines.length, 1, r.stderr);
        assert.match(
          lines[0],
          /^(unknown flag: --bogus|invalid argument "x" for "--iptables-sync-period" flag: .*)$/,
        );
      }
    });

    it("--help still prints help and exits 0; --help as a flag's value is that value, as in pflag", async () => {
      const h = await run(v.cmd, [...v.prefix, "-v=2", "--help"]);
      assert.equal(h.code, 0, h.stderr);
      assert.match(h.stdout, /\niptables proxier:\n/);
      const c = await run(v.cmd, [...v.prefix, "--config", "--help"]);
      assert.equal(c.code, 1);
      assert.equal(c.stdout, "");
      assert.match(c.stderr, /^invalid config --help: /);
    });
  });
}
