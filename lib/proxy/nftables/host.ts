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
import type { NftFamily } from "./render/transaction.ts";
import {
  compareMapSizes,
  compareRuleCounts,
  driftReads,
  parseChainRuleCounts,
  parseMapSizes,
} from "./drift.ts";
import { KUBE_PROXY_TABLE } from "./render/names.ts";
import type { NftGenerationTracker } from "./generation.ts";
import type { NftNetlinkReader } from "../../runtime/nft_netlink.ts";

/**
 * Adapts an NftRunner to the backend's host interface for `family`. Optional: `generations` tracks
 * foreign commits (the drift check then reads nothing while there were none); `netlink` reads the
 * drift fingerprint by name from the kernel (milliseconds at 10k Services, where `nft list chain` first
 * reads every chain of the table), with `nft` as the fallback.
 */
export function nftablesHost(
  runner: NftRunner,
  family: IPFamily,
  generations: NftGenerationTracker | null = null,
  netlink: NftNetlinkReader | null = null,
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
      const checked = new Map(reads.chains.map((c) => [c, expected.get(c)!]));
      if (netlink !== null) {
        try {
          return checkByNetlink(netlink, fam, checked, maps);
        } catch {
          // The socket failed: nft can still answer.
        }
      }
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
      const diffs = [
        ...compareRuleCounts(checked, parseChainRuleCounts(text)),
        ...compareMapSizes(maps, parseMapSizes(text)),
      ];
      return diffs.length === 0 ? null : diffs.join("; ");
    },
  };
}

/** The drift check's reads through netlink: table, chains' rule counts, maps' element counts. */
function checkByNetlink(
  netlink: NftNetlinkReader,
  fam: NftFamily,
  chains: ReadonlyMap<string, number>,
  maps: ReadonlyMap<string, number>,
): string | null {
  if (!netlink.tableExists(fam, KUBE_PROXY_TABLE)) return `table ${fam} ${KUBE_PROXY_TABLE} is gone`;
  const rules = new Map<string, number>();
  for (const c of chains.keys()) {
    if (netlink.chainExists(fam, KUBE_PROXY_TABLE, c)) {
      rules.set(c, netlink.ruleCount(fam, KUBE_PROXY_TABLE, c));
    }
  }
  const sizes = new Map<string, number>();
  for (const m of maps.keys()) sizes.set(m, netlink.elementCount(fam, KUBE_PROXY_TABLE, m) ?? 0);
  const diffs = [...compareRuleCounts(chains, rules), ...compareMapSizes(maps, sizes)];
  return diffs.length === 0 ? null : diffs.join("; ");
}
