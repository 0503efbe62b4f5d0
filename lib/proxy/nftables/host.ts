/**
 * The real host side of the nftables backend: one family of table `kube-proxy` through an
 * {@link NftRunner} — transactions, the chain and set names for full syncs, and the drift check.
 */
import type { IPFamily } from "../types.ts";
import type { NftablesHost } from "./backend.ts";
import { NftError, type NftRunner } from "./runner.ts";
import { nftFamily } from "./render/render.ts";
import { compareRuleCounts, driftReads, parseChainRuleCounts } from "./drift.ts";
import { KUBE_PROXY_TABLE } from "./render/names.ts";

/** Adapts an NftRunner to the backend's host interface for `family`. */
export function nftablesHost(runner: NftRunner, family: IPFamily): NftablesHost {
  const fam = nftFamily(family);
  let cursor = 0;
  return {
    apply: (transaction) => runner.run(transaction),
    listObjects: () => runner.listObjects(fam),
    async checkDrift(expected, samples) {
      if (expected.size === 0) return null;
      const reads = driftReads(fam, expected, samples, cursor++);
      let outputs: string[];
      try {
        outputs = await Promise.all(reads.batches.map((b) => runner.read(b)));
      } catch (e) {
        if (!(e instanceof NftError)) throw e;
        // A read failed: the table, a fixed chain or a sampled element is gone.
        const tableGone = await runner.listObjects(fam).then((o) => o === null, () => false);
        if (tableGone) return `table ${fam} ${KUBE_PROXY_TABLE} is gone`;
        return `nft cannot read what was programmed: ${e.result.stderr.trim().split("\n")[0]}`;
      }
      const checked = new Map(reads.chains.map((c) => [c, expected.get(c)!]));
      const diffs = compareRuleCounts(checked, parseChainRuleCounts(outputs.join("\n")));
      return diffs.length === 0 ? null : diffs.join("; ");
    },
  };
}
