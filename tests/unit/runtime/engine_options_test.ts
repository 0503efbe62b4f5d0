import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import process from "node:process";
import {
  ENGINE_OPTIONS,
  engineOptionsExec,
  FTL_JIT_ENV,
  HEAP_RAM_BYTES,
  HEAP_RAM_ENV,
  type ProcessView,
} from "../../../lib/runtime/engine_options.ts";

const COMPILED: ProcessView = {
  isBun: true,
  env: { PATH: "/usr/bin", HOME: "/root", EMPTY: undefined },
  argv: ["bun", "/$bunfs/root/edgeproxy", "--proxy-mode=nftables", "--v=2"],
  argv0: "/usr/bin/edgeproxy",
  execPath: "/usr/bin/edgeproxy",
};

const ALL_SET = { [HEAP_RAM_ENV]: String(HEAP_RAM_BYTES), [FTL_JIT_ENV]: "0" };

describe("engineOptionsExec", () => {
  it("a compiled executable runs itself again with its own arguments and the variables added", () => {
    const plan = engineOptionsExec(COMPILED);
    assert.deepEqual(plan, {
      file: "/usr/bin/edgeproxy",
      args: ["/usr/bin/edgeproxy", "--proxy-mode=nftables", "--v=2"],
      env: { PATH: "/usr/bin", HOME: "/root", ...ALL_SET },
    });
    assert.equal(HEAP_RAM_ENV, "BUN_JSC_forceRAMSize");
    assert.equal(HEAP_RAM_BYTES, 134217728);
    assert.equal(FTL_JIT_ENV, "BUN_JSC_useFTLJIT");
    assert.deepEqual(ENGINE_OPTIONS.map((o) => o.env), [HEAP_RAM_ENV, FTL_JIT_ENV]);
  });

  it("`bun main.ts` keeps its script", () => {
    const plan = engineOptionsExec({
      ...COMPILED,
      argv: ["/opt/bun", "/src/main.ts", "--dry-run"],
      argv0: "bun",
      execPath: "/opt/bun",
    });
    assert.deepEqual(plan?.args, ["bun", "/src/main.ts", "--dry-run"]);
    assert.equal(plan?.file, "/opt/bun");
  });

  it("runs once: nothing when every variable is set, by the first exec or by an operator (0 included)", () => {
    assert.equal(engineOptionsExec({ ...COMPILED, env: { ...COMPILED.env, ...ALL_SET } }), null);
    for (const value of ["0", "268435456", ""]) {
      const env = { ...COMPILED.env, [HEAP_RAM_ENV]: value, [FTL_JIT_ENV]: value === "" ? "" : "1" };
      assert.equal(engineOptionsExec({ ...COMPILED, env }), null, value);
    }
  });

  it("an operator's value of one is kept and only the other is added", () => {
    const plan = engineOptionsExec({ ...COMPILED, env: { ...COMPILED.env, [FTL_JIT_ENV]: "1" } });
    assert.equal(plan?.env[FTL_JIT_ENV], "1");
    assert.equal(plan?.env[HEAP_RAM_ENV], String(HEAP_RAM_BYTES));
    const sized = engineOptionsExec({ ...COMPILED, env: { ...COMPILED.env, [HEAP_RAM_ENV]: "0" } });
    assert.equal(sized?.env[HEAP_RAM_ENV], "0");
    assert.equal(sized?.env[FTL_JIT_ENV], "0");
  });

  it("nothing off Bun (V8 has no such options)", () => {
    assert.equal(engineOptionsExec({ ...COMPILED, isBun: false }), null);
  });
});

describe("the pinned Bun accepts the options", () => {
  // Bun refuses to start with a JSC variable it does not know: a Bun whose engine renamed an option
  // would make every agent exit at its re-exec. The runtime that runs this test is the pinned one.
  const bun = (globalThis as { Bun?: unknown }).Bun !== undefined;
  it("starts with them set and reports them unchanged", { skip: bun ? false : "Bun only" }, async () => {
    const out = await new Promise<string>((resolve, reject) => {
      execFile(
        process.execPath,
        ["-e", `console.log(process.env.${HEAP_RAM_ENV}, process.env.${FTL_JIT_ENV})`],
        { env: { ...process.env, ...ALL_SET } },
        (err, stdout, stderr) => err ? reject(new Error(`${err.message}: ${stderr}`)) : resolve(stdout),
      );
    });
    assert.equal(out.trim(), `${HEAP_RAM_BYTES} 0`);
  });

  it(
    "refuses an option it does not know (so the test above can fail)",
    { skip: bun ? false : "Bun only" },
    async () => {
      const code = await new Promise<number | null>((resolve) => {
        execFile(
          process.execPath,
          ["-e", "0"],
          { env: { ...process.env, BUN_JSC_noSuchOptionForEdgeproxy: "1" } },
          (err) => resolve(err === null ? 0 : (err as { code?: number }).code ?? null),
        );
      });
      assert.notEqual(code, 0);
    },
  );
});
