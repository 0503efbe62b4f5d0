/**
 * The user-mode-linux helper (tests/support/uml.ts): a guest boots, has IPVS and ipset, runs the script
 * and reports its exit status and output, and keeps its writes off the host. Skipped with the reason when
 * UML cannot run here (not root, no kernel, a kernel that does not boot on this CPU).
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { dirname } from "node:path";
import { runInUml, umlSkipReason } from "../support/uml.ts";

const skip = await umlSkipReason();
if (skip) console.log(`ipvs_uml_boot_test: skipped: ${skip}`);

describe("user-mode-linux guest", { skip: skip ?? false }, () => {
  it("has IPVS and ipset: ipvsadm -Ln and ipset list run, and a virtual server can be added", async () => {
    const r = await runInUml([
      "set -e",
      "ipvsadm -Ln",
      "ipvsadm -A -t 10.0.0.1:80 -s rr",
      "ipvsadm -a -t 10.0.0.1:80 -r 10.1.0.1:8080 -m",
      "ipvsadm -Sn",
      "ipset create KUBE-CLUSTER-IP hash:ip,port",
      "ipset add KUBE-CLUSTER-IP 10.0.0.1,tcp:80",
      "ipset list",
      'echo "iptables in the guest: $UML_IPTABLES"',
    ].join("\n"));
    console.log(`uml boot ${r.bootMs} ms, run ${r.totalMs} ms`);
    assert.equal(r.code, 0, `${r.output}\n--- console ---\n${r.console.slice(-3000)}`);
    assert.match(r.output, /IP Virtual Server version/);
    assert.match(r.output, /-A -t 10\.0\.0\.1:80 -s rr/);
    assert.match(r.output, /-a -t 10\.0\.0\.1:80 -r 10\.1\.0\.1:8080 -m -w 1/);
    assert.match(r.output, /Name: KUBE-CLUSTER-IP[\s\S]*10\.0\.0\.1,tcp:80/);
    assert.match(r.output, /iptables in the guest: (nf_tables|legacy|none)/);
  });

  it("returns the script's exit status and output, and removes its directory", async () => {
    const r = await runInUml('echo to-stdout; echo to-stderr >&2; echo "$UML_SCRATCH"; exit 7', {
      modules: [],
    });
    assert.equal(r.code, 7);
    assert.match(r.output, /to-stdout\nto-stderr\n/);
    const dir = dirname(r.output.trim().split("\n").pop()!);
    assert.match(dir, /edgeproxy-uml-/);
    assert.equal(existsSync(dir), false);
  });

  it("keeps guest writes in its scratch tmpfs: a file written there does not reach the host", async () => {
    let scratch = "";
    const r = await runInUml(
      'echo x >"$UML_SCRATCH/probe" && cat "$UML_SCRATCH/probe" && echo "$UML_SCRATCH"',
      {
        modules: [],
      },
    );
    assert.equal(r.code, 0, r.console.slice(-2000));
    scratch = r.output.trim().split("\n").pop()!;
    assert.match(scratch, /edgeproxy-uml-.*\/scratch$/);
    assert.equal(existsSync(`${scratch}/probe`), false);
  });

  it("kills the guest on timeout and reports it", async () => {
    const r = await runInUml("sleep 600", { modules: [], timeoutMs: 8_000 });
    assert.equal(r.timedOut, true);
    assert.equal(r.code, -1);
  });
});
