/**
 * O(change) nftables syncs: the renderer's per-service-port output (its chain and rule lines, the set
 * and map elements it wants, the chains and affinity sets it uses) cached between syncs, so a sync after
 * a change renders only the changed service ports and writes only their chains plus the element
 * differences — no walk over the unchanged services (upstream's partial sync still walks all of them
 * to diff every element) and no table listing.
 *
 * A full sync is the unchanged upstream-equal renderer (renderNFTablesSync); the cache is built from
 * what its single pass tells an observer (each service port rendered once). For a bounded first sync the
 * pass leaves the service ports' chains out, and they are rendered again as the sequence is made. The
 * cache keeps nothing rendered (incremental_cache.ts): per service port the service port and endpoints it
 * was rendered from, per element the keys of its wanting ports. A sync derives what it needs again from
 * those: a changed port's previous share (its elements, chains and affinity sets) and the body the kernel
 * holds for an element it touches, which is the element's first wanting port's, as a full sync writes it.
 * After a full sync the cache is replaced by a copy allocated away from the render's garbage, its two
 * large Maps as compact stores (compactCache, compact_store.ts). The table after any sequence of
 * incremental syncs, once the stale chains they flushed are deleted, equals the table a fresh full sync
 * of the same state writes (tests/unit/proxy/nftables/incremental_test.ts).
 */
import type { EndpointInfo, ServicePortInfo } from "../../types.ts";
import { servicePortNameString } from "../../types.ts";
import { joinTransactionChunks, NftTransaction } from "./transaction.ts";
import { writeServicePort } from "./service_port.ts";
import { ElementWriter } from "./elements.ts";
import { CLUSTER_IPS_CHECK_CHAIN, KUBE_PROXY_TABLE } from "./names.ts";
import { writeClusterIPsCheckRules } from "./setup.ts";
import {
  categorizedEndpoints,
  cidrsOfFamily,
  nftFamily,
  type NftRenderInput,
  type NftRenderResult,
  renderNFTablesSync,
  renderStaleChainDeletion,
  servicePortChainRenderer,
  servicePortContext,
} from "./render.ts";
import type { DeferredFullSync } from "./incremental_first_sync.ts";
import type { ServicePortOutcome } from "./service_port.ts";
import {
  compactCache,
  firstOwner,
  type Fragment,
  type IncrementalCache,
  isOwner,
  type Owners,
  withoutOwner,
  withOwner,
} from "./incremental_cache.ts";
import type { KeyedStore } from "./compact_store.ts";

/**
 * Renderer input with the service ports keyed by servicePortKey, so single ports can be looked up. The
 * renderer keeps the service ports and endpoint lists it was given (the proxy state replaces them on a
 * change and never changes one in place).
 */
export interface NftIncrementalInput extends Omit<NftRenderInput, "services"> {
  readonly services: ReadonlyMap<string, ServicePortInfo>;
}

/** One element a service port wants. */
interface WantedElement {
  readonly container: string;
  readonly key: readonly string[];
  readonly value: readonly string[] | undefined;
  readonly comment: string | undefined;
}

/** Element value ("" for a set element) and comment as written. */
interface ElementBody {
  readonly value: string;
  readonly comment: string | undefined;
}

/** A service port's share of the table, as rendered from its inputs. */
interface Share {
  /** Its elements by id, each with the body it writes (within one port the first ensure wins). */
  readonly elements: ReadonlyMap<string, ElementBody>;
  readonly chains: readonly string[];
  readonly affinitySets: readonly string[];
  readonly noLocalInternal: boolean;
  readonly noLocalExternal: boolean;
}

/** Work done by the syncs so far (counted, for tests: it must not grow with unchanged services). */
export interface NftIncrementalWork {
  /** Service ports rendered (full syncs render every one). */
  servicePortsRendered: number;
  /** Shares rendered again from a service port's cached inputs (its previous share, an element's body). */
  sharesDerived: number;
  /** Element keys compared against the applied state. */
  elementsCompared: number;
}

