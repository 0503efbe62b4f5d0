/**
 * An nft transaction as text for `nft -f -`, one command per line, written as knftables writes them
 * (upstream's Transaction.String()): "add table ip kube-proxy { comment "..." ; }", "add chain ...",
 * "flush map ...", "add rule ip kube-proxy <chain> <rule> [comment "..."]",
 * "add element ip kube-proxy <map> { <key> [comment "..."] : <value> }". Every object lives in one table
 * of one family. Pure: lines are only collected, in call order.
 */

/** nft address family of a table. */
export type NftFamily = "ip" | "ip6";

/** A base chain's attachment to a netfilter hook. */
export interface BaseChainSpec {
  readonly type: "filter" | "nat";
  readonly hook: "prerouting" | "input" | "forward" | "output" | "postrouting";
  /** Numeric priority (knftables writes named priorities as numbers). */
  readonly priority: number;
}

/** Properties of a named set or map. */
export interface SetSpec {
  /** Data type, e.g. "ipv4_addr" or "ipv4_addr . inet_proto . inet_service : verdict" for a map. */
  readonly type: string;
  readonly flags?: readonly string[];
  /** Element timeout in whole seconds. */
  readonly timeoutSeconds?: number;
  readonly comment?: string;
}

/** Go %q for the ASCII comments kube-proxy writes (names, fixed text). */
function quote(s: string): string {
  return JSON.stringify(s);
}

/** Collects the commands of one transaction on one table. */
export class NftTransaction {
  readonly #prefix: string;
  readonly #lines: string[] = [];

  /** A transaction on table `table` of family `family`. */
  constructor(readonly family: NftFamily, readonly table: string) {
    this.#prefix = `${family} ${table}`;
  }

  /** Number of commands so far (knftables NumOperations). */
  get operations(): number {
    return this.#lines.length;
  }

  /** `add table` (with an optional comment). */
  addTable(comment?: string): void {
    const body = comment === undefined ? "" : ` { comment ${quote(comment)} ; }`;
    this.#lines.push(`add table ${this.#prefix}${body}`);
  }

  /** `delete table`. */
  deleteTable(): void {
    this.#lines.push(`delete table ${this.#prefix}`);
  }

  /** `add chain`: a regular chain, or a base chain when `base` is given. */
  addChain(name: string, base?: BaseChainSpec, comment?: string): void {
    let body = "";
    if (base !== undefined || comment !== undefined) {
      body = " {";
      if (base !== undefined) body += ` type ${base.type} hook ${base.hook} priority ${base.priority} ;`;
      if (comment !== undefined) body += ` comment ${quote(comment)} ;`;
      body += " }";
    }
    this.#lines.push(`add chain ${this.#prefix} ${name}${body}`);
  }

  /** `flush chain`. */
  flushChain(name: string): void {
    this.#lines.push(`flush chain ${this.#prefix} ${name}`);
  }

  /** `delete chain`. */
  deleteChain(name: string): void {
    this.#lines.push(`delete chain ${this.#prefix} ${name}`);
  }

  #setBody(spec: SetSpec): string {
    let body = ` { type ${spec.type} ;`;
    if (spec.flags !== undefined && spec.flags.length > 0) body += ` flags ${spec.flags.join(",")} ;`;
    if (spec.timeoutSeconds !== undefined) body += ` timeout ${spec.timeoutSeconds}s ;`;
    if (spec.comment !== undefined) body += ` comment ${quote(spec.comment)} ;`;
    return body + " }";
  }

  /** `add set`. */
  addSet(name: string, spec: SetSpec): void {
    this.#lines.push(`add set ${this.#prefix} ${name}${this.#setBody(spec)}`);
  }

  /** `flush set`. */
  flushSet(name: string): void {
    this.#lines.push(`flush set ${this.#prefix} ${name}`);
  }

  /** `delete set`. */
  deleteSet(name: string): void {
    this.#lines.push(`delete set ${this.#prefix} ${name}`);
  }

  /** `add map` (spec.type includes the " : <value type>" part). */
  addMap(name: string, spec: SetSpec): void {
    this.#lines.push(`add map ${this.#prefix} ${name}${this.#setBody(spec)}`);
  }

  /** `flush map`. */
  flushMap(name: string): void {
    this.#lines.push(`flush map ${this.#prefix} ${name}`);
  }

  /** `add rule <chain> <rule> [comment "..."]`. */
  addRule(chain: string, rule: string, comment?: string): void {
    const c = comment === undefined ? "" : ` comment ${quote(comment)}`;
    this.#lines.push(`add rule ${this.#prefix} ${chain} ${rule}${c}`);
  }

  /** `add element` to a set (no value) or a map (value given); key parts joined with " . ". */
  addElement(
    setOrMap: string,
    key: readonly string[],
    value?: readonly string[],
    comment?: string,
  ): void {
    const c = comment === undefined ? "" : ` comment ${quote(comment)}`;
    const v = value === undefined || value.length === 0 ? "" : ` : ${value.join(" . ")}`;
    this.#lines.push(`add element ${this.#prefix} ${setOrMap} { ${key.join(" . ")}${c}${v} }`);
  }

  /** `delete element` (by key only). */
  deleteElement(setOrMap: string, key: readonly string[]): void {
    this.#lines.push(`delete element ${this.#prefix} ${setOrMap} { ${key.join(" . ")} }`);
  }

  /** The commands, one per line, each ending in "\n" ("" when empty). */
  toString(): string {
    return this.#lines.length === 0 ? "" : this.#lines.join("\n") + "\n";
  }

  /** The commands as lines (a copy). */
  lines(): string[] {
    return [...this.#lines];
  }
}
