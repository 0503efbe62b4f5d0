import { test } from "node:test";
import assert from "node:assert/strict";
import {
  joinTransactionChunks,
  NftTransaction,
  streamedChunks,
  transactionLength,
  transactionString,
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

test("a transaction as chunks of whole lines: streamed with the missing newlines, its length and text as joined", () => {
  const chunks = ["add table ip t", "", "add chain ip t a\nadd chain ip t b", "flush chain ip t a\n"];
  const text = "add table ip t\nadd chain ip t a\nadd chain ip t b\nflush chain ip t a\n";
  // No chunk is copied: each is streamed as it is, a lone newline after those without one.
  assert.deepEqual(streamedChunks(chunks), [chunks[0], "\n", chunks[2], "\n", chunks[3]]);
  assert.equal(streamedChunks(chunks)[2], chunks[2]);
  assert.equal(transactionString(chunks), text);
  assert.equal(transactionLength(chunks), text.length);
  assert.equal(transactionString(text), text);
  assert.equal(transactionLength(text), text.length);
  assert.deepEqual(streamedChunks(""), []);
  assert.deepEqual(streamedChunks([]), []);
  assert.equal(transactionLength([]), 0);
  // A renderer's chunks read as its joined text.
  const tx = new NftTransaction("ip", "t");
  for (let i = 0; i < 5000; i++) tx.addChain(`c${i}`);
  assert.equal(transactionString(tx.chunks()), tx.toString());
  assert.equal(transactionLength(tx.chunks()), tx.toString().length);
});
