/** Upstream's harness self-tests (TestSortIPTablesRules, TestCheckIPTablesRuleJumps, parsing) for canonical.ts. */
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  checkIptablesRuleJumps,
  countRules,
  parseIptablesDump,
  parseRule,
  sortIptablesRules,
} from "../../support/iptables_canonical.ts";
import { dedent } from "../../support/tracer.ts";

describe("sortIptablesRules (upstream TestSortIPTablesRules)", () => {
  it("sorts KUBE-SERVICES by service name across comment styles, stably", () => {
    const input = dedent(`
      *filter
      COMMIT
      *nat
      :KUBE-SERVICES - [0:0]
      -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 cluster IP" svc2 line 1
      -A KUBE-SERVICES -m comment --comment ns2/svc2 svc2 line 2
      -A KUBE-SERVICES -m comment --comment "ns2/svc2 blah" svc2 line 3
      -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" svc1 line 1
      -A KUBE-SERVICES -m comment --comment ns1/svc1 svc1 line 2
      -A KUBE-SERVICES -m comment --comment "ns1/svc1 blah" svc1 line 3
      -A KUBE-SERVICES -m comment --comment ns4/svc4 svc4 line 1
      -A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" svc4 line 2
      -A KUBE-SERVICES -m comment --comment "ns4/svc4 blah" svc4 line 3
      -A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" svc3 line 1
      -A KUBE-SERVICES -m comment --comment "ns3/svc3 blah" svc3 line 2
      -A KUBE-SERVICES -m comment --comment ns3/svc3 svc3 line 3
      COMMIT
      `);
    const output = dedent(`
      *filter
      COMMIT
      *nat
      :KUBE-SERVICES - [0:0]
      -A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" svc1 line 1
      -A KUBE-SERVICES -m comment --comment ns1/svc1 svc1 line 2
      -A KUBE-SERVICES -m comment --comment "ns1/svc1 blah" svc1 line 3
      -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 cluster IP" svc2 line 1
      -A KUBE-SERVICES -m comment --comment ns2/svc2 svc2 line 2
      -A KUBE-SERVICES -m comment --comment "ns2/svc2 blah" svc2 line 3
      -A KUBE-SERVICES -m comment --comment "ns3/svc3:p80 cluster IP" svc3 line 1
      -A KUBE-SERVICES -m comment --comment "ns3/svc3 blah" svc3 line 2
      -A KUBE-SERVICES -m comment --comment ns3/svc3 svc3 line 3
      -A KUBE-SERVICES -m comment --comment ns4/svc4 svc4 line 1
      -A KUBE-SERVICES -m comment --comment "ns4/svc4:p80 cluster IP" svc4 line 2
      -A KUBE-SERVICES -m comment --comment "ns4/svc4 blah" svc4 line 3
      COMMIT
      `);
    assert.equal(sortIptablesRules(input), output);
  });

  it("preserves unexpected chains and orders chains NODEPORTS, SERVICES, KUBE-*, others", () => {
    const input = dedent(`
      *filter
      COMMIT
      *nat
      :KUBE-SERVICES - [0:0]
      :KUBE-SEP-RS4RBKLTHTF2IUXJ - [0:0]
      :KUBE-AAAAA - [0:0]
      :KUBE-ZZZZZ - [0:0]
      :WHY-IS-THIS-CHAIN-HERE - [0:0]
      -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 cluster IP" svc2 line 1
      -A KUBE-SEP-RS4RBKLTHTF2IUXJ -m comment --comment ns2/svc2:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.2:80
      -A KUBE-ZZZZZ -m comment --comment "mystery chain number 1"
      -A KUBE-SERVICES -m comment --comment ns2/svc2 svc2 line 2
      -A WHY-IS-THIS-CHAIN-HERE -j ACCEPT
      -A KUBE-SERVICES -m comment --comment "ns2/svc2 blah" svc2 line 3
      -A KUBE-AAAAA -m comment --comment "mystery chain number 2"
      COMMIT
      `);
    const output = dedent(`
      *filter
      COMMIT
      *nat
      :KUBE-SERVICES - [0:0]
      :KUBE-AAAAA - [0:0]
      :KUBE-SEP-RS4RBKLTHTF2IUXJ - [0:0]
      :KUBE-ZZZZZ - [0:0]
      :WHY-IS-THIS-CHAIN-HERE - [0:0]
      -A KUBE-SERVICES -m comment --comment "ns2/svc2:p80 cluster IP" svc2 line 1
      -A KUBE-SERVICES -m comment --comment ns2/svc2 svc2 line 2
      -A KUBE-SERVICES -m comment --comment "ns2/svc2 blah" svc2 line 3
      -A KUBE-AAAAA -m comment --comment "mystery chain number 2"
      -A KUBE-SEP-RS4RBKLTHTF2IUXJ -m comment --comment ns2/svc2:p80 -m tcp -p tcp -j DNAT --to-destination 10.180.0.2:80
      -A KUBE-ZZZZZ -m comment --comment "mystery chain number 1"
      -A WHY-IS-THIS-CHAIN-HERE -j ACCEPT
      COMMIT
      `);
    assert.equal(sortIptablesRules(input), output);
  });

  it("keeps the nodeports rule last, sorts tables by name and moves -X lines to the end", () => {
    const input = dedent(`
      *nat
      :KUBE-SERVICES - [0:0]
      :KUBE-NODEPORTS - [0:0]
      :KUBE-SVC-B - [0:0]
      -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -j KUBE-NODEPORTS
      -X KUBE-SVC-B
      -A KUBE-SERVICES -m comment --comment "ns2/b cluster IP" -j X
      -A KUBE-NODEPORTS -m comment --comment ns2/b -j X
      -A KUBE-SERVICES -m comment --comment "ns1/a cluster IP" -j X
      -A KUBE-NODEPORTS -m comment --comment ns1/a -j X
      COMMIT
      *filter
      :KUBE-SERVICES - [0:0]
      COMMIT
      `);
    assert.equal(
      sortIptablesRules(input),
      dedent(`
        *filter
        :KUBE-SERVICES - [0:0]
        COMMIT
        *nat
        :KUBE-NODEPORTS - [0:0]
        :KUBE-SERVICES - [0:0]
        :KUBE-SVC-B - [0:0]
        -A KUBE-NODEPORTS -m comment --comment ns1/a -j X
        -A KUBE-NODEPORTS -m comment --comment ns2/b -j X
        -A KUBE-SERVICES -m comment --comment "ns1/a cluster IP" -j X
        -A KUBE-SERVICES -m comment --comment "ns2/b cluster IP" -j X
        -A KUBE-SERVICES -m comment --comment "kubernetes service nodeports; NOTE: this must be the last rule in this chain" -j KUBE-NODEPORTS
        -X KUBE-SVC-B
        COMMIT
        `),
    );
  });

  it("rejects malformed dumps like upstream's parser", () => {
    assert.throws(() => parseIptablesDump(":KUBE-SERVICES - [0:0]\nCOMMIT\n"), /not a table name/);
    assert.throws(() => parseIptablesDump("*nat\n-A KUBE-NOPE -j X\nCOMMIT\n"), /no such chain/);
    assert.throws(
      () => parseIptablesDump("*nat\n:A - [0:0]\n-A A -j X\n-X A\nCOMMIT\n"),
      /after adding rules/,
    );
    assert.throws(() => parseIptablesDump("*nat\n:A - [0:0]\n-X A\n-A A -j X\nCOMMIT\n"), /deleted chain/);
    assert.throws(() => parseIptablesDump("*nat\n:A - [0:0]\n"), /no COMMIT/);
    assert.throws(() => parseIptablesDump("*nat\n:A - [0:0]\nbogus\nCOMMIT\n"), /error parsing rule/);
  });

  it("parses rule parameters, negation and quoted comments", () => {
    const r = parseRule(
      '-A KUBE-SVC-X -m comment --comment "ns/a:p cluster IP" -m tcp -p tcp -d 172.30.0.1 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ',
    );
    assert.deepEqual(r.comment, { negated: false, value: "ns/a:p cluster IP" });
    assert.deepEqual(r.sourceAddress, { negated: true, value: "10.0.0.0/8" });
    assert.deepEqual(r.destinationPort, { negated: false, value: "80" });
    assert.deepEqual(r.jump, { negated: false, value: "KUBE-MARK-MASQ" });
    const m = parseRule("-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN");
    assert.equal(m.markCheck, true);
    assert.equal(parseRule("-A X -m recent --name Y --rcheck --seconds 10 --reap -j Y").affinityCheck, true);
    assert.throws(() => parseRule("-A X"), /no match rules/);
    assert.equal(countRules("*filter\nCOMMIT\n*nat\n:A - [0:0]\n-A A -j X\n-A A -j Y\nCOMMIT\n", "nat"), 2);
  });
});

