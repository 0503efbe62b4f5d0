/**
 * What one render takes in: the service ports and endpoints of one IP family, the node's identity and
 * addresses, the proxier's settings and the probed kernel features, and which kind of sync this is
 * (full, or partial with the changed Services named). Plain data; render.ts re-exports these types.
 */
import type { EndpointInfo, IPFamily, ServicePortInfo } from "../../types.ts";
import type { LocalTrafficDetector } from "../local_detector.ts";

/** Kernel/iptables capabilities and behaviour switches probed or configured by the caller. */
export interface RenderFeatures {
  /** iptables supports MASQUERADE --random-fully (>= 1.6.2). */
  readonly randomFully: boolean;
  /** nfacct counters exist (upstream creates them on full syncs; false if that failed). */
  readonly nfacct: boolean;
  /** Write the KUBE-FORWARD conntrack INVALID drop rule (false when nf_conntrack_tcp_be_liberal=1). */
  readonly dropInvalid: boolean;
  /** PreferSameTrafficDistribution feature gate (default true): honour hints.forNodes. */
  readonly preferSameTrafficDistribution?: boolean;
}

/** Everything one sync of one IP family needs. */
export interface RenderInput {
  readonly family: IPFamily;
  /** Service ports of this family, keyed by servicePortKey. */
  readonly services: ReadonlyMap<string, ServicePortInfo>;
  /** Endpoints per service port (same keys), sorted by "ip:port" as the endpoint tracker keeps them. */
  readonly endpoints: ReadonlyMap<string, readonly EndpointInfo[]>;
  /** This node's name (endpoint locality is already in EndpointInfo.isLocal; used for node hints). */
  readonly nodeName: string;
  /** This node's labels (topology zone). */
  readonly nodeLabels: Readonly<Record<string, string>>;
  /**
   * The node's primary IP of this family (upstream proxier.nodeIP), or null. Used for the KUBE-FW rule
   * that admits LB-IP-sourced hairpin traffic when a source range contains the node IP.
   */
  readonly primaryNodeIP: string | null;
  /**
   * All local addresses of this family (upstream: network interface addresses, including loopback);
   * used to expand `nodePortAddresses` into per-IP KUBE-NODEPORTS jumps.
   */
  readonly nodeIPs: readonly string[];
  readonly masqueradeAll: boolean;
  /** 0..31; the mark is 1 << bit, formatted as Go's %#08x (bit 14 → 0x00004000). */
  readonly masqueradeBit: number;
  /**
   * iptables.localhostNodePorts. Effective only for IPv4 and only when nodePortAddresses covers an IPv4
   * loopback address (upstream NewProxier turns it off otherwise).
   */
  readonly localhostNodePorts: boolean;
  /** `--nodeport-addresses` CIDRs (either family), or ["primary"] (resolved with primaryNodeIP). Empty: all addresses. */
  readonly nodePortAddresses: readonly string[];
  readonly localDetector: LocalTrafficDetector;
  readonly features: RenderFeatures;
  /** Full sync: write every service port's chains. */
  readonly full: boolean;
  /**
   * Partial sync: service ports whose chains are written. Holds servicePortKey values and/or
   * "namespace/name" of whole Services (upstream tracks changes per Service). An incremental sync
   * re-derives only these service ports: every service port whose ServicePortInfo or endpoints array
   * is not the object the previous render saw must be named here (the change trackers guarantee it).
   */
  readonly changedServices: ReadonlySet<string>;
  /** Override of INCREMENTAL_MAX_CHAINS (tests, tuning). */
  readonly incrementalMaxChains?: number;
  /**
   * Chains now in the kernel's nat table (from iptables-save), or null to skip stale-chain deletion
   * (upstream skips it in large-cluster mode more often than once per syncPeriod). On an incremental
   * sync, pass the previous result's activeNatChains object itself: stale chains are then found from
   * the changed service ports without reading the whole set.
   */
  readonly existingNatChains: ReadonlySet<string> | null;
}