/** What an incremental sync produced. */
export interface NftIncrementalResult {
  /** The transaction ("" when nothing changed; a full sync's is joined from its chunks when first read). */
  readonly transaction: string;
  /** The transaction as chunks of whole lines without their last newline (see NftRenderResult). */
  readonly transactionChunks: readonly string[];
  readonly operations: number;
  /** True when this was a full sync (no earlier state, or node-level settings changed). */
  readonly full: boolean;
  /** A partial sync that rewrote the `cluster-ips-check` chain (the service CIDRs changed). */
  readonly serviceCIDRsRewritten: boolean;
  /** Per-service chains flushed as stale by this sync (delete them later: staleChainDeletion). */
  readonly staleChains: readonly string[];
  readonly skippedServices: readonly string[];
  readonly warnings: readonly string[];
  /** Service ports without local endpoints for internal / external traffic, after this sync. */
  readonly noLocalEndpointsInternal: number;
  readonly noLocalEndpointsExternal: number;
  /**
   * A full sync rendered with `deferServicePortChains`: the transaction apart from its service ports'
   * chains, and those rendered on demand (`transactionChunks` then hold only the rest, and `transaction`
   * renders the whole anew when read); null otherwise.
   */
  readonly deferred: DeferredFullSync | null;
}

/** How {@link NftIncrementalRenderer.sync} renders. */
export interface NftIncrementalOptions {
  /**
   * A full sync's service ports' chains, rules and affinity sets are rendered only when read
   * (NftIncrementalResult.deferred), for a bounded first sync that applies them a chunk at a time.
   */
  readonly deferServicePortChains?: boolean;
  /**
   * Called every {@link RENDER_COLLECT_EVERY} service ports of a full render (the agent: lib/runtime/memory.ts
   * requestCollection).
   */
  readonly collect?: () => void;
}

/**
 * Service ports between two `collect` calls of a full render. A full render at 10k Services allocates
 * too little to trigger a collection of its own, so its garbage (each service port's element strings and
 * text) piled up into the first sync's peak; a collection asked for every 500 (20 at 10k, ~0.2–0.3 s in all)
 * frees it as it goes: in-process render peak ~183 → ~160 MiB, the agent's first-sync VmHWM at 10k
 * (nftables mode) 280 and 283 → 251 and 249 MiB (bench/README.md).
 */
export const RENDER_COLLECT_EVERY = 500;

/** Element identity: container and key. */
const elementId = (container: string, key: string) => `${container}\u0000${key}`;

/** The container of an element id. */
const containerOf = (id: string) => id.slice(0, id.indexOf("\u0000"));

/** A share from what writeServicePort ensured and returned. */
function shareOf(wanted: readonly WantedElement[], out: ServicePortOutcome): Share {
  const elements = new Map<string, ElementBody>();
  for (const e of wanted) {
    const id = elementId(e.container, e.key.join(" . "));
    if (elements.has(id)) continue;
    elements.set(id, { value: e.value === undefined ? "" : e.value.join(" . "), comment: e.comment });
  }
  return {
    elements,
    chains: out.chains,
    affinitySets: out.affinitySets,
    noLocalInternal: out.noLocalInternal,
    noLocalExternal: out.noLocalExternal,
  };
}

/**
 * Every setting except services, endpoints, the service CIDRs (a change of them rewrites one chain) and
 * the table listing: a change needs a full sync.
 */
function settingsOf(input: NftIncrementalInput): string {
  return JSON.stringify([
    input.family,
    input.nodeName,
    Object.entries(input.nodeLabels).sort(),
    input.nodeIP,
    input.nodePortAddresses.matchAll,
    input.nodePortAddresses.nodeIPs(input.localAddresses),
    input.masqueradeBit,
    input.masqueradeAll,
    input.localDetector,
    input.preferSameTrafficDistribution ?? true,
  ]);
}

