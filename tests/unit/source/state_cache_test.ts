import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import {
  chmod,
  chown,
  lstat,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rm,
  stat,
  symlink,
  writeFile,
} from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import {
  decodeState,
  encodeState,
  loadStateCache,
  readRegularFile,
  STATE_FILE,
  writeStateCache,
} from "../../../lib/source/state_cache.ts";
import type { StateSnapshot } from "../../../lib/source/state_store.ts";

const state: StateSnapshot = {
  services: [{
    metadata: { namespace: "ns1", name: "svc1", resourceVersion: "5" },
    spec: { clusterIP: "172.30.0.41" },
  }],
  endpointSlices: [{ metadata: { namespace: "ns1", name: "svc1-abc" }, addressType: "IPv4", endpoints: [] }],
  node: { metadata: { name: "node-a" } },
};

test("state cache round-trips and reports its age", () => {
  const text = encodeState(state, "node-a", Date.parse("2026-01-01T00:00:00Z"));
  const r = decodeState(text, "node-a", Date.parse("2026-01-01T00:01:00Z"));
  assert.ok(r.ok);
  assert.deepEqual(r.state, state);
  assert.equal(r.ageMs, 60_000);
});

test("state cache encoding is deterministic", () => {
  assert.equal(encodeState(state, "n", 0), encodeState(structuredClone(state), "n", 0));
});

test("a corrupt, truncated, foreign or other-node cache is refused with a reason", () => {
  const text = encodeState(state, "node-a", 0);
  const cases: Array<[string, string, RegExp]> = [
    ["other node", text, /belongs to node "node-a", this node is "node-b"/],
    ["truncated", text.slice(0, text.length - 20), /truncated/],
    ["no header", "garbage", /no header line/],
    ["header not JSON", "{oops\n{}", /header is not JSON/],
    ["foreign format", text.replace('"edgeproxy-state"', '"kube-state"'), /format "kube-state"/],
    ["foreign version", text.replace('"version":1', '"version":99'), /version 99/],
    ["bit flip", text.replace("172.30.0.41", "172.30.0.42"), /checksum mismatch/],
  ];
  for (const [name, t, re] of cases) {
    const r = decodeState(t, name === "other node" ? "node-b" : "node-a", 0);
    assert.equal(r.ok, false, name);
    if (!r.ok) assert.match(r.reason, re, name);
  }
});

