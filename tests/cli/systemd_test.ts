/**
 * The systemd unit and its example environment file: `systemd-analyze verify` accepts the unit, its
 * offline security exposure stays low, and every command line in the example file parses.
 * Skipped, saying so, when systemd-analyze is not installed.
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { resolveInvocation } from "../../lib/cli/resolve.ts";
import { run } from "../support/netns.ts";
import { haveCommand, offlineExposure, unitValues } from "../support/systemd_root.ts";
import { FTL_JIT_ENV, HEAP_RAM_ENV } from "../../lib/runtime/engine_options.ts";

const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));
const UNIT = readFileSync(join(ROOT, "systemd/edgeproxy.service"), "utf8");
const ENV = readFileSync(join(ROOT, "systemd/edgeproxy.env"), "utf8");

const skip = haveCommand("systemd-analyze") ? false : "systemd-analyze is not installed";
if (skip) console.log(`SKIP systemd unit checks: ${skip}`);

/** Directive values of the [Service] section (repeated keys in order). */
const directives = (key: string) => unitValues(UNIT, key);

describe("systemd/edgeproxy.service", { skip }, () => {
  const dir = mkdtempSync(join(tmpdir(), "edgeproxy-unit-"));
  after(() => rmSync(dir, { recursive: true, force: true }));
  // verify needs ExecStart's binary to exist: point it at a stand-in executable in the temp dir.
  const fakeBinary = join(dir, "edgeproxy");
  writeFileSync(fakeBinary, "#!/bin/sh\nexit 0\n");
  chmodSync(fakeBinary, 0o755);
  const unitPath = join(dir, "edgeproxy.service");
  writeFileSync(
    unitPath,
    UNIT.replace(/^ExecStart=\/usr\/bin\/edgeproxy /m, `ExecStart=${fakeBinary} `),
  );

  it("passes systemd-analyze verify without a warning about the unit", async () => {
    assert.match(
      readFileSync(unitPath, "utf8"),
      new RegExp(`^ExecStart=${fakeBinary} \\$EDGEPROXY_ARGS$`, "m"),
    );
    const r = await run(["systemd-analyze", "verify", unitPath], { timeoutMs: 60_000 });
    assert.equal(r.code, 0, r.stdout + r.stderr);
    const about = (r.stdout + r.stderr).split("\n").filter((l) => l.includes("edgeproxy.service"));
    assert.deepEqual(about, []);
  });

  it("has a low offline security exposure (recorded in docs/systemd.md)", async () => {
    const level = await offlineExposure(unitPath);
    const score = Number(level);
    console.log(`systemd-analyze security --offline=true: exposure ${score}`);
    assert.ok(score <= 3.0, `exposure ${score} regressed above 3.0`);
    const doc = readFileSync(join(ROOT, "docs/systemd.md"), "utf8");
    assert.ok(
      doc.includes(`exposure level ${level}`),
      `docs/systemd.md should record exposure level ${level}`,
    );
  });

  it("grants exactly the three capabilities and keeps the JIT and sysctl exceptions", () => {
    for (const key of ["CapabilityBoundingSet", "AmbientCapabilities"]) {
      assert.deepEqual(directives(key), ["CAP_NET_ADMIN CAP_NET_RAW CAP_SYS_RESOURCE"], key);
    }
    assert.deepEqual(directives("MemoryDenyWriteExecute"), ["no"]);
    assert.deepEqual(directives("ProtectKernelTunables"), ["no"]);
    assert.deepEqual(directives("Type"), ["simple"]);
    assert.deepEqual(directives("Restart"), ["always"]);
    assert.deepEqual(directives("ProtectSystem"), ["strict"]);
    assert.deepEqual(directives("StateDirectory"), ["edgeproxy"]);
    assert.deepEqual(directives("NoNewPrivileges"), ["yes"]);
    assert.deepEqual(directives("RestrictAddressFamilies"), ["AF_INET AF_INET6 AF_NETLINK AF_UNIX"]);
  });
});

describe("systemd/edgeproxy.env", () => {
  const argLines = ENV.split("\n")
    .map((l) => l.replace(/^#(?=EDGEPROXY_ARGS=)/, ""))
    .filter((l) => l.startsWith("EDGEPROXY_ARGS="))
    .map((l) => l.slice("EDGEPROXY_ARGS=".length));

  it("shows how to opt out of each engine option with the variable the agent reads", () => {
    assert.ok(ENV.split("\n").includes(`#${HEAP_RAM_ENV}=0`));
    assert.ok(ENV.split("\n").includes(`#${FTL_JIT_ENV}=1`));
  });
  it("defines EDGEPROXY_ARGS, with commented alternatives", () => {
    assert.ok(ENV.split("\n").some((l) => l.startsWith("EDGEPROXY_ARGS=")));
    assert.ok(argLines.length >= 2);
  });
  for (const line of argLines) {
    it(`parses: ${line}`, async () => {
      const config = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n";
      const inv = await resolveInvocation(line.split(/\s+/).filter((a) => a !== ""), {
        readConfig: () => Promise.resolve(config),
      });
      assert.equal(inv.action, "run");
    });
  }
});
