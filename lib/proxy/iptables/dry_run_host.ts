/**
 * The --dry-run host: prints what a sync would apply instead of applying it. Reads nothing from the
 * kernel (so it needs no root): no stale-chain detection, no drift checks.
 */
import type { IPFamily } from "../types.ts";
import { IPTABLES_JUMP_RULES, jumpRuleArgs } from "./jump_rules_table.ts";
import type { IptablesHost } from "./backend.ts";

/** Quotes an argument for a POSIX shell when it needs it, so the printed commands can be pasted. */
function shellQuote(arg: string): string {
  return /^[A-Za-z0-9_./:,=+-]+$/.test(arg) ? arg : `'${arg.replaceAll("'", `'\\''`)}'`;
}

/** Creates a host that writes each payload, headed by a comment naming the family, to `write`. */
export function createDryRunHost(family: IPFamily, write: (text: string) => void): IptablesHost {
  const bin = family === "IPv4" ? "iptables" : "ip6tables";
  return {
    restore(payload: string | Iterable<string>): Promise<void> {
      // Chunk by chunk: a 10k-Service payload is never joined into one string just to be printed.
      write(`# ${bin}-restore -w 5 -W 100000 --noflush --counters <<EOF\n`);
      for (const chunk of typeof payload === "string" ? [payload] : payload) write(chunk);
      write("# EOF\n");
      return Promise.resolve();
    },
    natChains: () => Promise.resolve(null),
    ensureBaseRules(): Promise<void> {
      const lines = IPTABLES_JUMP_RULES.map((r) =>
        `# ${bin} -w 5 -W 100000 -t ${r.table} -I ${r.fromChain} ${jumpRuleArgs(r).map(shellQuote).join(" ")}`
      );
      write(`# jump rules ensured on full syncs (${family}):\n${lines.join("\n")}\n`);
      return Promise.resolve();
    },
    checkDrift: () => Promise.resolve(null),
  };
}
