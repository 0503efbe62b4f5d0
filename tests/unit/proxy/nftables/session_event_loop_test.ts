/**
 * The nft session's writers that block (our netlink batches, libnftables in-process) give the event loop a
 * turn after each transaction: a caller awaiting one transaction after another (a bounded first sync) must
 * not hold timers, sockets and child exits until its last one. Fakes stand in for the socket and the
 * library: what is tested is the session's scheduling, not the kernel.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { NftSession } from "../../../../lib/proxy/nftables/nft_session.ts";
import type { NftBatchSocket } from "../../../../lib/runtime/nft_batch_socket.ts";
import type { LibNftablesContext } from "../../../../lib/runtime/libnftables.ts";

/** A session whose one writer counts its (synchronous) commits. */
function session(writer: "netlink" | "libnftables"): { s: NftSession; commits: () => number } {
  let commits = 0;
  const socket: NftBatchSocket = {
    commit: () => {
      commits++;
      return { errors: [], acknowledged: true };
    },
    close: () => {},
  };
  const lib: LibNftablesContext = {
    run: () => {
      commits++;
      return { ok: true, output: "", error: "" };
    },
    close: () => {},
  };
  const s = writer === "netlink" ? new NftSession({}, null, socket) : new NftSession({}, lib, null);
  return { s, commits: () => commits };
}

describe("nft session and the event loop", () => {
  for (const writer of ["netlink", "libnftables"] as const) {
    test(`${writer}: a timer due before a sequence of transactions runs after the first of them`, async () => {
      const { s, commits } = session(writer);
      assert.equal(s.writer, writer);
      let commitsWhenTimerRan = -1;
      setTimeout(() => commitsWhenTimerRan = commits(), 0);
      for (let i = 0; i < 5; i++) await s.run(`add table ip t${i}\n`);
      assert.equal(commits(), 5);
      assert.equal(commitsWhenTimerRan, 1);
      await s.close();
    });
  }
});
