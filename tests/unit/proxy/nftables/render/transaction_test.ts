import { test } from "node:test";
import assert from "node:assert/strict";
import {
  joinTransactionChunks,
  NftTransaction,
} from "../../../../../lib/proxy/nftables/render/transaction.ts";

test("NftTransaction: commands across many blocks keep their order, count and text", () => {
  const tx = new NftTransaction("ip", "kube-proxy");
  const want: string[] = [];
  // Enough commands for several joined blocks and a partial last one, at every block boundary.
  for (let i = 0; i < 10_000; i++) {
    if (i % 3 === 0) {
      tx.addChain(`chain-${i}`);
      want.push(`add chain ip kube-proxy chain-${i}`);
    } else {
      tx.addRule(`chain-${i - (i % 3)}`, `ip daddr 10.0.${i >> 8}.${i & 255} drop`, `c ${i}`);
      want.push(
        `add rule ip kube-proxy chain-${i - (i % 3)} ip daddr 10.0.${i >> 8}.${
          i & 255
        } drop comment "c ${i}"`,
      );
    }
    if (i === 4095 || i === 4096 || i === 8191 || i === 9999) {
      assert.equal(tx.operations, i + 1);
      assert.deepEqual(tx.lines(), want);
      assert.equal(tx.toString(), want.join("\n") + "\n");
      // Chunks of whole lines without their last newline, 4096 commands each but the last.
      const chunks = tx.chunks();
      assert.equal(chunks.length, Math.ceil((i + 1) / 4096));
      assert.deepEqual(
        chunks.map((c) => c.split("\n").length),
        chunks.map((_, k) => Math.min(4096, i + 1 - k * 4096)),
      );
      assert.equal(joinTransactionChunks(chunks), tx.toString());
    }
  }
});

test("NftTransaction: an empty transaction is the empty string", () => {
  const tx = new NftTransaction("ip6", "kube-proxy");
  assert.equal(tx.toString(), "");
  assert.deepEqual(tx.lines(), []);
  assert.deepEqual(tx.chunks(), []);
  assert.equal(joinTransactionChunks([]), "");
  assert.equal(tx.operations, 0);
});
