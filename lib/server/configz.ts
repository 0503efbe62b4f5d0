/**
 * The body kube-proxy's `/configz` serves for its configuration. Upstream registers the *internal*
 * KubeProxyConfiguration (pkg/proxy/apis/config, after defaulting and the v1alpha1 conversion) with
 * component-base configz, which writes it with Go's encoding/json. The internal types carry no json tags,
 * so the keys are Go field names (`IPTables`, `SyncPeriod`, `MasqueradeBit`), in declaration order; only
 * the embedded logging configuration (component-base logs/api/v1) has json tags (`flushFrequency`).
 * Durations are metav1.Duration, written as Go duration strings ("30s", "24h0m0s"). Nil slices and maps
 * are `null` (an empty featureGates map is reported as nil: the loaded configuration does not keep the
 * difference); TypeMeta is empty after conversion, so `kind` and `apiVersion` are left out.
 */
import { formatDuration } from "../config/duration.ts";
import type { KubeProxyConfiguration, LoggingFormatOptions } from "../config/types.ts";

/** A JSON value built in Go's field order. */
export type GoJson = string | number | boolean | null | GoJson[] | { [key: string]: GoJson };

/** A nil Go slice is `null`; an empty one (given as `[]` in the file) stays `[]`. */
function slice(xs: readonly string[] | null): string[] | null {
  return xs === null ? null : [...xs];
}

/** OutputRoutingOptions inlined into TextOptions/JSONOptions: splitStream (omitempty), infoBufferSize. */
function routing(o: LoggingFormatOptions): { [key: string]: GoJson } {
  const out: { [key: string]: GoJson } = {};
  if (o.splitStream) out.splitStream = true;
  out.infoBufferSize = o.infoBufferSize;
  return out;
}

/**
 * The running configuration as the object under `kubeproxy.config.k8s.io` in upstream's /configz,
 * converted the way upstream's v1alpha1→internal conversion does for iptables mode: `iptables.syncPeriod`
 * and `minSyncPeriod` become the top-level SyncPeriod/MinSyncPeriod, `iptables.masqueradeAll` becomes
 * Linux.MasqueradeAll, conntrack and oomScoreAdj move under Linux, and `clusterCIDR` becomes
 * DetectLocal.ClusterCIDRs (split at commas). An empty mode is reported as "iptables", as upstream sets it
 * before registering configz.
 */
export function configzDocument(c: KubeProxyConfiguration): { [key: string]: GoJson } {
  const d = formatDuration;
  const logging: { [key: string]: GoJson } = {};
  if (c.logging.format !== "") logging.format = c.logging.format;
  logging.flushFrequency = d(c.logging.flushFrequency);
  logging.verbosity = c.logging.verbosity;
  if (c.logging.vmodule && c.logging.vmodule.length > 0) {
    logging.vmodule = c.logging.vmodule.map((m) => ({ filePattern: m.filePattern, verbosity: m.verbosity }));
  }
  logging.options = { text: routing(c.logging.options.text), json: routing(c.logging.options.json) };
  const gates = Object.keys(c.featureGates).sort();
  return {
    Linux: {
      Conntrack: {
        MaxPerCore: c.conntrack.maxPerCore,
        Min: c.conntrack.min,
        TCPEstablishedTimeout: d(c.conntrack.tcpEstablishedTimeout),
        TCPCloseWaitTimeout: d(c.conntrack.tcpCloseWaitTimeout),
        TCPBeLiberal: c.conntrack.tcpBeLiberal,
        UDPTimeout: d(c.conntrack.udpTimeout),
        UDPStreamTimeout: d(c.conntrack.udpStreamTimeout),
      },
      MasqueradeAll: c.iptables.masqueradeAll,
      OOMScoreAdj: c.oomScoreAdj,
    },
    Windows: { RunAsService: c.windowsRunAsService },
    FeatureGates: gates.length === 0 ? null : Object.fromEntries(gates.map((k) => [k, c.featureGates[k]])),
    ClientConnection: {
      Kubeconfig: c.clientConnection.kubeconfig,
      AcceptContentTypes: c.clientConnection.acceptContentTypes,
      ContentType: c.clientConnection.contentType,
      QPS: c.clientConnection.qps,
      Burst: c.clientConnection.burst,
    },
    Logging: logging,
    HostnameOverride: c.hostnameOverride,
    BindAddress: c.bindAddress,
    HealthzBindAddress: c.healthzBindAddress,
    MetricsBindAddress: c.metricsBindAddress,
    BindAddressHardFail: c.bindAddressHardFail,
    EnableProfiling: c.enableProfiling,
    ShowHiddenMetricsForVersion: c.showHiddenMetricsForVersion,
    Mode: c.mode === "" ? "iptables" : c.mode,
    IPTables: { MasqueradeBit: c.iptables.masqueradeBit, LocalhostNodePorts: c.iptables.localhostNodePorts },
    IPVS: {
      Scheduler: c.ipvs.scheduler,
      ExcludeCIDRs: slice(c.ipvs.excludeCIDRs),
      StrictARP: c.ipvs.strictARP,
      TCPTimeout: d(c.ipvs.tcpTimeout),
      TCPFinTimeout: d(c.ipvs.tcpFinTimeout),
      UDPTimeout: d(c.ipvs.udpTimeout),
    },
    Winkernel: {
      NetworkName: c.winkernel.networkName,
      SourceVip: c.winkernel.sourceVip,
      EnableDSR: c.winkernel.enableDSR,
      RootHnsEndpointName: c.winkernel.rootHnsEndpointName,
      ForwardHealthCheckVip: c.winkernel.forwardHealthCheckVip,
    },
    NFTables: { MasqueradeBit: c.nftables.masqueradeBit },
    DetectLocalMode: c.detectLocalMode,
    DetectLocal: {
      BridgeInterface: c.detectLocal.bridgeInterface,
      ClusterCIDRs: c.clusterCIDR === "" ? null : c.clusterCIDR.split(","),
      InterfaceNamePrefix: c.detectLocal.interfaceNamePrefix,
    },
    NodePortAddresses: slice(c.nodePortAddresses),
    SyncPeriod: d(c.iptables.syncPeriod),
    MinSyncPeriod: d(c.iptables.minSyncPeriod),
    ConfigSyncPeriod: d(c.configSyncPeriod),
  };
}
