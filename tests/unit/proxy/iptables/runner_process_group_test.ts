import { test } from "node:test";
import assert from "node:assert/strict";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createIptablesRunner, RestoreError } from "../../../../lib/proxy/iptables/runner.ts";
import { killProcessGroups } from "../../../../lib/runtime/process_groups.ts";

function running(pid: number): boolean {
  try {
    return !/^\d+ \(.*\) [ZX] /s.test(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return false;
  }
}

/**
 * A fake iptables whose restore never returns: it ignores SIGTERM and waits on a grandchild that holds
 * its stdout open, so only killing the whole process group ends it.
 */
async function hangingIptables(dir: string): Promise<string> {
  const bin = join(dir, "fake-iptables");
  await writeFile(
    bin,
    `#!/bin/sh
case "$1" in --version) echo "iptables v1.8.9 (nf_tables)"; exit 0;; esac
trap '' TERM INT HUP
sleep 1000 &
echo "$$ $!" > ${dir}/pids
wait
`,
  );
  await chmod(bin, 0o755);
  return bin;
}

async function pidsOf(dir: string): Promise<number[]> {
  for (let i = 0; i < 100; i++) {
    const t = await readFile(join(dir, "pids"), "utf8").catch(() => "");
    if (/^\d+ \d+\n$/.test(t)) return t.trim().split(" ").map(Number);
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error("the fake restore did not start");
}

async function gone(pids: number[]): Promise<boolean> {
  for (let i = 0; i < 100 && pids.some(running); i++) await new Promise((r) => setTimeout(r, 20));
  return !pids.some(running);
}

test("a restore that outlives its timeout is killed with everything it started", async () => {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-runner-"));
  try {
    const bin = await hangingIptables(dir);
    const runner = await createIptablesRunner({
      family: "IPv4",
      binaries: { iptables: bin, save: bin, restore: bin },
      timeoutMs: 300,
    });
    const restore = runner.restore("*nat\nCOMMIT\n");
    const pids = await pidsOf(dir);
    await assert.rejects(
      restore,
      (e: Error) => e instanceof RestoreError && /killed after 300 ms/.test(e.message),
    );
    assert.ok(await gone(pids), `left running: ${pids.filter(running)}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("killProcessGroups (the agent's shutdown) ends an in-flight restore and its children", async () => {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-runner-"));
  try {
    const bin = await hangingIptables(dir);
    const runner = await createIptablesRunner({
      family: "IPv4",
      binaries: { iptables: bin, save: bin, restore: bin },
      timeoutMs: 0,
    });
    const restore = runner.restore("*nat\nCOMMIT\n");
    const pids = await pidsOf(dir);
    assert.equal(killProcessGroups(), 1);
    await assert.rejects(restore, /killed by SIGKILL/);
    assert.ok(await gone(pids), `left running: ${pids.filter(running)}`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
