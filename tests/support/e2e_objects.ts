/**
 * Builders for the API objects e2e tests put into the test apiserver: Services, EndpointSlices and the
 * Node, shaped as the apiserver returns them (defaults a real apiserver would fill in are filled in here,
 * e.g. protocol TCP, targetPort = port, sessionAffinityConfig timeout 10800).
 */
import type { EndpointSlice, Node, Service } from "../../lib/k8s/objects.ts";
import { LABEL_SERVICE_NAME } from "../../lib/k8s/objects.ts";

/** Namespace used when a builder is not given one. */
export const E2E_NAMESPACE = "e2e";

/** One port of an e2e Service. */
export interface E2eServicePort {
  /** Port name; EndpointSlice ports are matched by it (default ""). */
  readonly name?: string;
  readonly port: number;
  /** Default: `port`. */
  readonly targetPort?: number;
  /** Default TCP. */
  readonly protocol?: "TCP" | "UDP" | "SCTP";
  /** Only for NodePort and LoadBalancer Services. */
  readonly nodePort?: number;
}

/** Options of e2eService. */
export interface E2eServiceOptions {
  readonly name: string;
  readonly namespace?: string;
  /** Default ClusterIP. */
  readonly type?: "ClusterIP" | "NodePort" | "LoadBalancer";
  readonly clusterIP: string;
  readonly ports: readonly E2eServicePort[];
  readonly externalIPs?: readonly string[];
  /** Written to status.loadBalancer.ingress (as a cloud controller would). */
  readonly loadBalancerIngress?: readonly string[];
  readonly loadBalancerSourceRanges?: readonly string[];
  readonly externalTrafficPolicy?: "Cluster" | "Local";
  readonly internalTrafficPolicy?: "Cluster" | "Local";
  /** ClientIP session affinity with this timeout (seconds); absent = None. */
  readonly sessionAffinityTimeoutSeconds?: number;
  readonly healthCheckNodePort?: number;
}

/** A Service as the apiserver stores it after defaulting. */
export function e2eService(o: E2eServiceOptions): Service {
  const type = o.type ?? "ClusterIP";
  const external = type === "NodePort" || type === "LoadBalancer";
  const spec: NonNullable<Service["spec"]> = {
    type,
    clusterIP: o.clusterIP,
    clusterIPs: [o.clusterIP],
    ipFamilies: ["IPv4"],
    ipFamilyPolicy: "SingleStack",
    selector: { app: o.name },
    ports: o.ports.map((p) => ({
      name: p.name ?? "",
      protocol: p.protocol ?? "TCP",
      port: p.port,
      targetPort: p.targetPort ?? p.port,
      ...(p.nodePort !== undefined ? { nodePort: p.nodePort } : {}),
    })),
    internalTrafficPolicy: o.internalTrafficPolicy ?? "Cluster",
    sessionAffinity: o.sessionAffinityTimeoutSeconds !== undefined ? "ClientIP" : "None",
  };
  if (o.sessionAffinityTimeoutSeconds !== undefined) {
    spec.sessionAffinityConfig = { clientIP: { timeoutSeconds: o.sessionAffinityTimeoutSeconds } };
  }
  if (external || o.externalIPs?.length) spec.externalTrafficPolicy = o.externalTrafficPolicy ?? "Cluster";
  if (o.externalIPs?.length) spec.externalIPs = [...o.externalIPs];
  if (o.loadBalancerSourceRanges?.length) spec.loadBalancerSourceRanges = [...o.loadBalancerSourceRanges];
  if (o.healthCheckNodePort !== undefined) spec.healthCheckNodePort = o.healthCheckNodePort;
  const svc: Service = {
    metadata: { name: o.name, namespace: o.namespace ?? E2E_NAMESPACE },
    spec,
    status: { loadBalancer: {} },
  };
  if (o.loadBalancerIngress?.length) {
    svc.status = { loadBalancer: { ingress: o.loadBalancerIngress.map((ip) => ({ ip, ipMode: "VIP" })) } };
  }
  return svc;
}

/** One endpoint of an e2e EndpointSlice. */
export interface E2eEndpoint {
  readonly ip: string;
  readonly nodeName: string;
  /** Default true. */
  readonly ready?: boolean;
  /** Default: `ready`. */
  readonly serving?: boolean;
  /** Default false. */
  readonly terminating?: boolean;
}

/** Options of e2eEndpointSlice. */
export interface E2eEndpointSliceOptions {
  /** The Service this slice belongs to (label kubernetes.io/service-name). */
  readonly service: string;
  readonly namespace?: string;
  /** Default `<service>-e2e`. */
  readonly name?: string;
  /** Named like the Service's ports (name "" for a single unnamed port). */
  readonly ports: ReadonlyArray<
    { readonly name?: string; readonly port: number; readonly protocol?: "TCP" | "UDP" | "SCTP" }
  >;
  readonly endpoints: readonly E2eEndpoint[];
}

/** An IPv4 EndpointSlice as the EndpointSlice controller writes it. */
export function e2eEndpointSlice(o: E2eEndpointSliceOptions): EndpointSlice {
  return {
    metadata: {
      name: o.name ?? `${o.service}-e2e`,
      namespace: o.namespace ?? E2E_NAMESPACE,
      labels: { [LABEL_SERVICE_NAME]: o.service, "endpointslice.kubernetes.io/managed-by": "e2e-test" },
    },
    addressType: "IPv4",
    ports: o.ports.map((p) => ({ name: p.name ?? "", port: p.port, protocol: p.protocol ?? "TCP" })),
    endpoints: o.endpoints.map((e) => {
      const ready = e.ready ?? true;
      return {
        addresses: [e.ip],
        conditions: { ready, serving: e.serving ?? ready, terminating: e.terminating ?? false },
        nodeName: e.nodeName,
      };
    }),
  };
}

/** The Node object of the proxied node (podCIDR and InternalIP as a kubelet registers them). */
export function e2eNode(name: string, o: { readonly podCIDR: string; readonly internalIP: string }): Node {
  return {
    metadata: { name, labels: { "kubernetes.io/hostname": name, "kubernetes.io/os": "linux" } },
    spec: { podCIDR: o.podCIDR, podCIDRs: [o.podCIDR] },
    status: {
      addresses: [{ type: "InternalIP", address: o.internalIP }, { type: "Hostname", address: name }],
    },
  };
}
