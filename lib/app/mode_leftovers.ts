/**
 * Switching proxy modes (upstream platformCleanup in cmd/kube-proxy/app/server_linux.go): a mode starting
 * on a host removes what the other modes left there (iptables mode's KUBE-* chains and jump rules when
 * nftables starts, nftables' `kube-proxy` tables when iptables starts, IPVS mode's virtual servers,
 * kube-ipvs0, ipsets and chains when iptables or nftables starts), so packets never pass both; and
 * `--cleanup` removes what every mode left. Each mode's own `cleanup` does the work, except between the
 * two modes whose iptables chains share names (iptables and ipvs): there only what the other mode alone
 * owns may go, or a restart would tear down the starting mode's own rules.
 */
import { PROXY_BACKENDS } from "./backends.ts";
import { cleanupIpvsLeftovers } from "../proxy/ipvs/leftovers.ts";
import { createIpvsLeftoverHost } from "../proxy/ipvs/host.ts";

type CleanupLog = { info(msg: string): void; warn(msg: string): void };

/** One mode's cleanup as another mode's start runs it; null: nothing to run. */
export type LeftoverCleanup = ((log: CleanupLog) => Promise<number>) | null;

/**
 * What starting `starting` runs for `other`:
 * - ipvs: only IPVS mode's own part (its virtual servers, kube-ipvs0, its sets, the rules matching them
 *   and the IPVS-only chains; lib/proxy/ipvs/leftovers.ts), never the chains it shares with iptables mode;
 * - iptables when ipvs starts: nothing before the first sync (upstream skips it too: both are
 *   "iptables-based"); IPVS mode's first sync redeclares the shared chains, which cuts iptables mode's
 *   service chains off, and then removes them (removeIptablesModeLeftovers, lib/proxy/ipvs/leftovers.ts);
 * - otherwise the other mode's `--cleanup`.
 */
export function leftoverCleanup(starting: string, other: string): LeftoverCleanup {
  if (other === "ipvs") return (log) => cleanupIpvsLeftovers(log, createIpvsLeftoverHost(), { all: false });
  if (other === "iptables" && starting === "ipvs") return null;
  return (log) => PROXY_BACKENDS[other]().cleanup(log);
}

/**
 * The other modes in the order their leftovers go: IPVS mode first (its chains jump into the shared
 * KUBE-MARK-MASQ and its rules hold its ipsets, so iptables mode's cleanup could not delete those before).
 */
function othersInOrder(own: string): string[] {
  const names = Object.keys(PROXY_BACKENDS).filter((n) => n !== own);
  return [...names.filter((n) => n === "ipvs"), ...names.filter((n) => n !== "ipvs")];
}

/** Modes whose leftovers live in nftables tables of their own: their cleanup touches nothing the others' does. */
const OWN_TABLE_MODES: ReadonlySet<string> = new Set(["nftables"]);

/**
 * Runs the cleanup of every mode except `mode` ("" is iptables). The iptables-based modes' cleanups run one
 * after another in `othersInOrder`'s order (they edit the same tables); nftables mode's runs beside them
 * (its own tables only). A failure is logged, never fatal: the mode starting works regardless, and
 * upstream only logs these too. `cleanupFor` is for tests.
 */
export async function cleanupOtherModes(
  mode: string,
  log: CleanupLog,
  cleanupFor: (starting: string, other: string) => LeftoverCleanup = leftoverCleanup,
): Promise<void> {
  const own = mode === "" ? "iptables" : mode;
  const runOne = async (name: string) => {
    const cleanup = cleanupFor(own, name);
    if (cleanup === null) return;
    try {
      const code = await cleanup(log);
      if (code !== 0) log.warn(`leftovers of ${name} mode: cleanup exited ${code}`);
    } catch (e) {
      log.warn(`leftovers of ${name} mode: ${(e as Error).message}`);
    }
  };
  const others = othersInOrder(own);
  const inSequence = async () => {
    for (const name of others.filter((n) => !OWN_TABLE_MODES.has(n))) await runOne(name);
  };
  await Promise.all([inSequence(), ...others.filter((n) => OWN_TABLE_MODES.has(n)).map(runOne)]);
}

/**
 * `--cleanup`: IPVS mode's first (see othersInOrder), then the mode's own, then every other mode's.
 * Returns the worst exit code.
 */
export async function cleanupAllModes(mode: string, log: CleanupLog): Promise<number> {
  const own = mode === "" ? "iptables" : mode;
  const order = [...new Set([...othersInOrder("").filter((n) => n === "ipvs"), own, ...othersInOrder(own)])];
  let code = 0;
  for (const name of order) {
    try {
      code = Math.max(code, await PROXY_BACKENDS[name]().cleanup(log));
    } catch (e) {
      log.warn(`cleanup of ${name} mode: ${(e as Error).message}`);
      code = 1;
    }
  }
  return code;
}
