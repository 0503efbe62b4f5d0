/**
 * Defaults of KubeProxyConfiguration v1alpha1, as upstream's SetDefaults_KubeProxyConfiguration
 * (pkg/proxy/apis/config/v1alpha1/defaults.go) plus component-base's SetRecommendedLoggingConfiguration,
 * and the Linux platform defaults upstream applies after flags/config are read (server_linux.go).
 */
import type { EdgeproxyOptions, KubeProxyConfiguration } from "./types.ts";
import { ipFamily, joinHostPort, parseIPLegacy, splitHostPort } from "../net/go_net.ts";

/** apiVersion of the only configuration version edgeproxy reads and writes. */
export const CONFIG_API_VERSION = "kubeproxy.config.k8s.io/v1alpha1";
/** kind of the configuration object. */
export const CONFIG_KIND = "KubeProxyConfiguration";
/** Default health server port (pkg/cluster/ports ProxyHealthzPort). */
export const PROXY_HEALTHZ_PORT = 10256;
/** Default metrics server port (pkg/cluster/ports ProxyStatusPort). */
export const PROXY_STATUS_PORT = 10249;
/** kube-proxy's oom_score_adj (pkg/kubelet/qos KubeProxyOOMScoreAdj). */
export const KUBE_PROXY_OOM_SCORE_ADJ = -999;

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;

/**
 * A fully defaulted configuration: what `kube-proxy --write-config-to` describes before any flag
 * (field by field upstream's v1alpha1 defaults). Returns a new object each call.
 */
export function defaultConfig(): KubeProxyConfiguration {
  return {
    apiVersion: CONFIG_API_VERSION,
    kind: CONFIG_KIND,
    featureGates: {},
    clientConnection: {
      kubeconfig: "",
      acceptContentTypes: "",
      contentType: "application/vnd.kubernetes.protobuf",
      qps: 5,
      burst: 10,
    },
    logging: {
      flushFrequency: 5 * SECOND,
      format: "text",
      verbosity: 0,
      options: { json: { infoBufferSize: "0" }, text: { infoBufferSize: "0" } },
    },
    hostnameOverride: "",
    bindAddress: "0.0.0.0",
    healthzBindAddress: `0.0.0.0:${PROXY_HEALTHZ_PORT}`,
    metricsBindAddress: `127.0.0.1:${PROXY_STATUS_PORT}`,
    bindAddressHardFail: false,
    enableProfiling: false,
    showHiddenMetricsForVersion: "",
    mode: "",
    iptables: {
      masqueradeBit: 14,
      masqueradeAll: false,
      localhostNodePorts: true,
      syncPeriod: 30 * SECOND,
      minSyncPeriod: 1 * SECOND,
    },
    ipvs: {
      syncPeriod: 30 * SECOND,
      minSyncPeriod: 0,
      scheduler: "",
      excludeCIDRs: null,
      strictARP: false,
      tcpTimeout: 0,
      tcpFinTimeout: 0,
      udpTimeout: 0,
    },
    nftables: {
      masqueradeBit: 14,
      masqueradeAll: false,
      syncPeriod: 30 * SECOND,
      minSyncPeriod: 1 * SECOND,
    },
    winkernel: {
      networkName: "",
      sourceVip: "",
      enableDSR: false,
      rootHnsEndpointName: "",
      forwardHealthCheckVip: false,
    },
    detectLocalMode: "",
    detectLocal: { bridgeInterface: "", interfaceNamePrefix: "" },
    clusterCIDR: "",
    nodePortAddresses: null,
    oomScoreAdj: KUBE_PROXY_OOM_SCORE_ADJ,
    conntrack: {
      maxPerCore: 32 * 1024,
      min: 128 * 1024,
      tcpEstablishedTimeout: 24 * HOUR,
      tcpCloseWaitTimeout: 1 * HOUR,
      tcpBeLiberal: false,
      udpTimeout: 0,
      udpStreamTimeout: 0,
    },
    configSyncPeriod: 15 * MINUTE,
    portRange: "",
    windowsRunAsService: false,
  };
}

/**
 * Appends `port` to an address that has none, like upstream proxyutil.AppendPortIfNeeded: "1.2.3.4" →
 * "1.2.3.4:port", "::1" → "[::1]:port"; an address that already has a port, or is not an IP, is kept.
 */
export function appendPortIfNeeded(addr: string, port: number): string {
  if (splitHostPort(addr) !== null) return addr;
  if (parseIPLegacy(addr) === null) return addr;
  return joinHostPort(addr, port);
}

/**
 * The default health and metrics addresses for a bind address: IPv4 wildcards/loopback when it is an IPv4
 * address, IPv6 ones otherwise (upstream getDefaultAddresses, which also picks IPv6 for a non-IP).
 */
export function defaultServerAddresses(bindAddress: string): { healthz: string; metrics: string } {
  return ipFamily(bindAddress) === 4
    ? { healthz: `0.0.0.0:${PROXY_HEALTHZ_PORT}`, metrics: `127.0.0.1:${PROXY_STATUS_PORT}` }
    : { healthz: `[::]:${PROXY_HEALTHZ_PORT}`, metrics: `[::1]:${PROXY_STATUS_PORT}` };
}

