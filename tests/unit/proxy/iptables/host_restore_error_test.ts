import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { isNotFoundError, parseRestoreFailure, RestoreError } from "../../../../lib/proxy/iptables/runner.ts";

// stderr texts captured from iptables 1.8.9 (nf_tables and legacy) on Debian 12.
const WAIT_NOISE = "Ignoring deprecated --wait-interval option.\n";

describe("parseRestoreFailure", () => {
  it("nft commit error names the exact line (CHAIN_DEL busy)", () => {
    const payload = "*nat\n:C1 - [0:0]\n:C2 - [0:0]\n-A C1 -j C2\nCOMMIT\n*nat\n-X C2\nCOMMIT\n";
    const stderr =
      "iptables-restore v1.8.9 (nf_tables): \nline 7: CHAIN_DEL failed (Device or resource busy): chain C2\n";
    const f = parseRestoreFailure(stderr, payload);
    assert.equal(f.line, 7);
    assert.equal(f.lineText, "-X C2");
    assert.equal(f.summary, "CHAIN_DEL failed (Device or resource busy): chain C2");
    assert.equal(f.committedTransactions, 1);
  });

  it("nft reports a jump to a missing chain at COMMIT: the jumping rule is blamed instead", () => {
    const payload =
      "*nat\n:A1 - [0:0]\n-A A1 -j RETURN\nCOMMIT\n*nat\n:A2 - [0:0]\n-A A2 -p tcp -j NOPE\nCOMMIT\n";
    const stderr =
      "iptables-restore v1.8.9 (nf_tables): Chain 'NOPE' does not exist\nError occurred at line: 8\n" +
      "Try `iptables-restore -h' or 'iptables-restore --help' for more information.\n";
    const f = parseRestoreFailure(stderr, payload);
    assert.equal(f.line, 7);
    assert.equal(f.lineText, "-A A2 -p tcp -j NOPE");
    assert.equal(f.summary, "Chain 'NOPE' does not exist");
    assert.equal(f.committedTransactions, 1);
  });

  it("parse errors: 'Error occurred at line: N'", () => {
    const payload = "*nat\n:B1 - [0:0]\n-A B1 -j RETURN\n-A B1 -p tcp --dport 99999 -j RETURN\nCOMMIT\n";
    const stderr = WAIT_NOISE + "iptables-restore v1.8.9 (legacy): invalid port/service `99999' specified\n" +
      "Error occurred at line: 4\nTry `iptables-restore -h' or 'iptables-restore --help' for more information.\n";
    const f = parseRestoreFailure(stderr, payload);
    assert.equal(f.line, 4);
    assert.equal(f.lineText, "-A B1 -p tcp --dport 99999 -j RETURN");
    assert.equal(f.summary, "invalid port/service `99999' specified");
    assert.equal(f.committedTransactions, 0);
  });

  it("legacy 'line N failed' without a reason", () => {
    const payload = "*nat\n-X A1\nCOMMIT\n";
    const f = parseRestoreFailure(WAIT_NOISE + "iptables-restore: line 2 failed\n", payload);
    assert.equal(f.line, 2);
    assert.equal(f.lineText, "-X A1");
    assert.equal(f.summary, "");
  });

  it("nft 'line N failed: reason'", () => {
    const f = parseRestoreFailure(
      "iptables-restore: line 3 failed: No chain/target/match by that name.\n",
      "*nat\n:B1 - [0:0]\n-X NOTEXIST\nCOMMIT\n",
    );
    assert.equal(f.line, 3);
    assert.equal(f.lineText, "-X NOTEXIST");
    assert.equal(f.summary, "No chain/target/match by that name.");
  });

  it("missing COMMIT at end of input", () => {
    const f = parseRestoreFailure(
      "iptables-restore: COMMIT expected at line 4\n",
      "*nat\n:C1 - [0:0]\n-A C1 -j RETURN\n",
    );
    assert.equal(f.line, 4);
    assert.equal(f.lineText, null);
    assert.equal(f.summary, "COMMIT expected at line 4");
  });

  it("no line at all", () => {
    const f = parseRestoreFailure("iptables-restore: unable to initialize table 'nat'\n", "*nat\nCOMMIT\n");
    assert.equal(f.line, null);
    assert.equal(f.committedTransactions, null);
    assert.equal(f.summary, "unable to initialize table 'nat'");
  });
});

