/**
 * The musl build (`bash compile.sh --target linux-x64-musl`, for Alpine- and OpenWrt-style hosts) runs
 * under Debian's musl loader (/lib/ld-musl-x86_64.so.1, package `musl`) and prints what the glibc build
 * prints, for `--version` and for `--dry-run` on the example edge site.
 *
 * The build is made once, here (a few seconds; the first one downloads Bun's musl runtime from the npm
 * registry). Bun's musl runtime links libstdc++ and libgcc_s, which Alpine ships built for musl
 * (`apk add libstdc++ libgcc`) and Debian does not: the test lends it Debian's glibc-built copies plus
 * tests/support/glibc_compat_shim.c (compiled with musl-gcc, like Alpine's gcompat), on LD_LIBRARY_PATH.
 * The loader, libc and the program are musl's and the build's own.
 * Skipped, saying so, off x86_64 or without musl's loader, musl-gcc (package musl-tools) or dist/edgeproxy.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { arch, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import pkg from "../../package.json" with { type: "json" };
import { type CmdResult, run, runOk } from "../support/netns.ts";
import { haveCommand } from "../support/systemd_root.ts";

const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));
const GLIBC_BINARY = join(ROOT, "dist", "edgeproxy");
const MUSL_BINARY = join(ROOT, "dist", "edgeproxy-linux-x64-musl");
const MUSL_LOADER = "/lib/ld-musl-x86_64.so.1";
/** Debian's C++ runtime, lent to the musl build (see above). */
const LENT_LIBS = [
  ["/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/lib/x86_64-linux-gnu/libstdc++.so.6"],
  ["/lib/x86_64-linux-gnu/libgcc_s.so.1", "/usr/lib/x86_64-linux-gnu/libgcc_s.so.1"],
].map((candidates) => candidates.find((p) => existsSync(p)) ?? candidates[0]);

const DRY_RUN = [
  "--dry-run",
  "--manifests",
  "examples/edge-site",
  "--hostname-override",
  "edge-node-1",
  "--config",
  "examples/kube-proxy-config.yaml",
];

function skipReason(): string | false {
  if (arch() !== "x64") return `the musl test runs on x86_64 only (this is ${arch()})`;
  if (!existsSync(MUSL_LOADER)) return `no musl loader at ${MUSL_LOADER} (apt-get install musl)`;
  if (!haveCommand("musl-gcc")) return "no musl-gcc (apt-get install musl-tools)";
  if (!existsSync(GLIBC_BINARY)) return `no compiled binary at ${GLIBC_BINARY} (run "bash compile.sh" first)`;
  const absent = LENT_LIBS.filter((p) => !existsSync(p));
  if (absent.length > 0) return `not found: ${absent.join(", ")}`;
  return false;
}
const skip = skipReason();
if (skip) console.log(`SKIP musl build: ${skip}`);

/** The PT_INTERP string of an ELF64 little-endian executable. */
function elfInterpreter(file: string): string {
  const b = readFileSync(file).subarray(0, 1 << 16);
  assert.equal(b.toString("latin1", 0, 4), "\x7fELF", `${file} is not an ELF file`);
  const phoff = Number(b.readBigUInt64LE(32));
  const phentsize = b.readUInt16LE(54);
  const phnum = b.readUInt16LE(56);
  for (let i = 0; i < phnum; i++) {
    const ph = phoff + i * phentsize;
    if (b.readUInt32LE(ph) !== 3) continue; // PT_INTERP
    const off = Number(b.readBigUInt64LE(ph + 8));
    const size = Number(b.readBigUInt64LE(ph + 32));
    return b.toString("latin1", off, off + size).replace(/\0+$/, "");
  }
  return "";
}

describe("compile.sh --target linux-x64-musl", { skip }, () => {
  const work = mkdtempSync(join(tmpdir(), "edgeproxy-musl-"));
  const compat = join(work, "lib");
  after(() => rmSync(work, { recursive: true, force: true }));

  /** Runs in the repository root; `libs` puts the lent C++ runtime on LD_LIBRARY_PATH. */
  const exec = (binary: string, args: string[], libs: boolean): Promise<CmdResult> =>
    run([
      "env",
      "-u",
      "LD_LIBRARY_PATH",
      ...(libs ? [`LD_LIBRARY_PATH=${compat}`] : []),
      "sh",
      "-c",
      'cd "$1" && shift && exec "$@"',
      "sh",
      ROOT,
      binary,
      ...args,
    ], { timeoutMs: 60_000 });

  before(async () => {
    await runOk(["bash", join(ROOT, "compile.sh"), "--target", "linux-x64-musl"], { timeoutMs: 300_000 });
    await runOk(["mkdir", compat]);
    await runOk([
      "musl-gcc",
      "-shared",
      "-fPIC",
      "-O2",
      "-o",
      join(compat, "ld-linux-x86-64.so.2"),
      join(ROOT, "tests/support/glibc_compat_shim.c"),
    ]);
    for (const lib of LENT_LIBS) copyFileSync(lib, join(compat, lib.split("/").at(-1)!));
  });

  it("writes dist/edgeproxy-linux-x64-musl with a checksum file sha256sum accepts", async () => {
    const r = await run([
      "sh",
      "-c",
      'cd "$1" && sha256sum -c edgeproxy-linux-x64-musl.sha256',
      "sh",
      join(ROOT, "dist"),
    ]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.equal(r.stdout, "edgeproxy-linux-x64-musl: OK\n");
  });

  it("is a musl executable: its interpreter is musl's loader, and it needs a C++ runtime from the host", async () => {
    assert.equal(elfInterpreter(MUSL_BINARY), MUSL_LOADER);
    const bare = await exec(MUSL_BINARY, ["--version"], false);
    assert.notEqual(bare.code, 0);
    assert.match(bare.stderr, /libstdc\+\+\.so\.6/);
  });

  it("prints the same --version as the glibc build", async () => {
    const musl = await exec(MUSL_BINARY, ["--version"], true);
    const glibc = await exec(GLIBC_BINARY, ["--version"], false);
    assert.equal(musl.code, 0, musl.stderr);
    assert.ok(musl.stdout.includes(pkg.version), musl.stdout);
    assert.equal(musl.stdout, glibc.stdout);
  });

  it("prints the same --dry-run payload for the example edge site as the glibc build", async () => {
    const musl = await exec(MUSL_BINARY, DRY_RUN, true);
    const glibc = await exec(GLIBC_BINARY, DRY_RUN, false);
    assert.equal(musl.code, 0, musl.stderr);
    assert.equal(glibc.code, 0, glibc.stderr);
    assert.match(musl.stdout, /^\*nat$/m);
    assert.match(musl.stdout, /KUBE-SERVICES/);
    assert.equal(musl.stdout, glibc.stdout);
  });
});
