/**
 * Equal values of EndpointSlice endpoints held once. Every endpoint arrives with its own `conditions`
 * object (nearly always one of a few: ready, serving, not terminating) and its own copy of its node's
 * name and zone; at 10k Services / 65k endpoints those copies were 3.2 MiB of the informer store's ~20.
 * A table per resource hands out one frozen conditions object per distinct value and one string per
 * distinct node or zone name, and the store keeps those.
 */

/** An endpoint's fields this table shares (the rest are kept as they are). */
interface EndpointLike {
  conditions?: unknown;
  nodeName?: unknown;
  zone?: unknown;
}

/** Names kept at most (a cluster has one per node and zone; past this, new names are not shared). */
const MAX_NAMES = 16384;

const CONDITION_KEYS = ["ready", "serving", "terminating"] as const;

/** The shared values of one resource's endpoints. */
export class EndpointValueTable {
  readonly #names = new Map<string, string>();
  readonly #conditions = new Map<number, Readonly<Record<string, boolean>>>();

  /**
   * `endpoints` with each endpoint's conditions, nodeName and zone replaced by the shared equal value:
   * the array itself when every value was already the shared one, else a new array of new endpoint
   * objects — or, when `owned` (the caller made these endpoint objects and hands them over), the same
   * objects changed in place. Conditions objects with anything but the three boolean conditions (in any
   * order) are kept as they are.
   */
  share<E>(endpoints: readonly E[], owned = false): readonly E[] {
    let out: E[] | null = null;
    for (let i = 0; i < endpoints.length; i++) {
      const e = endpoints[i] as EndpointLike;
      if (typeof e !== "object" || e === null) continue;
      const conditions = this.#sharedConditions(e.conditions);
      const nodeName = this.#sharedName(e.nodeName);
      const zone = this.#sharedName(e.zone);
      if (conditions === e.conditions && nodeName === e.nodeName && zone === e.zone) continue;
      if (owned) {
        if ("conditions" in e) e.conditions = conditions;
        if ("nodeName" in e) e.nodeName = nodeName;
        if ("zone" in e) e.zone = zone;
        continue;
      }
      out ??= endpoints.slice();
      // The same keys in the same order, so the object serialises exactly as it came.
      const copy: Record<string, unknown> = { ...e };
      if ("conditions" in e) copy.conditions = conditions;
      if ("nodeName" in e) copy.nodeName = nodeName;
      if ("zone" in e) copy.zone = zone;
      out[i] = copy as E;
    }
    return out ?? endpoints;
  }

  /** Distinct conditions and names held (diagnostics and tests). */
  get size(): { conditions: number; names: number } {
    return { conditions: this.#conditions.size, names: this.#names.size };
  }

  #sharedName(v: unknown): unknown {
    if (typeof v !== "string") return v;
    const held = this.#names.get(v);
    if (held !== undefined) return held;
    if (this.#names.size < MAX_NAMES) this.#names.set(v, v);
    return v;
  }

  #sharedConditions(v: unknown): unknown {
    if (typeof v !== "object" || v === null || Array.isArray(v)) return v;
    const c = v as Record<string, unknown>;
    // The key encodes the object's own keys and values in order (base 7, one digit per key: which key
    // and which value), so equal keys mean an equal serialisation; no string is made per endpoint.
    let key = 0;
    let n = 0;
    for (const k in c) {
      const index = (CONDITION_KEYS as readonly string[]).indexOf(k);
      const value = c[k];
      if (index < 0 || typeof value !== "boolean" || ++n > CONDITION_KEYS.length) return v;
      key = key * 7 + 1 + index * 2 + (value ? 1 : 0);
    }
    const held = this.#conditions.get(key);
    if (held !== undefined) return held;
    const frozen = Object.freeze({ ...(c as Record<string, boolean>) });
    this.#conditions.set(key, frozen);
    return frozen;
  }
}
