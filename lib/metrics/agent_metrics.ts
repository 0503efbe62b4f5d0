/**
 * The registry served on /metrics, built the one way the agent builds it (and the tests that compare it
 * with upstream's list of families): kubeproxy_* (iptables mode), process_*, kubernetes_build_info,
 * client-go's rest_client_* fed by the apiserver transport's statistics, and edgeproxy_*.
 */
import type { ApiStats } from "../k8s/stats.ts";
import { registerBuildInfo } from "./build_info.ts";
import { type CacheStateSource, createEdgeproxyMetrics, type EdgeproxyMetrics } from "./edgeproxy.ts";
import {
  createKubeProxyMetrics,
  initKubeProxySeries,
  type IPFamilyLabel,
  type KubeProxyMetrics,
  type MetricsProxyMode,
  type NfacctSource,
} from "./kubeproxy.ts";
import { registerProcessMetrics } from "./process.ts";
import { Registry } from "./registry.ts";
import { createRestClientMetrics, type RestClientMetrics } from "./restclient.ts";

/** Options of {@link createAgentMetrics}. */
export interface AgentMetricsOptions {
  /** The apiserver client's statistics; absent in manifests mode (no apiserver families then). */
  readonly apiStats?: ApiStats;
  readonly cacheState?: CacheStateSource;
  readonly nfacct?: NfacctSource;
  /** The proxy mode whose kubeproxy_* families are registered (default iptables). */
  readonly mode?: MetricsProxyMode;
}

/** Everything the agent writes metrics into. */
export interface AgentMetrics {
  readonly registry: Registry;
  readonly kubeproxy: KubeProxyMetrics;
  readonly edgeproxy: EdgeproxyMetrics;
  readonly restClient: RestClientMetrics;
  /** Creates the labelled kubeproxy_* series for the IP families the agent runs (see initKubeProxySeries). */
  initIPFamilies(families: readonly IPFamilyLabel[]): void;
}

/** Builds the agent's registry and registers every family in it. */
export function createAgentMetrics(opts: AgentMetricsOptions = {}): AgentMetrics {
  const registry = new Registry();
  const kubeproxy = createKubeProxyMetrics(registry, { nfacct: opts.nfacct, mode: opts.mode });
  registerProcessMetrics(registry);
  registerBuildInfo(registry);
  const restClient = createRestClientMetrics(registry);
  opts.apiStats?.onRequest((e) => restClient.record(e));
  const edgeproxy = createEdgeproxyMetrics(registry, {
    apiserverStats: opts.apiStats,
    cacheState: opts.cacheState,
  });
  return {
    registry,
    kubeproxy,
    edgeproxy,
    restClient,
    initIPFamilies: (families) => initKubeProxySeries(kubeproxy, families),
  };
}
