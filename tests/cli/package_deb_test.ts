/**
 * scripts/package-deb.sh: the .deb built from dist/edgeproxy has the expected files, modes, conffile and
 * control fields; `dpkg --root` installs and purges it in a scratch root (maintainer scripts run with
 * DPKG_ROOT, outside a chroot); the installed unit passes `systemd-analyze verify` there and keeps the
 * hardening score docs/systemd.md records; and the maintainer scripts, run as root in a private mount
 * namespace that fakes a running systemd (/run/systemd/system) and a scratch /var/lib, call systemctl for
 * a reload but never start the service.
 * Skipped, saying so, when dist/edgeproxy is not built or dpkg-deb / systemd-analyze is missing.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import pkg from "../../package.json" with { type: "json" };
import { run, runOk } from "../support/netns.ts";
import {
  haveCommand,
  offlineExposure,
  prepareVerifyRoot,
  unitCommands,
  verifyInRoot,
} from "../support/systemd_root.ts";

const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));
const BINARY = join(ROOT, "dist", "edgeproxy");
const UNIT_IN_DEB = "lib/systemd/system/edgeproxy.service";
const ENV_IN_DEB = "etc/edgeproxy/edgeproxy.env";

const missing = ["dpkg-deb", "dpkg", "systemd-analyze"].filter((c) => !haveCommand(c));
const skip = !existsSync(BINARY)
  ? `no compiled binary at ${BINARY} (run "bash compile.sh" first)`
  : missing.length > 0
  ? `not installed: ${missing.join(", ")}`
  : false;
if (skip) console.log(`SKIP package-deb: ${skip}`);
const isRoot = typeof process.getuid === "function" && process.getuid() === 0;

describe("scripts/package-deb.sh", { skip }, () => {
  const work = mkdtempSync(join(tmpdir(), "edgeproxy-deb-"));
  after(() => rmSync(work, { recursive: true, force: true }));
  let deb = "";
  let arch = "";

  before(async () => {
    arch = (await runOk(["dpkg", "--print-architecture"])).trim();
    const out = await runOk(["bash", join(ROOT, "scripts/package-deb.sh"), "--out", join(work, "out")], {
      timeoutMs: 300_000,
    });
    deb = out.trim().split("\n").at(-1) ?? "";
  });

  it("is named edgeproxy_<version>_<arch>.deb", () => {
    assert.equal(deb, join(work, "out", `edgeproxy_${pkg.version}_${arch}.deb`));
    assert.ok(existsSync(deb));
  });

  it("is what the README's Debian package section says it installs", async () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    const section = readme.slice(readme.indexOf("\n### As a Debian package\n")).split(/\n##+ /)[1] ?? "";
    assert.ok(section.includes(`./dist/edgeproxy_${pkg.version}_`), "README names another .deb file");
    const listing = await runOk(["dpkg-deb", "-c", deb]);
    for (
      const path of [
        "/usr/bin/edgeproxy",
        "/lib/systemd/system/edgeproxy.service",
        "/etc/edgeproxy/edgeproxy.env",
      ]
    ) {
      assert.ok(listing.includes(` .${path}\n`), `${path} not in the package`);
      assert.ok(section.includes(`\`${path}\``), `the README does not say the package installs ${path}`);
    }
  });

  it("holds exactly the binary, the unit, the env file and the docs, with their modes", async () => {
    const listing = await runOk(["dpkg-deb", "-c", deb]);
    const entries = new Map<string, string>();
    for (const line of listing.trim().split("\n")) {
      const f = line.split(/\s+/);
      entries.set(f.slice(5).join(" ").replace(/^\.\//, "/"), `${f[0]} ${f[1]}`);
    }
    const files = [...entries].filter(([, mode]) => !mode.startsWith("d")).map(([p, m]) => `${m} ${p}`);
    assert.deepEqual(files.sort(), [
      "-rw------- root/root /etc/edgeproxy/edgeproxy.env",
      "-rw-r--r-- root/root /lib/systemd/system/edgeproxy.service",
      "-rw-r--r-- root/root /usr/share/doc/edgeproxy/CHANGELOG.md.gz",
      "-rw-r--r-- root/root /usr/share/doc/edgeproxy/changelog.gz",
      "-rw-r--r-- root/root /usr/share/doc/edgeproxy/copyright",
      "-rwxr-xr-x root/root /usr/bin/edgeproxy",
    ]);
    assert.equal(entries.get("/etc/edgeproxy/"), "drwx------ root/root");
  });

  it("has the control fields, the conffile and maintainer scripts", async () => {
    const field = async (name: string) => (await runOk(["dpkg-deb", "-f", deb, name])).trim();
    assert.equal(await field("Package"), "edgeproxy");
    assert.equal(await field("Version"), pkg.version);
    assert.equal(await field("Architecture"), arch);
    assert.equal(await field("Depends"), "libc6 (>= 2.17), iptables");
    assert.ok(Number(await field("Installed-Size")) > statSync(BINARY).size / 1024);
    assert.equal(await runOk(["dpkg-deb", "-I", deb, "conffiles"]), "/etc/edgeproxy/edgeproxy.env\n");
    const info = await runOk(["dpkg-deb", "-I", deb]);
    for (const script of ["postinst", "prerm", "postrm"]) {
      assert.match(info, new RegExp(`\\*\\s+${script}\\s+#!/bin/sh`), `${script} missing or not executable`);
    }
  });

  it("takes the architecture from the binary's ELF header, and refuses musl builds and non-ELF files", async () => {
    /** A stand-in executable: an ELF64 header with `machine`, then `body`. */
    const fake = (name: string, machine: number, body = "") => {
      const header = Buffer.alloc(64);
      header.write("\x7fELF", 0, "latin1");
      header.writeUInt16LE(machine, 18);
      const file = join(work, name);
      writeFileSync(file, Buffer.concat([header, Buffer.from(body)]), { mode: 0o755 });
      return file;
    };
    const build = (binary: string) =>
      run(["bash", join(ROOT, "scripts/package-deb.sh"), "--binary", binary, "--out", join(work, "fakes")]);
    let r = await build(fake("arm64-bin", 183));
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.stdout.trim(), join(work, "fakes", `edgeproxy_${pkg.version}_arm64.deb`));
    assert.equal((await runOk(["dpkg-deb", "-f", r.stdout.trim(), "Architecture"])).trim(), "arm64");
    r = await build(fake("musl-bin", 62, "/lib/ld-musl-x86_64.so.1\0"));
    assert.equal(r.code, 1);
    assert.match(
      r.stderr,
      /^package-deb\.sh: --binary .*musl-bin: a musl build; Debian packages need the glibc build\n$/,
    );
    writeFileSync(join(work, "script-bin"), "#!/bin/sh\n", { mode: 0o755 });
    r = await build(join(work, "script-bin"));
    assert.equal(r.code, 1);
    assert.match(r.stderr, /script-bin: not an ELF executable/);
  });

  it(
    "installs into a scratch root with dpkg --root, runs postinst there, and purges cleanly",
    { skip: isRoot ? false : "needs root (dpkg --root)" },
    async () => {
      const root = join(work, "dpkgroot");
      for (const d of ["var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers"]) {
        mkdirSync(join(root, d), { recursive: true });
      }
      writeFileSync(join(root, "var/lib/dpkg/status"), "");
      const dpkg = (args: string[]) =>
        run(["dpkg", `--root=${root}`, "--force-script-chrootless", "--log=/dev/null", ...args], {
          timeoutMs: 300_000,
        });
      // iptables is not in the scratch root's package database: --force-depends.
      let r = await dpkg(["--force-depends", "-i", deb]);
      assert.equal(r.code, 0, r.stdout + r.stderr);
      assert.match((await dpkg(["-s", "edgeproxy"])).stdout, /^Status: install ok installed$/m);
      assert.equal(statSync(join(root, "var/lib/edgeproxy")).mode & 0o7777, 0o700, "postinst's state dir");
      assert.equal(statSync(join(root, "usr/bin/edgeproxy")).size, statSync(BINARY).size);
      assert.equal(
        readFileSync(join(root, UNIT_IN_DEB), "utf8"),
        readFileSync(join(ROOT, "systemd/edgeproxy.service"), "utf8"),
      );

      // The operator's edit of the conffile survives reinstalling the package.
      writeFileSync(join(root, ENV_IN_DEB), "EDGEPROXY_ARGS=--hostname-override=site-7\n");
      r = await dpkg(["--force-depends", "--force-confold", "-i", deb]);
      assert.equal(r.code, 0, r.stdout + r.stderr);
      assert.equal(
        readFileSync(join(root, ENV_IN_DEB), "utf8"),
        "EDGEPROXY_ARGS=--hostname-override=site-7\n",
      );

      // The installed unit passes verify in that root, and keeps its recorded hardening score.
      const unit = readFileSync(join(root, UNIT_IN_DEB), "utf8");
      const verifyRoot = join(work, "verifyroot");
      mkdirSync(verifyRoot);
      await runOk(["cp", "-a", `${root}/.`, `${verifyRoot}/`]);
      prepareVerifyRoot(verifyRoot, unitCommands(unit, "ExecStartPre"));
      const v = await verifyInRoot(verifyRoot, UNIT_IN_DEB);
      assert.equal(v.code, 0, v.stdout + v.stderr);
      assert.deepEqual((v.stdout + v.stderr).split("\n").filter((l) => l.includes("edgeproxy.service")), []);
      const exposure = await offlineExposure(join(root, UNIT_IN_DEB));
      const doc = readFileSync(join(ROOT, "docs/systemd.md"), "utf8");
      assert.ok(
        doc.includes(`exposure level ${exposure}`),
        `docs/systemd.md records another level than ${exposure}`,
      );

      r = await dpkg(["-P", "edgeproxy"]);
      assert.equal(r.code, 0, r.stdout + r.stderr);
      for (const p of ["usr/bin/edgeproxy", UNIT_IN_DEB, ENV_IN_DEB, "etc/edgeproxy", "var/lib/edgeproxy"]) {
        assert.ok(!existsSync(join(root, p)), `${p} is left after purge`);
      }
    },
  );

  it(
    "reloads systemd but never starts the service (scripts run under a faked running systemd)",
    { skip: isRoot ? false : "needs root (private mount namespace)" },
    async () => {
      const ctl = join(work, "control");
      const stubs = join(work, "stubs");
      const varlib = join(work, "varlib");
      const calls = join(work, "systemctl.log");
      for (const d of [stubs, varlib]) mkdirSync(d);
      await runOk(["dpkg-deb", "-e", deb, ctl]);
      writeFileSync(join(stubs, "systemctl"), `#!/bin/sh\necho "$*" >> "${calls}"\n`, { mode: 0o755 });
      // A private mount namespace: /run/systemd/system exists (systemd "running"), /var/lib is scratch.
      const steps = [
        `sh ${ctl}/postinst configure ''`,
        "echo ---",
        `sh ${ctl}/postinst configure 0.0.1`,
        "echo ---",
        `sh ${ctl}/prerm remove`,
        `sh ${ctl}/postrm remove`,
        "echo ---",
        `ls -ld /var/lib/edgeproxy >> ${calls}`,
        `sh ${ctl}/postrm purge`,
        "test ! -e /var/lib/edgeproxy",
      ].map((s) => (s.startsWith("echo") ? `${s} >> ${calls}` : s));
      const script = [
        "set -e",
        "mount --make-rprivate /",
        "mount -t tmpfs tmpfs /run",
        "mkdir -p /run/systemd/system",
        `mount --bind ${varlib} /var/lib`,
        `export PATH=${stubs}:$PATH`,
        ...steps,
      ].join("\n");
      const r = await run(["unshare", "-m", "sh", "-c", script], { timeoutMs: 60_000 });
      assert.equal(r.code, 0, r.stdout + r.stderr);
      const [install, upgrade, remove, purge] = readFileSync(calls, "utf8").split("---\n");
      assert.equal(install, "daemon-reload\n", "fresh install: reload only");
      assert.equal(
        upgrade,
        "daemon-reload\ntry-restart edgeproxy.service\n",
        "upgrade: restart only if running",
      );
      assert.equal(remove, "stop edgeproxy.service\n--no-reload disable edgeproxy.service\ndaemon-reload\n");
      assert.match(purge, /^drwx------ .* \/var\/lib\/edgeproxy\ndaemon-reload\n$/);
    },
  );
});
