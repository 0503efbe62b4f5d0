/**
 * Per-target outputs of compile.sh: `--target linux-arm64` writes dist/edgeproxy-linux-arm64 and its
 * .sha256 and leaves the host build dist/edgeproxy alone (it used to overwrite it, so the README's
 * air-gapped recipe shipped the arm64 file under the x86_64 checksum); and every dist/ file that recipe
 * ships is one its own compile.sh commands produce for a target.
 * The arm64 build is made once, here (a few seconds; the first one downloads Bun's arm64 runtime from the
 * npm registry). Skipped, saying so, when dist/edgeproxy is not built.
 */
import { before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { sectionShellBlocks } from "../support/markdown.ts";
import { run, runOk } from "../support/netns.ts";

const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));
const HOST_BINARY = join(ROOT, "dist", "edgeproxy");
const ARM64 = join(ROOT, "dist", "edgeproxy-linux-arm64");
const README = readFileSync(join(ROOT, "README.md"), "utf8");

const skip = existsSync(HOST_BINARY)
  ? false
  : `no compiled binary at ${HOST_BINARY} (run "bash compile.sh" first)`;
if (skip) console.log(`SKIP compile targets: ${skip}`);

const sha256 = (file: string) => createHash("sha256").update(readFileSync(file)).digest("hex");

describe("compile.sh --target", { skip }, () => {
  let hostBefore = "";
  before(async () => {
    hostBefore = sha256(HOST_BINARY);
    await runOk(["bash", join(ROOT, "compile.sh"), "--target", "linux-arm64"], { timeoutMs: 300_000 });
  });

  it("writes dist/edgeproxy-linux-arm64, an aarch64 ELF, and leaves dist/edgeproxy alone", () => {
    const head = readFileSync(ARM64).subarray(0, 20);
    assert.equal(head.toString("latin1", 0, 4), "\x7fELF");
    assert.equal(head.readUInt16LE(18), 183, "e_machine should be EM_AARCH64");
    assert.equal(sha256(HOST_BINARY), hostBefore);
  });

  it("writes dist/edgeproxy-linux-arm64.sha256 in sha256sum format", async () => {
    assert.equal(
      readFileSync(`${ARM64}.sha256`, "utf8"),
      `${sha256(ARM64)}  edgeproxy-linux-arm64\n`,
    );
    const r = await run([
      "sh",
      "-c",
      'cd "$1" && sha256sum -c edgeproxy-linux-arm64.sha256',
      "sh",
      join(ROOT, "dist"),
    ]);
    assert.equal(r.code, 0, r.stdout + r.stderr);
  });

  it("rejects a target name that is not one (no output outside dist/)", async () => {
    const r = await run(["bash", join(ROOT, "compile.sh"), "--target", "../x"]);
    assert.equal(r.code, 2);
    assert.equal(r.stderr, "compile.sh: --target: not a target name: ../x\n");
  });

  it("the README's air-gapped recipe ships only files its own --target builds write", () => {
    const heading = "## Carrying it into an air-gapped site";
    const block = sectionShellBlocks(README, heading).join("\n");
    const targets = [...block.matchAll(/compile\.sh --target (\S+)/g)].map((m) => m[1]);
    assert.ok(targets.length >= 1, "the recipe builds no --target");
    const produced = targets.flatMap((t) => [`dist/edgeproxy-${t}`, `dist/edgeproxy-${t}.sha256`]);
    const shipped = [...block.matchAll(/(?:^|\s)(dist\/\S+)/g)].map((m) => m[1]);
    assert.ok(shipped.length >= 2, "the recipe copies no dist/ file");
    for (const f of shipped) {
      assert.ok(produced.includes(f), `the recipe ships ${f}, which no --target build writes`);
    }
    assert.doesNotMatch(
      block,
      /npm run build|compile\.sh\s*(?:$|&|;)/m,
      "the host build is not for another site",
    );
  });
});
