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
  renderNFTablesFullSync,
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
