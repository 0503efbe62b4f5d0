/**
 * The real host side of the nftables backend: one family of table `kube-proxy` through an
 * {@link NftRunner} — transactions, the chain and set names for full syncs, and the drift check. With a
 * generation tracker (shared by both families), transactions are committed through it and the backend
 * learns whether anyone else changed the ruleset since, without reading it.
 */
import type { IPFamily } from "../types.ts";
import type { NftablesHost } from "./backend.ts";
import { NftError, type NftRunner } from "./runner.ts";
import { nftFamily } from "./render/render.ts";
import {
  compareMapSizes,
  compareRuleCounts,
  driftReads,
  parseChainRuleCounts,
  parseMapSizes,
} from "./drift.ts";
import { KUBE_PROXY_TABLE } from "./render/names.ts";
import type { NftGenerationTracker } from "./generation.ts";

/**
 * Adapts an NftRunner to the backend's host interface for `family`; `generations` (optional) tracks
 * foreign commits for the drift check.
 */
export function nftablesHost(
  runner: NftRunner,
  family: IPFamily,
  generations: NftGenerationTracker | null = null,
): NftablesHost {
  const fam = nftFamily(family);
  return {
    apply: (transaction) =>
      generations === null ? runner.run(transaction) : generations.commit(() => runner.run(transaction)),
    foreignCommits: () => generations?.foreignCommits() ?? Promise.resolve(null),
    listObjects: () => runner.listObjects(fam),
    async checkDrift(expected, maps) {
      if (expected.size === 0) return null;
      const reads = driftReads(fam, expected);
      let outputs: string[];
      try {
        outputs = await Promise.all(reads.batches.map((b) => runner.read(b)));
      } catch (e) {
        if (!(e instanceof NftError)) throw e;
        // A read failed: the table, the chain or a map is gone.
        const tableGone = await runner.listObjects(fam).then((o) => o === null, () => false);
        if (tableGone) return `table ${fam} ${KUBE_PROXY_TABLE} is gone`;
        return `nft cannot read what was programmed: ${e.result.stderr.trim().split("\n")[0]}`;
      }
      const text = outputs.join("\n");
      const checked = new Map(reads.chains.map((c) => [c, expected.get(c)!]));
      const diffs = [
        ...compareRuleCounts(checked, parseChainRuleCounts(text)),
        ...compareMapSizes(maps, parseMapSizes(text)),
      ];
      return diffs.length === 0 ? null : diffs.join("; ");
    },
  };
}
