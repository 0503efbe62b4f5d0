/**
 * The userspace mode's own figures, per service port: edgeproxy_userspace_connections_total,
 * edgeproxy_userspace_bytes_total{direction}, edgeproxy_userspace_dial_errors_total and
 * edgeproxy_userspace_no_endpoints_total, read from the backends' counters at scrape time; and
 * edgeproxy_userspace_kernel_spliced_connections_total, the TCP connections relayed by splice(2).
 */
import type { Registry } from "../../metrics/registry.ts";
import type { IPFamily } from "../types.ts";
import type { UserspaceCounters } from "./backend.ts";
import { kernelSplicedConnections } from "../../runtime/tcp_transport.ts";

/** What the collectors read: each family's counters by service port key. */
export type CounterSource = () => Iterable<
  [IPFamily, ReadonlyMap<string, Readonly<UserspaceCounters>>]
>;

/** Registers the edgeproxy_userspace_* families in `registry`. */
export function registerUserspaceMetrics(registry: Registry, source: CounterSource): void {
  const family = (
    name: string,
    help: string,
    pick: (c: Readonly<UserspaceCounters>) => number,
  ) =>
    registry.collector({
      name,
      help,
      type: "counter",
      labelNames: ["ip_family", "service_port"],
      collect: function* () {
        for (const [ip_family, counters] of source()) {
          for (const [service_port, c] of counters) {
            yield { labels: { ip_family, service_port }, value: pick(c) };
          }
        }
      },
    });
  family(
    "edgeproxy_userspace_connections_total",
    "Connections (TCP) and sessions (UDP) the userspace proxy accepted, by service port.",
    (c) => c.connections,
  );
  family(
    "edgeproxy_userspace_dial_errors_total",
    "Failed dials to endpoints (each retry counts), by service port.",
    (c) => c.dialErrors,
  );
  family(
    "edgeproxy_userspace_no_endpoints_total",
    "Connections and datagrams closed or dropped because the service port had no endpoint.",
    (c) => c.noEndpoints,
  );
  registry.collector({
    name: "edgeproxy_userspace_bytes_total",
    help: "Bytes the userspace proxy copied, by service port and direction (in: client to endpoint).",
    type: "counter",
    labelNames: ["ip_family", "service_port", "direction"],
    collect: function* () {
      for (const [ip_family, counters] of source()) {
        for (const [service_port, c] of counters) {
          yield { labels: { ip_family, service_port, direction: "in" }, value: c.bytesIn };
          yield { labels: { ip_family, service_port, direction: "out" }, value: c.bytesOut };
        }
      }
    },
  });
  registry.collector({
    name: "edgeproxy_userspace_kernel_spliced_connections_total",
    help:
      "TCP connections handed to the in-kernel splice(2) relay once they carried bulk data (their bytes " +
      "no longer pass through the process).",
    type: "counter",
    labelNames: [],
    collect: function* () {
      yield { labels: {}, value: kernelSplicedConnections() };
    },
  });
}
