/**
 * edgeproxy_ipvs_* gauges: what the IPVS mode last programmed, per IP family (upstream's IPVS proxier has
 * no rule-count family; these take the place of the iptables mode's kubeproxy_sync_proxy_rules_iptables_*).
 * Read at scrape time from each family's provider.
 */
import type { Registry } from "../../metrics/registry.ts";
import type { IPFamily } from "../types.ts";
import type { IpvsBackend } from "./backend.ts";

/** Registers the gauges over `source` (the providers built so far). */
export function registerIpvsMetrics(
  registry: Registry,
  source: () => Iterable<readonly [IPFamily, Pick<IpvsBackend, "lastState" | "terminating">]>,
): void {
  const gauge = (
    name: string,
    help: string,
    pick: (b: Pick<IpvsBackend, "lastState" | "terminating">) => number,
  ) =>
    registry.collector({
      name,
      help,
      type: "gauge",
      labelNames: ["ip_family"],
      collect: function* () {
        for (const [ip_family, backend] of source()) yield { labels: { ip_family }, value: pick(backend) };
      },
    });
  gauge(
    "edgeproxy_ipvs_virtual_servers",
    "IPVS virtual servers programmed by the last successful sync.",
    (b) => b.lastState?.virtualServers.size ?? 0,
  );
  gauge(
    "edgeproxy_ipvs_real_servers",
    "IPVS real servers (weight 1) programmed by the last successful sync, over all virtual servers.",
    (b) => [...(b.lastState?.virtualServers.values() ?? [])].reduce((n, vs) => n + vs.realServers.length, 0),
  );
  gauge(
    "edgeproxy_ipvs_terminating_real_servers",
    "Removed TCP real servers kept at weight 0 until their connections drain (graceful termination).",
    (b) => b.terminating.length,
  );
  gauge(
    "edgeproxy_ipvs_service_addresses",
    "Addresses bound to kube-ipvs0 by the last successful sync.",
    (b) => b.lastState?.bindAddresses.length ?? 0,
  );
}
