/**
 * RenderResult.activeNatChains: every per-service nat chain that exists once a payload is applied. At 10k
 * Services that is ~90k names; building them on every partial sync would cost O(all chains) for nothing,
 * since the renderer finds stale chains from the changed service ports' facts. So the Set is filled
 * from the facts on first read, and is read-only (the renderer relies on it matching its facts).
 */
import { isServiceChainName } from "../chain_names.ts";
import { forEachOwnChain, type ServicePortFacts } from "./state.ts";

/** A read-only Set of chain names, expanded from service-port facts on first read. */
export class ActiveNatChains extends Set<string> {
  #facts: readonly ServicePortFacts[] | null;

  constructor(facts: readonly ServicePortFacts[]) {
    super();
    this.#facts = facts;
  }

  #expand(): void {
    const facts = this.#facts;
    if (facts === null) return;
    this.#facts = null;
    const add = (c: string) => super.add(c);
    for (const f of facts) forEachOwnChain(f, add);
  }

  override get size(): number {
    this.#expand();
    return super.size;
  }
  override has(value: string): boolean {
    this.#expand();
    return super.has(value);
  }
  override forEach(cb: (value: string, key: string, set: Set<string>) => void, thisArg?: unknown): void {
    this.#expand();
    super.forEach(cb, thisArg);
  }
  override entries(): SetIterator<[string, string]> {
    this.#expand();
    return super.entries();
  }
  override keys(): SetIterator<string> {
    this.#expand();
    return super.keys();
  }
  override values(): SetIterator<string> {
    this.#expand();
    return super.values();
  }
  override [Symbol.iterator](): SetIterator<string> {
    this.#expand();
    return super.values();
  }
  override union<U>(other: ReadonlySetLike<U>): Set<string | U> {
    this.#expand();
    return super.union(other);
  }
  override intersection<U>(other: ReadonlySetLike<U>): Set<string & U> {
    this.#expand();
    return super.intersection(other);
  }
  override difference<U>(other: ReadonlySetLike<U>): Set<string> {
    this.#expand();
    return super.difference(other);
  }
  override symmetricDifference<U>(other: ReadonlySetLike<U>): Set<string | U> {
    this.#expand();
    return super.symmetricDifference(other);
  }
  override isSubsetOf(other: ReadonlySetLike<unknown>): boolean {
    this.#expand();
    return super.isSubsetOf(other);
  }
  override isSupersetOf(other: ReadonlySetLike<unknown>): boolean {
    this.#expand();
    return super.isSupersetOf(other);
  }
  override isDisjointFrom(other: ReadonlySetLike<unknown>): boolean {
    this.#expand();
    return super.isDisjointFrom(other);
  }
  override add(value: string): this {
    throw new TypeError(`activeNatChains is read-only (add ${JSON.stringify(value)})`);
  }
  override delete(value: string): boolean {
    throw new TypeError(`activeNatChains is read-only (delete ${JSON.stringify(value)})`);
  }
  override clear(): void {
    throw new TypeError("activeNatChains is read-only (clear)");
  }
}

/** Stale per-service chains: those in `existing` that no service port's facts name (sorted). */
export function staleChainsByScan(
  existing: ReadonlySet<string> | null,
  facts: readonly ServicePortFacts[],
): string[] {
  if (existing === null) return [];
  const candidates: string[] = [];
  for (const chain of existing) if (isServiceChainName(chain)) candidates.push(chain);
  if (candidates.length === 0) return candidates;
  const active = new Set<string>();
  const add = (c: string) => active.add(c);
  for (const f of facts) forEachOwnChain(f, add);
  return candidates.filter((c) => !active.has(c)).sort();
}
