import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { openFilesLimit } from "../../../lib/runtime/rlimit.ts";

/** "Max open files" of /proc/self/limits: the kernel's view, not the adapter's. */
function procLimits(): { soft: number; hard: number } {
  const line = readFileSync("/proc/self/limits", "utf8").split("\n").find((l) =>
    l.startsWith("Max open files")
  )!;
  const [soft, hard] = line.split(/\s{2,}/).slice(1, 3).map((
    v,
  ) => (v === "unlimited" ? Infinity : Number(v)));
  return { soft, hard };
}

describe("openFilesLimit (libc through the runtime's FFI)", () => {
  it("reads RLIMIT_NOFILE as the kernel reports it and sets the soft limit", async () => {
    const limit = await openFilesLimit();
    assert.ok(limit, "Bun and Deno both have an FFI");
    const start = limit.get();
    assert.deepEqual(start, procLimits());
    try {
      // Lowering the soft limit is always allowed; the hard limit is never lowered here (irreversible).
      assert.equal(limit.set({ soft: 512, hard: start.hard }), null);
      assert.deepEqual(procLimits(), { soft: 512, hard: start.hard });
      // A soft limit above the hard one is EINVAL.
      if (start.hard !== Infinity) {
        assert.equal(limit.set({ soft: start.hard + 1, hard: start.hard }), "EINVAL");
      }
    } finally {
      assert.equal(limit.set(start), null);
    }
    assert.deepEqual(procLimits(), start);
  });
});
