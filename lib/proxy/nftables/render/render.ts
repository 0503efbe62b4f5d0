/**
 * The nftables renderer for a full sync: upstream kube-proxy's nftables syncProxyRules (v1.34, with
 * needFullSync) as a pure function. Service ports, endpoints and node facts of one IP family in; the
 * `nft -f -` transaction upstream would send for table `kube-proxy` of that family out. Service ports
 * are processed in sorted key order (upstream: map order), so the same input gives the same bytes.
 *
 * Stale objects are handled as upstream does, from the table's current chains and sets given by the
 * caller: per-service chains no longer used are flushed (deleted by a later sync, once no map element
 * can still reference them) and unused affinity sets are deleted.
 */
import type { EndpointInfo, IPFamily, ServicePortInfo } from "../../types.ts";
import { servicePortKey, servicePortNameString } from "../../types.ts";
import { type CategorizedEndpoints, categorizeEndpoints } from "../../topology.ts";
import type { NodePortAddresses } from "../../nodeport_addresses.ts";
import { compareEndpoints } from "../../endpoints.ts";
import { formatCIDR, isLoopback, parseCIDR, parseIP } from "../../../net/ip.ts";
import { masqueradeMark } from "../../iptables/render/render.ts";
import { checkEndpoint, checkServicePort } from "../../iptables/render/validate.ts";
import { joinTransactionChunks, type NftFamily, NftTransaction } from "./transaction.ts";
import { localTrafficMatches, type NftLocalTrafficDetector } from "./local_traffic.ts";
import { writeSetup } from "./setup.ts";
import { type ServicePortContext, type ServicePortOutcome, writeServicePort } from "./service_port.ts";
import { type ElementObserver, ElementWriter, type NftElementState } from "./elements.ts";
import { isAffinitySetName, isServiceChainName, KUBE_PROXY_TABLE } from "./names.ts";

/** Everything one full nftables sync of one IP family needs. */
export interface NftRenderInput {
  readonly family: IPFamily;
  /** Service ports of this family (any order; keyed by servicePortKey internally). */
  readonly services: Iterable<ServicePortInfo>;
  /** Endpoints per service port, keyed by servicePortKey (any order; sorted by "ip:port" here). */
  readonly endpoints: ReadonlyMap<string, readonly EndpointInfo[]>;
  /** This node's name (node topology hints). */
  readonly nodeName: string;
  /** This node's labels (topology zone). */
  readonly nodeLabels: Readonly<Record<string, string>>;
  /** The node's primary IP of this family, or null (loadBalancerSourceRanges hairpin). */
  readonly nodeIP: string | null;
  /** `--nodeport-addresses` for this family (lib/proxy/nodeport_addresses.ts). */
  readonly nodePortAddresses: NodePortAddresses;
  /** This family's local interface addresses, from which the nodeport-ips set is chosen. */
  readonly localAddresses: readonly string[];
  /** ServiceCIDRs (either family; this family's are used): unallocated ClusterIPs in them are dropped. */
  readonly serviceCIDRs: readonly string[];
  /** 0..31; the mark is 1 << bit, formatted as Go's %#08x. */
  readonly masqueradeBit: number;
  readonly masqueradeAll: boolean;
  readonly localDetector: NftLocalTrafficDetector;
  /** First sync of this process: recreate the base chains (upstream's one-time add+delete). */
  readonly firstSync: boolean;
  /** Chains now in the table (upstream lists them each sync), or null when the table does not exist. */
  readonly existingChains: Iterable<string> | null;
  /** Sets now in the table, or null when the table does not exist. */
  readonly existingSets: Iterable<string> | null;
  /** PreferSameTrafficDistribution feature gate (default true). */
  readonly preferSameTrafficDistribution?: boolean;
}

/** What a partial sync needs from the last applied sync of the same family. */
export interface NftSyncState {
  readonly family: IPFamily;
  /** Set and map elements the last sync left in the kernel. */
  readonly elements: NftElementState;
}

/** A partial sync (upstream's syncs without needFullSync). */
export interface NftPartialSync {
  /** State of the last applied sync (full or partial) of this family. */
  readonly previous: NftSyncState;
  /**
   * Services whose chains are rewritten, as "namespace/name" (upstream: the services and endpoint
   * slices that changed since the last sync); every other service port only has its elements checked.
   */
  readonly changedServices: ReadonlySet<string>;
}

