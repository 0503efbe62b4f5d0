/**
 * The shared sync loop for one IP family (upstream pkg/proxy/iptables/proxier.go's mode-neutral half,
 * written once for every mode). It turns handler events into pending changes, and on each run of its
 * BoundedFrequencyRunner applies them, hands the proxy state to its {@link Provider} for a full or
 * partial sync, and then updates health, metrics, conntrack, health-check node ports and the state cache.
 * Every syncPeriod it asks the provider whether the kernel still matches, and forces a full sync if not.
 */
import type { EndpointSlice, Node, Service } from "../k8s/objects.ts";
import type { ProxyHandlers } from "./handlers.ts";
import type { IPFamily } from "./types.ts";
import {
  ServiceChangeTracker,
  ServicePortMap,
  type UpdateServiceMapResult,
} from "./service_change_tracker.ts";
import {
  EndpointsChangeTracker,
  EndpointsMap,
  type UpdateEndpointsMapResult,
} from "./endpoints_change_tracker.ts";
import { DriftFoundError, type Provider, type SyncOutcome } from "./provider.ts";
import { type LocalDetection, nodePodCIDRs } from "./local_detect.ts";
import { BoundedFrequencyRunner } from "./runner/bounded_frequency_runner.ts";
import type { Clock, TimerHandle } from "../runtime/clock.ts";
import type { KubeProxyMetrics } from "../metrics/kubeproxy.ts";
import { ipVersion } from "../net/ip.ts";

/** Upstream proxyutil.FullSyncPeriod: a full resync at least this often. */
export const FULL_SYNC_PERIOD_MS = 60 * 60 * 1000;

/** Deletes stale conntrack entries after a successful sync (UDP). */
export interface ConntrackCleaner {
  cleanStaleEntries(
    services: ServicePortMap,
    endpoints: EndpointsMap,
    svcResult: UpdateServiceMapResult,
    epResult: UpdateEndpointsMapResult,
  ): Promise<number>;
}

/** Receives health updates (upstream ProxyHealthServer: QueuedUpdate / Updated). */
export interface ProxierHealthUpdater {
  queuedUpdate(family: IPFamily): void;
  updated(family: IPFamily): void;
}

/** Health-check node ports of eTP=Local LoadBalancer Services (upstream ServiceHealthServer). */
export interface ServiceHealthUpdater {
  syncServices(ports: Map<string, number>): void;
  syncEndpoints(localEndpoints: Map<string, number>): void;
}

/** The logger a proxier writes to. */
export interface ProxierLog {
  info(msg: string): void;
  warn(msg: string): void;
  error(msg: string): void;
  debug(msg: string): void;
}

/** Everything a proxier needs; all I/O is behind these. */
export interface ProxierOptions {
  family: IPFamily;
  nodeName: string;
  /** The proxy mode's side: programs the kernel and checks it for drift. */
  provider: Provider;
  clock: Clock;
  log: ProxierLog;
  metrics: KubeProxyMetrics;
  health: ProxierHealthUpdater;
  serviceHealth?: ServiceHealthUpdater;
  conntrack?: ConntrackCleaner;
  /** Called when a drift check found the kernel's rules changed by someone else. */
  onDrift?: (family: IPFamily, reason: string) => void;
  /** Called after every successful sync (state cache writer, dry-run exit). */
  onSynced?: (info: SyncInfo) => void;
  minSyncPeriodMs: number;
  syncPeriodMs: number;
  /** Decides local-traffic detection; called again when the Node's podCIDRs change (NodeCIDR mode). */
  localDetection: (node: Node | null) => LocalDetection;
}

/** What a successful sync did. */
export interface SyncInfo {
  family: IPFamily;
  full: boolean;
  outcome: SyncOutcome;
  durationMs: number;
}

