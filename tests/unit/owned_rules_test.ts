import { test } from "node:test";
import assert from "node:assert/strict";
import { applyPayloadToOwnedRules, type OwnedRules } from "../../lib/iptables/owned_rules.ts";

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
