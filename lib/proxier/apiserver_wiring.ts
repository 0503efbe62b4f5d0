/**
 * Connects the agent to the apiserver: kubeconfig/in-cluster credentials, the rate-limited transport,
 * list/watch (or poll) of Services, EndpointSlices and the own Node, and the "Starting" event.
 */
import type { EdgeproxyOptions, KubeProxyConfiguration } from "../config/types.ts";
import type { ProxyHandlers } from "../source/handlers.ts";
import { loadRestConfig } from "../k8s/kubeconfig.ts";
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

/** Loads credentials, starts the source and records the Starting event (best effort). */
export async function startApiserver(
  config: KubeProxyConfiguration,
  options: EdgeproxyOptions,
  nodeName: string,
  handlers: ProxyHandlers,
  stats: ApiStats,
): Promise<ApiserverConnection> {
  const restConfig = await loadRestConfig({
    kubeconfig: config.clientConnection.kubeconfig,
    master: options.master,
  });
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
    pollIntervalMs: options.pollInterval,
    stats,
    log,
  });
  void recordStartingEvent(transport, nodeName, { log });
  return {
    synced: source.synced,
    stop: async () => {
      await source.stop();
      transport.close();
    },
  };
}
