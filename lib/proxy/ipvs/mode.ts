/**
 * The IPVS proxy mode as the composition root sees it (upstream NewDualStackProxier / NewProxier for
 * ipvs): the deprecation warning, the IPVS sysctls and timeouts, one {@link IpvsBackend} per family
 * (IPv6 when ip6tables works), and `--cleanup` of what the mode leaves: virtual servers, kube-ipvs0, the
 * chains and jump rules, the ipsets. With --dry-run the providers print what they would write
 * (lib/proxy/ipvs/dry_run.ts) and nothing on the host is read but its addresses, or changed.
 */
import type { IPFamily } from "../types.ts";
import type { BackendContext, Provider, ProxyBackend } from "../provider.ts";
import type { KubeProxyConfiguration } from "../../config/types.ts";
import { createIptablesRunner, type IptablesRunner } from "../iptables/runner.ts";
import { newNodePortAddresses } from "../nodeport_addresses.ts";
import { featureEnabled } from "../../config/feature_gates.ts";
import { ensureSysctl, ProcSysctl, type Sysctl } from "../../host/sysctl.ts";
import { parseCIDR } from "../../net/go_net.ts";
import { IpvsBackend } from "./backend.ts";
import { createIpvsHost, createIpvsLeftoverHost, type IpvsHost } from "./host.ts";
import { cleanupIpvsLeftovers, type IpvsLeftoverHost } from "./leftovers.ts";
import { createDryRunIptablesRunner, createDryRunIpvsHost } from "./dry_run.ts";
import { registerIpvsMetrics } from "./metrics.ts";

/** Upstream's start-up warning: the mode is deprecated in favour of nftables. */
export const IPVS_DEPRECATION_WARNING =
  "The ipvs proxier is now deprecated and may be removed in a future release. Please use 'nftables' instead.";

/** The sysctls upstream's NewProxier ensures, in its order (conn_reuse_mode only before kernel 5.9). */
export function ipvsSysctls(
  config: Pick<KubeProxyConfiguration, "ipvs">,
  kernel: { major: number; minor: number } | null,
): [string, number][] {
  const out: [string, number][] = [["net/ipv4/vs/conntrack", 1]];
  const k = kernel ? kernel.major * 1000 + kernel.minor : null;
  // 4.1 <= kernel < 5.9: conn_reuse_mode=0 (upstream #93297); 5.9 and later: left as-is.
  if (k !== null && k >= 4001 && k < 5009) out.push(["net/ipv4/vs/conn_reuse_mode", 0]);
  out.push(["net/ipv4/vs/expire_nodest_conn", 1], ["net/ipv4/vs/expire_quiescent_template", 1], [
    "net/ipv4/ip_forward",
    1,
  ]);
  if (config.ipvs.strictARP) {
    out.push(["net/ipv4/conf/all/arp_ignore", 1], ["net/ipv4/conf/all/arp_announce", 2]);
  }
  return out;
}

/** "6.1.0-13-amd64" → {6, 1}; null when unreadable. */
export function parseKernelVersion(release: string): { major: number; minor: number } | null {
  const m = /^(\d+)\.(\d+)/.exec(release);
  return m ? { major: Number(m[1]), minor: Number(m[2]) } : null;
}

/** Upstream filterCIDRs: the --ipvs-exclude-cidrs of one family. */
export function excludeCIDRsOf(family: IPFamily, cidrs: readonly string[] | null): string[] {
  return (cidrs ?? []).filter((c) => (parseCIDR(c.trim())?.family === 6) === (family === "IPv6"));
}

/** Options for tests (a fake host, another /proc/sys). */
export interface IpvsModeOptions {
  readonly host?: () => IpvsHost;
  readonly sysctl?: Sysctl;
  readonly kernelRelease?: () => Promise<string>;
  readonly leftoverHost?: () => IpvsLeftoverHost;
}

async function osRelease(): Promise<string> {
  const { release } = await import("node:os");
  return release();
}