/** ElementWriter that only records what a service port wants (writes nothing). */
class RecordingElements extends ElementWriter {
  readonly wanted: WantedElement[] = [];
  override ensure(
    container: string,
    key: readonly string[],
    value?: readonly string[],
    comment?: string,
  ): void {
    this.wanted.push({ container, key, value, comment });
  }
}

/**
 * Keeps one family's rendered state across syncs. Use `sync(input, changed)`: `changed` null for a full
 * sync, or the servicePortKeys whose service or endpoints changed since the last sync.
 */
export class NftIncrementalRenderer {
  #settings: string | null = null;
  /** This family's service CIDRs in the table (joined), as the last sync wrote them. */
  #serviceCIDRs = "";
  // The cache (incremental_cache.ts): Maps while a full sync builds it, then its compact copy.
  #fragments: KeyedStore<Fragment> = new Map<string, Fragment>();
  /**
   * Wanting service ports of each element, by element id. After each sync the kernel holds exactly these
   * elements, each with its winner's body (#winner): that is the applied state, not stored apart.
   */
  #owners: KeyedStore<Owners> = new Map<string, Owners>();
  /** Applied elements per container. */
  readonly #appliedCounts = new Map<string, number>();
  /** Flushed per-service chains not yet deleted. */
  readonly #stale = new Set<string>();
  readonly #skipped = new Map<string, string>();
  #noLocalInternal = 0;
  #noLocalExternal = 0;
  /** Work counters (see NftIncrementalWork). */
  readonly work: NftIncrementalWork = { servicePortsRendered: 0, sharesDerived: 0, elementsCompared: 0 };

