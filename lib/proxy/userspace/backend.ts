/**
 * The userspace backend of one IP family (upstream pkg/proxy/userspace/proxier.go): per service port a
 * listener for each address traffic reaches it on, TCP or UDP, feeding a {@link LoadBalancerRR}. With
 * `--userspace-portals=none` the listeners bind the service addresses themselves (made local by a
 * {@link ServiceAddressHost}) and the node-port addresses; no netfilter rule is written.
 *
 * Endpoint changes only update the balancer: established connections stay on the endpoint they were
 * dialed to. A service port that goes away stops accepting at once and its connections are closed after
 * a grace period.
 */
import type { IPFamily } from "../types.ts";
import { externallyAccessible } from "../types.ts";
import type { Provider, ProxyState, SyncOutcome } from "../provider.ts";
import { categorizeEndpoints, type CategorizeOptions } from "../topology.ts";
import { LoadBalancerRR, type TrafficKind } from "./load_balancer.ts";
import { openProxySocket, type ProxySocket, type ProxySocketStats } from "./proxy_socket.ts";
import type { ServiceAddressHost } from "./interface_addresses.ts";
import { portalDrift, type PortalRule, renderPortalRules } from "./portals.ts";
import { newNodePortAddresses } from "../nodeport_addresses.ts";
import { joinHostPort } from "../../net/go_net.ts";
import { cidrContains, parseCIDR, parseIP } from "../../net/ip.ts";
import type { LocalDetection } from "../local_detect.ts";
import type { TcpTransport } from "../../runtime/tcp_transport.ts";
import type { UdpTransport } from "../../runtime/udp_transport.ts";

/** Default time a closed service port's connections may finish. */
export const DEFAULT_CLOSE_GRACE_MS = 10_000;

/** Per-service-port counters of the userspace mode (exported as edgeproxy_userspace_* metrics). */
export interface UserspaceCounters {
  connections: number;
  bytesIn: number;
  bytesOut: number;
  dialErrors: number;
  noEndpoints: number;
}

/** What the userspace backend of one family needs besides the proxy state. */
export interface UserspaceBackendOptions {
  readonly family: IPFamily;
  readonly nodeName: string;
  readonly log: { warn(msg: string): void; debug(msg: string): void };
  /** How service addresses reach the listeners. */
  readonly steering: Steering;
  readonly nodePortAddresses: readonly string[];
  /** Whether node ports answer on loopback addresses (upstream iptables.localhostNodePorts). */
  readonly localhostNodePorts?: boolean;
  /** The node's own addresses of this family (a connection from one is the node's own traffic). */
  readonly localAddresses?: () => readonly string[];
  /** The node's primary IP of this family, or null (load-balancer source ranges). */
  readonly primaryNodeIP?: () => string | null;
  readonly udpIdleTimeoutMs?: number;
  readonly closeGraceMs?: number;
  readonly deadEndpointBackoffMs?: number;
  readonly dialTimeoutsMs?: readonly number[];
  /** TCP sockets; default: the running runtime's (the bench compares them). */
  readonly transport?: TcpTransport;
  /** UDP sockets (default: the runtime's; benchmarks compare). */
  readonly udpTransport?: UdpTransport;
  readonly categorize?: CategorizeOptions;
  readonly now?: () => number;
}

/**
 * How service addresses reach the listeners: `none` makes them local addresses that the listeners bind;
 * `iptables` binds one listener per service port and kind at `listenIP` (kernel-chosen ports) and writes
 * portal rules, through `restore`, one transaction per sync.
 */
export type Steering =
  | { readonly kind: "none"; readonly addresses: ServiceAddressHost }
  | {
    readonly kind: "iptables";
    /** The node address the listeners bind ("0.0.0.0"/"::": the wildcard, and the rules REDIRECT). */
    readonly listenIP: () => string;
    /** iptables-restore --noflush of a nat payload. */
    readonly restore: (payload: string) => Promise<void>;
    /** Ensures the jumps from PREROUTING and OUTPUT (full syncs). */
    readonly ensureJumps: () => Promise<void>;
    /** The nat table as iptables-save prints it (drift check); absent: not checked. */
    readonly save?: () => Promise<string>;
  };

