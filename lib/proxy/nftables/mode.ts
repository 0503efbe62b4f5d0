/**
 * The nftables proxy mode as the composition root sees it: the start checks (nft version, kernel
 * features), which families this host can program (IPv6 when the kernel accepts the probe in `ip6`), one
 * {@link NftablesBackend} per family on a real host or a printing one in --dry-run, and `--cleanup`.
 */
import type { IPFamily } from "../types.ts";
import type { BackendContext, Provider, ProxyBackend } from "../provider.ts";
import { NftablesBackend, type NftablesHost } from "./backend.ts";
import { createNftDryRunHost } from "./dry_run_host.ts";
import { createNftRunner, NftError, type NftRunner, nftVersionOutput } from "./runner.ts";
import { nftVersionProblem } from "./version.ts";
import { featureProbeTransaction } from "./features.ts";
import { nftablesHost } from "./host.ts";
import { openNftSession } from "./nft_session.ts";
import { infoV } from "../../log.ts";
import { NftGenerationTracker } from "./generation.ts";
import { type NftNetlinkReader, openNftNetlink } from "../../runtime/nft_netlink.ts";
import { cleanupLine, cleanupNftables } from "./cleanup.ts";
import { featureEnabled } from "../../config/feature_gates.ts";
import { parseCIDR } from "../../net/go_net.ts";
import { SpawnError } from "../../runtime/process_groups.ts";
import type { KubeProxyConfiguration } from "../../config/types.ts";
import { defaultConfig } from "../../config/defaults.ts";

/**
 * Checks nft and the kernel before anything is programmed: `nft --version` at least the minimum, and the
 * feature probe accepted for IPv4. Throws one line naming what is missing. Returns whether IPv6 works.
 */
export async function checkNftablesSupport(runner: NftRunner, nft = "nft"): Promise<{ ipv6: boolean }> {
  let version: string;
  try {
    version = await nftVersionOutput(nft);
  } catch (e) {
    if (e instanceof SpawnError) {
      throw new Error(`nftables mode: ${nft} not found or not runnable: ${e.message}`);
    }
    throw new Error(`nftables mode: ${(e as Error).message}`);
  }
  const problem = nftVersionProblem(version);
  if (problem !== null) throw new Error(`nftables mode: ${problem}`);
  try {
    await runner.check(featureProbeTransaction("ip"));
  } catch (e) {
    const why = e instanceof NftError
      ? e.result.stderr.trim().split("\n").slice(0, 2).join(" | ")
      : String(e);
    throw new Error(`nftables mode: the kernel rejects a needed nftables feature (ip family): ${why}`);
  }
  const ipv6 = await runner.check(featureProbeTransaction("ip6")).then(() => true, () => false);
  return { ipv6 };
}

/**
 * The mode's sync periods: the `nftables` section, except that upstream's --iptables-sync-period and
 * --iptables-min-sync-period flags set the mode-neutral period (they land in the `iptables` section
 * here), so an `iptables` value other than the default wins.
 */
export function nftablesSyncPeriods(
  config: KubeProxyConfiguration,
): { minSyncPeriodMs: number; syncPeriodMs: number } {
  const d = defaultConfig();
  return {
    minSyncPeriodMs: config.iptables.minSyncPeriod !== d.iptables.minSyncPeriod
      ? config.iptables.minSyncPeriod
      : config.nftables.minSyncPeriod,
    syncPeriodMs: config.iptables.syncPeriod !== d.iptables.syncPeriod
      ? config.iptables.syncPeriod
      : config.nftables.syncPeriod,
  };
}

/** A fresh nftables mode. `runnerFactory` makes the writer (the simple `nft -f -` one by default). */
export function createNftablesBackend(
  runnerFactory: () => NftRunner = () => createNftRunner(),
): ProxyBackend {
  let runner: NftRunner | null = null;
  let generations: NftGenerationTracker | null = null;
  let netlink: NftNetlinkReader | null = null;
  return {
    syncPeriods: (config) => nftablesSyncPeriods(config),

    async families({ config, dryRun, log }: BackendContext): Promise<IPFamily[]> {
      if (dryRun) {
        const v6 = config.clusterCIDR.split(",").some((c) => parseCIDR(c.trim())?.family === 6);
        return v6 ? ["IPv4", "IPv6"] : ["IPv4"];
      }
      runner = runnerFactory();
      const { ipv6 } = await checkNftablesSupport(runner);
      runner = await withSessionWriter(runner, (m) => log.info(m));
      netlink = await openNftNetlink().catch(() => null);
      if (netlink === null) {
        log.info("nftables drift checks read the table through nft every time (no netlink reads here)");
      } else generations = new NftGenerationTracker(netlink);
      return ipv6 ? ["IPv4", "IPv6"] : ["IPv4"];
    },

    provider(family: IPFamily, ctx: BackendContext): Promise<Provider> {
      const { config, dryRun, log } = ctx;
      let host: NftablesHost;
      if (dryRun) host = createNftDryRunHost(family, ctx.out);
      else host = nftablesHost(runner ??= runnerFactory(), family, generations, netlink);
      return Promise.resolve(
        new NftablesBackend({
          family,
          nodeName: ctx.nodeName,
          host,
          log,
          metrics: ctx.metrics,
          // Upstream's --masquerade-all sets the mode-neutral value; here it lands in iptables.masqueradeAll.
          masqueradeAll: config.nftables.masqueradeAll || config.iptables.masqueradeAll,
          masqueradeBit: config.nftables.masqueradeBit,
          nodePortAddresses: config.nodePortAddresses ?? [],
          preferSameTrafficDistribution: featureEnabled(config.featureGates, "PreferSameTrafficDistribution"),
          nodeIPs: () => ctx.nodeIPs(family),
          primaryNodeIP: () => ctx.primaryNodeIP(family),
        }),
      );
    },

    async cleanup(log): Promise<number> {
      return await cleanupNftablesLeftovers(log, runnerFactory());
    },
  };
}

/**
 * `runner` with its transactions sent through an nft session (libnftables in-process where
 * the runtime has one, else `nft -f -`); listings and checks stay on `runner`. Unchanged when no session
 * opens.
 */
export async function withSessionWriter(runner: NftRunner, info: (m: string) => void): Promise<NftRunner> {
  const session = await openNftSession({
    onFallback: (reason) =>
      infoV(4, "nftables transaction not encodable as netlink, applied through nft", "reason", reason),
  }).catch(() => null);
  if (session === null) return runner;
  const others = session.lib === null ? "nft -f -" : "a libnftables session";
  info(
    `nftables transactions go through ${
      session.netlink === null ? others : `netlink batches (${others} for statements they do not encode)`
    }`,
  );
  return { ...runner, run: (transaction) => session.run(transaction) };
}

/**
 * Deletes table `kube-proxy` in both families (upstream nftables CleanupLeftovers). A host without nft
 * has nothing to clean. Returns the exit code (1 when a deletion failed).
 */
export async function cleanupNftablesLeftovers(
  log: { info(msg: string): void; warn(msg: string): void },
  runner: NftRunner = createNftRunner(),
): Promise<number> {
  try {
    const { report, failed } = await cleanupNftables(runner);
    (failed ? log.warn : log.info)(cleanupLine(report));
    return failed ? 1 : 0;
  } catch (e) {
    if (e instanceof SpawnError) {
      log.info(`nftables cleanup: skipped: nft not runnable (${e.code ?? e.message})`);
      return 0;
    }
    throw e;
  }
}