/** A fresh IPVS mode. */
export function createIpvsBackend(opts: IpvsModeOptions = {}): ProxyBackend {
  let ip6Runner: IptablesRunner | null = null;
  let prepared: Promise<void> | null = null;
  let host: IpvsHost | null = null;
  const backends = new Map<IPFamily, IpvsBackend>();
  let metricsRegistered = false;
  const prepare = (ctx: BackendContext): Promise<void> =>
    prepared ??= (async () => {
      ctx.log.warn(IPVS_DEPRECATION_WARNING);
      if (ctx.dryRun) return; // no sysctl, no timeouts: the host stays as it is
      const sysctl = opts.sysctl ?? new ProcSysctl();
      const kernel = parseKernelVersion(await (opts.kernelRelease ?? osRelease)());
      for (const [name, value] of ipvsSysctls(ctx.config, kernel)) await ensureSysctl(sysctl, name, value);
      host = (opts.host ?? createIpvsHost)();
      const s = (ms: number) => Math.floor(ms / 1000);
      const { tcpTimeout, tcpFinTimeout, udpTimeout } = ctx.config.ipvs;
      if (tcpTimeout > 0 || tcpFinTimeout > 0 || udpTimeout > 0) {
        try {
          await host.ipvsSetTimeouts(s(tcpTimeout), s(tcpFinTimeout), s(udpTimeout));
        } catch (e) {
          ctx.log.error(`Failed to configure IPVS timeouts: ${(e as Error).message}`);
        }
      }
    })();
  return {
    syncPeriods: (config) => ({
      minSyncPeriodMs: config.ipvs.minSyncPeriod,
      syncPeriodMs: config.ipvs.syncPeriod,
    }),

    async families({ config, dryRun }: BackendContext): Promise<IPFamily[]> {
      // In dry-run, IPv6 when configured (as the iptables mode decides it), nothing probed.
      if (dryRun) {
        const v6 = config.clusterCIDR.split(",").some((c) => parseCIDR(c.trim())?.family === 6);
        return v6 ? ["IPv4", "IPv6"] : ["IPv4"];
      }
      const { usableIp6tablesRunner } = await import("../iptables/host.ts");
      ip6Runner = await usableIp6tablesRunner();
      return ip6Runner ? ["IPv4", "IPv6"] : ["IPv4"];
    },

    async provider(family: IPFamily, ctx: BackendContext): Promise<Provider> {
      await prepare(ctx);
      const { config } = ctx;
      let iptables: IptablesRunner;
      let familyHost: IpvsHost;
      if (ctx.dryRun) {
        const { localAddresses } = await import("../node_addresses.ts");
        iptables = createDryRunIptablesRunner(family, ctx.out);
        familyHost = opts.host?.() ?? createDryRunIpvsHost(family, ctx.out, localAddresses);
      } else {
        iptables = family === "IPv6" && ip6Runner ? ip6Runner : await createIptablesRunner({ family });
        familyHost = host!;
      }
      const backend = new IpvsBackend({
        family,
        nodeName: ctx.nodeName,
        host: familyHost,
        iptables,
        scheduler: config.ipvs.scheduler,
        excludeCIDRs: excludeCIDRsOf(family, config.ipvs.excludeCIDRs),
        masqueradeAll: config.iptables.masqueradeAll,
        masqueradeBit: config.iptables.masqueradeBit,
        nodePortAddresses: newNodePortAddresses(family, config.nodePortAddresses ?? []),
        primaryNodeIP: () => ctx.primaryNodeIP(family),
        preferSameTrafficDistribution: featureEnabled(config.featureGates, "PreferSameTrafficDistribution"),
        metrics: ctx.metrics,
        log: ctx.log,
      });
      backends.set(family, backend);
      if (!metricsRegistered && ctx.registry) {
        metricsRegistered = true;
        registerIpvsMetrics(ctx.registry, () => [...backends]);
      }
      return backend;
    },

    async cleanup(log): Promise<number> {
      return await cleanupIpvs(log, opts.leftoverHost);
    },
  };
}

/** `--cleanup`: upstream's ipvs CleanupLeftovers (every virtual server, kube-ipvs0, the chains, the sets). */
export async function cleanupIpvs(
  log: { info(msg: string): void; warn(msg: string): void },
  makeHost: () => IpvsLeftoverHost = createIpvsLeftoverHost,
): Promise<number> {
  return await cleanupIpvsLeftovers(log, makeHost(), { all: true });
}
