/**
 * An IPVS Provider over a fake host for unit tests: it records which kernel reads happen and the
 * `ipvsadm -R` batches written; `setKernel` sets what `ipvsadm -Sn` answers. iptables is a no-op runner.
 */
import { IpvsBackend } from "../../lib/proxy/ipvs/backend.ts";
import type { IpvsHost } from "../../lib/proxy/ipvs/host.ts";
import type { IptablesRunner } from "../../lib/proxy/iptables/runner.ts";
import { newNodePortAddresses } from "../../lib/proxy/nodeport_addresses.ts";
import { createKubeProxyMetrics, type KubeProxyMetrics } from "../../lib/metrics/kubeproxy.ts";
import { Registry } from "../../lib/metrics/registry.ts";

/** The provider, the reads it made, the batches it wrote. */
export interface FakeIpvs {
  readonly backend: IpvsBackend;
  readonly calls: string[];
  readonly ipvsLines: string[][];
  setKernel(ipvsadmSave: string): void;
  /** What `ipvsadm -Ln [<vs args>]` does (default: answers ""). */
  setList(list: (vsArgs?: string) => Promise<string>): void;
  /** The addresses kube-ipvs0 holds (default: none). */
  setDummy(addresses: string[]): void;
}

/** A fresh provider for IPv4 on node "n1" (node address 192.168.0.2). */
export function fakeIpvsBackend(
  nodeName = "n1",
  metrics: KubeProxyMetrics = createKubeProxyMetrics(new Registry(), { mode: "ipvs" }),
): FakeIpvs {
  const calls: string[] = [];
  const ipvsLines: string[][] = [];
  let kernelIpvs = "";
  let list = (_vsArgs?: string) => Promise.resolve("");
  let dummy: string[] = [];
  const host: IpvsHost = {
    ipvsSave: () => (calls.push("ipvsSave"), Promise.resolve(kernelIpvs)),
    ipvsList: (v) => (calls.push("ipvsList"), list(v)),
    ipvsRestore: (l) => (l.length && ipvsLines.push([...l]), Promise.resolve()),
    ipvsSetTimeouts: () => Promise.resolve(),
    ipsetSave: () => (calls.push("ipsetSave"), Promise.resolve("")),
    ipsetRestore: () => Promise.resolve(),
    ensureDummy: () => (calls.push("ensureDummy"), Promise.resolve()),
    dummyAddresses: () => (calls.push("dummyAddresses"), Promise.resolve([...dummy])),
    changeDummyAddresses: () => Promise.resolve(),
    nodeAddresses: () => Promise.resolve(["192.168.0.2"]),
  };
  const iptables = {
    family: "IPv4",
    features: { hasRandomFully: true, waitFlags: [] },
    restore: () => Promise.resolve(),
    save: () => Promise.resolve(""),
    exec: () => Promise.resolve({ code: 0, stdout: "", stderr: "" }),
  } as unknown as IptablesRunner;
  const backend = new IpvsBackend({
    family: "IPv4",
    nodeName,
    host,
    iptables,
    scheduler: "",
    excludeCIDRs: [],
    masqueradeAll: false,
    masqueradeBit: 14,
    nodePortAddresses: newNodePortAddresses("IPv4", []),
    primaryNodeIP: () => "192.168.0.2",
    preferSameTrafficDistribution: true,
    metrics,
    log: { info: () => {}, warn: () => {}, debug: () => {} },
  });
  return {
    backend,
    calls,
    ipvsLines,
    setKernel: (t: string) => void (kernelIpvs = t),
    setList: (f) => void (list = f),
    setDummy: (a) => void (dummy = a),
  };
}
