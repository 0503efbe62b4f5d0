/**
 * The nftables backend of one IP family (upstream pkg/proxy/nftables/proxier.go's kernel half): renders
 * the proxy state into one `nft -f -` transaction for table `kube-proxy` and hands it to its host. Full
 * syncs re-create the table's contents as upstream does; partial syncs are upstream's partial syncs
 * (chains of changed services only, element diffs against the last applied sync). Between syncs it keeps
 * what upstream lists from the kernel every sync — the per-service chains and affinity sets in the table
 * — so partial syncs read nothing; full syncs list the chain and set names (declarations only). Stale
 * per-service chains are flushed by the sync that stops using them and deleted by the first sync over a
 * second later, in their own transaction (upstream's timing).
 */
import type { IPFamily } from "../types.ts";
import type { KubeProxyMetrics } from "../../metrics/kubeproxy.ts";
import type { Provider, ProxyState, SyncOutcome } from "../provider.ts";
import type { LocalDetection } from "../local_detect.ts";
import type { NodePortAddresses } from "../nodeport_addresses.ts";
import type { NftLocalTrafficDetector } from "./render/local_traffic.ts";
import {
  nftFamily,
  type NftRenderInput,
  type NftSyncState,
  renderNFTablesSync,
  renderStaleChainDeletion,
} from "./render/render.ts";
import { isAffinitySetName, KUBE_PROXY_TABLE } from "./render/names.ts";
import type { NftTableObjects } from "./runner.ts";
import { fixedChainRules, mapSizes } from "./drift.ts";
import type { NftElementState } from "./render/elements.ts";

/** Stale per-service chains are deleted once unreferenced for longer than this (upstream: one second). */
export const STALE_CHAIN_DELAY_MS = 1000;

/** The host side of one family (real nft in the agent, a fake in tests, a printer in --dry-run). */
export interface NftablesHost {
  /** Applies one transaction atomically; throws with nft's message when it fails. */
  apply(transaction: string): Promise<void>;
  /** Chains and sets now in table `kube-proxy`, or null when the table does not exist (or in dry-run). */
  listObjects(): Promise<NftTableObjects | null>;
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
  nodePortAddresses: NodePortAddresses;
  preferSameTrafficDistribution: boolean;
  /** Local addresses of this family (for nodePortAddresses); called on every sync. */
  nodeIPs: () => readonly string[];
  /** The node's primary IP of this family, or null. */
  primaryNodeIP: () => string | null;
  /** Milliseconds clock (tests pass a fake). */
  now?: () => number;
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
  /** Elements of the last applied sync; null forces the next render to be full. */
  #state: NftSyncState | null = null;
  /** Per-service chains and affinity sets now in the table, as far as this process wrote them. */
  #chains = new Set<string>();
  #affinitySets = new Set<string>();
  /** Flushed per-service chains waiting for deletion → when they were flushed. */
  #staleChains = new Map<string, number>();
  /** Drift fingerprint: rule counts of the fixed chains written by the last full sync. */
  #fixedRules: ReadonlyMap<string, number> = new Map();
  #elements: NftElementState = new Map();

  constructor(o: NftablesBackendOptions) {
    this.#o = o;
    this.#now = o.now ?? Date.now;
  }

  /** @inheritdoc */
  async sync(state: ProxyState, { full }: { readonly full: boolean }): Promise<SyncOutcome> {
    const o = this.#o;
    const start = this.#now();
    await this.#deleteStaleChains(start);

    full ||= this.#state === null;
    let existingChains: Iterable<string> | null = this.#chains;
    let existingSets: Iterable<string> | null = this.#affinitySets;
    if (full) {
      // A full sync also repairs drift: take the names from the kernel, not from memory.
      const listed = await o.host.listObjects();
      existingChains = listed?.chains ?? null;
      existingSets = listed?.sets ?? null;
    }
    const input: NftRenderInput = {
      family: o.family,
      services: state.services.values(),
      endpoints: state.endpoints,
      nodeName: o.nodeName,
      nodeLabels: state.nodeLabels,
      nodeIP: o.primaryNodeIP(),
      nodePortAddresses: o.nodePortAddresses,
      localAddresses: o.nodeIPs(),
      // ServiceCIDR objects are not watched: the "drop unallocated ClusterIPs" rule is left out.
      serviceCIDRs: [],
      masqueradeBit: o.masqueradeBit,
      masqueradeAll: o.masqueradeAll,
      localDetector: nftLocalDetector(state.localDetection),
      firstSync: this.#firstSync,
      existingChains,
      existingSets,
      preferSameTrafficDistribution: o.preferSameTrafficDistribution,
    };
    const changed = new Set<string>();
    for (const key of state.changedServices) changed.add(serviceOfKey(key));
    const result = renderNFTablesSync(
      input,
      full ? null : { previous: this.#state!, changedServices: changed },
    );
    for (const w of result.warnings) o.log.warn(w);
    try {
      await o.host.apply(result.transaction);
    } catch (e) {
      o.metrics.nftablesSyncFailuresTotal.inc({ ip_family: o.family });
      // Whether nft applied it is unknown only for a crash mid-way; either way the next sync is full.
      this.#state = null;
      throw e;
    }

    this.#firstSync = false;
    this.#state = result.state;
    this.#elements = result.state.elements;
    if (full) this.#fixedRules = fixedChainRules(result.transaction);
    for (const chain of result.staleChains) {
      if (!this.#staleChains.has(chain)) this.#staleChains.set(chain, start);
    }
    this.#chains = new Set([...result.activeChains, ...this.#staleChains.keys()]);
    this.#affinitySets = affinitySetsAfter(
      full ? new Set(existingSets ?? []) : this.#affinitySets,
      result.transaction,
      nftFamily(o.family),
    );
    return {
      kind: full ? "full" : "partial",
      bytes: result.transaction.length,
      noLocalEndpoints: {
        internal: result.noLocalEndpointsInternal,
        external: result.noLocalEndpointsExternal,
      },
    };
  }

  /** @inheritdoc */
  checkDrift(): Promise<string | null> {
    if (this.#state === null) return Promise.resolve(null);
    return this.#o.host.checkDrift(this.#fixedRules, mapSizes(this.#elements));
  }

  /** Upstream: at the start of a sync, delete chains flushed more than a second ago (separately). */
  async #deleteStaleChains(now: number): Promise<void> {
    const due: string[] = [];
    for (const [chain, since] of this.#staleChains) {
      if (now - since > STALE_CHAIN_DELAY_MS) due.push(chain);
    }
    if (due.length === 0) return;
    for (const chain of due) {
      this.#staleChains.delete(chain);
      this.#chains.delete(chain);
    }
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

/** Affinity sets after `transaction` ran on a table holding `before`. */
function affinitySetsAfter(before: ReadonlySet<string>, transaction: string, family: string): Set<string> {
  const out = new Set([...before].filter(isAffinitySetName));
  const re = new RegExp(`^(add|delete) set ${family} ${KUBE_PROXY_TABLE} (\\S+)`, "gm");
  for (const m of transaction.matchAll(re)) {
    if (!isAffinitySetName(m[2])) continue;
    if (m[1] === "add") out.add(m[2]);
    else out.delete(m[2]);
  }
  return out;
}