/** What one render produced. */
export interface NftRenderResult {
  /**
   * The transaction text for `nft -f -` (joined from transactionChunks when first read). With
   * deferServicePortChains, this and the next two cover the transaction as rendered: without the
   * service ports' chains, rules and affinity sets.
   */
  readonly transaction: string;
  /**
   * The same text as chunks of whole lines without their last newline (joinTransactionChunks): a full
   * sync at 10k Services is 41 MB, and the bounded first sync reads its lines from these without the
   * joined copy.
   */
  readonly transactionChunks: readonly string[];
  /** Number of commands in it. */
  readonly operations: number;
  /**
   * Per-service and per-endpoint chains in use, sorted. With
   * {@link NftRenderOptions.deferServicePortChains}: only those among its `chainsOfInterest`.
   */
  readonly activeChains: readonly string[];
  /** Per-service chains flushed as stale this sync (to delete in a later one), sorted. */
  readonly staleChains: readonly string[];
  /** Service ports whose internal traffic has no local endpoints (metric). */
  readonly noLocalEndpointsInternal: number;
  /** Service ports whose external traffic has no local endpoints (metric). */
  readonly noLocalEndpointsExternal: number;
  /** Service ports not written because a value could not be written safely (servicePortKey), sorted. */
  readonly skippedServices: readonly string[];
  /** One line per input problem ignored (skipped service ports, loopback nodePortAddresses, ...). */
  readonly warnings: readonly string[];
  /** State for the next (partial) sync, to keep once this transaction was applied. */
  readonly state: NftSyncState;
  /**
   * With {@link NftRenderOptions.deferServicePortChains}: the servicePortKeys written, in the
   * transaction's order, whose chains, rules and affinity sets were left out (servicePortChainRenderer
   * writes them); null otherwise.
   */
  readonly deferredServicePorts: readonly string[] | null;
}

/** How a sync is rendered. */
export interface NftRenderOptions {
  /**
   * A full sync only: leave every service port's chains, rules and affinity sets out of the transaction
   * (its elements stay, in their place), for a caller that writes them later, one service port at a time
   * (servicePortChainRenderer). A 10k-Service full sync is 41 MB of text, ~90 % of it those lines.
   */
  readonly deferServicePortChains?: boolean;
  /**
   * With deferServicePortChains: the chains whose use `activeChains` reports (the caller's own stale
   * chains); others in use are not kept. At 10k Services every chain in use is ~80k names, ~10 MiB
   * held through the render (bench/nftables_first_sync_peak.ts), and stale chains need none of them.
   */
  readonly chainsOfInterest?: ReadonlySet<string>;
}

/**
 * Told what each service port of a sync wrote (the incremental renderer builds its cache from a full
 * sync's single pass): its elements as they are ensured, then the port's key and outcome, and what it
 * was rendered from (the service port and its endpoints as `input.endpoints` holds them).
 */
export interface NftRenderObserver {
  readonly element: ElementObserver;
  servicePort(
    key: string,
    outcome: ServicePortOutcome,
    svc: ServicePortInfo,
    endpoints: readonly EndpointInfo[] | undefined,
  ): void;
}

/** Characters nft allows in a chain or set name (the renderer only ever writes names of this form). */
const NFT_NAME = /^[A-Za-z_.][A-Za-z0-9_./-]*$/;

/** nft family of an IP family. */
export function nftFamily(family: IPFamily): NftFamily {
  return family === "IPv6" ? "ip6" : "ip";
}

/**
 * CIDRs of `family` among `cidrs`, normalised, in order (upstream OnServiceCIDRsChanged filtering);
 * invalid ones are reported and dropped.
 */
export function cidrsOfFamily(cidrs: readonly string[], family: IPFamily, warnings: string[]): string[] {
  const out: string[] = [];
  for (const c of cidrs) {
    const parsed = parseCIDR(c);
    if (parsed === null) {
      warnings.push(`serviceCIDRs value ${JSON.stringify(c)} is not a CIDR; ignored`);
      continue;
    }
    if ((parsed.bytes.length === 16) === (family === "IPv6")) out.push(formatCIDR(parsed));
  }
  return out;
}

