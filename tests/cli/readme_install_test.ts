/**
 * The README's "Installing on a systemd node" instructions, run as written, produce an install whose unit
 * finds everything it names.
 *
 * How the install block runs here without touching the machine:
 * - every absolute path in it (the destinations: /usr/bin, /etc/..., /var/lib/...) is prefixed with
 *   "$DESTDIR", a scratch directory standing for the node's root, which starts with only the directories
 *   every Debian system with systemd has (usr/bin, usr/local/bin, etc/default, etc/systemd/system,
 *   var/lib); relative paths (dist/edgeproxy, systemd/...) are left alone;
 * - it runs in a scratch "clone" directory whose dist/ and systemd/ are links to this checkout's, with a
 *   placeholder `kubeconfig` file as the operator would have it;
 * - `npm`, `systemctl` and `journalctl` are stubs first on PATH that record their arguments: the build has
 *   already been done (dist/edgeproxy, by `bash compile.sh` before the CLI tests), and there is no
 *   systemd to talk to.
 * Then every EnvironmentFile / ExecStart / ReadWritePaths path of the installed unit must exist in the
 * scratch root (or be created by the unit itself: ExecStartPre's touch, StateDirectory=), and
 * `systemd-analyze verify --root=<scratch>` must accept the installed unit.
 * Skipped, saying so, when dist/edgeproxy is not built or systemd-analyze is missing.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { sectionShellBlocks } from "../support/markdown.ts";
import { run } from "../support/netns.ts";
import {
  haveCommand,
  prepareVerifyRoot,
  unitCommands,
  unitPath,
  unitValues,
  verifyInRoot,
} from "../support/systemd_root.ts";

const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));
const BINARY = join(ROOT, "dist", "edgeproxy");
const README = readFileSync(join(ROOT, "README.md"), "utf8");
const SECTION = "## Installing on a systemd node";

const skip = !existsSync(BINARY)
  ? `no compiled binary at ${BINARY} (run "bash compile.sh" first)`
  : !haveCommand("systemd-analyze")
  ? "systemd-analyze is not installed"
  : false;
if (skip) console.log(`SKIP README install: ${skip}`);

/** The block as a script for the scratch root: comments dropped, absolute paths under "$DESTDIR". */
function toDestdirScript(block: string): string {
  return block.split("\n")
    .map((l) => l.replace(/(^|\s)#.*$/, "").trimEnd())
    .filter((l) => l !== "")
    .map((l) => l.replace(/(^|\s)\//g, '$1"$DESTDIR"/'))
    .join("\n");
}

describe("README install on a systemd node", { skip }, () => {
  const work = mkdtempSync(join(tmpdir(), "edgeproxy-readme-"));
  const dest = join(work, "root");
  const clone = join(work, "clone");
  const stubs = join(work, "stubs");
  const calls = join(work, "calls.log");
  after(() => rmSync(work, { recursive: true, force: true }));

  let unit = "";
  let unitInRoot = "";
  let script = "";

  before(async () => {
    for (const d of [clone, stubs]) mkdirSync(d);
    for (const d of ["usr/bin", "usr/local/bin", "etc/default", "etc/systemd/system", "var/lib"]) {
      mkdirSync(join(dest, d), { recursive: true });
    }
    symlinkSync(join(ROOT, "dist"), join(clone, "dist"));
    symlinkSync(join(ROOT, "systemd"), join(clone, "systemd"));
    writeFileSync(join(clone, "kubeconfig"), "apiVersion: v1\nkind: Config\n");
    for (const name of ["npm", "systemctl", "journalctl"]) {
      writeFileSync(join(stubs, name), `#!/bin/sh\necho "${name} $*" >> "${calls}"\n`, { mode: 0o755 });
    }
    const blocks = sectionShellBlocks(README, SECTION);
    assert.ok(blocks.length >= 1, `README.md has no sh block under "${SECTION}"`);
    script = blocks.map(toDestdirScript).join("\n");
    const r = await run([
      "env",
      `PATH=${stubs}:${process.env.PATH ?? "/usr/bin:/bin"}`,
      `DESTDIR=${dest}`,
      "bash",
      "-euo",
      "pipefail",
      "-c",
      `cd "${clone}"\n${script}`,
    ], { timeoutMs: 120_000 });
    assert.equal(r.code, 0, `README install block failed:\n${script}\n${r.stderr}`);
    const units = ["etc/systemd/system", "lib/systemd/system"]
      .flatMap((d) => existsSync(join(dest, d)) ? readdirSync(join(dest, d)).map((f) => join(d, f)) : [])
      .filter((f) => f.endsWith("edgeproxy.service"));
    assert.equal(units.length, 1, `the README should install one edgeproxy.service, found: ${units}`);
    unitInRoot = units[0];
    unit = readFileSync(join(dest, unitInRoot), "utf8");
  });

  it("installs the repository's unit and enables it through systemctl", () => {
    assert.equal(unit, readFileSync(join(ROOT, "systemd/edgeproxy.service"), "utf8"));
    const log = readFileSync(calls, "utf8").split("\n");
    assert.ok(log.includes("systemctl daemon-reload"), log.join("\n"));
    assert.ok(log.includes("systemctl enable --now edgeproxy"), log.join("\n"));
  });

  it("puts the EnvironmentFile where the unit reads it", () => {
    const envFiles = unitValues(unit, "EnvironmentFile").map(unitPath);
    assert.ok(envFiles.length >= 1, "the unit has no EnvironmentFile=");
    for (const p of envFiles) {
      assert.ok(existsSync(join(dest, p)), `unit reads EnvironmentFile ${p}, the README installs none there`);
      assert.equal(
        readFileSync(join(dest, p), "utf8"),
        readFileSync(join(ROOT, "systemd/edgeproxy.env"), "utf8"),
      );
    }
  });

  it("puts the binary where ExecStart runs it", () => {
    const [exe] = unitCommands(unit, "ExecStart");
    const installed = join(dest, exe);
    assert.ok(existsSync(installed), `ExecStart runs ${exe}, the README installs no binary there`);
    assert.equal(statSync(installed).mode & 0o777, 0o755);
    assert.equal(statSync(installed).size, statSync(BINARY).size);
  });

  it("leaves every ReadWritePaths path existing, or created by the unit itself", () => {
    const touched = unitValues(unit, "ExecStartPre")
      .map((v) => unitPath(v).split(/\s+/))
      .filter((argv) => argv[0].endsWith("/touch"))
      .flatMap((argv) => argv.slice(1));
    const stateDirs = unitValues(unit, "StateDirectory").flatMap((v) => v.split(/\s+/))
      .map((d) => `/var/lib/${d}`);
    const paths = unitValues(unit, "ReadWritePaths").flatMap((v) => v.split(/\s+/)).map(unitPath);
    assert.ok(paths.length >= 1);
    for (const p of paths) {
      const ok = existsSync(join(dest, p)) || touched.includes(p) || stateDirs.includes(p);
      assert.ok(ok, `ReadWritePaths ${p}: neither installed by the README nor created by the unit`);
    }
  });

  it("leaves the files named in the env file's active EDGEPROXY_ARGS where they are named", () => {
    const env = readFileSync(join(ROOT, "systemd/edgeproxy.env"), "utf8");
    const args = unitValues(env, "EDGEPROXY_ARGS")[0].split(/\s+/);
    const files = args.map((a) => /^--(kubeconfig|state-dir)=(\/.*)$/.exec(a)).filter((m) => m !== null);
    assert.ok(files.length >= 1, `no --kubeconfig/--state-dir in ${args.join(" ")}`);
    for (const m of files) {
      assert.ok(existsSync(join(dest, m[2])), `--${m[1]}=${m[2]}: the README puts nothing there`);
    }
  });

  it("passes systemd-analyze verify in the scratch root", async () => {
    prepareVerifyRoot(dest, unitCommands(unit, "ExecStartPre"));
    const r = await verifyInRoot(dest, unitInRoot);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const about = (r.stdout + r.stderr).split("\n").filter((l) => l.includes("edgeproxy.service"));
    assert.deepEqual(about, []);
  });
});
