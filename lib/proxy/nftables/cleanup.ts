/**
 * Removing what the nftables mode leaves on a host (upstream nftables CleanupLeftovers): table
 * `kube-proxy` in the `ip` and `ip6` families. Used by `--cleanup` and when another mode starts.
 */
import type { NftFamily } from "./render/transaction.ts";
import type { NftRunner } from "./runner.ts";
import { KUBE_PROXY_TABLE } from "./render/names.ts";

/** The families the mode programs. */
export const NFT_FAMILIES: readonly NftFamily[] = ["ip", "ip6"];

/** What one cleanup did per family: "deleted", "absent", or the error. */
export type NftCleanupReport = Record<NftFamily, string>;

/** Deletes table `kube-proxy` in both families; each family is tried even when the other fails. */
export async function cleanupNftables(
  runner: NftRunner,
): Promise<{ report: NftCleanupReport; failed: boolean }> {
  const report = { ip: "", ip6: "" } as NftCleanupReport;
  let failed = false;
  for (const fam of NFT_FAMILIES) {
    try {
      report[fam] = (await runner.deleteTable(fam)) ? "deleted" : "absent";
    } catch (e) {
      failed = true;
      report[fam] = `error: ${(e as Error).message}`;
    }
  }
  return { report, failed };
}

/** One log line for a report. */
export function cleanupLine(report: NftCleanupReport): string {
  return `nftables cleanup: table ip ${KUBE_PROXY_TABLE}: ${report.ip}; table ip6 ${KUBE_PROXY_TABLE}: ${report.ip6}`;
}
