/**
 * Health and metrics wiring: the metric registry, the proxy health server (/healthz, /livez), the
 * health-check node ports of eTP=Local Services, and the two listeners (healthz and metrics).
 */
import type { EdgeproxyOptions, KubeProxyConfiguration } from "../config/types.ts";
import type { ApiStats } from "../k8s/stats.ts";
import type { CacheStateSource } from "../metrics/edgeproxy.ts";
import { type AgentMetrics, createAgentMetrics } from "../metrics/agent_metrics.ts";
import { createHealthzApp, healthTimeoutFor, ProxyHealthServer } from "../server/proxier_health.ts";
import { createMetricsApp } from "../server/metrics_app.ts";
import { startHealthServers } from "../server/health_servers.ts";
import { ServiceHealthServer } from "../server/service_health.ts";
import { log } from "../log.ts";

/** The agent's health and metrics side, before anything listens. */
export interface Observability {
  readonly metrics: AgentMetrics;
  readonly health: ProxyHealthServer;
  /** Health-check node ports; none in --dry-run. */
  readonly serviceHealth: ServiceHealthServer | undefined;
}

/** Builds the metrics and health state (nothing listens yet); `syncPeriodMs` sets the health timeout. */
export function createObservability(
  options: EdgeproxyOptions,
  nodeName: string,
  apiStats: ApiStats,
  cacheState: CacheStateSource,
  syncPeriodMs: number,
): Observability {
  const metrics = createAgentMetrics({ apiStats: options.manifests ? undefined : apiStats, cacheState });
  const health = new ProxyHealthServer({
    healthTimeoutMs: healthTimeoutFor(syncPeriodMs),
    metrics: metrics.kubeproxy,
    cacheState,
    // Without an apiserver the Node may never arrive; do not report the node ineligible for that.
    nodeEligibleWhenUnknown: options.manifests !== "",
  });
  const serviceHealth = options.dryRun ? undefined : new ServiceHealthServer({
    proxyHealthy: () => health.isHealthy(),
    hostname: nodeName,
  });
  return { metrics, health, serviceHealth };
}

/** Starts the healthz and metrics listeners (not in --dry-run); the result closes them and the node ports. */
export async function startServers(
  config: KubeProxyConfiguration,
  options: EdgeproxyOptions,
  o: Observability,
): Promise<{ close(): Promise<void> }> {
  const servers = options.dryRun ? null : await startHealthServers({
    healthzBindAddress: config.healthzBindAddress,
    metricsBindAddress: config.metricsBindAddress,
    bindAddressHardFail: config.bindAddressHardFail,
    healthzApp: createHealthzApp(o.health),
    metricsApp: createMetricsApp({
      registry: o.metrics.registry,
      configz: () => config,
      proxyMode: config.mode,
    }),
    logger: log,
  });
  return {
    close: async () => {
      await Promise.all([o.serviceHealth?.stop(), servers?.close()]);
    },
  };
}
