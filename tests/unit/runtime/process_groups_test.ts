import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import {
  killProcessGroups,
  liveChildProcesses,
  runInProcessGroup,
  SpawnError,
  spawnInProcessGroup,
} from "../../../lib/runtime/process_groups.ts";

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

test("runInProcessGroup feeds stdin in chunks, streams lines, and describes every ending one way", async () => {
  const lines: string[] = [];
  const cat = await runInProcessGroup(["/bin/sh", "-c", "cat; echo oops >&2"], {
    stdin: ["a\nb", "\nc"],
    onStdoutLine: (l) => lines.push(l),
  });
  assert.deepEqual(lines, ["a", "b", "c"]);
  assert.equal(cat.stdoutLines, 3);
  assert.equal(cat.stderr, "oops\n");
  assert.equal(cat.exit, "exit status 0");
  const fail = await runInProcessGroup(["/bin/sh", "-c", "exit 3"]);
  assert.equal(fail.exit, "exit status 3");
  const slow = await runInProcessGroup(["/bin/sh", "-c", "sleep 5"], { timeoutMs: 100 });
  assert.equal(slow.killed, "timeout");
  assert.equal(slow.exit, "timed out after 100 ms (process group killed)");
  const big = await runInProcessGroup(["/bin/sh", "-c", "head -c 100000 /dev/zero"], {
    maxStdoutBytes: 1000,
  });
  assert.equal(big.exit, "output larger than 1000 bytes");
  const c = new AbortController();
  const aborted = runInProcessGroup(["/bin/sh", "-c", "sleep 5"], { signal: c.signal });
  setTimeout(() => c.abort(), 50);
  assert.equal((await aborted).exit, "aborted");
  await assert.rejects(
    runInProcessGroup(["/nonexistent/cmd", "x"]),
    (e: unknown) =>
      e instanceof SpawnError && e.code === "ENOENT" && /\/nonexistent\/cmd x: cannot run/.test(e.message),
  );
  assert.equal(liveChildProcesses(), 0);
});

test("killProcessGroups also ends a runInProcessGroup command (Bun.spawn's under Bun) and its children", async () => {
  let grandchild = 0;
  const started = new Promise<void>((resolve) => {
    const run = runInProcessGroup(["/bin/sh", "-c", "sleep 60 & echo $!; wait"], {
      onStdoutLine: (l) => {
        grandchild = Number(l);
        resolve();
      },
    });
    void run.then((r) => results.push(r.exit));
  });
  const results: string[] = [];
  await started;
  assert.ok(alive(grandchild));
  assert.equal(liveChildProcesses(), 1);
  assert.equal(killProcessGroups(), 1);
  for (let i = 0; i < 100 && (results.length === 0 || alive(grandchild)); i++) {
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.deepEqual(results, ["killed by SIGKILL"]);
  assert.equal(alive(grandchild), false, "the grandchild must not be left as an orphan");
  assert.equal(liveChildProcesses(), 0);
});

test("runInProcessGroup with stdinByPath: a command that opens /dev/stdin by name reads the input", async () => {
  const input = "line 1\nline 2\n";
  const r = await runInProcessGroup(["sh", "-c", "cat /dev/stdin"], { stdin: input, stdinByPath: true });
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout.toString("utf8"), input);
});
