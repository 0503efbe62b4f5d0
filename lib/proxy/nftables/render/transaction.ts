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

/** Commands joined into one string at a time (see NftTransaction's #push). */
const LINES_PER_BLOCK = 4096;

/** Collects the commands of one transaction on one table. */
export class NftTransaction {
  readonly #prefix: string;
  /** The latest commands, each a string (often a rope of its parts) until {@link LINES_PER_BLOCK}. */
  #lines: string[] = [];
  /** Earlier commands, LINES_PER_BLOCK at a time, joined (without the last newline). */
  readonly #blocks: string[] = [];
  #operations = 0;

  /** A transaction on table `table` of family `family`. */
  constructor(readonly family: NftFamily, readonly table: string) {
    this.#prefix = `${family} ${table}`;
  }

  /** Number of commands so far (knftables NumOperations). */
  get operations(): number {
    return this.#operations;
  }

  /**
   * Appends one command. Every LINES_PER_BLOCK commands are joined into one flat string at once: a full
   * sync at 10k Services writes ~400k commands, and held one string (and rope) each until the end they
   * cost more than the transaction's text.
   */
  #push(line: string): void {
    this.#lines.push(line);
    this.#operations++;
    if (this.#lines.length === LINES_PER_BLOCK) {
      this.#blocks.push(this.#lines.join("\n"));
      this.#lines = [];
    }
  }

  /** `add table` (with an optional comment). */
  addTable(comment?: string): void {
    const body = comment === undefined ? "" : ` { comment ${quote(comment)} ; }`;
    this.#push(`add table ${this.#prefix}${body}`);
  }

  /** `delete table`. */
  deleteTable(): void {
    this.#push(`delete table ${this.#prefix}`);
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
    this.#push(`add chain ${this.#prefix} ${name}${body}`);
  }

  /** `flush chain`. */
  flushChain(name: string): void {
    this.#push(`flush chain ${this.#prefix} ${name}`);
  }

  /** `delete chain`. */
  deleteChain(name: string): void {
    this.#push(`delete chain ${this.#prefix} ${name}`);
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
    this.#push(`add set ${this.#prefix} ${name}${this.#setBody(spec)}`);
  }

  /** `flush set`. */
  flushSet(name: string): void {
    this.#push(`flush set ${this.#prefix} ${name}`);
  }

  /** `delete set`. */
  deleteSet(name: string): void {
    this.#push(`delete set ${this.#prefix} ${name}`);
  }

  /** `add map` (spec.type includes the " : <value type>" part). */
  addMap(name: string, spec: SetSpec): void {
    this.#push(`add map ${this.#prefix} ${name}${this.#setBody(spec)}`);
  }

  /** `flush map`. */
  flushMap(name: string): void {
    this.#push(`flush map ${this.#prefix} ${name}`);
  }

  /** `add rule <chain> <rule> [comment "..."]`. */
  addRule(chain: string, rule: string, comment?: string): void {
    const c = comment === undefined ? "" : ` comment ${quote(comment)}`;
    this.#push(`add rule ${this.#prefix} ${chain} ${rule}${c}`);
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
    this.#push(`add element ${this.#prefix} ${setOrMap} { ${key.join(" . ")}${c}${v} }`);
  }

  /** `delete element` (by key only). */
  deleteElement(setOrMap: string, key: readonly string[]): void {
    this.#push(`delete element ${this.#prefix} ${setOrMap} { ${key.join(" . ")} }`);
  }

  /** The commands, one per line, each ending in "\n" ("" when empty). */
  toString(): string {
    return joinTransactionChunks(this.chunks());
  }

  /**
   * The commands as chunks of whole lines, each without its last newline (none when empty): what
   * {@link joinTransactionChunks} makes one string of. At 10k Services that string is another 41 MB
   * beside the chunks; consumers that read lines take the chunks.
   */
  chunks(): string[] {
    return this.#lines.length === 0 ? [...this.#blocks] : [...this.#blocks, this.#lines.join("\n")];
  }

  /** The commands as lines (a copy). */
  lines(): string[] {
    return [...this.#blocks.flatMap((b) => b.split("\n")), ...this.#lines];
  }
}

/**
 * A transaction as hosts and runners take it: one text, or chunks of whole lines in order, each chunk's
 * end a line's end (its newline optional: {@link NftTransaction.chunks}' chunks have none). A full sync at
 * 10k Services is 41 MB: applied from its chunks it is never joined into one string beside them.
 */
export type NftTransactionText = string | readonly string[];

/** Characters of `t` once joined (a newline after each chunk that lacks one). */
export function transactionLength(t: NftTransactionText): number {
  if (typeof t === "string") return t.length;
  let n = 0;
  for (const c of t) if (c !== "") n += c.length + (c.endsWith("\n") ? 0 : 1);
  return n;
}

/**
 * `t` as strings to write in order (to a pipe, to --dry-run's output), ending in a newline: the missing
 * newlines as strings of their own, so no chunk is copied.
 */
export function streamedChunks(t: NftTransactionText): string[] {
  const out: string[] = [];
  for (const c of typeof t === "string" ? [t] : t) {
    if (c === "") continue;
    out.push(c);
    if (!c.endsWith("\n")) out.push("\n");
  }
  return out;
}

/** `t` as one string: a string as it is, chunks joined, each ending in a newline (a copy: small ones, errors). */
export function transactionString(t: NftTransactionText): string {
  return typeof t === "string" ? t : streamedChunks(t).join("");
}

/** The transaction text of {@link NftTransaction.chunks}' chunks: "\n"-joined, ending in "\n" ("" when none). */
export function joinTransactionChunks(chunks: readonly string[]): string {
  return chunks.length === 0 ? "" : chunks.join("\n") + "\n";
}
