import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import {
  killProcessGroups,
  liveChildProcesses,
  spawnInProcessGroup,
} from "../../lib/runtime/process_groups.ts";

/** Whether `pid` is a live (not zombie) process. */
function alive(pid: number): boolean {
  if (!existsSync(`/proc/${pid}/stat`)) return false;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !/^\d+ \(.*\) [ZX] /.test(stat);
  } catch {
    return false;
  }
}

test("killProcessGroups kills a child and everything it started, even when it ignores SIGTERM", async () => {
  // The child ignores TERM and starts a grandchild, then waits: like a hung iptables-restore wrapper.
  const child = spawnInProcessGroup("/bin/sh", ["-c", "trap '' TERM; sleep 60 & echo $!; wait"]);
  const grandchild = await new Promise<number>((resolve) =>
    child.stdout.once("data", (b: Buffer) => resolve(Number(b.toString().trim())))
  );
  assert.ok(alive(child.pid!) && alive(grandchild));
  const pgid = Number(readFileSync(`/proc/${grandchild}/stat`, "utf8").split(") ")[1].split(" ")[2]);
  assert.equal(pgid, child.pid, "the child leads its own process group");
  assert.equal(liveChildProcesses(), 1);
  const closed = new Promise((r) => child.once("close", r));
  assert.equal(killProcessGroups(), 1);
  await closed;
  for (let i = 0; i < 50 && alive(grandchild); i++) await new Promise((r) => setTimeout(r, 20));
  assert.equal(alive(grandchild), false, "the grandchild must not be left as an orphan");
  assert.equal(liveChildProcesses(), 0);
});
