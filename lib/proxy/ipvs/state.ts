/**
 * The desired IPVS state of one family, as upstream's IPVS proxier (pkg/proxy/ipvs/proxier.go
 * syncProxyRules) computes it from the service ports and endpoints: the addresses on kube-ipvs0, one
 * virtual server per service port and address (ClusterIP, each externalIP, each load-balancer VIP, the
 * NodePort on every node-port address) with its scheduler, persistence and real servers, the entries of
 * every ipset, and the iptables payload. Pure: no I/O, sorted output, so tests compare it directly and
 * the writers diff it against what they read back from the kernel.
 */
import type { EndpointInfo, IPFamily, Protocol, ServicePortInfo } from "../types.ts";
import { servicePortKey } from "../types.ts";
import { categorizeEndpoints } from "../topology.ts";
import type { NodePortAddresses } from "../nodeport_addresses.ts";
import type { LocalTrafficDetector } from "../iptables/local_detector.ts";
import { cidrContains, joinHostPort, parseIP } from "../../net/go_net.ts";
import { DEFAULT_SCHEDULER } from "./chains.ts";
import {
  ipPortEntry,
  ipPortIPEntry,
  ipPortNetEntry,
  IPSET_INFO,
  KUBE_CLUSTER_IP_SET,
  KUBE_EXTERNAL_IP_LOCAL_SET,
  KUBE_EXTERNAL_IP_SET,
  KUBE_HEALTH_CHECK_NODE_PORT_SET,
  KUBE_IPVS_SET,
  KUBE_LOAD_BALANCER_FW_SET,
  KUBE_LOAD_BALANCER_LOCAL_SET,
  KUBE_LOAD_BALANCER_SET,
  KUBE_LOAD_BALANCER_SOURCE_CIDR_SET,
  KUBE_LOAD_BALANCER_SOURCE_IP_SET,
  KUBE_LOOP_BACK_SET,
  KUBE_NODE_PORT_LOCAL_SCTP_SET,
  KUBE_NODE_PORT_LOCAL_TCP_SET,
  KUBE_NODE_PORT_LOCAL_UDP_SET,
  KUBE_NODE_PORT_SCTP_SET,
  KUBE_NODE_PORT_TCP_SET,
  KUBE_NODE_PORT_UDP_SET,
} from "./ipsets.ts";
import { type LbNoNodeAccess, renderIpvsIptables } from "./iptables_rules.ts";

/** One IPVS destination. */
export interface RealServer {
  readonly address: string;
  readonly port: number;
  readonly weight: number;
}

/** One IPVS service (upstream utilipvs.VirtualServer) with the destinations it should have. */
export interface VirtualServer {
  readonly address: string;
  readonly port: number;
  readonly protocol: Protocol;
  readonly scheduler: string;
  /** ClientIP affinity: persistence timeout in seconds; 0 = not persistent. */
  readonly persistentTimeout: number;
  /** The "mh" scheduler's source-hash flag. */
  readonly sourceHash: boolean;
  /** Sorted by address, then port. */
  readonly realServers: readonly RealServer[];
  /** The service port (servicePortKey) this virtual server belongs to. */
  readonly servicePort: string;
}

/** Everything one family's IPVS proxier programs. */
export interface IpvsState {
  /** Addresses on kube-ipvs0 (also the KUBE-IPVS-IPS set), sorted. */
  readonly bindAddresses: readonly string[];
  /** By {@link virtualServerKey}, inserted in sorted key order. */
  readonly virtualServers: ReadonlyMap<string, VirtualServer>;
  /** Every set of upstream's list by its IPv4 name, entries sorted (empty sets included). */
  readonly ipsets: ReadonlyMap<string, readonly string[]>;
  /** The iptables-restore payload (nat and filter, --noflush). */
  readonly iptables: string;
  /** Services (namespace/name) with a Local policy and endpoints, but none on this node. */
  readonly noLocalEndpoints: { readonly internal: number; readonly external: number };
}

/** What the model reads. */
export interface IpvsModelInput {
  readonly family: IPFamily;
  readonly services: Iterable<ServicePortInfo>;
  /** Endpoints by servicePortKey (the core's EndpointsMap). */
  readonly endpoints: ReadonlyMap<string, readonly EndpointInfo[]>;
  readonly nodeName: string;
  readonly nodeLabels: Readonly<Record<string, string>>;
  /** The node's primary IP of this family (source ranges that contain it allow the node), or null. */
  readonly nodeIP: string | null;
  /** Local addresses of this family on every interface but kube-ipvs0 (upstream GetAllLocalAddressesExcept). */
  readonly nodeAddresses: readonly string[];
  readonly nodePortAddresses: NodePortAddresses;
  /** --ipvs-scheduler ("" = rr). */
  readonly scheduler: string;
  readonly masqueradeAll: boolean;
  readonly masqueradeBit: number;
  readonly localDetector: LocalTrafficDetector;
  readonly randomFully: boolean;
  readonly preferSameTrafficDistribution?: boolean;
}

