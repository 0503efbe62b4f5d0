import { test } from "node:test";
import assert from "node:assert/strict";
import { applyPayloadToOwnedRules, type OwnedRules } from "../../support/owned_rules.ts";

test("owned rule counts follow full and partial payloads", () => {
  const owned: OwnedRules = new Map();
  applyPayloadToOwnedRules(
    owned,
    "*filter\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -j REJECT\nCOMMIT\n*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-A - [0:0]\n:KUBE-SEP-B - [0:0]\n" +
      "-A KUBE-SERVICES -d 1.2.3.4 -j KUBE-SVC-A\n-A KUBE-SVC-A -j KUBE-SEP-B\n-A KUBE-SEP-B -j DNAT\n-A KUBE-SEP-B -j KUBE-MARK-MASQ\nCOMMIT\n",
  );
  assert.deepEqual([...owned.get("nat")!], [["KUBE-SERVICES", 1], ["KUBE-SVC-A", 1], ["KUBE-SEP-B", 2]]);
  assert.deepEqual([...owned.get("filter")!], [["KUBE-SERVICES", 1]]);
  // A partial sync rewrites KUBE-SERVICES, leaves KUBE-SVC-A alone and deletes KUBE-SEP-B.
  applyPayloadToOwnedRules(
    owned,
    "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SEP-B - [0:0]\n-X KUBE-SEP-B\nCOMMIT\n",
  );
  assert.deepEqual([...owned.get("nat")!], [["KUBE-SERVICES", 0], ["KUBE-SVC-A", 1]]);
});

test("a chunked payload (whole lines per chunk, tables spanning chunks) counts like the joined text", () => {
  const lines = [
    "*filter",
    ":KUBE-SERVICES - [0:0]",
    "-A KUBE-SERVICES -j REJECT",
    "COMMIT",
    "*nat",
    ":KUBE-SERVICES - [0:0]",
    ":KUBE-SVC-A - [0:0]",
    ":KUBE-SEP-B - [0:0]",
    "-A KUBE-SERVICES -d 1.2.3.4 -j KUBE-SVC-A",
    "-A KUBE-SVC-A -j KUBE-SEP-B",
    "-A KUBE-SEP-B -j DNAT",
    "-X KUBE-SEP-OLD",
    "COMMIT",
  ];
  const expected: OwnedRules = new Map();
  applyPayloadToOwnedRules(expected, lines.map((l) => `${l}\n`).join(""));
  for (let a = 1; a < lines.length; a++) {
    for (let b = a; b < lines.length; b++) {
      const chunks = [lines.slice(0, a), lines.slice(a, b), lines.slice(b)].map((p) =>
        p.map((l) => `${l}\n`).join("")
      );
      const owned: OwnedRules = new Map();
      applyPayloadToOwnedRules(owned, chunks);
      assert.deepEqual(owned, expected, `split at ${a}/${b}`);
    }
  }
  assert.deepEqual([...expected.get("nat")!], [["KUBE-SERVICES", 1], ["KUBE-SVC-A", 1], ["KUBE-SEP-B", 1]]);
});