/** One family's proxier. Implements the source handlers; feed it through a StateStore. */
export class Proxier implements ProxyHandlers {
  readonly family: IPFamily;
  readonly #o: ProxierOptions;
  readonly #serviceChanges: ServiceChangeTracker;
  readonly #endpointsChanges: EndpointsChangeTracker;
  readonly #svcPortMap = new ServicePortMap();
  readonly #endpointsMap = new EndpointsMap();
  readonly #runner: BoundedFrequencyRunner;
  readonly #labels: Record<string, string> = {};
  #node: Node | null = null;
  #localDetection: LocalDetection;
  /** This family's service CIDRs (upstream OnServiceCIDRsChanged). */
  #serviceCIDRs: readonly string[] = [];
  #servicesSynced = false;
  #endpointSlicesSynced = false;
  #needFullSync = true;
  #lastFullSyncMs = -Infinity;
  #driftTimer: TimerHandle | null = null;
  #stopped = false;
  #syncs = 0;
  /** Syncs started, and whether one is running: a drift check that overlaps a sync is discarded. */
  #syncStarts = 0;
  #syncing = false;

  constructor(o: ProxierOptions) {
    this.#o = o;
    this.family = o.family;
    const warn = (msg: string) => o.log.warn(msg);
    this.#serviceChanges = new ServiceChangeTracker({ ipFamily: o.family, warn });
    this.#endpointsChanges = new EndpointsChangeTracker({
      ipFamily: o.family,
      nodeName: o.nodeName,
      warn,
      trackerStartTime: new Date(o.clock.now()),
    });
    this.#localDetection = o.localDetection(null);
    this.#runner = new BoundedFrequencyRunner({
      name: `sync-runner-${o.family}`,
      fn: () => this.syncProxyRules(),
      minIntervalMs: o.minSyncPeriodMs,
      maxIntervalMs: Math.max(FULL_SYNC_PERIOD_MS, o.minSyncPeriodMs),
      burstRuns: 2,
      clock: o.clock,
    });
  }

  /** Starts the runner loop and the periodic drift check (upstream SyncLoop + canary Monitor). */
  start(): void {
    this.#o.health.updated(this.family); // a starting proxy reports healthy, as upstream's SyncLoop does
    void this.#runner.loop();
    this.#scheduleDriftCheck();
  }

  /** Stops the loop and timers; an in-flight sync finishes first. */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#driftTimer) this.#o.clock.clearTimeout(this.#driftTimer);
    await this.#runner.stop();
  }

  /** Number of successful syncs so far. */
  get syncCount(): number {
    return this.#syncs;
  }

  /** Requests a sync (upstream Proxier.Sync). */
  sync(): void {
    this.#o.health.queuedUpdate(this.family);
    this.#o.metrics.syncProxyRulesLastQueuedTimestamp.set(
      { ip_family: this.family },
      this.#o.clock.now() / 1000,
    );
    this.#runner.run();
  }

  get #initialized(): boolean {
    return this.#servicesSynced && this.#endpointSlicesSynced;
  }

  #changed(changed: boolean): void {
    this.#o.metrics.serviceChangesPending.set({}, this.#serviceChanges.pendingChanges());
    if (changed && this.#initialized) this.sync();
  }

  /** @inheritdoc */
  onServiceAdd(service: Service): void {
    this.#o.metrics.serviceChangesTotal.inc();
    this.#changed(this.#serviceChanges.update(null, service));
  }
  /** @inheritdoc */
  onServiceUpdate(oldService: Service, service: Service): void {
    this.#o.metrics.serviceChangesTotal.inc();
    this.#changed(this.#serviceChanges.update(oldService, service));
  }
  /** @inheritdoc */
  onServiceDelete(service: Service): void {
    this.#o.metrics.serviceChangesTotal.inc();
    this.#changed(this.#serviceChanges.update(service, null));
  }
  /** @inheritdoc */
  onServicesSynced(): void {
    this.#servicesSynced = true;
    if (this.#initialized) this.sync();
  }
  /** @inheritdoc */
  onEndpointSliceAdd(slice: EndpointSlice): void {
    this.#o.metrics.endpointChangesTotal.inc();
    this.#changed(this.#endpointsChanges.endpointSliceUpdate(slice, false));
  }
  /** @inheritdoc */
  onEndpointSliceUpdate(_old: EndpointSlice, slice: EndpointSlice): void {
    this.#o.metrics.endpointChangesTotal.inc();
    this.#changed(this.#endpointsChanges.endpointSliceUpdate(slice, false));
  }
  /** @inheritdoc */
  onEndpointSliceDelete(slice: EndpointSlice): void {
    this.#o.metrics.endpointChangesTotal.inc();
    this.#changed(this.#endpointsChanges.endpointSliceUpdate(slice, true));
  }
  /** @inheritdoc */
  onEndpointSlicesSynced(): void {
    this.#endpointSlicesSynced = true;
    if (this.#initialized) this.sync();
  }
  /** @inheritdoc */
  onNodeAdd(node: Node): void {
    this.#setNode(node);
  }
  /** @inheritdoc */
  onNodeUpdate(_old: Node, node: Node): void {
    this.#setNode(node);
  }
  /** @inheritdoc */
  onNodeDelete(node: Node): void {
    if (node.metadata?.name !== this.#o.nodeName) return;
    this.#node = null;
    for (const k of Object.keys(this.#labels)) delete this.#labels[k];
    this.#needFullSync = true;
    this.sync();
  }
  /** @inheritdoc */
  onNodeSynced(): void {}

  /**
   * Keeps this family's CIDRs (upstream OnServiceCIDRsChanged) and, when they changed, asks for a sync:
   * upstream only takes them into its next full sync; the nftables provider rewrites just the rule that
   * uses them.
   */
  onServiceCIDRsChanged(cidrs: readonly string[]): void {
    const ours = cidrs.filter((c) =>
      (ipVersion(c.slice(0, c.indexOf("/"))) === 6) === (this.family === "IPv6")
    );
    if (ours.join(",") === this.#serviceCIDRs.join(",")) return;
    this.#serviceCIDRs = ours;
    if (this.#initialized) this.sync();
  }

  #setNode(node: Node): void {
    if (node.metadata?.name !== this.#o.nodeName) {
      this.#o.log.error(
        `received a Node event for ${node.metadata?.name}, but this proxy runs on ${this.#o.nodeName}`,
      );
      return;
    }
    const labels = node.metadata?.labels ?? {};
    const labelsChanged =
      JSON.stringify(sortedEntries(labels)) !== JSON.stringify(sortedEntries(this.#labels));
    const cidrsBefore = JSON.stringify(nodePodCIDRs(this.#node));
    this.#node = node;
    const cidrsChanged = JSON.stringify(nodePodCIDRs(node)) !== cidrsBefore;
    if (cidrsChanged) {
      // Upstream restarts the process when podCIDRs change (NodeCIDR mode); deciding again is equivalent.
      this.#localDetection = this.#o.localDetection(node);
    }
    if (labelsChanged || cidrsChanged) {
      for (const k of Object.keys(this.#labels)) delete this.#labels[k];
      Object.assign(this.#labels, labels);
      this.#needFullSync = true;
      if (this.#initialized) this.sync();
    }
  }

  /** Forces the next sync to be full and requests it (drift, canary gone, failure). */
  forceFullSync(reason: string): void {
    this.#o.log.info(`full resync of ${this.family} rules: ${reason}`);
    this.#needFullSync = true;
    this.sync();
  }

  #scheduleDriftCheck(): void {
    if (this.#stopped || this.#o.syncPeriodMs <= 0) return;
    this.#driftTimer = this.#o.clock.setTimeout(async () => {
      this.#driftTimer = null;
      await this.checkDrift();
      this.#scheduleDriftCheck();
    }, this.#o.syncPeriodMs);
  }

  /**
   * Compares the kernel with what we programmed (every syncPeriod; stricter than upstream, which only
   * watches its canary chain) and forces a full sync when they differ. Returns the reason, or null.
   */
  async checkDrift(): Promise<string | null> {
    if (this.#syncs === 0 || this.#needFullSync || this.#syncing) return null;
    const generation = this.#syncStarts;
    try {
      const reason = await this.#o.provider.checkDrift();
      if (this.#syncing || this.#syncStarts !== generation) {
        // A sync changed the kernel and our expectation while the check was reading: the comparison
        // mixes two states, so it proves nothing either way. The next period checks again.
        this.#o.log.debug(`drift check (${this.family}) overlapped a sync; result discarded`);
        return null;
      }
      if (reason !== null) {
        this.#o.onDrift?.(this.family, reason);
        this.forceFullSync(`rules changed outside edgeproxy: ${reason}`);
      }
      return reason;
    } catch (e) {
      this.#o.log.warn(`drift check (${this.family}) failed: ${(e as Error).message}`);
      return null;
    }
  }

  /** One sync (upstream syncProxyRules). Runs only from the runner, never concurrently. */
  async syncProxyRules(): Promise<void> {
    if (!this.#initialized) {
      this.#o.log.debug(
        `not syncing ${this.family} rules until Services and EndpointSlices have been received`,
      );
      return;
    }
    this.#syncing = true;
    this.#syncStarts++;
    try {
      await this.#syncProxyRules();
    } finally {
      this.#syncing = false;
    }
  }

  async #syncProxyRules(): Promise<void> {
    const o = this.#o;
    const start = o.clock.now();
    const full = this.#needFullSync || start - this.#lastFullSyncMs > FULL_SYNC_PERIOD_MS;
    const svcResult = this.#svcPortMap.apply(this.#serviceChanges);
    const epResult = this.#endpointsMap.apply(this.#endpointsChanges);
    o.metrics.serviceChangesPending.set({}, 0);
    o.metrics.endpointChangesPending.set({}, 0);

    let outcome: SyncOutcome;
    try {
      outcome = await o.provider.sync({
        family: this.family,
        services: this.#svcPortMap,
        endpoints: this.#endpointsMap,
        changedServices: new Set<string>([...svcResult.updatedServices, ...epResult.updatedServices]),
        // A copy: a Node event handled while the provider awaits (a long sequence of transactions) must
        // not change the labels under the part of the sync still to be rendered (upstream holds its lock).
        nodeLabels: { ...this.#labels },
        localDetection: this.#localDetection,
        serviceCIDRs: this.#serviceCIDRs,
      }, { full });
    } catch (e) {
      if (e instanceof DriftFoundError && !full) {
        this.forceFullSync(e.message);
        return;
      }
      o.log.error(
        `${full ? "full" : "partial"} sync of ${this.family} rules failed: ${(e as Error).message}`,
      );
      // The change trackers were drained: only a full sync can bring the kernel back in line.
      this.#needFullSync = true;
      this.#runner.retryAfter(o.syncPeriodMs);
      return;
    }

    const end = o.clock.now();
    if (full) {
      this.#needFullSync = false;
      this.#lastFullSyncMs = start;
    }
    this.#syncs++;

    const fam = { ip_family: this.family };
    const seconds = (end - start) / 1000;
    o.metrics.syncProxyRulesLatency.observe(fam, seconds);
    (full ? o.metrics.syncFullProxyRulesLatency : o.metrics.syncPartialProxyRulesLatency).observe(
      fam,
      seconds,
    );
    o.metrics.syncProxyRulesLastTimestamp.set(fam, end / 1000);
    o.metrics.syncProxyRulesNoLocalEndpointsTotal.set(
      { ...fam, traffic_policy: "internal" },
      outcome.noLocalEndpoints.internal,
    );
    o.metrics.syncProxyRulesNoLocalEndpointsTotal.set(
      { ...fam, traffic_policy: "external" },
      outcome.noLocalEndpoints.external,
    );
    for (const times of epResult.lastChangeTriggerTimes.values()) {
      for (const t of times) {
        o.metrics.networkProgrammingLatency.observe(fam, Math.max(0, (end - t.getTime()) / 1000));
      }
    }
    o.health.updated(this.family);
    o.log.debug(
      `${outcome.kind} sync of ${this.family} rules took ${end - start}ms (${outcome.bytes} bytes)`,
    );

    o.serviceHealth?.syncServices(this.#svcPortMap.healthCheckNodePorts());
    o.serviceHealth?.syncEndpoints(this.#endpointsMap.localReadyEndpoints());
    if (o.conntrack) {
      try {
        await o.conntrack.cleanStaleEntries(this.#svcPortMap, this.#endpointsMap, svcResult, epResult);
      } catch (e) {
        o.log.warn(`conntrack cleanup (${this.family}) failed: ${(e as Error).message}`);
      }
    }
    o.onSynced?.({ family: this.family, full, outcome, durationMs: end - start });
  }
}

function sortedEntries(r: Record<string, string>): Array<[string, string]> {
  return Object.entries(r).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
}
