/**
 * ServiceCIDR objects → the list of service CIDRs (upstream pkg/proxy/config ServiceCIDRConfig): keeps
 * every ServiceCIDR it is told about and, after each change that changes the list, hands the complete list
 * to its handler. Unlike upstream (which deletes an updated or deleted object's CIDRs from one shared set,
 * even when another object still holds them, and hands the set over in random order) the list is the union
 * over the objects held now, normalised and sorted: the same objects always give the same rule.
 *
 * A value that is not a CIDR is left out with one warning naming the object and the field, logged once
 * while the object holds it; the object's other CIDRs still count.
 */
import type { ServiceCIDR } from "../k8s/objects.ts";
import type { ProxyHandlers, ServiceCIDRHandler, ServiceCIDRsHandler } from "../proxy/handlers.ts";
import { formatCIDR, parseCIDR } from "../net/ip.ts";

/** Where the warnings go. */
export type Warn = (msg: string) => void;

/** The valid CIDRs of one ServiceCIDR, normalised, in spec order, and one line per bad value. */
export function serviceCIDRsOf(obj: ServiceCIDR): { cidrs: string[]; problems: string[] } {
  const name = JSON.stringify(obj.metadata?.name ?? "");
  const cidrs: string[] = [];
  const problems: string[] = [];
  const list: unknown = obj.spec?.cidrs;
  if (list === undefined || list === null) return { cidrs, problems };
  if (!Array.isArray(list)) {
    problems.push(`ServiceCIDR ${name}: spec.cidrs: ${JSON.stringify(list)} is not a list; ignored`);
    return { cidrs, problems };
  }
  list.forEach((v: unknown, i) => {
    const parsed = typeof v === "string" ? parseCIDR(v) : null;
    if (parsed === null) {
      problems.push(
        `ServiceCIDR ${name}: spec.cidrs[${i}]: ${JSON.stringify(v)} is not a valid CIDR; ignored`,
      );
    } else cidrs.push(formatCIDR(parsed));
  });
  return { cidrs, problems };
}

/** Turns ServiceCIDR object events into {@link ServiceCIDRsHandler} calls; see the module header. */
export class ServiceCIDRConfig implements ServiceCIDRHandler {
  readonly #handler: ServiceCIDRsHandler;
  readonly #warn: Warn;
  /** name → valid CIDRs of that object. */
  readonly #objects = new Map<string, string[]>();
  /** name → problems last warned about (warned again only when they change). */
  readonly #warned = new Map<string, string>();
  /** The list last handed over, joined (null before the first). */
  #last: string | null = null;

  constructor(handler: ServiceCIDRsHandler, warn: Warn) {
    this.#handler = handler;
    this.#warn = warn;
  }

  /** The current list (normalised, sorted, unique). */
  get cidrs(): string[] {
    return [...new Set([...this.#objects.values()].flat())].sort();
  }

  /** @inheritdoc */
  onServiceCIDRAdd(serviceCIDR: ServiceCIDR): void {
    this.#set(serviceCIDR);
  }
  /** @inheritdoc */
  onServiceCIDRUpdate(_old: ServiceCIDR, serviceCIDR: ServiceCIDR): void {
    this.#set(serviceCIDR);
  }
  /** @inheritdoc */
  onServiceCIDRDelete(serviceCIDR: ServiceCIDR): void {
    const name = serviceCIDR.metadata?.name ?? "";
    this.#objects.delete(name);
    this.#warned.delete(name);
    this.#publish();
  }
  /** @inheritdoc */
  onServiceCIDRsSynced(): void {
    // Upstream's Run hands the list over once the informer synced, even when it is empty.
    this.#publish(true);
  }

  #set(obj: ServiceCIDR): void {
    const name = obj.metadata?.name ?? "";
    const { cidrs, problems } = serviceCIDRsOf(obj);
    const text = problems.join("\n");
    if (text !== "" && this.#warned.get(name) !== text) { for (const p of problems) this.#warn(p); }
    if (text === "") this.#warned.delete(name);
    else this.#warned.set(name, text);
    this.#objects.set(name, cidrs);
    this.#publish();
  }

  /** Hands the list over when it changed (or always, when `force`). */
  #publish(force = false): void {
    const cidrs = this.cidrs;
    const key = cidrs.join(",");
    if (!force && key === this.#last) return;
    this.#last = key;
    this.#handler.onServiceCIDRsChanged(cidrs);
  }
}

/**
 * `downstream` with ServiceCIDR object events turned into `onServiceCIDRsChanged` calls on it (which it
 * may ignore); every other event passes unchanged.
 */
export function withServiceCIDRConfig(downstream: ProxyHandlers, warn: Warn): ProxyHandlers {
  const config = new ServiceCIDRConfig(
    { onServiceCIDRsChanged: (cidrs) => downstream.onServiceCIDRsChanged?.(cidrs) },
    warn,
  );
  return {
    onServiceAdd: (s) => downstream.onServiceAdd(s),
    onServiceUpdate: (o, s) => downstream.onServiceUpdate(o, s),
    onServiceDelete: (s) => downstream.onServiceDelete(s),
    onServicesSynced: () => downstream.onServicesSynced(),
    onEndpointSliceAdd: (s) => downstream.onEndpointSliceAdd(s),
    onEndpointSliceUpdate: (o, s) => downstream.onEndpointSliceUpdate(o, s),
    onEndpointSliceDelete: (s) => downstream.onEndpointSliceDelete(s),
    onEndpointSlicesSynced: () => downstream.onEndpointSlicesSynced(),
    onNodeAdd: (n) => downstream.onNodeAdd(n),
    onNodeUpdate: (o, n) => downstream.onNodeUpdate(o, n),
    onNodeDelete: (n) => downstream.onNodeDelete(n),
    onNodeSynced: () => downstream.onNodeSynced(),
    onServiceCIDRAdd: (c) => config.onServiceCIDRAdd(c),
    onServiceCIDRUpdate: (o, c) => config.onServiceCIDRUpdate(o, c),
    onServiceCIDRDelete: (c) => config.onServiceCIDRDelete(c),
    onServiceCIDRsSynced: () => config.onServiceCIDRsSynced(),
  };
}
