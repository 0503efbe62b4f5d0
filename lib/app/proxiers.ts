/**
 * Builds the proxy side of the agent: one shared sync loop (Proxier) per IP family, each over its
 * backend's provider, with local-traffic detection, conntrack cleanup and the post-sync hooks, all behind
 * one MetaProxier that the StateStore feeds.
 */
import type { KubeProxyConfiguration } from "../config/types.ts";
import type { Node } from "../k8s/objects.ts";
import type { IPFamily } from "../proxy/types.ts";
import type { BackendContext, ProxyBackend } from "../proxy/provider.ts";
import {
  Proxier,
  type ProxierHealthUpdater,
  type ServiceHealthUpdater,
  type SyncInfo,
} from "../proxy/proxier.ts";
import { MetaProxier, type NodeEventHandler } from "../proxy/meta_proxier.ts";
import { type DetectLocalMode, localDetectionChooser } from "../proxy/local_detect.ts";
import { CliConntrackRunner, findConntrackBinary } from "../proxy/conntrack/runner.ts";
import { createConntrackCleaner } from "../proxy/conntrack/cleaner.ts";
import type { Clock } from "../runtime/clock.ts";
import type { EdgeproxyMetrics } from "../metrics/edgeproxy.ts";
import { log } from "../log.ts";

/** What {@link buildProxiers} wires each family's loop to. */
export interface ProxierWiring {
  readonly backend: ProxyBackend;
  readonly ctx: BackendContext;
  readonly families: readonly IPFamily[];
  readonly clock: Clock;
  readonly health: ProxierHealthUpdater & NodeEventHandler;
  /** Health-check node ports (given to the first family only: the Service set is the same). */
  readonly serviceHealth: ServiceHealthUpdater | undefined;
  readonly edgeMetrics: EdgeproxyMetrics;
  /** Extra receivers of the own Node's events (before the proxiers). */
  readonly nodeHandlers: readonly NodeEventHandler[];
  readonly onSynced: (info: SyncInfo) => void;
}

/** One Proxier per family over the backend's providers, fanned out by a MetaProxier. */
export async function buildProxiers(w: ProxierWiring): Promise<MetaProxier> {
  const { config, dryRun, metrics } = w.ctx;
  const conntrackBinary = dryRun ? null : findConntrackBinary();
  if (!dryRun && conntrackBinary === null) {
    log.warn(
      "conntrack binary not found: stale UDP conntrack entries will not be cleaned up (install conntrack)",
    );
  }
  const { minSyncPeriodMs, syncPeriodMs } = w.backend.syncPeriods(config);
  const detectionWarned = new Set<string>(); // each detection warning once, not on every Node update
  const proxiers: Proxier[] = [];
  for (const family of w.families) {
    const provider = await w.backend.provider(family, w.ctx);
    proxiers.push(
      new Proxier({
        family,
        nodeName: w.ctx.nodeName,
        provider,
        clock: w.clock,
        log,
        metrics,
        health: w.health,
        serviceHealth: family === w.families[0] ? w.serviceHealth : undefined,
        conntrack: conntrackBinary === null ? undefined : createConntrackCleaner(
          family,
          new CliConntrackRunner({ binary: conntrackBinary }),
          metrics,
          Date.now,
        ),
        minSyncPeriodMs,
        syncPeriodMs: dryRun ? 0 : syncPeriodMs,
        localDetection: localDetectionChooser(
          family,
          detectLocalConfig(config),
          (m) => log.warn(m),
          detectionWarned,
        ),
        onDrift: (fam) => w.edgeMetrics.driftRepairsTotal.inc({ ip_family: fam }),
        onSynced: w.onSynced,
      }),
    );
  }
  return new MetaProxier(proxiers, [w.health, ...w.nodeHandlers]);
}

/** The detectLocal settings of the configuration (an empty mode means ClusterCIDR, as upstream defaults it). */
function detectLocalConfig(config: KubeProxyConfiguration) {
  return {
    mode: (config.detectLocalMode || "ClusterCIDR") as DetectLocalMode,
    clusterCIDR: config.clusterCIDR,
    bridgeInterface: config.detectLocal.bridgeInterface,
    interfaceNamePrefix: config.detectLocal.interfaceNamePrefix,
  };
}

/** Tracks the own Node for the primary node IP (kept apart from the proxiers, which keep their own). */
export class NodeTracker implements NodeEventHandler {
  /** The own Node, or null before it arrives / after it is deleted. */
  node: Node | null = null;
  /** @inheritdoc */
  onNodeAdd(n: Node): void {
    this.node = n;
  }
  /** @inheritdoc */
  onNodeUpdate(_o: Node, n: Node): void {
    this.node = n;
  }
  /** @inheritdoc */
  onNodeDelete(): void {
    this.node = null;
  }
}