test("writeStateCache writes atomically with mode 0600 and loadStateCache reads it back", async () => {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-cache-"));
  try {
    const missing = await loadStateCache(dir, "node-a", 0);
    assert.equal(missing.ok, false);
    if (!missing.ok) assert.equal(missing.missing, true);
    await writeStateCache(join(dir, "sub"), encodeState(state, "node-a", 1000));
    const st = await stat(join(dir, "sub", STATE_FILE));
    assert.equal(st.mode & 0o777, 0o600);
    const r = await loadStateCache(join(dir, "sub"), "node-a", 2000);
    assert.ok(r.ok);
    if (r.ok) assert.deepEqual(r.state, state);
    // A corrupted file on disk is refused, and names the file.
    const p = join(dir, "sub", STATE_FILE);
    await writeFile(p, (await readFile(p, "utf8")).replace("svc1", "svc9"));
    const bad = await loadStateCache(join(dir, "sub"), "node-a", 2000);
    assert.equal(bad.ok, false);
    if (!bad.ok) assert.match(bad.reason, new RegExp(`${STATE_FILE}: checksum mismatch`));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

const isRoot = typeof process.getuid === "function" && process.getuid() === 0;

/** Whether this process may mount (root with CAP_SYS_ADMIN, e.g. not in an unprivileged container). */
function canMount(): boolean {
  if (!isRoot) return false;
  const dir = mkdtempSync(join(tmpdir(), "edgeproxy-mount-probe-"));
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=4k", "tmpfs", dir], { stdio: "pipe" });
    execFileSync("umount", [dir], { stdio: "pipe" });
    return true;
  } catch {
    return false;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
const mountable = canMount();

/** Creates a /dev/zero device node (endless) at `path`; false where that is not permitted. */
function mknodZero(path: string): boolean {
  try {
    execFileSync("mknod", ["-m", "0600", path, "c", "1", "5"], { stdio: "pipe" });
    return true;
  } catch {
    return false;
  }
}

async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "edgeproxy-cache-"));
  try {
    await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

test("writeStateCache never follows a symlink planted at a temp name or at state.json", async () => {
  await withDir(async (dir) => {
    const victim = join(dir, "victim");
    await writeFile(victim, "root-owned content\n", { mode: 0o644 });
    const cache = join(dir, "cache");
    await mkdir(cache, { mode: 0o700 });
    // The name the writer used to pick (pid-based) and a few guesses; state.json itself too.
    for (const name of [`.${STATE_FILE}.${process.pid}.tmp`, `.${STATE_FILE}.tmp`, STATE_FILE]) {
      await symlink(victim, join(cache, name));
    }
    await writeStateCache(cache, encodeState(state, "node-a", 1000));
    assert.equal(await readFile(victim, "utf8"), "root-owned content\n");
    const st = await lstat(join(cache, STATE_FILE));
    assert.ok(st.isFile(), "state.json must be a regular file, not the planted symlink");
    assert.equal(st.mode & 0o777, 0o600);
    const r = await loadStateCache(cache, "node-a", 2000);
    assert.ok(r.ok, r.ok ? "" : r.reason);
    // Only the planted links the writer never touched remain besides state.json: no temp file is left.
    assert.deepEqual((await readdir(cache)).sort(), [
      `.${STATE_FILE}.${process.pid}.tmp`,
      `.${STATE_FILE}.tmp`,
      STATE_FILE,
    ]);
  });
});

test("a group/world-writable or foreign-owned state dir is refused for writing and reading, naming dir and mode", async () => {
  await withDir(async (dir) => {
    await writeStateCache(dir, encodeState(state, "node-a", 1000));
    const before = await readFile(join(dir, STATE_FILE), "utf8");
    for (const mode of [0o777, 0o770, 0o1777]) {
      await chmod(dir, mode);
      const octal = mode.toString(8).padStart(4, "0");
      await assert.rejects(
        writeStateCache(dir, encodeState({ ...state, services: [] }, "node-a", 2000)),
        (e: Error) => e.message.includes(dir) && e.message.includes(octal) && /writable/.test(e.message),
      );
      const r = await loadStateCache(dir, "node-a", 2000);
      assert.equal(r.ok, false);
      if (!r.ok) {
        assert.ok(r.reason.includes(dir) && r.reason.includes(octal), r.reason);
        assert.equal(r.missing, false);
      }
    }
    await chmod(dir, 0o700);
    assert.equal(await readFile(join(dir, STATE_FILE), "utf8"), before);
    if (isRoot) {
      await chown(dir, 65534, 65534);
      await assert.rejects(
        writeStateCache(dir, encodeState(state, "node-a", 2000)),
        /owned by uid 65534, not by this agent's uid 0/,
      );
      const r = await loadStateCache(dir, "node-a", 2000);
      assert.equal(r.ok, false);
      if (!r.ok) assert.match(r.reason, /mode 0700\) is owned by uid 65534/);
    }
  });
});

test("only a regular state.json is read: a FIFO, a device or a symlink is refused without blocking", async () => {
  await withDir(async (dir) => {
    const path = join(dir, STATE_FILE);
    execFileSync("mkfifo", [path]);
    const t0 = Date.now();
    const fifo = await loadStateCache(dir, "node-a", 0);
    assert.ok(Date.now() - t0 < 2000);
    assert.equal(fifo.ok, false);
    if (!fifo.ok) assert.match(fifo.reason, /state\.json: is a FIFO; only a regular file is read/);
    await rm(path);

    await writeFile(join(dir, "real"), encodeState(state, "node-a", 0));
    await symlink(join(dir, "real"), path);
    const link = await loadStateCache(dir, "node-a", 0);
    assert.equal(link.ok, false);
    if (!link.ok) assert.match(link.reason, /is a symbolic link/);
    await rm(path);

    if (isRoot && mknodZero(path)) {
      const dev = await loadStateCache(dir, "node-a", 0);
      assert.equal(dev.ok, false);
      if (!dev.ok) assert.match(dev.reason, /is a device/);
    }
  });
});

test("the size cap holds for files whose stat size is 0", async () => {
  const proc = `/proc/${process.pid}/maps`; // this process: alive while the bind mount is
  assert.equal((await stat(proc)).size, 0);
  await assert.rejects(readRegularFile(proc, 64), /holds more than the 64 byte limit/);
  assert.ok((await readRegularFile(proc, 1 << 20)).length > 64);
  if (!mountable) return;
  // The same through loadStateCache, with a /proc file bind-mounted as state.json.
  await withDir(async (dir) => {
    const path = join(dir, STATE_FILE);
    await writeFile(path, "");
    execFileSync("mount", ["--bind", proc, path]);
    try {
      const r = await loadStateCache(dir, "node-a", 0, { maxBytes: 64 });
      assert.equal(r.ok, false);
      if (!r.ok) assert.match(r.reason, /holds more than the 64 byte limit/);
    } finally {
      execFileSync("umount", [path]);
    }
  });
});

test("a failed write (ENOSPC) removes its temp file and keeps the old cache", {
  skip: !mountable && "needs to mount a tmpfs (root)",
}, async () => {
  await withDir(async (dir) => {
    const mnt = join(dir, "small");
    await mkdir(mnt, { mode: 0o700 });
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", mnt]);
    try {
      const good = encodeState(state, "node-a", 1000);
      await writeStateCache(mnt, good);
      const big: StateSnapshot = {
        ...state,
        services: Array.from({ length: 2000 }, (_, i) => ({
          metadata: { namespace: "ns1", name: `svc-${i}`, resourceVersion: String(i) },
          spec: { clusterIP: "172.30.0.41" },
        })),
      };
      await assert.rejects(writeStateCache(mnt, encodeState(big, "node-a", 2000)), /ENOSPC|no space/i);
      assert.deepEqual(await readdir(mnt), [STATE_FILE]);
      assert.equal(await readFile(join(mnt, STATE_FILE), "utf8"), good);
    } finally {
      execFileSync("umount", [mnt]);
    }
  });
});
