/**
 * The dual-stack fan-out (upstream pkg/proxy/metaproxier): one set of handlers that feeds every family's
 * proxier, each of which keeps only what is of its own family. Node events also go to extra node
 * handlers (the health server's node eligibility, the agent's own-Node tracker) before the proxiers.
 */
import type { EndpointSlice, Node, Service } from "../k8s/objects.ts";
import type { NodeHandler, ProxyHandlers } from "./handlers.ts";

/** A family's proxier as the meta-proxier drives it. */
export interface FamilyProxier extends ProxyHandlers {
  start(): void;
  stop(): Promise<void>;
}

/** Node events without the synced signal (what the health server and the Node tracker need). */
export type NodeEventHandler = Pick<NodeHandler, "onNodeAdd" | "onNodeUpdate" | "onNodeDelete">;

/** Fans handler calls out to every family's proxier, in the order given. */
export class MetaProxier implements ProxyHandlers {
  readonly #proxiers: readonly FamilyProxier[];
  readonly #nodeHandlers: readonly NodeEventHandler[];

  constructor(proxiers: readonly FamilyProxier[], nodeHandlers: readonly NodeEventHandler[] = []) {
    this.#proxiers = proxiers;
    this.#nodeHandlers = nodeHandlers;
  }

  /** Starts every family's sync loop. */
  start(): void {
    for (const p of this.#proxiers) p.start();
  }

  /** Stops every family's sync loop; resolves when all have stopped. */
  async stop(): Promise<void> {
    await Promise.all(this.#proxiers.map((p) => p.stop()));
  }

  /** @inheritdoc */
  onServiceAdd(s: Service): void {
    for (const p of this.#proxiers) p.onServiceAdd(s);
  }
  /** @inheritdoc */
  onServiceUpdate(o: Service, s: Service): void {
    for (const p of this.#proxiers) p.onServiceUpdate(o, s);
  }
  /** @inheritdoc */
  onServiceDelete(s: Service): void {
    for (const p of this.#proxiers) p.onServiceDelete(s);
  }
  /** @inheritdoc */
  onServicesSynced(): void {
    for (const p of this.#proxiers) p.onServicesSynced();
  }
  /** @inheritdoc */
  onEndpointSliceAdd(s: EndpointSlice): void {
    for (const p of this.#proxiers) p.onEndpointSliceAdd(s);
  }
  /** @inheritdoc */
  onEndpointSliceUpdate(o: EndpointSlice, s: EndpointSlice): void {
    for (const p of this.#proxiers) p.onEndpointSliceUpdate(o, s);
  }
  /** @inheritdoc */
  onEndpointSliceDelete(s: EndpointSlice): void {
    for (const p of this.#proxiers) p.onEndpointSliceDelete(s);
  }
  /** @inheritdoc */
  onEndpointSlicesSynced(): void {
    for (const p of this.#proxiers) p.onEndpointSlicesSynced();
  }
  /** @inheritdoc */
  onNodeAdd(n: Node): void {
    for (const h of this.#nodeHandlers) h.onNodeAdd(n);
    for (const p of this.#proxiers) p.onNodeAdd(n);
  }
  /** @inheritdoc */
  onNodeUpdate(o: Node, n: Node): void {
    for (const h of this.#nodeHandlers) h.onNodeUpdate(o, n);
    for (const p of this.#proxiers) p.onNodeUpdate(o, n);
  }
  /** @inheritdoc */
  onNodeDelete(n: Node): void {
    for (const h of this.#nodeHandlers) h.onNodeDelete(n);
    for (const p of this.#proxiers) p.onNodeDelete(n);
  }
  /** @inheritdoc */
  onNodeSynced(): void {
    for (const p of this.#proxiers) p.onNodeSynced();
  }
  /** @inheritdoc */
  onServiceCIDRsChanged(cidrs: readonly string[]): void {
    for (const p of this.#proxiers) p.onServiceCIDRsChanged?.(cidrs);
  }
}