/** Names of `names` that nft could have listed, reporting others (never written into a command). */
function safeNames(what: string, names: Iterable<string> | null, warnings: string[]): string[] {
  const out: string[] = [];
  for (const n of names ?? []) {
    if (NFT_NAME.test(n)) out.push(n);
    else warnings.push(`existing ${what} name ${JSON.stringify(n)} is not a valid nft name; ignored`);
  }
  return out.sort();
}

/** Renders a full sync of `input.family` (upstream syncProxyRules with needFullSync). */
export function renderNFTablesFullSync(input: NftRenderInput): NftRenderResult {
  return renderNFTablesSync(input, null);
}

/**
 * Renders a sync of `input.family`: a full one when `partial` is null, otherwise upstream's partial sync
 * (no fixed part; chains only for the changed services; element additions, replacements and deletions
 * against `partial.previous`). `input.firstSync` is ignored for a partial sync. `observer` is told what
 * each service port wrote.
 */
export function renderNFTablesSync(
  input: NftRenderInput,
  partial: NftPartialSync | null,
  observer: NftRenderObserver | null = null,
  options: NftRenderOptions = {},
): NftRenderResult {
  if (partial !== null && partial.previous.family !== input.family) {
    throw new Error(`partial sync: previous state is for ${partial.previous.family}, not ${input.family}`);
  }
  const family = nftFamily(input.family);
  const tx = new NftTransaction(family, KUBE_PROXY_TABLE);
  const warnings: string[] = [];

  let nodePortIPs: string[] = [];
  if (!input.nodePortAddresses.matchAll) {
    for (const ip of input.nodePortAddresses.nodeIPs(input.localAddresses)) {
      const bytes = parseIP(ip);
      if (bytes !== null && isLoopback(bytes)) {
        warnings.push(
          `--nodeport-addresses includes localhost but localhost NodePorts are not supported: address ${ip}`,
        );
        continue;
      }
      nodePortIPs.push(ip);
    }
  }
  nodePortIPs = [...new Set(nodePortIPs)];

  const mark = masqueradeMark(input.masqueradeBit);
  const serviceCIDRs = cidrsOfFamily(input.serviceCIDRs, input.family, warnings);
  if (partial === null) {
    writeSetup(tx, {
      family,
      masqueradeMark: mark,
      serviceCIDRs,
      nodePortMatchAll: input.nodePortAddresses.matchAll,
      nodePortIPs,
      recreateBaseChains: input.firstSync,
    });
  }
  const elements = new ElementWriter(
    tx,
    partial === null ? null : partial.previous.elements,
    observer?.element ?? null,
  );

  const ctx = servicePortContext(input, elements);
  const deferred = partial === null && options.deferServicePortChains === true ? [] as string[] : null;
  const byKey = new Map<string, ServicePortInfo>();
  for (const svc of input.services) byKey.set(servicePortKey(svc.name), svc);
  const keys = [...byKey.keys()].sort();

  // The table's per-service chains and affinity sets not seen in use so far: what is left once every
  // service port was written is stale. (Their warnings follow the service ports', as the names are
  // reported after them.)
  const nameWarnings: string[] = [];
  const existingChains = safeNames("chain", input.existingChains, nameWarnings);
  const existingSets = safeNames("set", input.existingSets, nameWarnings);
  const unusedChains = new Set(existingChains.filter(isServiceChainName));
  const unusedSets = new Set(existingSets.filter(isAffinitySetName));
  const activeChains = new Set<string>();
  const interest = deferred === null ? null : options.chainsOfInterest ?? new Set<string>();
  const skippedServices: string[] = [];
  let noLocalInternal = 0;
  let noLocalExternal = 0;
  for (const key of keys) {
    const svc = byKey.get(key)!;
    const endpoints = input.endpoints.get(key);
    const cat = categorizedEndpoints(input, svc, endpoints);
    if (typeof cat === "string") {
      // One bad value must not break the whole transaction: leave this service port out.
      skippedServices.push(key);
      warnings.push(`service port ${servicePortNameString(svc.name)} skipped: ${cat}`);
      continue;
    }
    const writeChains = partial === null
      ? deferred === null
      : partial.changedServices.has(`${svc.name.namespace}/${svc.name.name}`);
    deferred?.push(key);
    const out = writeServicePort(tx, ctx, svc, cat, writeChains);
    observer?.servicePort(key, out, svc, endpoints);
    for (const c of out.chains) {
      unusedChains.delete(c);
      if (interest === null || interest.has(c)) activeChains.add(c);
    }
    for (const s of out.affinitySets) unusedSets.delete(s);
    if (out.noLocalInternal) noLocalInternal++;
    if (out.noLocalExternal) noLocalExternal++;
  }

  for (const w of nameWarnings) warnings.push(w);
  const staleChains: string[] = [];
  for (const chain of existingChains) {
    if (unusedChains.has(chain)) {
      tx.flushChain(chain);
      staleChains.push(chain);
    }
  }
  for (const set of existingSets) if (unusedSets.has(set)) tx.deleteSet(set);
  const elementState = elements.finish();

  const transactionChunks = tx.chunks();
  let transaction: string | undefined;
  // Sorted when read: a full render at 10k Services has ~80k of them, and the first sync reads none.
  let activeSorted: string[] | undefined;
  return {
    get transaction(): string {
      return transaction ??= joinTransactionChunks(transactionChunks);
    },
    transactionChunks,
    operations: tx.operations,
    get activeChains(): string[] {
      return activeSorted ??= [...activeChains].sort();
    },
    staleChains,
    noLocalEndpointsInternal: noLocalInternal,
    noLocalEndpointsExternal: noLocalExternal,
    skippedServices,
    warnings,
    state: { family: input.family, elements: elementState },
    deferredServicePorts: deferred,
  };
}

