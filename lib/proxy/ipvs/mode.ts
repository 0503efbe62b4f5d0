/**
 * The IPVS proxy mode as the composition root sees it (upstream NewDualStackProxier / NewProxier for
 * ipvs): the deprecation warning, the IPVS sysctls and timeouts, one {@link IpvsBackend} per family
 * (IPv6 when ip6tables works), and `--cleanup` of what the mode leaves: virtual servers, kube-ipvs0, the
 * chains and jump rules, the ipsets.
 */
import type { IPFamily } from "../types.ts";
import type { BackendContext, Provider, ProxyBackend } from "../provider.ts";
import type { KubeProxyConfiguration } from "../../config/types.ts";
import { createIptablesRunner, iptablesArgs, type IptablesRunner } from "../iptables/runner.ts";
import { deleteJumpRule } from "../iptables/jump_rules.ts";
import { newNodePortAddresses } from "../nodeport_addresses.ts";
import { featureEnabled } from "../../config/feature_gates.ts";
import { ensureSysctl, ProcSysctl, type Sysctl } from "../../host/sysctl.ts";
import { parseCIDR } from "../../net/go_net.ts";
import { IPVS_JUMP_RULES, IpvsBackend } from "./backend.ts";
import { createIpvsHost, type IpvsHost } from "./host.ts";
import { DEFAULT_DUMMY_DEVICE, IPVS_CHAINS } from "./chains.ts";
import { ourIpsetNames } from "./ipset_restore.ts";

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
  const prepare = (ctx: BackendContext): Promise<void> =>
    prepared ??= (async () => {
      ctx.log.warn(IPVS_DEPRECATION_WARNING);
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

    async families({ dryRun }: BackendContext): Promise<IPFamily[]> {
      if (dryRun) throw new Error("mode: --dry-run is not implemented for the ipvs proxy mode");
      const { usableIp6tablesRunner } = await import("../iptables/host.ts");
      ip6Runner = await usableIp6tablesRunner();
      return ip6Runner ? ["IPv4", "IPv6"] : ["IPv4"];
    },

    async provider(family: IPFamily, ctx: BackendContext): Promise<Provider> {
      await prepare(ctx);
      const { config } = ctx;
      const iptables = family === "IPv6" && ip6Runner ? ip6Runner : await createIptablesRunner({ family });
      return new IpvsBackend({
        family,
        nodeName: ctx.nodeName,
        host: host!,
        iptables,
        scheduler: config.ipvs.scheduler,
        excludeCIDRs: excludeCIDRsOf(family, config.ipvs.excludeCIDRs),
        masqueradeAll: config.iptables.masqueradeAll,
        masqueradeBit: config.iptables.masqueradeBit,
        nodePortAddresses: newNodePortAddresses(family, config.nodePortAddresses ?? []),
        primaryNodeIP: () => ctx.primaryNodeIP(family),
        preferSameTrafficDistribution: featureEnabled(config.featureGates, "PreferSameTrafficDistribution"),
        log: ctx.log,
      });
    },

    async cleanup(log): Promise<number> {
      return await cleanupIpvs(log, opts.host ?? createIpvsHost);
    },
  };
}

/** Upstream cleanupLeftovers: flush IPVS, delete kube-ipvs0, remove chains and jump rules, destroy sets. */
export async function cleanupIpvs(
  log: { info(msg: string): void; warn(msg: string): void },
  makeHost: () => IpvsHost = createIpvsHost,
): Promise<number> {
  let code = 0;
  const step = async (what: string, f: () => Promise<unknown>) => {
    try {
      await f();
    } catch (e) {
      log.warn(`ipvs cleanup: ${what}: ${(e as Error).message}`);
      code = 1;
    }
  };
  let host: IpvsHost | null = null;
  await step("ipvsadm/ipset/ip", () => Promise.resolve(void (host = makeHost())));
  const { runInProcessGroup } = await import("../../runtime/process_groups.ts");
  const { resolveBinary } = await import("../iptables/runner.ts");
  await step("flush IPVS", async () => {
    const r = await runInProcessGroup([resolveBinary("ipvsadm"), "-C"], { timeoutMs: 60_000 });
    // A kernel without IPVS has no virtual servers to flush (every other mode's start runs this cleanup).
    if (r.code !== 0 && !/Protocol not available/.test(r.stderr)) throw new Error(r.stderr.trim() || r.exit);
  });
  await step(`delete ${DEFAULT_DUMMY_DEVICE}`, async () => {
    const r = await runInProcessGroup([resolveBinary("ip"), "link", "del", DEFAULT_DUMMY_DEVICE], {
      timeoutMs: 60_000,
    });
    if (r.code !== 0 && !/Cannot find device/.test(r.stderr)) throw new Error(r.stderr.trim() || r.exit);
  });
  for (const family of ["IPv4", "IPv6"] as const) {
    let runner: IptablesRunner;
    try {
      runner = await createIptablesRunner({ family });
    } catch {
      continue;
    }
    for (const rule of IPVS_JUMP_RULES) {
      await step(`jump ${rule.fromChain} -> ${rule.toChain}`, () => deleteJumpRule(runner, rule));
    }
    for (const op of ["-F", "-X"]) {
      for (const c of IPVS_CHAINS) {
        const r = await runner.exec(iptablesArgs(runner, op, c.table, c.chain));
        if (r.code !== 0 && !/No chain|does not exist|No such file/.test(r.stderr)) {
          log.warn(`ipvs cleanup: iptables ${op} ${c.table} ${c.chain}: ${r.stderr.trim()}`);
          code = 1;
        }
      }
    }
  }
  if (host) {
    for (const family of ["IPv4", "IPv6"] as const) {
      for (const name of ourIpsetNames(family)) {
        const r = await runInProcessGroup([resolveBinary("ipset"), "destroy", name], { timeoutMs: 60_000 });
        if (r.code !== 0 && !/does not exist/.test(r.stderr)) {
          log.warn(`ipvs cleanup: ipset destroy ${name}: ${r.stderr.trim()}`);
          code = 1;
        }
      }
    }
  }
  log.info(`ipvs cleanup: done (exit ${code})`);
  return code;
}
