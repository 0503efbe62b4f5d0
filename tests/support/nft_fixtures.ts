/**
 * Upstream's nftables NewFakeProxier settings (pkg/proxy/nftables/proxier_test.go) as renderer input,
 * and a helper that renders a full sync into a FakeNftTable.
 */
import type { EndpointInfo, IPFamily, ServicePortInfo } from "../../lib/proxy/types.ts";
import { servicePortKey } from "../../lib/proxy/types.ts";
import { newNodePortAddresses } from "../../lib/proxy/nodeport_addresses.ts";
import {
  type NftRenderInput,
  type NftRenderResult,
  type NftSyncState,
  renderNFTablesFullSync,
  renderNFTablesSync,
  renderStaleChainDeletion,
} from "../../lib/proxy/nftables/render/render.ts";
import { FakeNftTable } from "./nft_fake.ts";
import { TEST_INTERFACE_ADDRESSES, TEST_NODE_IP, TEST_NODE_IPV6, TEST_NODE_NAME } from "./tracer.ts";

/** Renderer settings of upstream's NewFakeProxier for `family` (services and endpoints empty). */
export function nftFakeProxierInput(family: IPFamily = "IPv4"): NftRenderInput {
  const v6 = family === "IPv6";
  return {
    family,
    services: [],
    endpoints: new Map(),
    nodeName: TEST_NODE_NAME,
    nodeLabels: {},
    nodeIP: v6 ? TEST_NODE_IPV6 : TEST_NODE_IP,
    nodePortAddresses: newNodePortAddresses(family, [`${TEST_NODE_IP}/32`, `${TEST_NODE_IPV6}/128`]),
    localAddresses: TEST_INTERFACE_ADDRESSES.filter((a) => a.includes(":") === v6),
    serviceCIDRs: [v6 ? "fd00:10:96::/112" : "172.30.0.0/16"],
    masqueradeBit: 14,
    masqueradeAll: false,
    localDetector: { mode: "CIDR", cidr: v6 ? "fd00:10::/64" : "10.0.0.0/8" },
    firstSync: true,
    existingChains: null,
    existingSets: null,
  };
}

/** Service ports and their endpoints, as a test builds them. */
export interface NftCluster {
  readonly services: readonly ServicePortInfo[];
  readonly endpoints: ReadonlyArray<readonly [ServicePortInfo, readonly EndpointInfo[]]>;
}

/** Renders a full sync of `cluster` (over `base` settings) from the fake's current chains and sets. */
export function syncInto(
  nft: FakeNftTable,
  cluster: NftCluster,
  base: NftRenderInput = nftFakeProxierInput(),
  firstSync = !nft.exists(),
): NftRenderResult {
  const result = renderNFTablesFullSync({
    ...base,
    services: cluster.services,
    endpoints: new Map(cluster.endpoints.map(([svc, eps]) => [servicePortKey(svc.name), eps])),
    firstSync,
    existingChains: nft.exists() ? nft.chains() : null,
    existingSets: nft.exists() ? nft.sets() : null,
  });
  nft.run(result.transaction);
  return result;
}

/**
 * Upstream's sync loop around the renderer: stale per-service chains are flushed by one sync and deleted
 * (in a separate, earlier transaction) by the first sync after they have "aged" (upstream: one second;
 * here: after ageStaleChains()); every sync re-stamps the chains it finds stale. With `partial`, syncs
 * after the first are partial, rewriting only services changed since the last sync.
 */
export class FakeNftProxier {
  readonly nft: FakeNftTable;
  readonly services = new Map<string, ServicePortInfo>();
  readonly endpoints = new Map<string, readonly EndpointInfo[]>();
  /** Stale chain → aged. */
  readonly staleChains = new Map<string, boolean>();
  /** "namespace/name" of services changed since the last sync. */
  readonly changed = new Set<string>();
  #synced = false;
  #state: NftSyncState | null = null;
  /** Commands in the last sync's main transaction. */
  lastOperations = 0;
  /** The last sync's stale-chain deletion transaction ("" when none). */
  lastDeletion = "";

  constructor(readonly base: NftRenderInput = nftFakeProxierInput(), readonly partial = false) {
    this.nft = new FakeNftTable(base.family === "IPv6" ? "ip6" : "ip", "kube-proxy");
  }

  /** Adds or replaces a service port. */
  setService(svc: ServicePortInfo): void {
    this.services.set(servicePortKey(svc.name), svc);
    this.changed.add(`${svc.name.namespace}/${svc.name.name}`);
  }

  /** Removes a service port and its endpoints. */
  deleteService(svc: ServicePortInfo): void {
    this.services.delete(servicePortKey(svc.name));
    this.endpoints.delete(servicePortKey(svc.name));
    this.changed.add(`${svc.name.namespace}/${svc.name.name}`);
  }

  /** Sets a service port's endpoints. */
  setEndpoints(svc: ServicePortInfo, eps: readonly EndpointInfo[]): void {
    this.endpoints.set(servicePortKey(svc.name), eps);
    this.changed.add(`${svc.name.namespace}/${svc.name.name}`);
  }

  /** Makes every stale chain old enough to delete (upstream's test helper ageStaleChains). */
  ageStaleChains(): void {
    for (const chain of this.staleChains.keys()) this.staleChains.set(chain, true);
  }

  /** One sync: delete aged stale chains, then a full sync. */
  sync(): NftRenderResult {
    const aged = [...this.staleChains].filter(([, old]) => old).map(([c]) => c);
    this.lastDeletion = renderStaleChainDeletion(this.base.family, aged);
    if (aged.length > 0) {
      this.nft.run(this.lastDeletion);
      for (const c of aged) this.staleChains.delete(c);
    }
    const partial = this.partial && this.#state !== null
      ? { previous: this.#state, changedServices: new Set(this.changed) }
      : null;
    const result = renderNFTablesSync({
      ...this.base,
      services: this.services.values(),
      endpoints: this.endpoints,
      firstSync: !this.#synced,
      existingChains: this.nft.exists() ? this.nft.chains() : null,
      existingSets: this.nft.exists() ? this.nft.sets() : null,
    }, partial);
    this.nft.run(result.transaction);
    this.#synced = true;
    this.#state = result.state;
    this.changed.clear();
    this.lastOperations = result.operations;
    for (const c of result.staleChains) this.staleChains.set(c, false);
    for (const c of result.activeChains) this.staleChains.delete(c);
    return result;
  }
}
