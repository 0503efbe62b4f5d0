/**
 * The --dry-run host of the nftables mode: prints each transaction as the `nft -f -` input it would be,
 * headed by a comment line. Reads nothing from the kernel (so it needs no root): every sync is rendered
 * as if the table did not exist, and there are no drift checks.
 */
import type { IPFamily } from "../types.ts";
import type { NftablesHost } from "./backend.ts";
import { type NftTransactionText, streamedChunks } from "./render/transaction.ts";

/** A host that writes each transaction to `write`. */
export function createNftDryRunHost(family: IPFamily, write: (text: string) => void): NftablesHost {
  return {
    apply(transaction: NftTransactionText): Promise<void> {
      write(`# nft -f - <<EOF (${family})\n`);
      // (An empty transaction still prints its empty line.)
      const chunks = streamedChunks(transaction);
      for (const chunk of chunks.length === 0 ? ["\n"] : chunks) write(chunk);
      write("# EOF\n");
      return Promise.resolve();
    },
    listObjects: () => Promise.resolve(null),
    foreignCommits: () => Promise.resolve(null),
    checkDrift: () => Promise.resolve(null),
  };
}
