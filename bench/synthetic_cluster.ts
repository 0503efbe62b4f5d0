/**
 * Deterministic synthetic clusters for benchmarks: N Services with 1–2 ports and 5 endpoints each, a mix
 * of ClusterIP, NodePort and LoadBalancer, traffic policies and session affinity. Same N and seed, same
 * objects.
 */
import type { EndpointSlice, Node, Service } from "../lib/k8s/objects.ts";
import { mulberry32 } from "../tests/support/random.ts";

/** A generated cluster. */
export interface SyntheticCluster {
  services: Service[];
  endpointSlices: EndpointSlice[];
  node: Node;
}

/** Options for {@link syntheticCluster}. */
export interface SyntheticOptions {
  services: number;
  endpointsPerService?: number;
  nodeName?: string;
  seed?: number;
}

/** The n-th address of a /8-sized block starting at `a.b.0.0` (b carries the overflow past 65535). */
const addr = (a: number, b: number, n: number) => `${a}.${b + (n >> 16)}.${(n >> 8) & 255}.${n & 255}`;

/** Builds the cluster: ClusterIPs from 172.30.0.0/15, LB IPs from 100.64/10, externalIPs from 100.100/14, endpoints from 10/8. */
export function syntheticCluster(opts: SyntheticOptions): SyntheticCluster {
  const rnd = mulberry32(opts.seed ?? 1);
  const eps = opts.endpointsPerService ?? 5;
  const nodeName = opts.nodeName ?? "bench-node";
  const services: Service[] = [];
  const endpointSlices: EndpointSlice[] = [];
  let nodePort = 30000;
  for (let i = 0; i < opts.services; i++) {
    const ns = `ns${i % 50}`;
    const name = `svc${i}`;
    const r = rnd();
    const type = r < 0.7 ? "ClusterIP" : r < 0.85 ? "NodePort" : "LoadBalancer";
    const twoPorts = rnd() < 0.3;
    const ports = [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080 }];
    if (twoPorts) ports.push({ name: "dns", protocol: "UDP", port: 53, targetPort: 5353 });
    const spec: NonNullable<Service["spec"]> = {
      type,
      clusterIP: addr(172, 30, i + 1),
      ports: ports.map((p) => ({
        ...p,
        ...(type !== "ClusterIP" && nodePort < 32767 ? { nodePort: nodePort++ } : {}),
      })),
    };
    spec.clusterIPs = [spec.clusterIP!];
    if (type === "LoadBalancer" && rnd() < 0.5) {
      spec.externalTrafficPolicy = "Local";
      if (nodePort < 32767) spec.healthCheckNodePort = nodePort++;
    }
    if (rnd() < 0.1) spec.internalTrafficPolicy = "Local";
    if (rnd() < 0.1) {
      spec.sessionAffinity = "ClientIP";
      spec.sessionAffinityConfig = { clientIP: { timeoutSeconds: 10800 } };
    }
    if (type === "ClusterIP" && rnd() < 0.05) spec.externalIPs = [addr(100, 100, i + 1)];
    const svc: Service = {
      apiVersion: "v1",
      kind: "Service",
      metadata: { namespace: ns, name, resourceVersion: String(i + 1), uid: `uid-svc-${i}` },
      spec,
    };
    if (type === "LoadBalancer") {
      svc.status = { loadBalancer: { ingress: [{ ip: addr(100, 64, i + 1) }] } };
    }
    services.push(svc);
    endpointSlices.push({
      apiVersion: "discovery.k8s.io/v1",
      kind: "EndpointSlice",
      metadata: {
        namespace: ns,
        name: `${name}-abcde`,
        resourceVersion: String(1_000_000 + i),
        labels: { "kubernetes.io/service-name": name },
      },
      addressType: "IPv4",
      endpoints: Array.from({ length: eps }, (_, j) => ({
        addresses: [addr(10, 0, (i * eps + j + 1) & 0xffffff)],
        conditions: { ready: true, serving: true, terminating: false },
        nodeName: j === 0 ? nodeName : `node-${(i + j) % 100}`,
      })),
      ports: ports.map((p) => ({ name: p.name, protocol: p.protocol, port: p.targetPort })),
    });
  }
  const node: Node = {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name: nodeName, labels: { "topology.kubernetes.io/zone": "zone-a" } },
    spec: { podCIDR: "10.0.0.0/8", podCIDRs: ["10.0.0.0/8"] },
  };
  return { services, endpointSlices, node };
}

