/**
 * KubeProxyConfiguration, kubeproxy.config.k8s.io/v1alpha1, with upstream's JSON field names.
 * Durations are kept as milliseconds in memory and written back as Go duration strings.
 * lib/config/defaults.ts fills every field; lib/config/load.ts validates a file against this shape.
 */

/** Go-duration values, held as milliseconds. */
export type DurationMs = number;

/** clientConnection. */
export interface ClientConnectionConfiguration {
  kubeconfig: string;
  acceptContentTypes: string;
  contentType: string;
  qps: number;
  burst: number;
}

/** One `--vmodule` entry: log at `verbosity` in files matching `filePattern`. */
export interface VModuleItem {
  filePattern: string;
  verbosity: number;
}

/** logging.options.json / logging.options.text (component-base; alpha options). */
export interface LoggingFormatOptions {
  /** A resource.Quantity such as "0", "64Ki". */
  infoBufferSize: string;
  /** Present only when true (Go omits false). */
  splitStream?: boolean;
}

/** logging (component-base LoggingConfiguration, the fields kube-proxy writes). */
export interface LoggingConfiguration {
  flushFrequency: DurationMs;
  format: string;
  verbosity: number;
  options: { json: LoggingFormatOptions; text: LoggingFormatOptions };
  /** Present only when non-empty (Go omits an empty list). */
  vmodule?: VModuleItem[];
}

/** iptables. */
export interface KubeProxyIPTablesConfiguration {
  masqueradeBit: number;
  masqueradeAll: boolean;
  localhostNodePorts: boolean;
  syncPeriod: DurationMs;
  minSyncPeriod: DurationMs;
}

/** ipvs (accepted and written for compatibility; edgeproxy does not implement IPVS). */
export interface KubeProxyIPVSConfiguration {
  syncPeriod: DurationMs;
  minSyncPeriod: DurationMs;
  scheduler: string;
  excludeCIDRs: string[] | null;
  strictARP: boolean;
  tcpTimeout: DurationMs;
  tcpFinTimeout: DurationMs;
  udpTimeout: DurationMs;
}

/** nftables (accepted and written for compatibility). */
export interface KubeProxyNFTablesConfiguration {
  masqueradeBit: number;
  masqueradeAll: boolean;
  syncPeriod: DurationMs;
  minSyncPeriod: DurationMs;
}

/** winkernel (accepted and written for compatibility). */
export interface KubeProxyWinkernelConfiguration {
  networkName: string;
  sourceVip: string;
  enableDSR: boolean;
  rootHnsEndpointName: string;
  forwardHealthCheckVip: boolean;
}

/** conntrack. */
export interface KubeProxyConntrackConfiguration {
  maxPerCore: number;
  min: number;
  tcpEstablishedTimeout: DurationMs;
  tcpCloseWaitTimeout: DurationMs;
  tcpBeLiberal: boolean;
  udpTimeout: DurationMs;
  udpStreamTimeout: DurationMs;
}

/** detectLocal. */
export interface DetectLocalConfiguration {
  bridgeInterface: string;
  interfaceNamePrefix: string;
}

/** The whole configuration, fully defaulted. */
export interface KubeProxyConfiguration {
  apiVersion: "kubeproxy.config.k8s.io/v1alpha1";
  kind: "KubeProxyConfiguration";
  featureGates: Record<string, boolean>;
  clientConnection: ClientConnectionConfiguration;
  logging: LoggingConfiguration;
  hostnameOverride: string;
  bindAddress: string;
  healthzBindAddress: string;
  metricsBindAddress: string;
  bindAddressHardFail: boolean;
  enableProfiling: boolean;
  showHiddenMetricsForVersion: string;
  mode: string;
  iptables: KubeProxyIPTablesConfiguration;
  ipvs: KubeProxyIPVSConfiguration;
  nftables: KubeProxyNFTablesConfiguration;
  winkernel: KubeProxyWinkernelConfiguration;
  detectLocalMode: string;
  detectLocal: DetectLocalConfiguration;
  clusterCIDR: string;
  nodePortAddresses: string[] | null;
  oomScoreAdj: number;
  conntrack: KubeProxyConntrackConfiguration;
  configSyncPeriod: DurationMs;
  portRange: string;
  windowsRunAsService: boolean;
}

/** edgeproxy's own settings (flags only; not part of the v1alpha1 file). */
export interface EdgeproxyOptions {
  /** Directory of the last-known-state cache; "" disables it. */
  stateDir: string;
  apiMode: "watch" | "poll";
  pollInterval: DurationMs;
  /** A file or directory of manifests; "" means read the apiserver. */
  manifests: string;
  dryRun: boolean;
  /** Apiserver URL override (--master). */
  master: string;
  cleanup: boolean;
  initOnly: boolean;
  /** --userspace-portals: how the userspace mode steers service addresses to its listeners. */
  userspacePortals: "iptables" | "none";
  /** --udp-timeout: idle timeout of a userspace-mode UDP session (upstream udpIdleTimeout). */
  udpIdleTimeout: DurationMs;
  /** How long to wait for the apiserver at start before programming from the state cache. */
  cacheStartDeadline: DurationMs;
  /** The --config file, watched like upstream: a change ends the process so its supervisor restarts it. */
  configFile?: string;
}
