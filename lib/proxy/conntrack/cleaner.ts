/**
 * Adapts the stale-flow reconciler (cleanup.ts) to the proxier: after a successful sync it reconciles
 * UDP conntrack entries of this family, but only when the sync could have made entries stale (a full sync,
 * removed UDP endpoints or service ports, UDP services that gained their first endpoint), so quiet partial
 * syncs do not pay for listing the conntrack table. Records upstream's reconciler metrics.
 */
import type { IPFamily } from "../types.ts";
import type { ServicePortMap, UpdateServiceMapResult } from "../service_change_tracker.ts";
import type { EndpointsMap, UpdateEndpointsMapResult } from "../endpoints_change_tracker.ts";
import { type ServicePortEndpoints, StaleFlowReconciler } from "./cleanup.ts";
import type { ConntrackRunner } from "./runner.ts";
import type { KubeProxyMetrics } from "../../metrics/kubeproxy.ts";
import type { ConntrackCleaner } from "../proxier.ts";

/** Creates the cleaner for one family. */
export function createConntrackCleaner(
  family: IPFamily,
  runner: ConntrackRunner,
  metrics: KubeProxyMetrics,
  now: () => number,
): ConntrackCleaner & { forceNext(): void } {
  const reconciler = new StaleFlowReconciler(runner);
  let force = true; // the first sync after start reconciles whatever an earlier process left
  return {
    forceNext() {
      force = true;
    },
    async cleanStaleEntries(
      services: ServicePortMap,
      endpoints: EndpointsMap,
      svcResult: UpdateServiceMapResult,
      epResult: UpdateEndpointsMapResult,
    ): Promise<number> {
      const needed = force || svcResult.deletedUDPClusterIPs.size > 0 ||
        epResult.deletedUDPEndpoints.length > 0 ||
        epResult.newlyActiveUDPServices.size > 0 ||
        [...svcResult.updatedServices].some((k) => k.endsWith("/UDP"));
      if (!needed) return 0;
      const start = now();
      const ports: ServicePortEndpoints[] = [];
      for (const [key, servicePort] of services) {
        ports.push({ servicePort, endpoints: endpoints.get(key) ?? [] });
      }
      const result = await reconciler.reconcile(family, ports);
      force = false;
      metrics.reconcileConntrackFlowsLatency.observe({ ip_family: family }, (now() - start) / 1000);
      metrics.reconcileConntrackFlowsDeletedEntriesTotal.inc({ ip_family: family }, result.entriesDeleted);
      return result.entriesDeleted;
    },
  };
}