/**
 * The cluster's objects as a real apiserver sends them for kubectl-applied Services and controller-made
 * EndpointSlices: `metadata.managedFields` (server-side-apply history), kubectl's last-applied annotation
 * on Services, the owner reference and each endpoint's `targetRef` on slices. Shapes and sizes follow
 * what a v1.34 apiserver returns for such objects; the proxy reads none of it.
 */
export function withApiserverFields(c: SyntheticCluster): SyntheticCluster {
  const time = "2026-11-01T00:00:00Z";
  const services = c.services.map((s) => {
    const { status: _st, ...manifest } = s;
    const applied = JSON.stringify({
      ...manifest,
      metadata: { name: s.metadata?.name, namespace: s.metadata?.namespace },
    });
    return {
      ...s,
      metadata: {
        ...s.metadata,
        creationTimestamp: time,
        annotations: { "kubectl.kubernetes.io/last-applied-configuration": `${applied}\n` },
        managedFields: [{
          manager: "kubectl-client-side-apply",
          operation: "Update",
          apiVersion: "v1",
          time,
          fieldsType: "FieldsV1",
          fieldsV1: {
            "f:metadata": {
              "f:annotations": { ".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {} },
            },
            "f:spec": {
              "f:internalTrafficPolicy": {},
              "f:ports": Object.fromEntries(
                (s.spec?.ports ?? []).map((p) => [
                  `k:{"port":${p.port},"protocol":"${p.protocol}"}`,
                  { ".": {}, "f:name": {}, "f:port": {}, "f:protocol": {}, "f:targetPort": {} },
                ]),
              ),
              "f:sessionAffinity": {},
              "f:type": {},
            },
          },
        }],
      },
    } as Service;
  });
  const endpointSlices = c.endpointSlices.map((e) => {
    const svc = e.metadata?.labels?.["kubernetes.io/service-name"] ?? "";
    return {
      ...e,
      metadata: {
        ...e.metadata,
        generateName: `${svc}-`,
        creationTimestamp: time,
        generation: 1,
        labels: {
          ...e.metadata?.labels,
          "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
        },
        ownerReferences: [{
          apiVersion: "v1",
          kind: "Service",
          name: svc,
          uid: `uid-${svc}`,
          controller: true,
          blockOwnerDeletion: true,
        }],
        managedFields: [{
          manager: "kube-controller-manager",
          operation: "Update",
          apiVersion: "discovery.k8s.io/v1",
          time,
          fieldsType: "FieldsV1",
          fieldsV1: {
            "f:addressType": {},
            "f:endpoints": {},
            "f:metadata": {
              "f:generateName": {},
              "f:labels": {
                ".": {},
                "f:endpointslice.kubernetes.io/managed-by": {},
                "f:kubernetes.io/service-name": {},
              },
              "f:ownerReferences": { ".": {}, [`k:{"uid":"uid-${svc}"}`]: {} },
            },
            "f:ports": {},
          },
        }],
      },
      endpoints: (e.endpoints ?? []).map((ep, j) => ({
        ...ep,
        targetRef: {
          kind: "Pod",
          namespace: e.metadata?.namespace,
          name: `${svc}-7d9f8c6b5-${j}x2kq`,
          uid: `uid-pod-${svc}-${j}`,
        },
      })),
    } as EndpointSlice;
  });
  return { ...c, services, endpointSlices };
}
