import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  openFilesTarget,
  raiseOpenFilesLimit,
  USERSPACE_OPEN_FILES_LIMIT,
} from "../../../../lib/proxy/userspace/open_files_limit.ts";
import type { OpenFilesLimit, RLimit } from "../../../../lib/runtime/rlimit.ts";

/** A limit that accepts a hard limit up to `maxHard` (what the process may raise it to). */
function fakeLimit(start: RLimit, maxHard: number) {
  let now = start;
  const sets: RLimit[] = [];
  const limit: OpenFilesLimit = {
    get: () => now,
    set(l) {
      sets.push(l);
      if (l.hard > Math.max(maxHard, now.hard) || l.soft > l.hard) return "EPERM";
      now = l;
      return null;
    },
  };
  return { limit, sets, now: () => now };
}

function warnings() {
  const lines: string[] = [];
  return { lines, log: { warn: (m: string) => lines.push(m) } };
}

describe("openFilesTarget", () => {
  it("raises both limits to 64000 and never lowers a higher one", () => {
    assert.equal(USERSPACE_OPEN_FILES_LIMIT, 64000);
    assert.deepEqual(openFilesTarget({ soft: 1024, hard: 4096 }, 64000), { soft: 64000, hard: 64000 });
    assert.deepEqual(openFilesTarget({ soft: 1024, hard: 1048576 }, 64000), { soft: 64000, hard: 1048576 });
    assert.deepEqual(openFilesTarget({ soft: 100000, hard: 100000 }, 64000), null);
    assert.deepEqual(openFilesTarget({ soft: Infinity, hard: Infinity }, 64000), null);
  });
});

describe("raiseOpenFilesLimit", () => {
  it("sets 64000:64000 when allowed, without a warning", () => {
    const f = fakeLimit({ soft: 1024, hard: 4096 }, Infinity);
    const w = warnings();
    assert.deepEqual(raiseOpenFilesLimit(f.limit, w.log), { soft: 64000, hard: 64000 });
    assert.deepEqual(f.now(), { soft: 64000, hard: 64000 });
    assert.deepEqual(w.lines, []);
  });

  it("leaves a higher limit alone (no set at all)", () => {
    const f = fakeLimit({ soft: 1048576, hard: 1048576 }, Infinity);
    const w = warnings();
    assert.deepEqual(raiseOpenFilesLimit(f.limit, w.log), { soft: 1048576, hard: 1048576 });
    assert.deepEqual(f.sets, []);
    assert.deepEqual(w.lines, []);
  });

  it("keeps a higher hard limit while raising the soft one", () => {
    const f = fakeLimit({ soft: 1024, hard: 1048576 }, 1048576);
    assert.deepEqual(raiseOpenFilesLimit(f.limit, warnings().log), { soft: 64000, hard: 1048576 });
  });

  it("without permission to raise the hard limit: soft up to hard, one warning naming the limit", () => {
    const f = fakeLimit({ soft: 1024, hard: 20000 }, 20000);
    const w = warnings();
    assert.deepEqual(raiseOpenFilesLimit(f.limit, w.log), { soft: 20000, hard: 20000 });
    assert.deepEqual(f.now(), { soft: 20000, hard: 20000 });
    assert.deepEqual(w.lines, [
      "failed to set open file handler limit to 64000: setrlimit: EPERM; open files limit is 20000 (hard 20000)",
    ]);
  });

  it("without FFI: one warning, nothing else", () => {
    const w = warnings();
    assert.equal(raiseOpenFilesLimit(null, w.log), null);
    assert.equal(w.lines.length, 1);
    assert.match(
      w.lines[0],
      /^failed to set open file handler limit to 64000: this runtime cannot call setrlimit/,
    );
  });
});