/** One listener the state asks for. */
interface Portal {
  readonly serviceKey: string;
  readonly kind: TrafficKind;
  readonly protocol: "TCP" | "UDP";
  readonly address: string;
  /** 0: the kernel chooses (iptables portals). */
  readonly port: number;
  /** With iptables portals: the destinations steered to this listener (null ip: a node port). */
  readonly destinations: { ip: string | null; port: number }[];
  /** loadBalancerSourceRanges a client must be inside (load-balancer IP listeners only; empty: any). */
  readonly sourceRanges: readonly string[];
}

function portalKey(p: Portal): string {
  return p.port === 0
    ? `${p.protocol}/${p.serviceKey}/${p.kind}${p.sourceRanges.length > 0 ? "/ranged" : ""}`
    : `${p.protocol}/${joinHostPort(p.address, p.port)}`;
}

/** One family's userspace backend. */
export class UserspaceBackend implements Provider {
  readonly #o: UserspaceBackendOptions;
  readonly #lb: LoadBalancerRR;
  readonly #listeners = new Map<string, { portal: Portal; socket: ProxySocket }>();
  readonly #counters = new Map<string, UserspaceCounters>();
  /** Listeners being closed (grace period running). */
  readonly #closing = new Set<Promise<void>>();
  #warnedSCTP = new Set<string>();
  #jumpsEnsured = false;
  /** The last portal payload written (iptables portals), what the drift check compares with. */
  #lastPayload: string | null = null;
  #localSources: (ip: string) => boolean = () => false;

