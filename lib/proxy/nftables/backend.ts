/**
 * The nftables backend of one IP family (upstream pkg/proxy/nftables/proxier.go's kernel half): renders
 * the proxy state into `nft -f -` transactions for table `kube-proxy` and hands them to its host. Full
 * syncs re-create the table's contents as upstream does, but as bounded make-before-break transactions
 * (render/incremental_first_sync.ts, their service ports' chains rendered a chunk at a time as they are
 * applied) where upstream commits one; small tables, and the full sync after a failed sequence, go as
 * one transaction. Partial syncs cost O(change) (render/incremental.ts): only the changed service ports
 * are rendered, their chains rewritten and their element differences written; nothing is read from the
 * kernel. Full syncs list the chain and set names (declarations only). Stale per-service chains are
 * flushed by the sync that stops using them and deleted by the first sync over a second later, in their
 * own transaction (upstream's timing).
 */
import type { IPFamily } from "../types.ts";
import type { KubeProxyMetrics } from "../../metrics/kubeproxy.ts";
import type { Provider, ProxyState, SyncOutcome } from "../provider.ts";
import type { LocalDetection } from "../local_detect.ts";
import { newNodePortAddresses, resolveNodePortAddresses } from "../nodeport_addresses.ts";
import type { NftLocalTrafficDetector } from "./render/local_traffic.ts";
import { renderStaleChainDeletion } from "./render/render.ts";
import { isServiceChainName, SERVICE_CHAIN_PREFIX } from "./render/names.ts";
import type { NftTableObjects } from "./runner.ts";
import { fixedChainRules, SAMPLED_MAPS } from "./drift.ts";
import {
  type NftIncrementalInput,
  NftIncrementalRenderer,
  type NftIncrementalWork,
} from "./render/incremental.ts";
import {
  deferredFirstSyncTransactions,
  type FirstSyncSplitOptions,
} from "./render/incremental_first_sync.ts";
import { COLLECT_BEFORE_FULL_RENDER, releaseMemory, requestCollection } from "../../runtime/memory.ts";
import { type NftTransactionText, transactionLength } from "./render/transaction.ts";

/** Stale per-service chains are deleted once unreferenced for longer than this (upstream: one second). */
export const STALE_CHAIN_DELAY_MS = 1000;

/** The host side of one family (real nft in the agent, a fake in tests, a printer in --dry-run). */
export interface NftablesHost {
  /**
   * Applies one transaction (a text, or chunks of whole lines) atomically; throws with nft's message when
   * it fails.
   */
  apply(transaction: NftTransactionText): Promise<void>;
  /** Chains and sets now in table `kube-proxy`, or null when the table does not exist (or in dry-run). */
  listObjects(): Promise<NftTableObjects | null>;
  /**
   * How many nftables commits not made through `apply` (of any family sharing the host's tracker) were
   * seen so far, looking at the kernel's generation id now; null when it cannot be known. Equal values
   * at two times mean nobody else changed the ruleset in between.
   */
  foreignCommits(): Promise<number | null>;
  /**
   * Compares the table with the fingerprint of what was programmed: rule counts of the fixed chains
   * (`expected`; a host may check a subset) and element counts of the dispatch maps (`maps`). Returns
   * a reason when they differ, else null.
   */
  checkDrift(
    expected: ReadonlyMap<string, number>,
    maps: ReadonlyMap<string, number>,
  ): Promise<string | null>;
}

/** What the nftables backend of one family needs besides the proxy state. */
export interface NftablesBackendOptions {
  family: IPFamily;
  nodeName: string;
  host: NftablesHost;
  log: { info(msg: string): void; warn(msg: string): void };
  metrics: KubeProxyMetrics;
  masqueradeAll: boolean;
  masqueradeBit: number;
  /** `--nodeport-addresses` as configured (CIDRs, or ["primary"], resolved on each sync). */
  nodePortAddresses: readonly string[];
  preferSameTrafficDistribution: boolean;
  /** Local addresses of this family (for nodePortAddresses); called on every sync. */
  nodeIPs: () => readonly string[];
  /** The node's primary IP of this family, or null. */
  primaryNodeIP: () => string | null;
  /** Milliseconds clock (tests pass a fake). */
  now?: () => number;
  /** How a first sync into an empty or foreign table is bounded (default: the adaptive bound). */
  firstSyncSplit?: FirstSyncSplitOptions;
}

/** The renderer's form of the core's local-traffic detection. */
export function nftLocalDetector(d: LocalDetection): NftLocalTrafficDetector {
  switch (d.kind) {
    case "cidr":
      return { mode: "CIDR", cidr: d.cidr };
    case "iface":
      return { mode: "BridgeInterface", interfaceName: d.name };
    case "prefix":
      return { mode: "InterfaceNamePrefix", prefix: d.prefix };
    case "none":
      return { mode: "None" };
  }
}

