/**
 * Runs inside a user-mode-linux guest (bench/ipvs_uml_bench.ts starts it): the IPVS Provider's first
 * sync of N ClusterIP+NodePort Services with 2 endpoints each against the guest's real IPVS and ipsets,
 * then a one-endpoint change, then an unchanged resync. Prints `FIGURE <name> <value>` lines. The
 * iptables payload is rendered but recorded, not applied, when the guest kernel has no IPv4 iptables.
 */
import { IpvsBackend } from "../lib/proxy/ipvs/backend.ts";
import { createIpvsHost } from "../lib/proxy/ipvs/host.ts";
import { createIptablesRunner, type IptablesRunner } from "../lib/proxy/iptables/runner.ts";
import { newNodePortAddresses } from "../lib/proxy/nodeport_addresses.ts";
import { ServicePortMap } from "../lib/proxy/service_change_tracker.ts";
import { EndpointsMap } from "../lib/proxy/endpoints_change_tracker.ts";
import { detectLocalByCIDR } from "../lib/proxy/local_detect.ts";
import type { ProxyState } from "../lib/proxy/provider.ts";
import { type EndpointInfo, servicePortKey } from "../lib/proxy/types.ts";
import { makeEndpoint, makeServicePort } from "../tests/support/tracer.ts";

const n = Number(process.argv[2] ?? "1000");
const real = await createIptablesRunner({ family: "IPv4" });
const iptables: IptablesRunner = process.env.UML_IPTABLES === "none"
  ? {
    ...real,
    restore: () => Promise.resolve(),
    save: () => Promise.resolve(""),
    exec: () => Promise.resolve({ code: 0, stdout: "", stderr: "" }),
  }
  : real;
const backend = new IpvsBackend({
  family: "IPv4",
  nodeName: "node1",
  host: createIpvsHost(),
  iptables,
  scheduler: "rr",
  excludeCIDRs: [],
  masqueradeAll: false,
  masqueradeBit: 14,
  nodePortAddresses: newNodePortAddresses("IPv4", []),
  primaryNodeIP: () => null,
  preferSameTrafficDistribution: true,
  log: { info: () => {}, warn: () => {}, debug: () => {} },
});
const services = new ServicePortMap();
const endpoints = new EndpointsMap();
for (let i = 0; i < n; i++) {
  const s = makeServicePort("bench", `svc${i}`, {
    clusterIP: `10.96.${i >> 8}.${i & 255}`,
    nodePort: 30000 + (i % 2000),
  });
  services.set(servicePortKey(s.name), s);
  const eps: EndpointInfo[] = [
    makeEndpoint(`10.${100 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`, 8080),
    makeEndpoint(`10.${150 + (i >> 16)}.${(i >> 8) & 255}.${i & 255}`, 8080),
  ];
  endpoints.set(servicePortKey(s.name), eps);
}
const state = (changed: string[]): ProxyState => ({
  family: "IPv4",
  services,
  endpoints,
  changedServices: new Set(changed),
  nodeLabels: {},
  localDetection: detectLocalByCIDR("10.100.0.0/14"),
});
let t = performance.now();
await backend.sync(state([]), { full: true });
console.log(`FIGURE first_sync_ms ${Math.round(performance.now() - t)}`);
console.log(`FIGURE virtual_servers ${backend.lastState!.virtualServers.size}`);
const key = servicePortKey(makeServicePort("bench", "svc7", { clusterIP: "x" }).name);
endpoints.set(key, [makeEndpoint("10.200.0.7", 8080)]);
t = performance.now();
await backend.sync(state([key]), { full: false });
console.log(`FIGURE one_endpoint_change_ms ${Math.round(performance.now() - t)}`);
t = performance.now();
await backend.sync(state([]), { full: false });
console.log(`FIGURE unchanged_resync_ms ${Math.round(performance.now() - t)}`);
process.exit(0);