  constructor(o: UserspaceBackendOptions) {
    this.#o = o;
    this.#lb = new LoadBalancerRR({
      nodeName: o.nodeName,
      now: o.now ?? Date.now,
      deadEndpointBackoffMs: o.deadEndpointBackoffMs,
      categorize: o.categorize,
    });
  }

  /** The balancer (read by tests and metrics). */
  get loadBalancer(): LoadBalancerRR {
    return this.#lb;
  }

  /** Per service port counters, by service port key. */
  counters(): ReadonlyMap<string, Readonly<UserspaceCounters>> {
    return this.#counters;
  }

  /** The open listeners: "PROTO/ip:port" → service port key. */
  listeners(): Map<string, string> {
    return new Map([...this.#listeners].map(([k, v]) => [k, v.portal.serviceKey]));
  }

  /** @inheritdoc */
  async sync(state: ProxyState, opts: { readonly full: boolean }): Promise<SyncOutcome> {
    const o = this.#o;
    this.#lb.cleanupStale();
    let internalNoLocal = 0;
    let externalNoLocal = 0;
    const want = new Map<string, Portal>();
    const serviceAddresses = new Set<string>();
    const st = o.steering;
    // Node ports bind each node address (portals=none). The addresses come from the host with portals=none
    // (every interface, up or not, without the service addresses), as upstream reads them.
    const nodeAddresses = st.kind === "none" ? await st.addresses.nodeAddresses(o.family) : [];
    const nodePortIPs = newNodePortAddresses(o.family, o.nodePortAddresses).nodeIPs(nodeAddresses)
      .filter((ip) => o.localhostNodePorts !== false || !isLoopback(ip));
    const ownAddresses = [...nodeAddresses, ...(o.localAddresses?.() ?? [])];
    const primaryIP = o.primaryNodeIP?.() ?? null;
    const listenIP = st.kind === "iptables" ? st.listenIP() : "";

    for (const [key, svc] of state.services) {
      const eps = state.endpoints.get(key) ?? [];
      this.#lb.onEndpointsUpdate(key, svc, eps, state.nodeLabels);
      const cat = categorizeEndpoints(eps, svc, o.nodeName, state.nodeLabels, o.categorize);
      if (svc.internalPolicyLocal && cat.localEndpoints.length === 0) internalNoLocal++;
      if (svc.externalPolicyLocal && externallyAccessible(svc) && cat.localEndpoints.length === 0) {
        externalNoLocal++;
      }
      if (svc.protocol === "SCTP") {
        if (!this.#warnedSCTP.has(key)) {
          this.#warnedSCTP.add(key);
          o.log.warn(`userspace mode: service port ${key}: SCTP is not supported; skipping it`);
        }
        continue;
      }
      const protocol = svc.protocol as "TCP" | "UDP";
      const add = (kind: TrafficKind, ip: string | null, port: number, ranges: readonly string[] = []) => {
        if (st.kind === "none") {
          if (ip === null) return;
          const p: Portal = {
            serviceKey: key,
            kind,
            protocol,
            address: ip,
            port,
            destinations: [],
            sourceRanges: ranges,
          };
          want.set(portalKey(p), p);
          return;
        }
        const probe: Portal = {
          serviceKey: key,
          kind,
          protocol,
          address: listenIP,
          port: 0,
          destinations: [],
          // Load-balancer IPs with source ranges get a listener of their own that checks the client.
          sourceRanges: ranges,
        };
        const k = portalKey(probe);
        if (!want.has(k)) want.set(k, probe);
        want.get(k)!.destinations.push({ ip, port });
      };
      add("internal", svc.clusterIP, svc.port);
      serviceAddresses.add(svc.clusterIP);
      for (const ip of svc.externalIPs) {
        add("external", ip, svc.port);
        serviceAddresses.add(ip);
      }
      // The node's own connections to a local load-balancer IP come from that IP: allowed when a range holds
      // the node's primary IP, as upstream's "-s <ingress IP>" firewall rule is written only then.
      const inRanges = sourceRangeMatcher(svc.loadBalancerSourceRanges);
      const ranges = svc.loadBalancerSourceRanges.length === 0
        ? []
        : primaryIP !== null && inRanges(primaryIP)
        ? [
          ...svc.loadBalancerSourceRanges,
          ...svc.loadBalancerVIPs.map((ip) => `${ip}/${ip.includes(":") ? 128 : 32}`),
        ]
        : svc.loadBalancerSourceRanges;
      for (const ip of svc.loadBalancerVIPs) {
        add("external", ip, svc.port, ranges);
        serviceAddresses.add(ip);
      }
      if (svc.nodePort > 0) {
        if (st.kind === "none") { for (const ip of nodePortIPs) add("external", ip, svc.nodePort); }
        else add("external", null, svc.nodePort);
      }
    }
    for (const key of [...this.#lb.services()]) if (!state.services.has(key)) this.#lb.deleteService(key);

    // Listeners that are no longer wanted, or now belong to another service port, stop accepting now.
    for (const [k, l] of this.#listeners) {
      const w = want.get(k);
      if (
        w && w.serviceKey === l.portal.serviceKey && w.kind === l.portal.kind &&
        w.address === l.portal.address && w.sourceRanges.join() === l.portal.sourceRanges.join()
      ) {
        this.#listeners.set(k, { portal: w, socket: l.socket }); // new destinations, same socket
        continue;
      }
      this.#listeners.delete(k);
      const p = l.socket.close(w ? 0 : o.closeGraceMs ?? DEFAULT_CLOSE_GRACE_MS);
      this.#closing.add(p);
      void p.finally(() => this.#closing.delete(p));
      if (w) await p; // the same address is rebound below
    }
    // The addresses first, so the listeners can bind them.
    if (st.kind === "none") await st.addresses.sync(o.family, serviceAddresses);
    // The node's own connections to a service address on this node come from that address (the kernel picks
    // a local destination as the source): those count as the node's too, from the sync that adds them.
    this.#localSources = localSourceMatcher(state.localDetection, [...ownAddresses, ...serviceAddresses]);
    const failures: string[] = [];
    await Promise.all(
      [...want].filter(([k]) => !this.#listeners.has(k)).map(async ([k, p]) => {
        try {
          const socket = await openProxySocket({
            protocol: p.protocol,
            address: p.address,
            port: p.port,
            picker: {
              next: (clientIP, reset) => {
                // Pods and the node reach external destinations through the cluster endpoints.
                const kind = p.kind === "external" && this.#localSources(clientIP) ? "cluster" : p.kind;
                return this.#lb.nextEndpoint(p.serviceKey, kind, clientIP, reset);
              },
              admit: p.sourceRanges.length === 0 ? undefined : sourceRangeMatcher(p.sourceRanges),
              dialFailed: (ep) => this.#lb.markDialFailed(ep.endpoint),
              dialSucceeded: (ep) => this.#lb.markDialSucceeded(ep.endpoint),
            },
            stats: this.#stats(p.serviceKey),
            udpIdleTimeoutMs: o.udpIdleTimeoutMs,
            dialTimeoutsMs: o.dialTimeoutsMs,
            transport: o.transport,
            udpTransport: o.udpTransport,
            log: o.log,
          });
          this.#listeners.set(k, { portal: p, socket });
        } catch (e) {
          failures.push(`${k} (${p.serviceKey}): ${(e as Error).message}`);
        }
      }),
    );
    for (const f of failures) o.log.warn(`userspace mode: cannot listen on ${f}; retrying on the next sync`);
    let bytes = this.#listeners.size;
    if (st.kind === "iptables") {
      const rules: PortalRule[] = [];
      for (const { portal, socket } of this.#listeners.values()) {
        for (const d of portal.destinations) {
          rules.push({
            servicePort: portal.serviceKey.replace(/\/(TCP|UDP|SCTP)$/, ""),
            protocol: portal.protocol,
            ip: d.ip,
            port: d.port,
            listenIP: portal.address,
            listenPort: socket.port,
          });
        }
      }
      const payload = renderPortalRules(o.family, rules, { localhostNodePorts: o.localhostNodePorts });
      await st.restore(payload);
      this.#lastPayload = payload;
      if (opts.full || !this.#jumpsEnsured) {
        await st.ensureJumps();
        this.#jumpsEnsured = true;
      }
      bytes = payload.length;
    }
    return {
      kind: this.#o.steering.kind === "iptables" ? "portals" : "listeners",
      bytes,
      noLocalEndpoints: { internal: internalNoLocal, external: externalNoLocal },
    };
  }

  /**
   * Whether what the last sync set up is still there: with portals=none the service addresses on their
   * interface (a missing one is added again by the next sync), with iptables portals the portal chains'
   * rules and the jumps to them. The proxier forces a full sync when this returns a reason.
   */
  async checkDrift(): Promise<string | null> {
    const st = this.#o.steering;
    if (st.kind === "none") {
      const gone = (await st.addresses.missing?.(this.#o.family)) ?? [];
      return gone.length === 0
        ? null
        : `service addresses missing from ${st.addresses.device}: ${gone.join(", ")}`;
    }
    if (this.#lastPayload === null || st.save === undefined) return null;
    return portalDrift(this.#lastPayload, await st.save());
  }

  /** Closes every listener and connection at once (shutdown, tests). */
  async close(): Promise<void> {
    const all = [...this.#listeners.values()].map((l) => l.socket.close(0));
    this.#listeners.clear();
    await Promise.all([...all, ...this.#closing]);
  }

  #stats(key: string): ProxySocketStats {
    let c = this.#counters.get(key);
    if (!c) {
      c = { connections: 0, bytesIn: 0, bytesOut: 0, dialErrors: 0, noEndpoints: 0 };
      this.#counters.set(key, c);
    }
    const counters = c;
    return {
      connection: () => counters.connections++,
      bytes: (dir, n) => dir === "in" ? (counters.bytesIn += n) : (counters.bytesOut += n),
      dialError: () => counters.dialErrors++,
      noEndpoints: () => counters.noEndpoints++,
    };
  }
}

function isLoopback(ip: string): boolean {
  return ip.startsWith("127.") || ip === "::1";
}

/** Matches a client address against CIDRs. */
function sourceRangeMatcher(cidrs: readonly string[]): (ip: string) => boolean {
  const parsed = cidrs.flatMap((c) => {
    const p = parseCIDR(c);
    return p ? [p] : [];
  });
  return (ip) => {
    const b = parseIP(ip);
    return b !== null && parsed.some((c) => cidrContains(c, b));
  };
}

/** True for a pod of this node (by the local-traffic detection's CIDR) or the node itself. */
function localSourceMatcher(
  detection: LocalDetection,
  nodeAddresses: readonly string[],
): (ip: string) => boolean {
  const own = new Set(nodeAddresses);
  const pods = detection.kind === "cidr" ? sourceRangeMatcher([detection.cidr]) : () => false;
  return (ip) => own.has(ip) || isLoopback(ip) || pods(ip);
}