/** "namespace/name" of a servicePortKey ("ns/name:port/TCP" or "ns/name/TCP"). */
export function serviceOfKey(key: string): string {
  const slash = key.indexOf("/");
  const rest = key.slice(slash + 1);
  return `${key.slice(0, slash)}/${rest.split(/[:/]/)[0]}`;
}

/** One family's nftables backend. */
export class NftablesBackend implements Provider {
  readonly #o: NftablesBackendOptions;
  readonly #now: () => number;
  #firstSync = true;
  /** Per-service-port rendered state of the last applied sync (reset after a failed one). */
  readonly #renderer = new NftIncrementalRenderer();
  /** False until a sync was applied, and after a failed one: the next sync is full. */
  #applied = false;
  /** Set when a bounded first sync failed: the next full sync goes as one transaction. */
  #boundedFailed = false;
  /** Flushed per-service chains waiting for deletion → when they were flushed. */
  #staleChains = new Map<string, number>();
  /** Drift fingerprint: rule counts of the fixed chains written by the last full sync. */
  #fixedRules: ReadonlyMap<string, number> = new Map();
  /**
   * The host's foreign-commit count when the table was last known to match the fingerprint (written by
   * a full sync with no foreign commit during it, or read by a drift check); null when not known.
   */
  #verifiedAt: number | null = null;

  constructor(o: NftablesBackendOptions) {
    this.#o = o;
    this.#now = o.now ?? Date.now;
  }

  /** Work done by the renderer so far (service ports rendered, elements compared). */
  get renderWork(): Readonly<NftIncrementalWork> {
    return this.#renderer.work;
  }

