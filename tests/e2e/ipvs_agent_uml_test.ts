/**
 * The compiled agent, `dist/edgeproxy --proxy-mode ipvs`, end to end in a real IPVS kernel: boots a
 * user-mode-linux guest (tests/support/uml.ts) and runs tests/support/ipvs_agent_uml_guest.ts there with
 * this test's runtime; that file builds the network-namespace cluster of tests/support/e2e_cluster.ts with
 * the test apiserver inside the guest and checks real traffic. Skipped with the reason when UML cannot run,
 * when dist/edgeproxy is missing, or when the guest kernel has no IPv4 iptables (Debian's prebuilt UML
 * packages: tests/support/uml_kernel.sh builds one that has).
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { fileURLToPath } from "node:url";
import { runInUml, umlSkipReason } from "../support/uml.ts";
import { agentBinaryMissingReason } from "../support/e2e_agent.ts";

const skip = (await umlSkipReason()) ?? (agentBinaryMissingReason() || null);
if (skip) console.log(`ipvs_agent_uml_test: skipped: ${skip}`);

const GUEST_FILE = fileURLToPath(new URL("../support/ipvs_agent_uml_guest.ts", import.meta.url));
const ROOT = fileURLToPath(new URL("../..", import.meta.url));
/** The `it`s of the guest file. */
const GUEST_TESTS = 12;
/** How long the guest may run before it is killed and the test fails saying so. */
const GUEST_TIMEOUT_MS = 900_000;

/** The command that runs one node:test file with this runtime (Deno: `deno test`, Bun: `bun test`). */
function testCommand(file: string): string {
  const isDeno = typeof (globalThis as { Deno?: unknown }).Deno !== "undefined";
  return isDeno
    ? `${process.execPath} test -A --no-check ${file}`
    : `${process.execPath} test --timeout 600000 ${file}`;
}

describe("edgeproxy --proxy-mode ipvs in a user-mode-linux kernel", { skip: skip ?? false }, () => {
  // 89 s on an idle machine, over the runner's 120 s default under CI's load: the guest's own bound, plus boot.
  it("runs the agent against the test apiserver with real traffic (tests/support/ipvs_agent_uml_guest.ts)", {
    timeout: GUEST_TIMEOUT_MS + 60_000,
  }, async (t) => {
    const r = await runInUml(
      [
        `cd ${ROOT}`,
        // Debian's prebuilt UML kernels have no IPv4 iptables: nothing of the mode can run there.
        'if [ "$UML_IPTABLES" = none ]; then echo "UML: no IPv4 iptables in this kernel"; exit 0; fi',
        'echo "UML: iptables $UML_IPTABLES, kernel $(uname -r)"',
        `NO_COLOR=1 ${testCommand(GUEST_FILE)}`,
      ].join("\n"),
      { timeoutMs: GUEST_TIMEOUT_MS, memMB: 2048 },
    );
    const out = r.output;
    if (/^UML: no IPv4 iptables in this kernel$/m.test(out)) {
      t.skip("the guest kernel has no IPv4 iptables (tests/support/uml_kernel.sh builds one that has)");
      return;
    }
    console.log(
      out.split("\n").filter((l) => /^UML:|drift repaired|ok \||pass$|fail$|passed/.test(l)).join("\n"),
    );
    console.log(`uml boot ${r.bootMs} ms, whole run ${r.totalMs} ms`);
    assert.equal(r.timedOut, false, `guest timed out\n${out.slice(-6000)}`);
    assert.equal(r.code, 0, `${out.slice(-12000)}\n--- console ---\n${r.console.slice(-2000)}`);
    // Every test of the guest file ran and passed: none failed, none skipped.
    const passed = Number(
      /(?:^\s*(\d+) pass$)|(?:\((\d+) steps?\) \| 0 failed)/m.exec(out)?.slice(1).find((x) => x),
    );
    assert.ok(
      passed >= GUEST_TESTS,
      `${passed} guest tests passed, expected ${GUEST_TESTS}\n${out.slice(-4000)}`,
    );
    assert.doesNotMatch(
      out,
      /^\s*[1-9]\d* (fail|skip|todo)$|\| [1-9]\d* failed|[1-9]\d* ignored/m,
      out.slice(-4000),
    );
  });
});