describe("RestoreError", () => {
  it("message: family, line, line text, stderr gist", () => {
    const payload = "*nat\n:A2 - [0:0]\n-A A2 -j NOPE\nCOMMIT\n";
    const e = new RestoreError(
      "IPv4",
      2,
      "iptables-restore v1.8.9 (nf_tables): Chain 'NOPE' does not exist\nError occurred at line: 4\n",
      payload,
    );
    assert.equal(
      e.message,
      "iptables-restore failed (IPv4): line 3: -A A2 -j NOPE: Chain 'NOPE' does not exist",
    );
    assert.equal(e.exitCode, 2);
    assert.equal(e.line, 3);
    assert.ok(e instanceof Error);
  });
  it("IPv6 and no line: exit code stands in for an empty summary", () => {
    const e = new RestoreError("IPv6", 1, "", "*nat\nCOMMIT\n");
    assert.equal(e.message, "ip6tables-restore failed (IPv6): exit code 1");
  });
  it("cuts very long lines in the message but keeps them whole in lineText", () => {
    const long = `-A X ${"-m comment --comment y ".repeat(100)}-j NOPE`;
    const e = new RestoreError("IPv4", 1, "iptables-restore: line 2 failed\n", `*nat\n${long}\nCOMMIT\n`);
    assert.equal(e.lineText, long);
    assert.ok(e.message.length < 600);
  });
});

describe("isNotFoundError", () => {
  it("recognises legacy and nft wordings", () => {
    assert.ok(isNotFoundError("iptables: No chain/target/match by that name."));
    assert.ok(isNotFoundError("iptables: Bad rule (does a matching rule exist in that chain?)."));
    assert.ok(isNotFoundError("iptables v1.8.9 (nf_tables): Chain 'KUBE-NOPE' does not exist"));
    assert.ok(isNotFoundError("Couldn't load target `KUBE-NOPE':No such file or directory"));
    assert.ok(!isNotFoundError("iptables: Chain already exists."));
  });
});

describe("RestoreError with a chunked payload", () => {
  it("finds the failing line's text and the committed transactions across chunks", () => {
    const lines = [
      "*nat",
      ":A1 - [0:0]",
      "-A A1 -j RETURN",
      "COMMIT",
      "*nat",
      ":A2 - [0:0]",
      "-A A2 -p tcp -j NOPE",
      "COMMIT",
    ];
    const joined = lines.map((l) => `${l}\n`).join("");
    for (let n = 1; n <= lines.length; n++) {
      const stderr = `iptables-restore v1.8.9 (nf_tables): \nline ${n}: something failed\n`;
      const want = parseRestoreFailure(stderr, joined);
      assert.equal(want.lineText, lines[n - 1]);
      for (let cut = 1; cut < lines.length; cut++) {
        const chunks = [lines.slice(0, cut), lines.slice(cut)].map((p) => p.map((l) => `${l}\n`).join(""));
        assert.deepEqual(parseRestoreFailure(stderr, chunks), want, `line ${n}, cut ${cut}`);
      }
    }
    const e = new RestoreError("IPv4", 1, "Chain 'NOPE' does not exist\nError occurred at line: 8\n", [
      "*nat\n:A1 - [0:0]\n-A A1 -j RETURN\nCOMMIT\n",
      "*nat\n:A2 - [0:0]\n-A A2 -p tcp -j NOPE\nCOMMIT\n",
    ]);
    assert.equal(e.line, 7);
    assert.equal(e.lineText, "-A A2 -p tcp -j NOPE");
    assert.equal(e.committedTransactions, 1);
    assert.match(e.message, /line 7: -A A2 -p tcp -j NOPE: Chain 'NOPE' does not exist/);
    assert.equal(parseRestoreFailure("line 99: x\n", ["*nat\n", "COMMIT\n"]).lineText, null);
  });
});

describe("RestoreError with a lazily generated payload", () => {
  it("re-iterates a re-iterable payload to find the failing line", () => {
    const payload = {
      *[Symbol.iterator]() {
        yield "*nat\n:A1 - [0:0]\n";
        yield "-A A1 -p tcp --dport 99999 -j RETURN\nCOMMIT\n";
      },
    };
    const e = new RestoreError(
      "IPv4",
      2,
      "invalid port/service `99999' specified\nError occurred at line: 3\n",
      payload,
    );
    assert.equal(e.line, 3);
    assert.equal(e.lineText, "-A A1 -p tcp --dport 99999 -j RETURN");
  });
});
