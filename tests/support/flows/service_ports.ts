/**
 * A flow table's Service as the core's service ports, for backend runners that render from the core's model
 * (the iptables and nftables renderers' table runners share it).
 */
import type { ServicePortInfo } from "../../../lib/proxy/types.ts";
import { makeServicePort } from "../tracer.ts";
import type { FlowService } from "./types.ts";

/** Each port of `svc` as a ServicePortInfo, with the port its endpoints listen on. */
export function flowServicePorts(svc: FlowService): Array<[ServicePortInfo, number]> {
  return svc.ports.map((port) => [
    makeServicePort(svc.namespace, svc.name, {
      port: port.name ?? "p80",
      protocol: port.protocol ?? "TCP",
      clusterIP: svc.clusterIP,
      portNumber: port.port,
      nodePort: port.nodePort ?? 0,
      externalIPs: svc.externalIPs ?? [],
      loadBalancerVIPs: svc.loadBalancerIPs ?? [],
      loadBalancerSourceRanges: svc.loadBalancerSourceRanges ?? [],
      stickyMaxAgeSeconds: svc.sessionAffinitySeconds ?? 0,
      externalPolicyLocal: svc.externalTrafficPolicy === "Local",
      internalPolicyLocal: svc.internalTrafficPolicy === "Local",
      healthCheckNodePort: svc.healthCheckNodePort ?? 0,
    }),
    port.targetPort ?? port.port,
  ]);
}
