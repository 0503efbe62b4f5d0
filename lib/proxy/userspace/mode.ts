/**
 * The userspace proxy mode as the composition root sees it (`--proxy-mode=userspace`): a round-robin
 * proxy in this process, one {@link UserspaceBackend} per IP family the host has addresses of, steering
 * chosen by `--userspace-portals`.
 */
import type { IPFamily } from "../types.ts";
import type { BackendContext, Provider, ProxyBackend } from "../provider.ts";
import { UserspaceBackend } from "./backend.ts";
import {
  createServiceAddressHost,
  type ServiceAddressHost,
  USERSPACE_INTERFACE,
} from "./interface_addresses.ts";
import { registerUserspaceMetrics } from "./metrics.ts";
import { featureEnabled } from "../../config/feature_gates.ts";
import { localAddresses } from "../node_addresses.ts";
import { runIp } from "./interface_addresses.ts";

/** A fresh userspace mode. */
export function createUserspaceBackend(): ProxyBackend {
  const backends = new Map<IPFamily, UserspaceBackend>();
  let addressHost: Promise<ServiceAddressHost> | null = null;
  let metricsRegistered = false;
  return {
    // Upstream's userspace proxier used the iptables section's periods.
    syncPeriods: (config) => ({
      minSyncPeriodMs: config.iptables.minSyncPeriod,
      syncPeriodMs: config.iptables.syncPeriod,
    }),

    families(ctx: BackendContext): Promise<IPFamily[]> {
      // IPv6 when the host has a global IPv6 address to serve node ports on (or, in dry-run, always IPv4).
      if (ctx.dryRun) return Promise.resolve(["IPv4"]);
      const v6 = localAddresses("IPv6").some((a) => a !== "::1" && !a.startsWith("fe80:"));
      return Promise.resolve(v6 ? ["IPv4", "IPv6"] : ["IPv4"]);
    },

    async provider(family: IPFamily, ctx: BackendContext): Promise<Provider> {
      const { config, log } = ctx;
      const portals = ctx.options?.userspacePortals ?? "none";
      if (portals !== "none") {
        throw new Error(
          `--userspace-portals=${portals} is not implemented yet; use --userspace-portals=none`,
        );
      }
      addressHost ??= createServiceAddressHost((m) => log.warn(m));
      const backend = new UserspaceBackend({
        family,
        nodeName: ctx.nodeName,
        log,
        addresses: await addressHost,
        nodePortAddresses: config.nodePortAddresses ?? [],
        nodeIPs: () => ctx.nodeIPs(family),
        udpIdleTimeoutMs: ctx.options?.udpIdleTimeout,
        categorize: {
          preferSameTrafficDistribution: featureEnabled(config.featureGates, "PreferSameTrafficDistribution"),
        },
      });
      backends.set(family, backend);
      if (!metricsRegistered && ctx.registry) {
        metricsRegistered = true;
        registerUserspaceMetrics(ctx.registry, () => [...backends].map(([f, b]) => [f, b.counters()]));
      }
      return backend;
    },

    async cleanup(log): Promise<number> {
      // The dummy interface holds only service addresses: deleting it removes them all.
      try {
        await runIp(["link", "del", USERSPACE_INTERFACE]);
        log.info(`deleted interface ${USERSPACE_INTERFACE}`);
      } catch (e) {
        if (!/Cannot find device|does not exist/.test((e as Error).message)) {
          log.warn(`cannot delete ${USERSPACE_INTERFACE}: ${(e as Error).message}`);
          return 1;
        }
      }
      return 0;
    },
  };
}