/** Upstream VirtualServer.String(): "ip:port/PROTOCOL" (IPv6 bracketed). */
export function virtualServerKey(v: { address: string; port: number; protocol: string }): string {
  return `${joinHostPort(v.address, v.port)}/${v.protocol}`;
}

function isLoopback(ip: string): boolean {
  return ip.startsWith("127.") || ip === "::1";
}

function isLinkLocalV6(ip: string): boolean {
  return /^fe[89ab][0-9a-f]:/i.test(ip);
}

function compareRS(a: RealServer, b: RealServer): number {
  if (a.address !== b.address) return a.address < b.address ? -1 : 1;
  return a.port - b.port;
}

/** Computes the desired state (see the file comment). */
export function computeIpvsState(input: IpvsModelInput): IpvsState {
  const { family } = input;
  const scheduler = input.scheduler || DEFAULT_SCHEDULER;
  const sets = new Map<string, Set<string>>(IPSET_INFO.map((s) => [s.name, new Set<string>()]));
  const add = (set: string, entry: string) => sets.get(set)!.add(entry);
  const virtualServers = new Map<string, VirtualServer>();
  const bind = new Set<string>();
  const lbNoNodeAccess: LbNoNodeAccess[] = [];
  const noLocalInternal = new Set<string>();
  const noLocalExternal = new Set<string>();
  const ofFamily = (ip: string) => ip.includes(":") === (family === "IPv6");
  // Addresses of this family except loopback and IPv6 link-local (upstream isValidForSet).
  const nodeAddressSet = new Set(
    input.nodeAddresses.filter((ip) => ofFamily(ip) && !isLoopback(ip) && !isLinkLocalV6(ip)),
  );
  const services = [...input.services].sort((a, b) => {
    const ka = servicePortKey(a.name), kb = servicePortKey(b.name);
    return ka < kb ? -1 : ka > kb ? 1 : 0;
  });

  let nodeIPs: string[] = [];
  if (services.some((s) => s.nodePort !== 0)) {
    nodeIPs = input.nodePortAddresses.matchAll
      ? [...nodeAddressSet].sort()
      : input.nodePortAddresses.nodeIPs(input.nodeAddresses.filter(ofFamily)).filter((ip) => !isLoopback(ip));
  }

  for (const svc of services) {
    const key = servicePortKey(svc.name);
    const protocol = svc.protocol.toLowerCase();
    const endpoints = input.endpoints.get(key) ?? [];
    const nsName = `${svc.name.namespace}/${svc.name.name}`;
    const cat = categorizeEndpoints(endpoints, svc, input.nodeName, input.nodeLabels, {
      preferSameTrafficDistribution: input.preferSameTrafficDistribution,
    });
    // upstream syncEndpoint: Local policy uses local endpoints, falling back to the cluster ones so local
    // pods can still reach the service; the fallback is counted for the no-local-endpoints metric.
    const realServersFor = (onlyNodeLocal: boolean): RealServer[] => {
      let chosen: readonly EndpointInfo[];
      if (onlyNodeLocal) {
        if (cat.localEndpoints.length > 0) chosen = cat.localEndpoints;
        else {
          chosen = cat.clusterEndpoints;
          if (cat.hasAnyEndpoints && svc.internalPolicyLocal) noLocalInternal.add(nsName);
          if (cat.hasAnyEndpoints && svc.externalPolicyLocal) noLocalExternal.add(nsName);
        }
      } else chosen = cat.clusterEndpoints;
      const seen = new Map<string, RealServer>();
      for (const ep of chosen) seen.set(ep.endpoint, { address: ep.ip, port: ep.port, weight: 1 });
      return [...seen.values()].sort(compareRS);
    };
    const addVS = (address: string, port: number, onlyNodeLocal: boolean) => {
      const vs: VirtualServer = {
        address,
        port,
        protocol: svc.protocol,
        scheduler,
        persistentTimeout: svc.stickyMaxAgeSeconds > 0 ? svc.stickyMaxAgeSeconds : 0,
        sourceHash: scheduler === "mh",
        realServers: realServersFor(onlyNodeLocal),
        servicePort: key,
      };
      virtualServers.set(virtualServerKey(vs), vs);
    };

    // Hairpin: local endpoints talking to their own service are masqueraded.
    for (const ep of endpoints) {
      if (!ep.isLocal || ep.ip === "" || ep.port === 0) continue;
      add(KUBE_LOOP_BACK_SET, ipPortIPEntry(ep.ip, protocol, ep.port, ep.ip));
    }

    add(KUBE_CLUSTER_IP_SET, ipPortEntry(svc.clusterIP, protocol, svc.port));
    addVS(svc.clusterIP, svc.port, svc.internalPolicyLocal);
    bind.add(svc.clusterIP);

    for (const ip of svc.externalIPs) {
      add(
        svc.externalPolicyLocal ? KUBE_EXTERNAL_IP_LOCAL_SET : KUBE_EXTERNAL_IP_SET,
        ipPortEntry(ip, protocol, svc.port),
      );
      addVS(ip, svc.port, svc.externalPolicyLocal);
      // An address that is on another interface must not also go on the dummy device.
      if (!nodeAddressSet.has(ip)) bind.add(ip);
    }

    for (const ip of svc.loadBalancerVIPs) {
      const entry = ipPortEntry(ip, protocol, svc.port);
      add(KUBE_LOAD_BALANCER_SET, entry);
      if (svc.externalPolicyLocal) add(KUBE_LOAD_BALANCER_LOCAL_SET, entry);
      if (svc.loadBalancerSourceRanges.length > 0) {
        add(KUBE_LOAD_BALANCER_FW_SET, entry);
        let allowFromNode = false;
        for (const cidr of svc.loadBalancerSourceRanges) {
          add(KUBE_LOAD_BALANCER_SOURCE_CIDR_SET, ipPortNetEntry(ip, protocol, svc.port, cidr));
          if (input.nodeIP !== null && cidrContains(cidr, input.nodeIP)) allowFromNode = true;
        }
        if (allowFromNode) add(KUBE_LOAD_BALANCER_SOURCE_IP_SET, ipPortIPEntry(ip, protocol, svc.port, ip));
        else lbNoNodeAccess.push({ ip, protocol, port: svc.port });
      }
      addVS(ip, svc.port, svc.externalPolicyLocal);
      if (!nodeAddressSet.has(ip)) bind.add(ip);
    }

    if (svc.nodePort !== 0) {
      if (nodeIPs.length === 0) continue; // upstream skips the NodePort (and the health check port)
      const local = svc.externalPolicyLocal;
      if (svc.protocol === "SCTP") {
        for (const ip of nodeIPs) {
          add(KUBE_NODE_PORT_SCTP_SET, ipPortEntry(ip, protocol, svc.nodePort));
          if (local) add(KUBE_NODE_PORT_LOCAL_SCTP_SET, ipPortEntry(ip, protocol, svc.nodePort));
        }
      } else {
        const tcp = svc.protocol === "TCP";
        add(tcp ? KUBE_NODE_PORT_TCP_SET : KUBE_NODE_PORT_UDP_SET, String(svc.nodePort));
        if (local) {
          add(tcp ? KUBE_NODE_PORT_LOCAL_TCP_SET : KUBE_NODE_PORT_LOCAL_UDP_SET, String(svc.nodePort));
        }
      }
      for (const ip of nodeIPs) addVS(ip, svc.nodePort, local);
    }

    if (svc.healthCheckNodePort !== 0) add(KUBE_HEALTH_CHECK_NODE_PORT_SET, String(svc.healthCheckNodePort));
  }

  for (const ip of bind) add(KUBE_IPVS_SET, ip);
  const ipsets = new Map<string, readonly string[]>();
  for (const [name, entries] of sets) ipsets.set(name, [...entries].sort());
  const sortedVS = new Map([...virtualServers.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  return {
    bindAddresses: [...bind].sort(),
    virtualServers: sortedVS,
    ipsets,
    iptables: renderIpvsIptables({
      family,
      ipsets,
      lbNoNodeAccess,
      masqueradeAll: input.masqueradeAll,
      masqueradeBit: input.masqueradeBit,
      localDetector: input.localDetector,
      randomFully: input.randomFully,
    }),
    noLocalEndpoints: { internal: noLocalInternal.size, external: noLocalExternal.size },
  };
}

/** True when `ip` parses as an address of `family` (used to keep other families' state alone). */
export function isOfFamily(ip: string, family: IPFamily): boolean {
  const p = parseIP(ip);
  return p !== null && p.includes(":") === (family === "IPv6");
}
