import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import process from "node:process";
import {
  HEAP_RAM_BYTES,
  HEAP_RAM_ENV,
  heapSizingExec,
  type ProcessView,
} from "../../../lib/runtime/heap_sizing.ts";

const COMPILED: ProcessView = {
  isBun: true,
  env: { PATH: "/usr/bin", HOME: "/root", EMPTY: undefined },
  argv: ["bun", "/$bunfs/root/edgeproxy", "--proxy-mode=nftables", "--v=2"],
  argv0: "/usr/bin/edgeproxy",
  execPath: "/usr/bin/edgeproxy",
};

describe("heapSizingExec", () => {
  it("a compiled executable runs itself again with its own arguments and the variable added", () => {
    const plan = heapSizingExec(COMPILED);
    assert.deepEqual(plan, {
      file: "/usr/bin/edgeproxy",
      args: ["/usr/bin/edgeproxy", "--proxy-mode=nftables", "--v=2"],
      env: { PATH: "/usr/bin", HOME: "/root", [HEAP_RAM_ENV]: String(HEAP_RAM_BYTES) },
    });
    assert.equal(HEAP_RAM_ENV, "BUN_JSC_forceRAMSize");
    assert.equal(HEAP_RAM_BYTES, 134217728);
  });

  it("`bun main.ts` keeps its script", () => {
    const plan = heapSizingExec({
      ...COMPILED,
      argv: ["/opt/bun", "/src/main.ts", "--dry-run"],
      argv0: "bun",
      execPath: "/opt/bun",
    });
    assert.deepEqual(plan?.args, ["bun", "/src/main.ts", "--dry-run"]);
    assert.equal(plan?.file, "/opt/bun");
  });

  it("runs once: nothing when the variable is set, by the first exec or by an operator (0 included)", () => {
    for (const value of [String(HEAP_RAM_BYTES), "0", "268435456", ""]) {
      assert.equal(
        heapSizingExec({ ...COMPILED, env: { ...COMPILED.env, [HEAP_RAM_ENV]: value } }),
        null,
        value,
      );
    }
  });

  it("nothing off Bun (V8 has no such option)", () => {
    assert.equal(heapSizingExec({ ...COMPILED, isBun: false }), null);
  });
});

describe("the pinned Bun accepts the option", () => {
  // Bun refuses to start with a JSC variable it does not know: a Bun whose engine renamed the option
  // would make every agent exit at its re-exec. The runtime that runs this test is the pinned one.
  const bun = (globalThis as { Bun?: unknown }).Bun !== undefined;
  it("starts with it set and reports it unchanged", { skip: bun ? false : "Bun only" }, async () => {
    const out = await new Promise<string>((resolve, reject) => {
      execFile(
        process.execPath,
        ["-e", `console.log(process.env.${HEAP_RAM_ENV})`],
        { env: { ...process.env, [HEAP_RAM_ENV]: String(HEAP_RAM_BYTES) } },
        (err, stdout, stderr) => err ? reject(new Error(`${err.message}: ${stderr}`)) : resolve(stdout),
      );
    });
    assert.equal(out.trim(), String(HEAP_RAM_BYTES));
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
