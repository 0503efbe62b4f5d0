/**
 * The nft session (lib/proxy/nftables/nft_session.ts) against the real nft in a scratch network
 * namespace, for each writer this runtime has (libnftables through bun:ffi under Bun; `nft -f -`
 * everywhere): transactions apply in order, a bad one fails with nft's error text and leaves the table
 * unchanged, the session keeps working after it, and close() waits for queued work and ends the writer.
 * Skipped when not root or without nft.
 */
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { accessSync, constants } from "node:fs";
import { type Netns, NetnsScope, netnsUnavailableReason } from "../../../support/netns.ts";
import {
  NftSession,
  type NftSessionOptions,
  NftTransactionError,
  openNftSession,
} from "../../../../lib/proxy/nftables/nft_session.ts";
import { liveChildProcesses } from "../../../../lib/runtime/process_groups.ts";

const NFT = "/usr/sbin/nft";

function unavailable(): string {
  try {
    accessSync(NFT, constants.X_OK);
  } catch {
    return `${NFT} not found`;
  }
  return netnsUnavailableReason();
}

const skip = unavailable();
const env = new NetnsScope("nftses");
after(() => env.cleanup());

const isBun = typeof (globalThis as { Bun?: unknown }).Bun !== "undefined";

/** Each writer to test: libnftables only where this runtime can load it. */
const variants: { name: string; libnftables: boolean }[] = [
  { name: "nft -f -", libnftables: false },
  ...(isBun ? [{ name: "libnftables", libnftables: true }] : []),
];

for (const variant of variants) {
  describe(`nft session (${variant.name})`, { skip: skip || undefined }, () => {
    let ns: Netns;
    let opts: NftSessionOptions;
    const list = () => ns.execOk([NFT, "list", "table", "ip", "t"]);

    before(async () => {
      ns = await env.create(variant.libnftables ? "lib" : "proc");
      opts = {
        nftPath: NFT,
        commandPrefix: ns.prefix,
        netnsPath: `/var/run/netns/${ns.name}`,
        libnftables: variant.libnftables,
        // These tests are about the nft writers; the netlink one has its own (netlink/equivalence_test.ts).
        netlink: false,
      };
    });

    test("uses the writer asked for", async () => {
      const s = await openNftSession(opts);
      assert.equal(s.writer, variant.name);
      await s.close();
    });

    test("transactions apply in call order; a bad one fails with nft's text and changes nothing", async () => {
      const s = await openNftSession(opts);
      // Queued without awaiting: the second depends on the first.
      const first = s.run("add table ip t\nadd chain ip t c\n");
      const second = s.run("add rule ip t c ip daddr 10.0.0.1 counter accept\n");
      await Promise.all([first, second]);
      const before = await list();
      assert.match(before, /chain c \{/);
      assert.match(before, /ip daddr 10\.0\.0\.1 counter packets 0 bytes 0 accept/);

      // The first command is fine, the second names a missing chain: the whole transaction fails.
      const bad = "add chain ip t c2\nadd rule ip t nosuch accept\n";
      await assert.rejects(s.run(bad), (e: unknown) => {
        assert.ok(e instanceof NftTransactionError, String(e));
        assert.match(e.message, /No such file or directory/);
        // nft -f - quotes the failing command; libnftables 1.0.6 from a buffer may quote a neighbour.
        if (!variant.libnftables) assert.match(e.message, /add rule ip t nosuch accept/);
        assert.match(e.message, /\^\^\^/);
        assert.equal(e.writer, variant.name);
        assert.equal(e.notFound, true);
        return true;
      });
      assert.equal(await list(), before, "a failed transaction must leave the table unchanged");

      // The session survives the error; chunks are one transaction.
      await s.run(["add chain ip t c3\n", "add rule ip t c3 counter\n"]);
      assert.match(await list(), /chain c3 \{/);
      assert.doesNotMatch(await list(), /chain c2 /);
      // Chunks of whole lines without their last newline, as a render's (NftTransaction.chunks()).
      await s.run(["add chain ip t c4\nadd rule ip t c4 counter", "add chain ip t c5"]);
      assert.match(await list(), /chain c4 \{\n\s+counter/);
      assert.match(await list(), /chain c5 \{/);
      await s.run("delete table ip t\n");
      await s.close();
    });

    test("close() waits for queued transactions, then refuses more and leaves no nft process", async () => {
      const s = await openNftSession(opts);
      const queued = s.run("add table ip t\nadd chain ip t late\n");
      await s.close();
      await queued;
      assert.match(await list(), /chain late \{/);
      await assert.rejects(s.run("add chain ip t after\n"), /nft session is closed/);
      assert.equal(liveChildProcesses(), 0);
      // The libnftables context is freed.
      if (variant.libnftables) assert.throws(() => s.lib!.run("list tables\n"), /context is closed/);
      else assert.equal(s.lib, null);
      assert.ok(s instanceof NftSession);
      await ns.execOk([NFT, "delete", "table", "ip", "t"]);
    });

    test("large transactions go to nft -f - (never block the event loop on a long commit)", async () => {
      const s = await openNftSession({ ...opts, largeTransactionBytes: 64 });
      await s.run("add table ip t\n");
      await s.run(`add chain ip t ${"long".repeat(10)}\nadd chain ip t ${"x".repeat(40)}\n`);
      assert.deepEqual(
        s.counts,
        variant.libnftables ? { "netlink": 0, "libnftables": 1, "nft -f -": 1 } : {
          "netlink": 0,
          "libnftables": 0,
          "nft -f -": 2,
        },
      );
      await s.run("delete table ip t\n");
      await s.close();
    });
  });
}