/** The settings every service port of a sync of `input` is written with. */
export function servicePortContext(
  input: Omit<NftRenderInput, "services">,
  elements: ElementWriter,
): ServicePortContext {
  return {
    family: nftFamily(input.family),
    masqueradeAll: input.masqueradeAll,
    local: localTrafficMatches(input.localDetector),
    nodeIP: input.nodeIP,
    elements,
  };
}

/**
 * A service port's `endpoints` (its entry in `input.endpoints`), sorted and categorised as a sync writes
 * them, or the reason it is skipped (a value that cannot be written safely).
 */
export function categorizedEndpoints(
  input: Omit<NftRenderInput, "services">,
  svc: ServicePortInfo,
  endpoints: readonly EndpointInfo[] | undefined,
): CategorizedEndpoints | string {
  const ipv6 = input.family === "IPv6";
  const eps = [...(endpoints ?? [])].sort(compareEndpoints);
  const problem = checkServicePort(svc, ipv6) ??
    eps.map((ep) => checkEndpoint(ep, ipv6)).find((p) => p !== null) ?? null;
  if (problem !== null) return problem;
  return categorizeEndpoints(eps, svc, input.nodeName, input.nodeLabels, {
    preferSameTrafficDistribution: input.preferSameTrafficDistribution,
  });
}

/** An ElementWriter that writes nothing (the elements of a service port already written). */
class NoElements extends ElementWriter {
  override ensure(): void {}
}

/**
 * Renders what a full sync of `input` with deferServicePortChains left out: for a service port key (one
 * of the result's deferredServicePorts), its chain, rule and affinity-set commands, as the full sync
 * would have written them (in their order, without its elements); [] for a key not in `services`.
 */
export function servicePortChainRenderer(
  input: Omit<NftRenderInput, "services">,
  services: ReadonlyMap<string, ServicePortInfo>,
): (key: string) => string[] {
  const tx = new NftTransaction(nftFamily(input.family), KUBE_PROXY_TABLE);
  const ctx = servicePortContext(input, new NoElements(tx, null));
  return (key) => {
    const svc = services.get(key);
    const cat = svc === undefined ? "" : categorizedEndpoints(input, svc, input.endpoints.get(key));
    if (typeof cat === "string") return [];
    const one = new NftTransaction(ctx.family, KUBE_PROXY_TABLE);
    writeServicePort(one, ctx, svc!, cat, true);
    return one.lines();
  };
}

/**
 * The separate transaction upstream runs at the start of a sync to delete per-service chains that have
 * been stale (flushed, unreferenced) for over a second; "" when there are none.
 */
export function renderStaleChainDeletion(family: IPFamily, chains: Iterable<string>): string {
  const tx = new NftTransaction(nftFamily(family), KUBE_PROXY_TABLE);
  for (const chain of [...chains].sort()) tx.deleteChain(chain);
  return tx.toString();
}
