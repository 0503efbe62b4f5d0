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
  removeLoServiceAddresses,
  type ServiceAddressHost,
  USERSPACE_INTERFACE,
} from "./interface_addresses.ts";
import { registerUserspaceMetrics } from "./metrics.ts";
import { featureEnabled } from "../../config/feature_gates.ts";
import { localAddresses } from "../node_addresses.ts";
import { runIp } from "./interface_addresses.ts";
import type { Steering } from "./backend.ts";
import { PORTAL_CHAINS, portalJumps, renderPortalCleanup } from "./portals.ts";
import { createIptablesRunner, type IptablesRunner } from "../iptables/runner.ts";
import { openFilesLimit } from "../../runtime/rlimit.ts";
import { raiseOpenFilesLimit } from "./open_files_limit.ts";

/** iptables portals of one family: listeners on the node address, rules through iptables-restore. */
async function iptablesSteering(family: IPFamily, ctx: BackendContext): Promise<Steering> {
  const runner = await createIptablesRunner({ family });
  const wildcard = family === "IPv6" ? "::" : "0.0.0.0";
  return {
    kind: "iptables",
    listenIP: () => ctx.primaryNodeIP(family) ?? wildcard,
    restore: (payload) => runner.restore(payload),
    save: () => runner.save("nat"),
    async ensureJumps() {
      for (const j of portalJumps()) {
        const check = await runner.exec(["-w", "5", "-t", "nat", "-C", j.chain, ...j.args]);
        if (check.code === 0) continue;
        // Portal jumps go first; node-port jumps last (upstream's order).
        const where = j.args.includes("addrtype") ? ["-A", j.chain] : ["-I", j.chain, "1"];
        const r = await runner.exec(["-w", "5", "-t", "nat", ...where, ...j.args]);
        if (r.code !== 0) throw new Error(`iptables ${where.join(" ")}: ${r.stderr.trim()}`);
      }
    },
  };
}

/**
 * Removes the jumps and the four portal chains (--cleanup, another mode starting); absent ones are fine.
 * One read first: a host without the chains has no jumps to them either (iptables refuses a jump to a
 * missing chain), and then nothing else runs.
 */
async function removePortals(runner: IptablesRunner): Promise<void> {
  const declared = (save: string) => Object.values(PORTAL_CHAINS).some((c) => save.includes(`:${c} `));
  if (!declared(await runner.save("nat"))) return;
  for (const j of portalJumps()) {
    for (let i = 0; i < 10; i++) {
      const r = await runner.exec(["-w", "5", "-t", "nat", "-D", j.chain, ...j.args]);
      if (r.code !== 0) break;
    }
  }
  await runner.restore(renderPortalCleanup());
}

/** A fresh userspace mode. */
export function createUserspaceBackend(): ProxyBackend {
  const backends = new Map<IPFamily, UserspaceBackend>();
  let addressHost: Promise<ServiceAddressHost> | null = null;
  let metricsRegistered = false;
  let limitRaised = false;
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
      if (!limitRaised && !ctx.dryRun) {
        // Two sockets per proxied connection: upstream's 64000 open files, once per process.
        limitRaised = true;
        raiseOpenFilesLimit(await openFilesLimit(), log);
      }
      const portals = ctx.options?.userspacePortals ?? "none";
      let steering: Steering;
      if (portals === "none") {
        addressHost ??= createServiceAddressHost((m) => log.warn(m));
        steering = { kind: "none", addresses: await addressHost };
      } else {
        steering = await iptablesSteering(family, ctx);
      }
      const backend = new UserspaceBackend({
        family,
        nodeName: ctx.nodeName,
        log,
        steering,
        localhostNodePorts: config.iptables.localhostNodePorts,
        localAddresses: () => ctx.nodeIPs(family),
        primaryNodeIP: () => ctx.primaryNodeIP(family),
        nodePortAddresses: config.nodePortAddresses ?? [],
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
      let code = 0;
      for (const family of ["IPv4", "IPv6"] as const) {
        try {
          await removePortals(await createIptablesRunner({ family }));
        } catch (e) {
          if (family === "IPv4") {
            log.warn(`cannot remove the userspace portal chains: ${(e as Error).message}`);
            code = 1;
          }
        }
      }
      // The lo fallback's addresses carry the mode's mark; lo's own are left alone.
      try {
        await removeLoServiceAddresses();
      } catch (e) {
        log.warn(`cannot remove the userspace service addresses from lo: ${(e as Error).message}`);
        code = 1;
      }
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
      return code;
    },
  };
}