describe("checkIptablesRuleJumps (upstream TestCheckIPTablesRuleJumps)", () => {
  const cases: Array<[string, string, string | null]> = [
    [
      "valid",
      `*filter
COMMIT
*nat
:KUBE-MARK-MASQ - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 10.20.30.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 10.20.30.41 --dport 80 ! -s 10.0.0.0/24 -j KUBE-MARK-MASQ
COMMIT
`,
      null,
    ],
    [
      "can't jump to chain that wasn't created",
      `*filter
COMMIT
*nat
:KUBE-SERVICES - [0:0]
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
COMMIT
`,
      "some chains in nat are used but were not created: KUBE-SVC-XPGD46QRK7WJZT7O",
    ],
    [
      "can't jump to chain that has no rules",
      `*filter
COMMIT
*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O
COMMIT
`,
      "some chains in nat are jumped to but have no rules: KUBE-SVC-XPGD46QRK7WJZT7O",
    ],
    [
      "can't add rules to a chain that wasn't created",
      `*filter
COMMIT
*nat
:KUBE-MARK-MASQ - [0:0]
:KUBE-SERVICES - [0:0]
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" ...
-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment "ns1/svc1:p80 cluster IP" -m tcp -p tcp -d 172.30.0.41 --dport 80 ! -s 10.0.0.0/8 -j KUBE-MARK-MASQ
COMMIT
`,
      "some chains in nat are used but were not created: KUBE-SVC-XPGD46QRK7WJZT7O",
    ],
    [
      "can't create chain and then not use it",
      `*filter
COMMIT
*nat
:KUBE-MARK-MASQ - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]
-A KUBE-SERVICES -m comment --comment "ns1/svc1:p80 cluster IP" ...
COMMIT
`,
      "some chains in nat are created but not used: KUBE-SVC-XPGD46QRK7WJZT7O",
    ],
    ["not enough tables", "*filter\nCOMMIT\n", "bad ruleData (1 tables)"],
  ];
  for (const [name, input, error] of cases) {
    it(name, () => assert.equal(checkIptablesRuleJumps(input), error));
  }
});
