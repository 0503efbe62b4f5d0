/**
 * A cluster of service ports of every shape iptables mode's own chains have — NodePort (EXT), LoadBalancer
 * source ranges (FW), Local policy (SVL), affinity, several endpoints, one service port (svc1) larger than
 * the restore tests' small chain bounds — for the restore-plan tests. With `variants`, also internal
 * Local policy, not-ready endpoints and one service port (svc4) with an unsafe endpoint, which the render
 * skips. The objects are a pure function of the arguments (tests pin digests of what they render).
 */
import type { EndpointInfo, ServicePortInfo } from "../../lib/proxy/types.ts";
import { servicePortKey } from "../../lib/proxy/types.ts";
import { makeEndpoint, makeServicePort, TEST_NODE_NAME } from "./tracer.ts";

/** Service ports and their endpoints, keyed by servicePortKey. */
export interface OwnChainCluster {
  services: Map<string, ServicePortInfo>;
  endpoints: Map<string, EndpointInfo[]>;
}

/** `n` service ports; `gen` goes into the endpoint addresses (a second generation moves every endpoint). */
export function ownChainCluster(n: number, gen: number, variants = false): OwnChainCluster {
  const services = new Map<string, ServicePortInfo>();
  const endpoints = new Map<string, EndpointInfo[]>();
  for (let i = 0; i < n; i++) {
    const lb = i % 7 === 0;
    const svc = makeServicePort(`ns${i % 5}`, `svc${i}`, {
      clusterIP: `172.30.${i >> 8}.${i & 255}`,
      nodePort: i % 3 === 0 || lb ? 30000 + i : 0,
      loadBalancerVIPs: lb ? [`203.0.113.${i & 255}`] : [],
      loadBalancerSourceRanges: lb ? ["198.51.100.0/24"] : [],
      externalPolicyLocal: i % 6 === 0,
      internalPolicyLocal: variants && i % 11 === 0,
      stickyMaxAgeSeconds: i % 5 === 0 ? 10800 : 0,
    });
    const key = servicePortKey(svc.name);
    services.set(key, svc);
    // Service 1 is larger than the tests' chain bound: its segment is split leaves first.
    const count = i === 1 ? 12 : 1 + (i % 4);
    const eps: EndpointInfo[] = [];
    for (let e = 1; e <= count; e++) {
      eps.push(makeEndpoint(`10.${gen}.${i & 255}.${e}`, 8080, {
        nodeName: e === 1 ? TEST_NODE_NAME : "",
        ready: !(variants && i % 9 === 0 && e === 2),
      }));
    }
    if (variants && i === 4) eps[0] = { ...eps[0], endpoint: "10.9.9.9:1" }; // unsafe: skipped
    endpoints.set(key, eps);
  }
  return { services, endpoints };
}
