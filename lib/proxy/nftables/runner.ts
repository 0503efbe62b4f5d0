/**
 * The narrow interface between the nftables backend and the `nft` binary, and its simple implementation:
 * one `nft -f -` process per transaction, the transaction streamed on stdin. A faster writer (for example
 * a long-lived nft process) implements the same interface and is swapped in by the mode.
 */
import { runInProcessGroup, type RunResult } from "../../runtime/process_groups.ts";
import { type NftFamily, type NftTransactionText, streamedChunks } from "./render/transaction.ts";
import { KUBE_PROXY_TABLE } from "./render/names.ts";
import { copyOf } from "./drift.ts";

/** How long one nft command may run before its process group is killed. */
const NFT_TIMEOUT_MS = 120_000;

/** Chains and sets of one table, as `nft list chains` / `nft list sets` name them. */
export interface NftTableObjects {
  readonly chains: readonly string[];
  readonly sets: readonly string[];
}

/** Runs nft commands. Every method throws {@link NftError} when nft fails. */
export interface NftRunner {
  /** Applies one transaction atomically (`nft -f -`); chunks of whole lines are streamed in order. */
  run(transaction: NftTransactionText): Promise<void>;
  /** Checks a transaction without applying it (`nft -c -f -`). */
  check(transaction: string): Promise<void>;
  /**
   * Runs read-only commands (`list ...`, `get element ...`) as one `nft -a -f -` and returns the output;
   * throws when any of them fails (a missing table, chain or element).
   */
  read(commands: string): Promise<string>;
  /** Chains and sets of table `kube-proxy` in `family`, or null when the table does not exist. */
  listObjects(family: NftFamily): Promise<NftTableObjects | null>;
  /** Deletes table `kube-proxy` of `family`; false when it did not exist. */
  deleteTable(family: NftFamily): Promise<boolean>;
}

/** nft failed: `stderr` holds nft's own message (the failing command and a caret line). */
export class NftError extends Error {
  constructor(readonly what: string, readonly result: RunResult) {
    super(`${what}: ${result.exit}: ${firstLines(result.stderr)}`);
    this.name = "NftError";
  }
  /** nft said the object does not exist (ENOENT). */
  get notFound(): boolean {
    return /No such file or directory/.test(this.result.stderr);
  }
}

function firstLines(text: string): string {
  return text.trim().split("\n").slice(0, 3).join(" | ");
}

/** Names declared as `chain NAME {` / `set NAME {` at one level inside `table <family> kube-proxy`. */
export function parseListedNames(output: string, kind: "chain" | "set", family: NftFamily): string[] {
  const out: string[] = [];
  let inTable = false;
  for (const line of output.split("\n")) {
    const t = /^table (\S+) (\S+) \{/.exec(line);
    if (t !== null) {
      inTable = t[1] === family && t[2] === KUBE_PROXY_TABLE;
      continue;
    }
    if (!inTable) continue;
    const m = /^\t(chain|set|map) (\S+) \{/.exec(line);
    // Copied: the names outlive the listing (stale chains wait for deletion), the listing need not.
    if (m !== null && m[1] === kind) out.push(copyOf(m[2]));
  }
  return out;
}

/**
 * The `nft` binary through runInProcessGroup, one process per call. `command` is how nft is invoked
 * (default `nft`; e.g. `ip netns exec <ns> nft` in tests).
 */
export function createNftRunner(command: readonly string[] = ["nft"]): NftRunner {
  const exec = async (args: string[], what: string, stdin: string | readonly string[] | null) => {
    const r = await runInProcessGroup([...command, ...args], { stdin, timeoutMs: NFT_TIMEOUT_MS });
    if (r.code !== 0) throw new NftError(what, r);
    return r.stdout.toString("utf8");
  };
  return {
    async run(transaction) {
      await exec(["-f", "-"], "nft -f -", streamedChunks(transaction));
    },
    async check(transaction) {
      await exec(["-c", "-f", "-"], "nft -c -f -", transaction);
    },
    read(commands) {
      return exec(["-a", "-f", "-"], "nft -a -f - (read)", commands);
    },
    async listObjects(family) {
      // `list chains` / `list sets` print declarations only (no rules, no elements); the table may not exist.
      const [chains, sets] = await Promise.all([
        exec(["list", "chains", family], `nft list chains ${family}`, null),
        exec(["list", "sets", family], `nft list sets ${family}`, null),
      ]);
      if (!new RegExp(`^table ${family} ${KUBE_PROXY_TABLE} \\{`, "m").test(chains)) return null;
      return {
        chains: parseListedNames(chains, "chain", family),
        sets: parseListedNames(sets, "set", family),
      };
    },
    async deleteTable(family) {
      try {
        await exec(["delete", "table", family, KUBE_PROXY_TABLE], `nft delete table ${family}`, null);
        return true;
      } catch (e) {
        if (e instanceof NftError && e.notFound) return false;
        throw e;
      }
    },
  };
}

/** `nft --version` output, or throws naming the binary when it cannot run. */
export async function nftVersionOutput(nft = "nft"): Promise<string> {
  const r = await runInProcessGroup([nft, "--version"], { timeoutMs: 10_000 });
  if (r.code !== 0) throw new NftError(`${nft} --version`, r);
  return r.stdout.toString("utf8");
}
