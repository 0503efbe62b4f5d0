/**
 * A read-only /proc/sys, for real: a tree of sysctl files behind a read-only bind mount (what a container
 * runtime gives an unprivileged pod). Setup must warn about each setting it cannot write, and not throw.
 * Needs root for the mount; skipped otherwise.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import process from "node:process";
import { promisify } from "node:util";
import {
  applyConntrackSettings,
  applyOOMScoreAdj,
  ensureRouteLocalnet,
  SYSCTL,
} from "../../lib/host/conntrack_setup.ts";
import { ProcSysctl } from "../../lib/host/sysctl.ts";

const run = promisify(execFile);
const skip = process.getuid?.() !== 0 ? "needs root to create a read-only bind mount" : false;
if (skip) console.warn(`read-only sysctl e2e skipped: ${skip}`);

describe("setup on a read-only /proc/sys", { skip }, () => {
  let root = "";
  let mounted = false;

  before(async () => {
    root = await mkdtemp(join(tmpdir(), "edgeproxy-rosys-"));
    const files: Record<string, string> = {
      [SYSCTL.conntrackMax]: "65536",
      [SYSCTL.tcpTimeoutEstablished]: "432000",
      [SYSCTL.tcpTimeoutCloseWait]: "60",
      [SYSCTL.routeLocalnet]: "0",
      "hashsize": "16384",
      "oom_score_adj": "0",
    };
    for (const [name, value] of Object.entries(files)) {
      await mkdir(dirname(join(root, name)), { recursive: true });
      await writeFile(join(root, name), value + "\n");
    }
    await run("mount", ["--bind", root, root]);
    mounted = true;
    await run("mount", ["-o", "remount,bind,ro", root]);
  });

  after(async () => {
    if (mounted) await run("umount", [root]);
    await rm(root, { recursive: true, force: true });
  });

  it("warns with EROFS for each setting, keeps the values, and does not throw", async () => {
    const sysctl = new ProcSysctl(root);
    const report = await applyConntrackSettings(
      {
        maxPerCore: 32768,
        min: 131072,
        tcpEstablishedTimeout: 86_400_000,
        tcpCloseWaitTimeout: 3_600_000,
        tcpBeLiberal: false,
        udpTimeout: 0,
        udpStreamTimeout: 0,
      },
      { sysctl, cpuCount: 2, hashsizePath: join(root, "hashsize") },
    );
    assert.deepEqual(report.changed, []);
    assert.equal(report.warnings.length, 3);
    for (const w of report.warnings) assert.match(w, /EROFS/);
    assert.equal(await sysctl.get(SYSCTL.conntrackMax), "65536");

    const localnet = await ensureRouteLocalnet(sysctl);
    assert.match(localnet.warnings[0], /route_localnet to 1: NodePorts on localhost will not work: .*EROFS/);

    const oom = await applyOOMScoreAdj(-999, join(root, "oom_score_adj"));
    assert.match(oom.warnings[0], /cannot write -999 .*read-only file system/i);
    assert.equal((await readFile(join(root, "oom_score_adj"), "utf8")).trim(), "0");
  });
});