  /** Renders a sync; falls back to a full sync when there is no state or a node-level setting changed. */
  sync(
    input: NftIncrementalInput,
    changed: Iterable<string> | null,
    options: NftIncrementalOptions = {},
  ): NftIncrementalResult {
    const settings = settingsOf(input);
    try {
      if (changed === null || this.#settings !== settings) return this.#full(input, settings, options);
      return this.#incremental(input, changed);
    } catch (e) {
      // The state may be half-updated: the next sync starts over with a full one.
      this.reset();
      throw e;
    }
  }

  /**
   * True when the next sync must be full whatever the caller asks (no state yet, or a node-level setting
   * changed), so that the caller can take a full sync's table listing first.
   */
  needsFullSync(input: NftIncrementalInput): boolean {
    return this.#settings !== settingsOf(input);
  }

  /** Forgets the state: the next sync is full (after a failed or unknown transaction). */
  reset(): void {
    this.#settings = null;
  }

  /** Element counts per set or map after the last sync (the elements the service ports wrote). */
  elementCounts(): Map<string, number> {
    return new Map([...this.#appliedCounts].filter(([, n]) => n > 0));
  }

  /** Forgets stale chains deleted by the caller (its own staleChainDeletion timing). */
  forgetStale(chains: Iterable<string>): void {
    for (const c of chains) this.#stale.delete(c);
  }

  /** True while `chain` is flushed as stale and not used again since. */
  isStale(chain: string): boolean {
    return this.#stale.has(chain);
  }

  /** The transaction deleting the chains flushed as stale so far ("" when none); forgets them. */
  staleChainDeletion(input: Pick<NftRenderInput, "family">): string {
    const tx = renderStaleChainDeletion(input.family, this.#stale);
    this.#stale.clear();
    return tx;
  }

  /** Chains flushed as stale and not yet deleted. */
  staleChains(): string[] {
    return [...this.#stale].sort();
  }

  #full(input: NftIncrementalInput, settings: string, options: NftIncrementalOptions): NftIncrementalResult {
    this.#settings = settings;
    this.#fragments = new Map<string, Fragment>();
    this.#owners = new Map<string, Owners>();
    this.#appliedCounts.clear();
    this.#skipped.clear();
    this.#noLocalInternal = 0;
    this.#noLocalExternal = 0;
    this.#serviceCIDRs = cidrsOfFamily(input.serviceCIDRs, input.family, []).join(",");
    // One pass: the full sync's renderer tells us each service port's elements and outcome.
    let wanted: WantedElement[] = [];
    let rendered = 0;
    const result: NftRenderResult = renderNFTablesSync(
      { ...input, services: input.services.values() },
      null,
      {
        element: (container, key, value, comment) => wanted.push({ container, key, value, comment }),
        servicePort: (key, out, svc, endpoints) => {
          this.work.servicePortsRendered++;
          if (++rendered % RENDER_COLLECT_EVERY === 0) options.collect?.();
          for (const e of wanted) this.#own(key, elementId(e.container, e.key.join(" . ")));
          this.#fragments.set(key, { servicePort: svc, endpoints });
          if (out.noLocalInternal) this.#noLocalInternal++;
          if (out.noLocalExternal) this.#noLocalExternal++;
          wanted = [];
        },
      },
      // (Its activeChains then only tell which of this.#stale are in use again.)
      { deferServicePortChains: options.deferServicePortChains, chainsOfInterest: this.#stale },
    );
    for (const key of result.skippedServices) this.#skipped.set(key, "");
    // The render's garbage is still unswept: the copy goes into blocks of its own (the heap keeps ~25
    // MiB less at 5k Services once that garbage is collected), and the applied state is built from it.
    const cache: IncrementalCache = compactCache({ fragments: this.#fragments, owners: this.#owners });
    this.#fragments = cache.fragments;
    this.#owners = cache.owners;
    // A full sync leaves every wanted element in the kernel.
    for (const id of this.#owners.keys()) {
      const container = containerOf(id);
      this.#appliedCounts.set(container, (this.#appliedCounts.get(container) ?? 0) + 1);
    }
    for (const c of result.staleChains) this.#stale.add(c);
    if (this.#stale.size > 0) { for (const c of result.activeChains) this.#stale.delete(c); }
    // Only the chunks: the render result's state is garbage once this returns.
    const chunks = result.transactionChunks;
    const keys = result.deferredServicePorts;
    const deferred: DeferredFullSync | null = keys === null ? null : {
      rest: chunks,
      servicePorts: keys.length,
      *serviceLines() {
        const render = servicePortChainRenderer(input, input.services);
        for (const key of keys) yield* render(key);
      },
      // (Not kept: read only for a sync small enough not to be split.)
      whole: () =>
        joinTransactionChunks(
          renderNFTablesSync({ ...input, services: input.services.values() }, null).transactionChunks,
        ),
    };
    let transaction: string | undefined;
    return {
      get transaction(): string {
        return transaction ??= deferred === null ? joinTransactionChunks(chunks) : deferred.whole();
      },
      deferred,
      transactionChunks: chunks,
      operations: result.operations,
      full: true,
      serviceCIDRsRewritten: false,
      staleChains: result.staleChains,
      skippedServices: result.skippedServices,
      warnings: result.warnings,
      noLocalEndpointsInternal: result.noLocalEndpointsInternal,
      noLocalEndpointsExternal: result.noLocalEndpointsExternal,
    };
  }

  #incremental(input: NftIncrementalInput, changed: Iterable<string>): NftIncrementalResult {
    const family = nftFamily(input.family);
    const prefix = `${family} ${KUBE_PROXY_TABLE}`;
    const lines: string[] = [];
    const warnings: string[] = [];
    // Each element this sync touches, with the body the kernel holds for it before the sync (null: none).
    const touched = new Map<string, ElementBody | null>();
    const dropped = { chains: new Set<string>(), sets: new Set<string>() };
    const kept = { chains: new Set<string>(), sets: new Set<string>() };
    // Each service port's share as the owners entries stand: a changed port's previous share until it is
    // dropped, its new one once adopted; another port's derived from its inputs when first needed.
    const shares = new Map<string, Share>();
    const bodyOf = (owners: Owners | undefined, id: string): ElementBody | null => {
      if (owners === undefined) return null;
      const owner = firstOwner(owners);
      let share = shares.get(owner);
      if (share === undefined) shares.set(owner, share = this.#derive(input, owner));
      const body = share.elements.get(id);
      if (body === undefined) {
        throw new Error(`nftables cache: service port ${owner} does not want element ${id}`);
      }
      return body;
    };
    // Only the service CIDRs changed among the settings: rewrite the one chain that uses them.
    const cidrs = cidrsOfFamily(input.serviceCIDRs, input.family, warnings);
    const serviceCIDRsRewritten = cidrs.join(",") !== this.#serviceCIDRs;
    if (serviceCIDRsRewritten) {
      const tx = new NftTransaction(family, KUBE_PROXY_TABLE);
      tx.flushChain(CLUSTER_IPS_CHECK_CHAIN);
      writeClusterIPsCheckRules(tx, family, cidrs);
      lines.push(...tx.lines());
      this.#serviceCIDRs = cidrs.join(",");
    }
    for (const key of [...new Set(changed)].sort()) {
      let old = shares.get(key);
      if (old === undefined && this.#fragments.has(key)) shares.set(key, old = this.#derive(input, key));
      this.#skipped.delete(key);
      const next = input.services.has(key) ? this.#render(input, key, warnings) : null;
      if (old !== undefined) {
        this.#drop(key, old, touched, bodyOf);
        for (const c of old.chains) dropped.chains.add(c);
        for (const s of old.affinitySets) dropped.sets.add(s);
      }
      if (next !== null) {
        for (const id of next.share.elements.keys()) this.#own(key, id, touched, bodyOf);
        shares.set(key, next.share);
        this.#fragments.set(key, {
          servicePort: input.services.get(key)!,
          endpoints: input.endpoints.get(key),
        });
        if (next.share.noLocalInternal) this.#noLocalInternal++;
        if (next.share.noLocalExternal) this.#noLocalExternal++;
        lines.push(...next.lines);
        for (const c of next.share.chains) kept.chains.add(c);
        for (const s of next.share.affinitySets) kept.sets.add(s);
      }
    }
    // Element differences, after the chains they may point to exist.
    const deletes: string[] = [];
    const adds: string[] = [];
    for (const id of [...touched.keys()].sort()) {
      this.work.elementsCompared++;
      const want = bodyOf(this.#owners.get(id), id);
      const have = touched.get(id)!;
      if (have !== null && want !== null && have.value === want.value && have.comment === want.comment) {
        continue;
      }
      const container = containerOf(id);
      const keyText = id.slice(container.length + 1);
      if (have !== null) deletes.push(`delete element ${prefix} ${container} { ${keyText} }`);
      if (want !== null) {
        const c = want.comment === undefined ? "" : ` comment ${JSON.stringify(want.comment)}`;
        const v = want.value === "" ? "" : ` : ${want.value}`;
        adds.push(`add element ${prefix} ${container} { ${keyText}${c}${v} }`);
      }
      if ((have === null) !== (want === null)) {
        this.#appliedCounts.set(
          container,
          (this.#appliedCounts.get(container) ?? 0) + (want === null ? -1 : 1),
        );
      }
    }
    lines.push(...deletes, ...adds);
    const staleChains: string[] = [];
    for (const c of [...dropped.chains].sort()) {
      if (kept.chains.has(c)) continue;
      lines.push(`flush chain ${prefix} ${c}`);
      staleChains.push(c);
      this.#stale.add(c);
    }
    for (const c of kept.chains) this.#stale.delete(c);
    for (const s of [...dropped.sets].sort()) {
      if (!kept.sets.has(s)) lines.push(`delete set ${prefix} ${s}`);
    }
    const chunk = lines.join("\n");
    return {
      deferred: null,
      transaction: lines.length === 0 ? "" : chunk + "\n",
      transactionChunks: lines.length === 0 ? [] : [chunk],
      operations: lines.length,
      full: false,
      serviceCIDRsRewritten,
      staleChains,
      skippedServices: [...this.#skipped.keys()].sort(),
      warnings,
      noLocalEndpointsInternal: this.#noLocalInternal,
      noLocalEndpointsExternal: this.#noLocalExternal,
    };
  }

  /**
   * Adds service port `key` to element `id`'s wanting ports (nothing when it is one already). On a partial
   * sync the element is noted as `touched` first, with the body the kernel holds for it (`bodyOf`).
   */
  #own(
    key: string,
    id: string,
    touched?: Map<string, ElementBody | null>,
    bodyOf?: (owners: Owners | undefined, id: string) => ElementBody | null,
  ): void {
    const owners = this.#owners.get(id);
    if (isOwner(owners, key)) return;
    if (touched !== undefined && !touched.has(id)) touched.set(id, bodyOf!(owners, id));
    this.#owners.set(id, withOwner(owners, key));
  }

  /** Removes service port `key`, whose share was `old`, noting the elements it wanted as `touched`. */
  #drop(
    key: string,
    old: Share,
    touched: Map<string, ElementBody | null>,
    bodyOf: (owners: Owners | undefined, id: string) => ElementBody | null,
  ): void {
    this.#fragments.delete(key);
    this.#skipped.delete(key);
    if (old.noLocalInternal) this.#noLocalInternal--;
    if (old.noLocalExternal) this.#noLocalExternal--;
    for (const id of old.elements.keys()) {
      const owners = this.#owners.get(id);
      if (!touched.has(id)) touched.set(id, bodyOf(owners, id));
      if (owners === undefined) continue;
      const rest = withoutOwner(owners, key);
      if (rest === undefined) this.#owners.delete(id);
      else if (rest !== owners) this.#owners.set(id, rest);
    }
  }

  /** Service port `key`'s share rendered again from its cached inputs (the same as when it was adopted). */
  #derive(input: NftIncrementalInput, key: string): Share {
    this.work.sharesDerived++;
    const f = this.#fragments.get(key);
    if (f === undefined) throw new Error(`nftables cache: no inputs for service port ${key}`);
    const rendered = this.#renderPort(input, f.servicePort, f.endpoints, false);
    if (typeof rendered === "string") {
      throw new Error(`nftables cache: service port ${key} no longer renders: ${rendered}`);
    }
    return rendered.share;
  }

  /**
   * One service port's share, as the loop body of renderNFTablesSync writes it (same validation, endpoint
   * order and categorisation); null when it is skipped.
   */
  #render(
    input: NftIncrementalInput,
    key: string,
    warnings: string[],
  ): { lines: string[]; share: Share } | null {
    this.work.servicePortsRendered++;
    this.#skipped.delete(key);
    const svc = input.services.get(key)!;
    const rendered = this.#renderPort(input, svc, input.endpoints.get(key), true);
    if (typeof rendered === "string") {
      this.#skipped.set(key, rendered);
      warnings.push(`service port ${servicePortNameString(svc.name)} skipped: ${rendered}`);
      return null;
    }
    return rendered;
  }

  /**
   * A service port's lines (only when `withChains`: its chains, rules and affinity sets) and share, or the
   * reason it cannot be written.
   */
  #renderPort(
    input: NftIncrementalInput,
    svc: ServicePortInfo,
    endpoints: readonly EndpointInfo[] | undefined,
    withChains: boolean,
  ): { lines: string[]; share: Share } | string {
    const cat = categorizedEndpoints(input, svc, endpoints);
    if (typeof cat === "string") return cat;
    const tx = new NftTransaction(nftFamily(input.family), KUBE_PROXY_TABLE);
    const elements = new RecordingElements(tx, null);
    const ctx = servicePortContext(input, elements);
    const out = writeServicePort(tx, ctx, svc, cat, withChains);
    return { lines: withChains ? tx.lines() : [], share: shareOf(elements.wanted, out) };
  }
}
