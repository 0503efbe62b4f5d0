/**
 * `--dry-run --proxy-mode ipvs` end to end on the example edge site (no root, no IPVS kernel): exit 0,
 * the deprecation warning, and on stdout the ipset transaction, IPVS mode's jump rules and payload, the
 * kube-ipvs0 addresses and the ipvsadm batch, for `deno run`, `bun` and the compiled binary.
 */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));
const BINARY = process.env.EDGEPROXY_BIN
  ? resolve(process.env.EDGEPROXY_BIN)
  : join(ROOT, "dist", "edgeproxy");
const SITE = join(ROOT, "examples", "edge-site");

const VARIANTS = [
  {
    name: "deno run main.ts",
    cmd: join(ROOT, "node_modules/.bin/deno"),
    prefix: ["run", "-A", join(ROOT, "main.ts")],
  },
  { name: "bun main.ts", cmd: join(ROOT, "node_modules/.bin/bun"), prefix: [join(ROOT, "main.ts")] },
  { name: "compiled binary", cmd: BINARY, prefix: [] as string[] },
];

function run(cmd: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(cmd, args, { cwd: ROOT, timeout: 60_000, maxBuffer: 16 << 20 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
      done({ code, stdout: String(stdout), stderr: String(stderr) });
    });
  });
}

for (const v of VARIANTS) {
  const skip = v.cmd === BINARY && !existsSync(BINARY) ? `no compiled binary at ${BINARY}` : false;
  describe(`--dry-run --proxy-mode ipvs (${v.name})`, { skip }, () => {
    it("prints the ipset, iptables, ip and ipvsadm batches of the example site", async () => {
      const r = await run(v.cmd, [
        ...v.prefix,
        "--proxy-mode=ipvs",
        "--dry-run",
        "--manifests",
        SITE,
        "--hostname-override",
        "edge-node-1",
      ]);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.stderr, /The ipvs proxier is now deprecated .* Please use 'nftables' instead\./);
      const out = r.stdout;
      assert.match(out, /^# ipset -exist restore \(IPv4\) <<EOF\n/m);
      assert.match(out, /^add KUBE-CLUSTER-IP 10\.96\.0\.10,udp:53$/m);
      assert.match(out, /^# iptables -w 5 -W 100000 -I PREROUTING -t nat .*-j KUBE-SERVICES$/m);
      assert.match(out, /^-A KUBE-SERVICES .*--match-set KUBE-CLUSTER-IP dst,dst -j ACCEPT$/m);
      assert.match(out, /^addr add 10\.96\.0\.10\/32 dev kube-ipvs0$/m);
      assert.match(out, /^# ipvsadm -R \(IPv4\) <<EOF\n/m);
      assert.match(out, /^-A -u 10\.96\.0\.10:53 -s rr$/m);
      assert.match(out, /^-a -u 10\.96\.0\.10:53 -r 10\.244\.1\.2:53 -m -w 1$/m);
    });
  });
}
