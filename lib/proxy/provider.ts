/**
 * The Provider contract: what a proxy mode (iptables today) supplies to the shared sync loop
 * (lib/proxy/proxier.ts). The loop owns everything mode-neutral — handler events, change trackers, the
 * BoundedFrequencyRunner, full/partial decisions, node labels, local-traffic detection, the drift timer,
 * and health, metrics, conntrack and health-check node ports after a sync; a provider only turns the
 * proxy state into its kernel programming and tells whether the kernel still matches.
 */
import type { IPFamily } from "./types.ts";
import type { ServicePortMap } from "./service_change_tracker.ts";
import type { EndpointsMap } from "./endpoints_change_tracker.ts";
import type { LocalDetection } from "./local_detect.ts";
import type { EdgeproxyOptions, KubeProxyConfiguration } from "../config/types.ts";
import type { KubeProxyMetrics } from "../metrics/kubeproxy.ts";
import type { Registry } from "../metrics/registry.ts";

/** What the loop hands a provider on each sync: the whole proxy state of one family. */
export interface ProxyState {
  readonly family: IPFamily;
  readonly services: ServicePortMap;
  readonly endpoints: EndpointsMap;
  /** Service ports (servicePortKey) whose ports or endpoints changed since the last sync. */
  readonly changedServices: ReadonlySet<string>;
  /** The own Node's labels (topology). */
  readonly nodeLabels: Readonly<Record<string, string>>;
  /** How local pod traffic is recognised. */
  readonly localDetection: LocalDetection;
  /**
   * The service CIDRs of this family from ServiceCIDR objects (normalised, sorted), when watched; only
   * the nftables mode uses them.
   */
  readonly serviceCIDRs?: readonly string[];
}

/** What a successful provider sync reports to the loop. */
export interface SyncOutcome {
  /** What kind of update was written (e.g. "full", "partial"), for the debug line. */
  readonly kind: string;
  /** Size of what was written, in characters, for the debug line. */
  readonly bytes: number;
  /** Service ports with a Local traffic policy and no local endpoints (upstream's metric). */
  readonly noLocalEndpoints: { readonly internal: number; readonly external: number };
}

/**
 * What a provider's partial sync throws when it finds, part way, that someone else changed the kernel (what
 * its drift check would report): the loop runs a full sync at once and logs it as drift, not as a failure.
 * Thrown from a full sync it is a failure like any other (a full sync that finds drift again would loop).
 */
export class DriftFoundError extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = "DriftFoundError";
  }
}

/** One IP family of one proxy mode. */
export interface Provider {
  /**
   * Programs the kernel from `state`. `full` asks for a rewrite of everything the provider owns; otherwise
   * it may write only what `state.changedServices` touched. Throws when the kernel was not updated: the
   * loop then forces a full sync, retried after syncPeriod, so the provider forgets incremental state
   * ({@link DriftFoundError}: at once).
   */
  sync(state: ProxyState, opts: { readonly full: boolean }): Promise<SyncOutcome>;
  /**
   * Compares the kernel with what the provider programmed; returns a reason when someone else changed
   * it, else null. Called every syncPeriod, never while a sync runs.
   */
  checkDrift(): Promise<string | null>;
}

/** What the composition root gives a backend to build its providers with. */
export interface BackendContext {
  readonly config: KubeProxyConfiguration;
  /** edgeproxy's own flags (modes read their flag-only settings here); absent in tests that need none. */
  readonly options?: Readonly<EdgeproxyOptions>;
  /** --dry-run: print what would be programmed; touch nothing on the host. */
  readonly dryRun: boolean;
  readonly nodeName: string;
  readonly log: {
    info(msg: string): void;
    warn(msg: string): void;
    error(msg: string): void;
    debug(msg: string): void;
  };
  readonly metrics: KubeProxyMetrics;
  /** The metric registry, for a mode's own metric families; absent in tests that need none. */
  readonly registry?: Registry;
  /** Where --dry-run output goes. */
  readonly out: (text: string) => void;
  /** Local addresses of a family (for nodePortAddresses). */
  readonly nodeIPs: (family: IPFamily) => readonly string[];
  /** The node's primary IP of a family, or null. */
  readonly primaryNodeIP: (family: IPFamily) => string | null;
}

/** A proxy mode: what `config.mode` names, one per process (built by lib/app/backends.ts). */
export interface ProxyBackend {
  /** The mode's sync periods from the configuration (each mode has its own section, as upstream's). */
  syncPeriods(
    config: KubeProxyConfiguration,
  ): { readonly minSyncPeriodMs: number; readonly syncPeriodMs: number };
  /** The IP families this host can program in this mode (IPv4 first). */
  families(ctx: BackendContext): Promise<IPFamily[]>;
  /** The provider of one family (called once per family returned by {@link families}). */
  provider(family: IPFamily, ctx: BackendContext): Promise<Provider>;
  /** `--cleanup`: removes what this mode left on the host. Returns the exit code. */
  cleanup(log: { info(msg: string): void; warn(msg: string): void }): Promise<number>;
}
