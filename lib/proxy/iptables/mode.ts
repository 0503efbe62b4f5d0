/**
 * The iptables proxy mode as the composition root sees it: which families this host can program (IPv6
 * when ip6tables works), one {@link IptablesBackend} per family on a real host or a printing one in
 * --dry-run, and `--cleanup`.
 */
import type { IPFamily } from "../types.ts";
import type { BackendContext, Provider, ProxyBackend } from "../provider.ts";
import type { IptablesRunner } from "./runner.ts";
import { IptablesBackend, type IptablesHost } from "./backend.ts";
import { createDryRunHost } from "./dry_run_host.ts";
import { featureEnabled } from "../../config/feature_gates.ts";
import { parseCIDR } from "../../net/go_net.ts";

/** A fresh iptables mode (it keeps the IPv6 runner its family probe created, so ip6tables is probed once). */
export function createIptablesBackend(): ProxyBackend {
  let ip6Runner: IptablesRunner | null = null;
  return {
    syncPeriods: (config) => ({
      minSyncPeriodMs: config.iptables.minSyncPeriod,
      syncPeriodMs: config.iptables.syncPeriod,
    }),

    async families({ config, dryRun }: BackendContext): Promise<IPFamily[]> {
      // IPv4 always; IPv6 when the host can program it (or, in dry-run, when configured).
      if (dryRun) {
        const v6 = config.clusterCIDR.split(",").some((c) => parseCIDR(c.trim())?.family === 6);
        return v6 ? ["IPv4", "IPv6"] : ["IPv4"];
      }
      const { usableIp6tablesRunner } = await import("./host.ts");
      ip6Runner = await usableIp6tablesRunner();
      return ip6Runner ? ["IPv4", "IPv6"] : ["IPv4"];
    },

    async provider(family: IPFamily, ctx: BackendContext): Promise<Provider> {
      const { config, dryRun, log } = ctx;
      let host: IptablesHost;
      let features = {
        randomFully: true,
        nfacct: false,
        dropInvalid: !config.conntrack.tcpBeLiberal,
        preferSameTrafficDistribution: featureEnabled(config.featureGates, "PreferSameTrafficDistribution"),
      };
      if (dryRun) {
        host = createDryRunHost(family, ctx.out);
      } else {
        const { createIptablesHost } = await import("./host.ts");
        const h = await createIptablesHost(
          family,
          (m) => log.warn(m),
          family === "IPv6" ? ip6Runner ?? undefined : undefined,
        );
        host = h.host;
        features = { ...features, randomFully: h.randomFully };
      }
      return new IptablesBackend({
        family,
        nodeName: ctx.nodeName,
        host,
        log,
        metrics: ctx.metrics,
        masqueradeAll: config.iptables.masqueradeAll,
        masqueradeBit: config.iptables.masqueradeBit,
        localhostNodePorts: config.iptables.localhostNodePorts,
        nodePortAddresses: config.nodePortAddresses ?? [],
        features,
        nodeIPs: () => ctx.nodeIPs(family),
        primaryNodeIP: () => ctx.primaryNodeIP(family),
      });
    },

    async cleanup(log): Promise<number> {
      const { cleanupAll } = await import("./host.ts");
      return await cleanupAll((m) => log.info(m), (m) => log.warn(m));
    },
  };
}
