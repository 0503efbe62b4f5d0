/**
 * The agent's one re-exec that sets the engine's options (lib/runtime/engine_options.ts), seen from outside
 * as an operator would: a `--dry-run` on the example site at -v=2, under `bun main.ts` and the compiled
 * binary (skipped, saying so, when dist/edgeproxy has not been built). The agent reports the values it runs
 * with; every line comes from the process that was started (klog's pid: execve keeps it); the flags
 * arrive intact and are printed once; an operator's own values are kept.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import process from "node:process";
import { KLOG_HEADER } from "../support/klog_lines.ts";
import { ENGINE_OPTIONS, FTL_JIT_ENV, HEAP_RAM_ENV } from "../../lib/runtime/engine_options.ts";
import { type CliVariant, cliVariants, ROOT } from "../support/cli_variants.ts";

const SITE = join(ROOT, "examples", "edge-site");
const DRY_RUN = ["--dry-run", "--manifests", SITE, "--hostname-override", "edge-node-1", "--v=2"];

const VARIANTS = cliVariants("bun", "compiled");

interface Run {
  code: number;
  pid: number;
  stdout: string;
  stderr: string;
}

function run(v: CliVariant, env: Record<string, string | undefined>): Promise<Run> {
  return new Promise((done) => {
    const child = execFile(
      v.cmd,
      [...v.prefix, ...DRY_RUN],
      { cwd: ROOT, timeout: 60_000, maxBuffer: 16 << 20, env: { ...env, NO_COLOR: "1" } },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
        done({ code, pid: child.pid ?? -1, stdout: String(stdout), stderr: String(stderr) });
      },
    );
  });
}

/** The environment of this test without the variables, so the agent decides. */
function cleanEnv(): Record<string, string | undefined> {
  const env = { ...process.env };
  for (const o of ENGINE_OPTIONS) delete env[o.env];
  return env;
}

/** The -v=2 line listing `values` (variable → value, in ENGINE_OPTIONS' order). */
function optionsLine(values: Record<string, string>): string {
  return `] "Engine options" ${ENGINE_OPTIONS.map((o) => `${o.env}="${values[o.env]}"`).join(" ")}`;
}

for (const v of VARIANTS) {
  if (v.skip) console.log(`SKIP engine options (${v.name}): ${v.skip}`);
  describe(`engine options (${v.name})`, { skip: v.skip }, () => {
    it("runs with the variables set by its own re-exec: same pid, flags intact and printed once", async () => {
      const r = await run(v, cleanEnv());
      assert.equal(r.code, 0, r.stderr);
      const lines = r.stderr.split("\n").filter((l) => l !== "");
      const values = Object.fromEntries(ENGINE_OPTIONS.map((o) => [o.env, o.value]));
      assert.equal(lines.filter((l) => l.endsWith(optionsLine(values))).length, 1, r.stderr);
      for (const l of lines) {
        const m = KLOG_HEADER.exec(l);
        assert.ok(m, `not a klog line: ${l}`);
        assert.equal(Number(m[8]), r.pid, `a line from another process than the one started: ${l}`);
      }
      const flag = (name: string) => lines.filter((l) => l.endsWith(`] FLAG: --${name}`));
      assert.equal(flag('v="2"').length, 1, r.stderr);
      assert.equal(flag('hostname-override="edge-node-1"').length, 1, r.stderr);
      assert.equal(flag(`manifests="${SITE}"`).length, 1, r.stderr);
      assert.equal(lines.filter((l) => l.includes('"Version info"')).length, 1);
      // The dry run still printed its transaction.
      assert.match(r.stdout, /iptables-restore/);
    });

    it("keeps an operator's values (0: the engine's own heap sizing; 1: the FTL tier)", async () => {
      const r = await run(v, { ...cleanEnv(), [HEAP_RAM_ENV]: "0", [FTL_JIT_ENV]: "1" });
      assert.equal(r.code, 0, r.stderr);
      assert.ok(r.stderr.includes(optionsLine({ [HEAP_RAM_ENV]: "0", [FTL_JIT_ENV]: "1" })), r.stderr);
    });

    it("adds the one an operator left unset", async () => {
      const r = await run(v, { ...cleanEnv(), [HEAP_RAM_ENV]: "0" });
      assert.equal(r.code, 0, r.stderr);
      assert.ok(r.stderr.includes(optionsLine({ [HEAP_RAM_ENV]: "0", [FTL_JIT_ENV]: "0" })), r.stderr);
    });
  });
}
