import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readlinkSync } from "node:fs";
import { executableMappings, pageOutExecutable } from "../../../lib/runtime/code_pages.ts";

const MAPS = [
  "00200000-01a39000 r--p 00000000 fe:00 5314062                            /usr/bin/edgeproxy",
  "01a40000-0684a000 r-xp 01838000 fe:00 5314062                            /usr/bin/edgeproxy",
  "0684a000-0685f000 rw-p 06641000 fe:00 5314062                            /usr/bin/edgeproxy",
  "0685f000-06867000 r--p 06656000 fe:00 5314062                            /usr/bin/edgeproxy",
  "07087000-07ac5000 rw-p 00000000 00:00 0                                  [heap]",
  "7f0a1c000000-7f0a1c021000 rw-p 00000000 00:00 0 ",
  "7f0a20a00000-7f0a20a28000 r--p 00000000 fe:00 1316                       /usr/lib/x86_64-linux-gnu/libc.so.6",
  "7f0a20c00000-7f0a20c01000 r--p 00000000 fe:00 5314063                    /usr/bin/edgeproxy-other",
  "",
].join("\n");

describe("executableMappings", () => {
  it("keeps the executable's read-only mappings, in address order, and nothing else", () => {
    assert.deepEqual(executableMappings(MAPS, "/usr/bin/edgeproxy"), [
      { start: 0x200000, length: 0x1a39000 - 0x200000 },
      { start: 0x1a40000, length: 0x684a000 - 0x1a40000 },
      { start: 0x685f000, length: 0x6867000 - 0x685f000 },
    ]);
  });

  it("matches a replaced binary by the name the kernel shows", () => {
    const deleted = MAPS.replaceAll("/usr/bin/edgeproxy\n", "/usr/bin/edgeproxy (deleted)\n");
    assert.equal(executableMappings(deleted, "/usr/bin/edgeproxy (deleted)").length, 3);
    assert.equal(executableMappings(deleted, "/usr/bin/edgeproxy").length, 0);
  });

  it("reads this process's own maps: the running executable is mapped", () => {
    const own = executableMappings(readFileSync("/proc/self/maps", "utf8"), readlinkSync("/proc/self/exe"));
    assert.ok(own.length > 0);
    assert.ok(own.every((r) => r.length > 0 && r.start % 4096 === 0));
  });
});

describe("pageOutExecutable", () => {
  const isBun = (globalThis as { Bun?: unknown }).Bun !== undefined;

  it(
    "under Bun advises every read-only mapping of the executable without an error",
    { skip: !isBun },
    async () => {
      const r = await pageOutExecutable();
      assert.ok(r, "bun:ffi and glibc are there");
      assert.equal(r.error, undefined);
      const expected = executableMappings(
        readFileSync("/proc/self/maps", "utf8"),
        readlinkSync("/proc/self/exe"),
      )
        .reduce((n, m) => n + m.length, 0);
      assert.equal(r.advisedBytes, expected);
      // Other test processes may map the same runtime binary (their pages stay), so no drop is asserted here;
      // tests/e2e/agent_code_pages_test.ts measures it on a private copy of the agent.
      assert.ok(r.rssFileKiBBefore > 0);
    },
  );

  it("elsewhere does nothing and says so with null", { skip: isBun }, async () => {
    assert.equal(await pageOutExecutable(), null);
  });
});
