/**
 * The drift checks read `iptables -S` and iptables-save as a stream (runner.ts execLines / saveLines over
 * the spawner's line splitting), never as one text. Here the real runner runs stand-in iptables binaries
 * (shell scripts) whose output arrives in pieces cut in the middle of lines, the "-A " prefix included,
 * and big enough to span many pipe reads: counts and drift must come out as from the whole text.
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checkDrift } from "../../../../lib/proxy/iptables/drift.ts";
import { DriftTracker } from "../../../support/owned_rules.ts";
import { createIptablesRunner } from "../../../../lib/proxy/iptables/runner.ts";
import { iptablesHost } from "../../../../lib/proxy/iptables/host.ts";

/** Rules in KUBE-SERVICES: ~600 KB of listing, many 64 KB pipe reads. */
const RULES = 4000;
const RULE_TAIL =
  `-m comment --comment "ns/svc-with-a-long-name:http cluster IP" -m tcp -p tcp -d 10.96.0.1/32 --dport 80 -j KUBE-SVC-ABCDEFGHIJKLMNOP`;

const dir = mkdtempSync(join(tmpdir(), "drift-stream-"));
after(() => rmSync(dir, { recursive: true, force: true }));
/** How many KUBE-SERVICES rules the stand-in kernel holds (read by the scripts on every call). */
const countFile = join(dir, "count");

/**
 * Prints KUBE-SERVICES' rules: the first one cut after its "-" and the rest of it written after a pause
 * (a separate pipe read), then the others in one burst that the pipe splits at arbitrary points.
 */
const RULES_SH = `n=$(cat ${countFile})
if [ "$n" -gt 0 ]; then printf -- '-'; sleep 0.05; printf 'A KUBE-SERVICES 0 %s\\n' '${RULE_TAIL}'; fi
i=1; while [ "$i" -lt "$n" ]; do printf -- '-A KUBE-SERVICES %s %s\\n' "$i" '${RULE_TAIL}'; i=$((i+1)); done`;

function script(name: string, body: string): string {
  const path = join(dir, name);
  writeFileSync(path, `#!/bin/sh\n${body}\n`);
  chmodSync(path, 0o755);
  return path;
}

const iptables = script(
  "iptables",
  `case "$*" in
  --version) echo "iptables v1.8.9 (nf_tables)";;
  *"-S KUBE-SERVICES -t nat"*) echo "-N KUBE-SERVICES"; ${RULES_SH.replaceAll("\n", "; ")};;
  *) echo "iptables: No chain/target/match by that name." >&2; exit 1;;
esac`,
);
const save = script(
  "iptables-save",
  `echo "*nat"; echo ":PREROUTING ACCEPT [0:0]"; echo ":KUBE-SERVICES - [0:0]"; echo ":KUBE-SVC-ABCDEFGHIJKLMNOP - [0:0]"
${RULES_SH}
echo "-A KUBE-SVC-ABCDEFGHIJKLMNOP -j RETURN"
echo "COMMIT"`,
);

const PAYLOAD = [
  "*nat",
  ":KUBE-SERVICES - [0:0]",
  ":KUBE-SVC-ABCDEFGHIJKLMNOP - [0:0]",
  ...Array.from({ length: RULES }, (_, i) => `-A KUBE-SERVICES ${i} ${RULE_TAIL}`),
  "-A KUBE-SVC-ABCDEFGHIJKLMNOP -j RETURN",
  "COMMIT",
  "",
].join("\n");

async function runner() {
  return await createIptablesRunner({
    family: "IPv4",
    binaries: { iptables, save, restore: "/bin/true" },
  });
}

function expectation() {
  const t = new DriftTracker([]);
  t.recordRestore(PAYLOAD, true);
  return t.expectation()!;
}

describe("drift checks over streamed listings (real runner, stand-in binaries)", () => {
  for (const mode of ["cheap", "full"] as const) {
    it(`${mode}: a listing cut mid-line across pipe reads counts every rule`, async () => {
      writeFileSync(countFile, String(RULES));
      const { report } = await checkDrift(await runner(), expectation(), 0, { mode, sampleSize: 0 });
      assert.deepEqual(report.reasons, []);
      assert.equal(report.drifted, false);
    });
    it(`${mode}: one rule fewer in the stream is drift`, async () => {
      writeFileSync(countFile, String(RULES - 1));
      const { report } = await checkDrift(await runner(), expectation(), 0, { mode, sampleSize: 0 });
      assert.deepEqual(report.reasons, [`nat KUBE-SERVICES has ${RULES - 1} rules, expected ${RULES}`]);
    });
  }

  it("the host's stale-chain read collects the nat chains from the streamed iptables-save", async () => {
    writeFileSync(countFile, "3");
    const chains = await iptablesHost(await runner()).natChains();
    assert.deepEqual([...chains!], ["PREROUTING", "KUBE-SERVICES", "KUBE-SVC-ABCDEFGHIJKLMNOP"]);
  });
});
