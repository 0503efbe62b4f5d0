/**
 * The agent end to end in --dry-run over --manifests (no root, no kernel): object validation, the Node shape
 * check and the feature gates reach the rules. Runs `deno run -A main.ts` and, when built, the compiled
 * binary (dist/edgeproxy or $EDGEPROXY_BIN).
 */
import { after, describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { KLOG_HEADER } from "../support/klog_lines.ts";

const ROOT = resolve(fileURLToPath(new URL("../..", import.meta.url)));
const BINARY = process.env.EDGEPROXY_BIN
  ? resolve(process.env.EDGEPROXY_BIN)
  : join(ROOT, "dist", "edgeproxy");
const VARIANTS = [
  {
    name: "deno run main.ts",
    cmd: join(ROOT, "node_modules/.bin/deno"),
    prefix: ["run", "-A", join(ROOT, "main.ts")],
  },
  { name: "compiled binary", cmd: BINARY, prefix: [] as string[], skip: !existsSync(BINARY) },
];

const SITE = `apiVersion: v1
kind: Node
metadata: {name: node-a, labels: not-a-map}
spec: {taints: NoSchedule, podCIDRs: 10.244.1.0/24}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: site, resourceVersion: "12"}
spec:
  clusterIP: 10.96.0.20
  trafficDistribution: PreferSameNode
  externalIPs: [127.0.0.1, 203.0.113.9]
  ports: [{port: 80, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: site, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints:
- {addresses: [10.244.1.5], nodeName: node-a, hints: {forNodes: [{name: node-a}]}}
- {addresses: [10.244.2.5], nodeName: node-b, hints: {forNodes: [{name: node-b}]}}
- {addresses: [169.254.169.254], nodeName: node-b, hints: {forNodes: [{name: node-b}]}}
ports: [{port: 8080, protocol: TCP}]
`;

function run(cmd: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(
      cmd,
      args,
      { cwd: tmpdir(), timeout: 60_000, maxBuffer: 16 << 20, env: { ...process.env, NO_COLOR: "1" } },
      (err, stdout, stderr) => {
        const code = err ? (typeof err.code === "number" ? err.code : 1) : 0;
        done({ code, stdout: String(stdout), stderr: String(stderr) });
      },
    );
  });
}

/** The messages of the W lines of klog-format stderr (the quoted message, unquoted). */
function warnings(stderr: string): string[] {
  return stderr.split("\n").flatMap((l) => {
    const m = KLOG_HEADER.exec(l);
    if (m === null || m[1] !== "W") return [];
    const quoted = /^"(?:[^"\\]|\\.)*"/.exec(m[11]);
    return quoted ? [JSON.parse(quoted[0]) as string] : [m[11]];
  });
}

const dnat = (out: string) =>
  out.split("\n").filter((l) => l.includes("-j DNAT")).map((l) => l.split(" ").at(-1));

for (const v of VARIANTS) {
  describe(
    `--dry-run --manifests validation (${v.name})`,
    { skip: v.skip ? "no compiled binary" : false },
    () => {
      const dir = mkdtempSync(join(tmpdir(), "edgeproxy-dry-run-"));
      after(() => rmSync(dir, { recursive: true, force: true }));
      const file = join(dir, "site.yaml");
      writeFileSync(file, SITE);
      const base = [...v.prefix, "--dry-run", "--manifests", file, "--hostname-override", "node-a"];

      it("special addresses are not rendered; a malformed Node gives one warning per field and the rules", async () => {
        const r = await run(v.cmd, base);
        assert.equal(r.code, 0, r.stderr);
        assert.match(r.stdout, /"site\/web external IP" -m tcp -p tcp -d 203\.0\.113\.9 --dport 80/);
        assert.doesNotMatch(r.stdout, /-d 127\.0\.0\.1 /);
        assert.doesNotMatch(r.stdout, /169\.254\.169\.254/);
        const warns = warnings(r.stderr).filter((m) => !m.includes("detect-local-mode"));
        assert.deepEqual(warns, [
          'ignoring metadata.labels of Node node-a: must be a map (got "not-a-map")',
          'ignoring spec.podCIDRs of Node node-a: must be a list (got "10.244.1.0/24")',
          'ignoring spec.taints of Node node-a: must be a list (got "NoSchedule")',
          'ignoring spec.externalIPs[0] of Service site/web: may not be in the loopback range (127.0.0.0/8, ::1/128) (got "127.0.0.1")',
          'ignoring endpoints[2] of EndpointSlice site/web-1: addresses[0]: may not be in the link-local range (169.254.0.0/16, fe80::/10) (got "169.254.169.254")',
        ]);
        // PreferSameTrafficDistribution is on by default at v1.34: only this node's endpoint.
        assert.deepEqual(dnat(r.stdout), ["10.244.1.5:8080"]);
      });

      it("--feature-gates=PreferSameTrafficDistribution=false is honoured; a locked gate set to its other value is refused", async () => {
        const off = await run(v.cmd, [...base, "--feature-gates=PreferSameTrafficDistribution=false"]);
        assert.equal(off.code, 0, off.stderr);
        assert.deepEqual(dnat(off.stdout), ["10.244.1.5:8080", "10.244.2.5:8080"]);
        const bad = await run(v.cmd, [...base, "--feature-gates=LoadBalancerIPMode=false"]);
        assert.equal(bad.code, 1);
        assert.equal(bad.stdout, "");
        assert.equal(
          bad.stderr.trim(),
          'invalid argument "LoadBalancerIPMode=false" for "--feature-gates" flag: ' +
            "cannot set feature gate LoadBalancerIPMode to false, feature is locked to true",
        );
      });
    },
  );
}