  /** @inheritdoc */
  async sync(state: ProxyState, { full }: { readonly full: boolean }): Promise<SyncOutcome> {
    const o = this.#o;
    const start = this.#now();
    await this.#deleteStaleChains(start);

    const nodeIP = o.primaryNodeIP();
    let input: NftIncrementalInput = {
      family: o.family,
      services: state.services,
      endpoints: state.endpoints,
      nodeName: o.nodeName,
      nodeLabels: state.nodeLabels,
      nodeIP,
      // "primary" follows the Node's primary IP; a change of it is a node-level change (full sync).
      nodePortAddresses: newNodePortAddresses(
        o.family,
        resolveNodePortAddresses(o.nodePortAddresses, o.family, nodeIP),
      ),
      localAddresses: o.nodeIPs(),
      // From ServiceCIDR objects: the "drop traffic to unallocated ClusterIPs" rule.
      serviceCIDRs: state.serviceCIDRs ?? [],
      masqueradeBit: o.masqueradeBit,
      masqueradeAll: o.masqueradeAll,
      localDetector: nftLocalDetector(state.localDetection),
      firstSync: this.#firstSync,
      existingChains: null,
      existingSets: null,
      preferSameTrafficDistribution: o.preferSameTrafficDistribution,
    };
    // Node-level settings changed (e.g. the node's addresses): the renderer needs a full sync.
    full ||= !this.#applied || this.#renderer.needsFullSync(input);
    let listed: NftTableObjects | null = null;
    if (full) {
      // A full sync also repairs drift: take the names from the kernel, not from memory.
      const listing = o.host.listObjects();
      // While the table is listed (COLLECT_BEFORE_FULL_RENDER).
      if (state.services.size >= COLLECT_BEFORE_FULL_RENDER) releaseMemory();
      listed = await listing;
      input = { ...input, existingChains: listed?.chains ?? null, existingSets: listed?.sets ?? null };
    }
    // Every full sync (the first, the hourly one, a drift repair) goes as bounded make-before-break
    // transactions (sized by the service ports already in the table), each made as it is applied, its
    // service ports' chains rendered a chunk at a time (the full sync's text is never held whole on this
    // path). Upstream commits a later full sync as one transaction: over a table of 2000 Services that
    // held the kernel's commit for 11.6 s here, over 5000 for 92 s (its anonymous sets are made anew, each
    // a walk of the table's sets); bounded 2.7 s and 19.8 s in all, at most 0.45 and 0.54 s at a time.
    // Only the full sync after a failed bounded one is one transaction, as a fallback that cannot stop
    // half-way (bench/nftables_later_full_sync.ts).
    const split = full && !this.#boundedFailed;
    const result = this.#renderer.sync(input, full ? null : state.changedServices, {
      deferServicePortChains: split,
      collect: state.services.size >= COLLECT_BEFORE_FULL_RENDER ? requestCollection : undefined,
    });
    for (const w of result.warnings) o.log.warn(w);
    // The render's garbage goes before the first chunk's service ports are rendered and encoded beside it.
    if (split && state.services.size >= COLLECT_BEFORE_FULL_RENDER) releaseMemory();
    let bounded = false;
    // A full sync not split goes from its chunks: a 10k-Service one is 41 MB, never joined here.
    const parts: Iterable<NftTransactionText> = split && result.deferred !== null
      ? deferredFirstSyncTransactions(result.deferred, {
        ...o.firstSyncSplit,
        existingServicePorts: (listed?.chains ?? []).filter((c) =>
          isServiceChainName(c) && c.startsWith(SERVICE_CHAIN_PREFIX)
        ).length,
        onSplit: () => bounded = true,
      })
      : [result.full ? result.transactionChunks : result.transaction];
    const foreignBefore = result.full ? await o.host.foreignCommits() : null;
    let bytes = 0;
    try {
      for (const part of parts) {
        const length = transactionLength(part);
        bytes += length;
        if (length > 0) await o.host.apply(part);
      }
    } catch (e) {
      this.#verifiedAt = null;
      o.metrics.nftablesSyncFailuresTotal.inc({ ip_family: o.family });
      // Whether nft applied it is unknown only for a crash mid-way; either way the next sync is full,
      // and one transaction if the bounded sequence failed.
      this.#applied = false;
      this.#renderer.reset();
      if (bounded) this.#boundedFailed = true;
      throw e;
    }

    this.#firstSync = false;
    this.#applied = true;
    this.#boundedFailed = false;
    if (result.serviceCIDRsRewritten) {
      // The one fixed chain a partial sync rewrites: keep the drift fingerprint in step.
      this.#fixedRules = new Map([...this.#fixedRules, ...fixedChainRules(result.transactionChunks)]);
    }
    if (result.full) {
      this.#fixedRules = fixedChainRules(result.transactionChunks);
      // The full sync rewrote everything the fingerprint covers: known good unless someone else
      // committed while it ran.
      const foreignAfter = foreignBefore === null ? null : await o.host.foreignCommits();
      this.#verifiedAt = foreignAfter !== null && foreignAfter === foreignBefore ? foreignAfter : null;
    }
    for (const chain of result.staleChains) {
      if (!this.#staleChains.has(chain)) this.#staleChains.set(chain, start);
    }
    // A chain used again before its deletion stays (upstream drops it from staleChains).
    for (const chain of this.#staleChains.keys()) {
      if (!this.#renderer.isStale(chain)) this.#staleChains.delete(chain);
    }
    return {
      kind: result.full ? "full" : "partial",
      bytes,
      noLocalEndpoints: {
        internal: result.noLocalEndpointsInternal,
        external: result.noLocalEndpointsExternal,
      },
    };
  }

  /**
   * Reads the table only when someone else committed to the ruleset since it was last known good (the
   * kernel's generation id, through the host); with no way to tell, on every check.
   */
  async checkDrift(): Promise<string | null> {
    if (!this.#applied) return null;
    const foreign = await this.#o.host.foreignCommits();
    if (foreign !== null && foreign === this.#verifiedAt) return null;
    const counts = this.#renderer.elementCounts();
    const maps = new Map(SAMPLED_MAPS.map((m) => [m, counts.get(m) ?? 0]));
    const reason = await this.#o.host.checkDrift(this.#fixedRules, maps);
    // A commit landing during the read moves the count again, so the next check reads once more.
    this.#verifiedAt = reason === null ? foreign : null;
    return reason;
  }

  /** Upstream: at the start of a sync, delete chains flushed more than a second ago (separately). */
  async #deleteStaleChains(now: number): Promise<void> {
    const due: string[] = [];
    for (const [chain, since] of this.#staleChains) {
      if (now - since > STALE_CHAIN_DELAY_MS) due.push(chain);
    }
    if (due.length === 0) return;
    for (const chain of due) this.#staleChains.delete(chain);
    this.#renderer.forgetStale(due);
    this.#o.log.info(`deleting ${due.length} stale nftables chains (${this.#o.family})`);
    try {
      await this.#o.host.apply(renderStaleChainDeletion(this.#o.family, due));
    } catch (e) {
      // As upstream: a chain that still exists is found again by the next full sync.
      this.#o.metrics.nftablesCleanupFailuresTotal.inc({ ip_family: this.#o.family });
      this.#o.log.warn(`unable to delete stale chains; will retry later: ${(e as Error).message}`);
    }
  }
}
