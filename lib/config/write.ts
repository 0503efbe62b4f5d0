/**
 * `--write-config-to FILE`: the configuration as a v1alpha1 YAML document, shaped like upstream's output
 * (sigs.k8s.io/yaml over encoding/json): upstream field names, keys sorted at every level, durations in
 * Go's Duration.String() form (15m0s, 24h0m0s, 30s, 1s, 0s), sequences not indented under their key, and
 * the fields Go marks omitempty left out when empty (featureGates, windowsRunAsService, logging.vmodule,
 * logging.options.*.splitStream). Reading the output back with --config gives a deep-equal configuration.
 */
import { writeFile } from "node:fs/promises";
import { stringify } from "yaml";
import { formatDuration } from "./duration.ts";
import type { KubeProxyConfiguration } from "./types.ts";

type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

function sortKeys(v: Json): Json {
  if (Array.isArray(v)) return v.map(sortKeys);
  if (v !== null && typeof v === "object") {
    const out: { [key: string]: Json } = {};
    for (const k of Object.keys(v).sort()) out[k] = sortKeys(v[k]);
    return out;
  }
  return v;
}

/** The configuration as the JSON object Go would marshal (durations as strings), keys sorted. */
export function configToDocument(c: KubeProxyConfiguration): { [key: string]: Json } {
  const d = formatDuration;
  const formatOptions = (o: { infoBufferSize: string; splitStream?: boolean }): { [key: string]: Json } => {
    const out: { [key: string]: Json } = { infoBufferSize: o.infoBufferSize };
    if (o.splitStream) out.splitStream = true;
    return out;
  };
  const logging: { [key: string]: Json } = {
    flushFrequency: d(c.logging.flushFrequency),
    format: c.logging.format,
    options: { json: formatOptions(c.logging.options.json), text: formatOptions(c.logging.options.text) },
    verbosity: c.logging.verbosity,
  };
  if (c.logging.vmodule && c.logging.vmodule.length > 0) {
    logging.vmodule = c.logging.vmodule.map((m) => ({ filePattern: m.filePattern, verbosity: m.verbosity }));
  }
  const doc: { [key: string]: Json } = {
    apiVersion: c.apiVersion,
    kind: c.kind,
    clientConnection: { ...c.clientConnection },
    logging,
    hostnameOverride: c.hostnameOverride,
    bindAddress: c.bindAddress,
    healthzBindAddress: c.healthzBindAddress,
    metricsBindAddress: c.metricsBindAddress,
    bindAddressHardFail: c.bindAddressHardFail,
    enableProfiling: c.enableProfiling,
    showHiddenMetricsForVersion: c.showHiddenMetricsForVersion,
    mode: c.mode,
    iptables: {
      masqueradeBit: c.iptables.masqueradeBit,
      masqueradeAll: c.iptables.masqueradeAll,
      localhostNodePorts: c.iptables.localhostNodePorts,
      syncPeriod: d(c.iptables.syncPeriod),
      minSyncPeriod: d(c.iptables.minSyncPeriod),
    },
    ipvs: {
      syncPeriod: d(c.ipvs.syncPeriod),
      minSyncPeriod: d(c.ipvs.minSyncPeriod),
      scheduler: c.ipvs.scheduler,
      excludeCIDRs: c.ipvs.excludeCIDRs === null ? null : [...c.ipvs.excludeCIDRs],
      strictARP: c.ipvs.strictARP,
      tcpTimeout: d(c.ipvs.tcpTimeout),
      tcpFinTimeout: d(c.ipvs.tcpFinTimeout),
      udpTimeout: d(c.ipvs.udpTimeout),
    },
    nftables: {
      masqueradeBit: c.nftables.masqueradeBit,
      masqueradeAll: c.nftables.masqueradeAll,
      syncPeriod: d(c.nftables.syncPeriod),
      minSyncPeriod: d(c.nftables.minSyncPeriod),
    },
    winkernel: { ...c.winkernel },
    detectLocalMode: c.detectLocalMode,
    detectLocal: { ...c.detectLocal },
    clusterCIDR: c.clusterCIDR,
    nodePortAddresses: c.nodePortAddresses === null ? null : [...c.nodePortAddresses],
    oomScoreAdj: c.oomScoreAdj,
    conntrack: {
      maxPerCore: c.conntrack.maxPerCore,
      min: c.conntrack.min,
      tcpEstablishedTimeout: d(c.conntrack.tcpEstablishedTimeout),
      tcpCloseWaitTimeout: d(c.conntrack.tcpCloseWaitTimeout),
      tcpBeLiberal: c.conntrack.tcpBeLiberal,
      udpTimeout: d(c.conntrack.udpTimeout),
      udpStreamTimeout: d(c.conntrack.udpStreamTimeout),
    },
    configSyncPeriod: d(c.configSyncPeriod),
    portRange: c.portRange,
  };
  if (Object.keys(c.featureGates).length > 0) doc.featureGates = { ...c.featureGates };
  if (c.windowsRunAsService) doc.windowsRunAsService = true;
  return sortKeys(doc) as { [key: string]: Json };
}

/** The configuration as YAML text (ends with a newline). Same configuration, same bytes. */
export function configToYAML(c: KubeProxyConfiguration): string {
  return stringify(configToDocument(c), { indentSeq: false, lineWidth: 0, sortMapEntries: true });
}

/** Writes the YAML to `file` (created or truncated). */
export async function writeConfigFile(file: string, c: KubeProxyConfiguration): Promise<void> {
  await writeFile(file, configToYAML(c), "utf8");
}