/**
 * The fields of a decoded file that upstream treats as "unset" and defaults: zero values of plain fields,
 * and absent (null) values of the fields that are pointers in the Go type.
 */
export interface UnsetPointers {
  iptablesMasqueradeBit: boolean;
  iptablesLocalhostNodePorts: boolean;
  nftablesMasqueradeBit: boolean;
  oomScoreAdj: boolean;
  conntrackMaxPerCore: boolean;
  conntrackMin: boolean;
  conntrackTCPEstablishedTimeout: boolean;
  conntrackTCPCloseWaitTimeout: boolean;
}

/**
 * Applies upstream's defaulting to a decoded configuration in place: plain fields holding their zero
 * value ("" / 0) get the default, pointer fields get it only when they were absent or null (`unset`).
 * Note the upstream quirk this keeps: `iptables.minSyncPeriod: 0s` in a file becomes 1s.
 */
export function applyDefaults(c: KubeProxyConfiguration, unset: UnsetPointers): KubeProxyConfiguration {
  const d = defaultConfig();
  if (c.bindAddress === "") c.bindAddress = d.bindAddress;
  const servers = defaultServerAddresses(c.bindAddress);
  c.healthzBindAddress = c.healthzBindAddress === ""
    ? servers.healthz
    : appendPortIfNeeded(c.healthzBindAddress, PROXY_HEALTHZ_PORT);
  c.metricsBindAddress = c.metricsBindAddress === ""
    ? servers.metrics
    : appendPortIfNeeded(c.metricsBindAddress, PROXY_STATUS_PORT);
  if (unset.oomScoreAdj) c.oomScoreAdj = d.oomScoreAdj;
  if (unset.iptablesMasqueradeBit) c.iptables.masqueradeBit = d.iptables.masqueradeBit;
  if (unset.iptablesLocalhostNodePorts) c.iptables.localhostNodePorts = d.iptables.localhostNodePorts;
  if (c.iptables.syncPeriod === 0) c.iptables.syncPeriod = d.iptables.syncPeriod;
  if (c.iptables.minSyncPeriod === 0) c.iptables.minSyncPeriod = d.iptables.minSyncPeriod;
  if (c.ipvs.syncPeriod === 0) c.ipvs.syncPeriod = d.ipvs.syncPeriod;
  if (unset.nftablesMasqueradeBit) c.nftables.masqueradeBit = d.nftables.masqueradeBit;
  if (c.nftables.syncPeriod === 0) c.nftables.syncPeriod = d.nftables.syncPeriod;
  if (c.nftables.minSyncPeriod === 0) c.nftables.minSyncPeriod = d.nftables.minSyncPeriod;
  if (unset.conntrackMaxPerCore) c.conntrack.maxPerCore = d.conntrack.maxPerCore;
  if (unset.conntrackMin) c.conntrack.min = d.conntrack.min;
  if (unset.conntrackTCPEstablishedTimeout) {
    c.conntrack.tcpEstablishedTimeout = d.conntrack.tcpEstablishedTimeout;
  }
  if (unset.conntrackTCPCloseWaitTimeout) c.conntrack.tcpCloseWaitTimeout = d.conntrack.tcpCloseWaitTimeout;
  if (c.configSyncPeriod === 0) c.configSyncPeriod = d.configSyncPeriod;
  if (c.clientConnection.contentType === "") c.clientConnection.contentType = d.clientConnection.contentType;
  if (c.clientConnection.qps === 0) c.clientConnection.qps = d.clientConnection.qps;
  if (c.clientConnection.burst === 0) c.clientConnection.burst = d.clientConnection.burst;
  if (c.logging.format === "") c.logging.format = d.logging.format;
  if (c.logging.flushFrequency === 0) c.logging.flushFrequency = d.logging.flushFrequency;
  if (c.logging.options.json.infoBufferSize === "") c.logging.options.json.infoBufferSize = "0";
  if (c.logging.options.text.infoBufferSize === "") c.logging.options.text.infoBufferSize = "0";
  return c;
}

/**
 * Linux platform defaults upstream applies to the effective configuration after reading flags or the
 * file (server_linux.go platformApplyDefaults): an empty mode means iptables, and an empty
 * detectLocalMode means ClusterCIDR. They are not part of what `--write-config-to` writes.
 * Returns a new object.
 */
export function applyPlatformDefaults(c: KubeProxyConfiguration): KubeProxyConfiguration {
  const out = structuredClone(c);
  if (out.mode === "") out.mode = "iptables";
  // Upstream's nftables mode accepts NodePorts on the node's primary IPs unless told otherwise.
  if (out.mode === "nftables" && (out.nodePortAddresses ?? []).length === 0) {
    out.nodePortAddresses = ["primary"];
  }
  if (out.detectLocalMode === "") out.detectLocalMode = "ClusterCIDR";
  return out;
}

/** edgeproxy's own settings before any flag. */
export function defaultOptions(): EdgeproxyOptions {
  return {
    stateDir: "/var/lib/edgeproxy",
    apiMode: "watch",
    pollInterval: 10 * SECOND,
    manifests: "",
    dryRun: false,
    master: "",
    cleanup: false,
    initOnly: false,
    cacheStartDeadline: 3 * SECOND,
    userspacePortals: "none",
    udpIdleTimeout: 250,
  };
}
