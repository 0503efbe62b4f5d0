/**
 * Connects the agent to the apiserver: kubeconfig/in-cluster credentials, the rate-limited transport,
 * list/watch (or poll) of Services, EndpointSlices, the own Node (and ServiceCIDRs in nftables mode), and
 * the "Starting" event.
 * Credentials are resolved first and apart ({@link resolveApiserverConfig}), so that the agent can refuse
 * a broken kubeconfig before it touches the host.
 */
import type { EdgeproxyOptions, KubeProxyConfiguration } from "../config/types.ts";
import type { ProxyHandlers } from "../proxy/handlers.ts";
import { loadRestConfig } from "../k8s/kubeconfig.ts";
import type { RestConfig } from "../k8s/rest_config.ts";
import { ApiTransport } from "../k8s/transport.ts";
import type { ApiStats } from "../k8s/stats.ts";
import { startApiserverSource } from "../source/apiserver.ts";
import { recordStartingEvent } from "../k8s/events.ts";
import { log } from "../log.ts";

/** A running apiserver connection. */
export interface ApiserverConnection {
  synced: Promise<void>;
  stop(): Promise<void>;
}

/**
 * Resolves where the apiserver is and the credentials (kubeconfig, KUBECONFIG, --master, in-cluster).
 * @throws KubeconfigError: one line naming the file and the problem
 */
export async function resolveApiserverConfig(
  config: KubeProxyConfiguration,
  options: EdgeproxyOptions,
): Promise<RestConfig> {
  return await loadRestConfig({ kubeconfig: config.clientConnection.kubeconfig, master: options.master });
}

/**
 * Starts the source and records the Starting event (best effort). `restConfig` is what
 * {@link resolveApiserverConfig} returned (resolved here when not given).
 */
export async function startApiserver(
  config: KubeProxyConfiguration,
  options: EdgeproxyOptions,
  nodeName: string,
  handlers: ProxyHandlers,
  stats: ApiStats,
  resolved?: RestConfig,
): Promise<ApiserverConnection> {
  const restConfig = resolved ?? await resolveApiserverConfig(config, options);
  log.info(`apiserver ${restConfig.server} (credentials from ${restConfig.source})`);
  const transport = new ApiTransport({
    config: restConfig,
    qps: config.clientConnection.qps,
    burst: config.clientConnection.burst,
    stats,
    log,
  });
  const source = startApiserverSource({
    connection: transport,
    nodeName,
    handlers,
    mode: options.apiMode,
    // Only the nftables mode programs service CIDRs ("drop traffic to unallocated ClusterIPs").
    serviceCIDRs: config.mode === "nftables",
    pollIntervalMs: options.pollInterval,
    stats,
    log,
  });
  void recordStartingEvent(transport, nodeName, { log });
  return {
    synced: source.synced,
    stop: async () => {
      // First: a request waiting for an exec plugin that hangs must not hold the source's stop.
      restConfig.credentials.close?.();
      await source.stop();
      transport.close();
    },
  };
}
