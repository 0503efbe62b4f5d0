import { test } from "node:test";
import assert from "node:assert/strict";
import { createDryRunHost } from "../../../../lib/proxy/iptables/dry_run_host.ts";

test("dry-run host prints a chunked payload chunk by chunk, same text as the joined payload", async () => {
  const chunks = ["*nat\n:KUBE-SERVICES - [0:0]\n", "-A KUBE-SERVICES -j RETURN\nCOMMIT\n"];
  const a: string[] = [];
  const b: string[] = [];
  await createDryRunHost("IPv6", (t) => a.push(t)).restore(chunks);
  await createDryRunHost("IPv6", (t) => b.push(t)).restore(chunks.join(""));
  assert.equal(a.join(""), b.join(""));
  assert.equal(
    a.join(""),
    `# ip6tables-restore -w 5 -W 100000 --noflush --counters <<EOF\n${chunks.join("")}# EOF\n`,
  );
  assert.ok(a.includes(chunks[1]), "chunks are written as they are, not joined first");
});
