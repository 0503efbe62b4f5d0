/**
 * Splits one rendered iptables-restore payload into bounded transactions, ordered make-before-break.
 *
 * Why: iptables-nft (1.8.9, Debian 12) spends time quadratic in the number of chains declared in one
 * `--noflush` transaction (measured in a scratch netns, kube-proxy-shaped nat payload, 5 endpoints per
 * Service: 1000 Services 1.45 s, 2000 Services 6.7 s as one transaction; the same payloads as
 * 50-Service transactions in one process: 0.41 s and 1.05 s). Each `*table … COMMIT` section is its own
 * kernel transaction, so one iptables-restore process can apply many small ones. iptables-legacy is the
 * opposite (every COMMIT re-uploads the whole table: 10k Services 3.4 s as one transaction, 34-70 s as
 * 50), so for legacy the plan stays one transaction per table.
 *
 * Order (every intermediate state valid: no rule jumps to a chain that does not exist):
 *  1. tables other than nat (filter first, as upstream), one transaction each, as rendered;
 *  2. nat "base" chains that do not lead to per-service chains (KUBE-MARK-MASQ, KUBE-POSTROUTING);
 *  3. per-service chains (SVC/SVL/EXT/FW/SEP), grouped into units (chains that jump to each other, i.e.
 *     one ServicePort), leaves first, packed into transactions of at most `maxChainsPerTransaction`
 *     chains / `maxLinesPerTransaction` lines (a unit larger than that is split, leaves first);
 *  4. nat base chains that lead to per-service chains (KUBE-SERVICES, KUBE-NODEPORTS), together: only now
 *     do new Services become reachable, after all their chains exist;
 *  5. stale chains flushed, in bounded transactions (nothing live jumps to them any more);
 *  6. stale chains deleted (-X), in bounded transactions (they are empty, so no stale chain still jumps
 *     to another).
 *
 * The payload is read back into tables and chains by restore_content.ts; this file orders and packs them.
 * A full render also hands its per-service chains already grouped by service port (SectionedPayload):
 * `planSections` then reads back only the rest (tables, shared and fixed chains: a few percent of the
 * lines) and packs the render's segments into step 3's transactions by their counts alone. Their text is
 * rendered as each transaction is streamed, so no per-line string of the per-service chains is made and
 * only one transaction's text exists at a time (a segment over the bounds by itself is read back into
 * chains when planned).
 */
import { isServiceChainName } from "./chain_names.ts";
import type { IptablesRunner, RestorePayload } from "./runner.ts";
import type { IptablesBackend } from "./version.ts";
import {
  parseRestorePayload,
  type PlanChain,
  type RestoreContent,
  ruleTarget,
  type SectionedPayload,
  type ServiceChainSegment,
  type TableContent,
  UnplannablePayloadError,
} from "./restore_content.ts";

/** What each transaction of a plan does. */
export type TransactionStep =
  | "table"
  | "nat-base"
  | "nat-services"
  | "nat-top"
  | "stale-flush"
  | "stale-delete"
  | "single";

/** One `*table … COMMIT` section. */
export interface RestoreTransaction {
  readonly table: string;
  readonly step: TransactionStep;
  /** Lines between "*table" and "COMMIT" (derived from `text` on read when the transaction has it). */
  readonly lines: readonly string[];
  /**
   * The same lines as chunks of whole lines, each ending with "\n", when the transaction was packed from
   * a render's segments (`planSections`): rendered on each iteration and streamed as they are.
   */
  readonly text?: Iterable<string>;
  /** Chains declared in this transaction. */
  readonly chainCount: number;
}

/** Ordered transactions; `payloadOf(plan)` joins them for one iptables-restore process. */
export interface RestorePlan {
  readonly transactions: readonly RestoreTransaction[];
}

/** Limits and backend of a plan. */
export interface RestorePlanOptions {
  /** "legacy" keeps one transaction per table (splitting makes legacy slower). Default "nf_tables". */
  backend?: IptablesBackend;
  /** Chains declared per transaction. Default `DEFAULT_MAX_CHAINS_PER_TRANSACTION`. */
  maxChainsPerTransaction?: number;
  /** Lines per transaction (soft: one chain's rules are never split). Default `DEFAULT_MAX_LINES_PER_TRANSACTION`. */
  maxLinesPerTransaction?: number;
}

/** Default chain bound (see the benchmark figures in the report and tests/e2e/iptables_restore_plan_test.ts). */
export const DEFAULT_MAX_CHAINS_PER_TRANSACTION = 1000;
/** Default line bound. */
export const DEFAULT_MAX_LINES_PER_TRANSACTION = 20000;

function chainLine(name: string): string {
  return `:${name} - [0:0]`;
}

/** Lines of a transaction that declares `chains` (then their rules) and deletes `deletes`. */
function transactionLines(chains: readonly PlanChain[], deletes: readonly string[] = []): string[] {
  const lines: string[] = [];
  for (const c of chains) lines.push(chainLine(c.name));
  for (const c of chains) for (const r of c.rules) lines.push(r);
  for (const d of deletes) lines.push(`-X ${d}`);
  return lines;
}

/** The upstream-style plan: one transaction per table, stale chains declared and deleted in it. */
export function singleTransactionPlan(content: RestoreContent): RestorePlan {
  return {
    transactions: content.map((t) => {
      const stale = t.deleted.map((name) => ({ name, rules: [] as string[] }));
      return {
        table: t.table,
        step: "single" as const,
        lines: transactionLines([...t.chains, ...stale], t.deleted),
        chainCount: t.chains.length + t.deleted.length,
      };
    }),
  };
}

/** Lines per chunk of `payloadChunksOf` (~40 KB of rules, as the renderer's chunks). */
const CHUNK_LINES = 512;

/**
 * A plan as iptables-restore input, lazily: every iteration yields chunks of whole lines, each ending
 * with "\n" (for `IptablesRunner.restore`), built as they are written, so neither the full text nor a
 * second copy of every line is held while iptables-restore reads it.
 */
export function payloadChunksOf(plan: RestorePlan): Iterable<string> {
  return { [Symbol.iterator]: () => planChunks(plan) };
}

function* planChunks(plan: RestorePlan): Generator<string> {
  const parts: string[] = [];
  const flush = () => {
    parts.push("");
    const chunk = parts.join("\n");
    parts.length = 0;
    return chunk;
  };
  for (const t of plan.transactions) {
    parts.push(`*${t.table}`);
    if (t.text !== undefined) {
      yield flush();
      for (const c of t.text) if (c.length > 0) yield c;
      parts.push("COMMIT");
      continue;
    }
    for (const l of t.lines) {
      parts.push(l);
      if (parts.length >= CHUNK_LINES) yield flush();
    }
    parts.push("COMMIT");
    if (parts.length >= CHUNK_LINES) yield flush();
  }
  if (parts.length > 0) yield flush();
}

/** Joins a plan into one iptables-restore input (the concatenation of `payloadChunksOf`). */
export function payloadOf(plan: RestorePlan): string {
  return [...payloadChunksOf(plan)].join("");
}

/** Disjoint-set over chain indices: a unit is a set of per-service chains that jump to each other. */
function unionFind(n: number): { find(i: number): number; union(a: number, b: number): void } {
  const parent = Array.from({ length: n }, (_, i) => i);
  const find = (i: number): number => {
    while (parent[i] !== i) {
      parent[i] = parent[parent[i]];
      i = parent[i];
    }
    return i;
  };
  return {
    find,
    union(a, b) {
      const ra = find(a);
      const rb = find(b);
      if (ra !== rb) parent[Math.max(ra, rb)] = Math.min(ra, rb);
    },
  };
}

/**
 * Orders `members` (indices into `chains`) so that every chain comes after the chains it jumps to
 * (leaves first). iptables forbids jump loops; should the payload contain one anyway, the remaining
 * members keep their payload order.
 */
function leavesFirst(members: number[], targets: number[][]): number[] {
  const inUnit = new Set(members);
  const state = new Map<number, 1 | 2>(); // 1 = visiting, 2 = done
  const out: number[] = [];
  const visit = (root: number) => {
    const stack: [number, number][] = [[root, 0]];
    state.set(root, 1);
    while (stack.length > 0) {
      const top = stack[stack.length - 1];
      const [node, k] = top;
      const ts = targets[node];
      if (k < ts.length) {
        top[1]++;
        const t = ts[k];
        if (inUnit.has(t) && !state.has(t)) {
          state.set(t, 1);
          stack.push([t, 0]);
        }
      } else {
        state.set(node, 2);
        out.push(node);
        stack.pop();
      }
    }
  };
  for (const m of members) if (!state.has(m)) visit(m);
  return out;
}

/** Greedy packing of chain groups into bounded transactions. */
class Packer {
  readonly done: RestoreTransaction[] = [];
  private cur: PlanChain[] = [];
  private curLines = 0;
  constructor(
    private readonly table: string,
    private readonly step: TransactionStep,
    private readonly maxChains: number,
    private readonly maxLines: number,
  ) {}

  private flush(): void {
    if (this.cur.length === 0) return;
    this.done.push({
      table: this.table,
      step: this.step,
      lines: transactionLines(this.cur),
      chainCount: this.cur.length,
    });
    this.cur = [];
    this.curLines = 0;
  }

  /** Adds a unit: kept in one transaction when it fits an empty one, else split (it is leaves-first). */
  addUnit(unit: PlanChain[]): void {
    const lines = unit.reduce((s, c) => s + 1 + c.rules.length, 0);
    if (this.cur.length + unit.length > this.maxChains || this.curLines + lines > this.maxLines) this.flush();
    if (unit.length <= this.maxChains && lines <= this.maxLines) {
      this.cur.push(...unit);
      this.curLines += lines;
      return;
    }
    for (const c of unit) {
      const l = 1 + c.rules.length;
      if (
        this.cur.length + 1 > this.maxChains || (this.cur.length > 0 && this.curLines + l > this.maxLines)
      ) this.flush();
      this.cur.push(c);
      this.curLines += l;
    }
  }

  finish(): RestoreTransaction[] {
    this.flush();
    return this.done;
  }
}

function chunk<T>(items: readonly T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < items.length; i += size) out.push(items.slice(i, i + size));
  return out;
}

/** Transactions that flush, then delete, `chains` (already unreferenced by anything live) in bounded steps. */
export function chainRemovalTransactions(
  table: string,
  chains: readonly string[],
  maxChainsPerTransaction = DEFAULT_MAX_CHAINS_PER_TRANSACTION,
): RestoreTransaction[] {
  const size = Math.max(1, maxChainsPerTransaction);
  const out: RestoreTransaction[] = [];
  for (const part of chunk(chains, size)) {
    out.push({ table, step: "stale-flush", lines: part.map(chainLine), chainCount: part.length });
  }
  for (const part of chunk(chains, size)) {
    out.push({ table, step: "stale-delete", lines: part.map((c) => `-X ${c}`), chainCount: 0 });
  }
  return out;
}

/**
 * Splits the nat table as described in the module comment. `segments` (planSections) are per-service
 * chains declared outside `t`: a jump to a per-service chain that `t` does not declare then leads to one
 * of them, and they are packed, as text, into step 3's transactions.
 */
function planNat(
  t: TableContent,
  maxChains: number,
  maxLines: number,
  segments: readonly ServiceChainSegment[] = [],
): RestoreTransaction[] {
  const chains = t.chains;
  const index = new Map<string, number>();
  chains.forEach((c, i) => index.set(c.name, i));
  const jumpsToSegment = new Array<boolean>(chains.length).fill(false);
  const targets: number[][] = chains.map((c, i) => {
    const out: number[] = [];
    for (const r of c.rules) {
      const tg = ruleTarget(r);
      const ti = tg === null ? undefined : index.get(tg);
      if (ti !== undefined && ti !== i) out.push(ti);
      else if (ti === undefined && tg !== null && segments.length > 0 && isServiceChainName(tg)) {
        jumpsToSegment[i] = true;
      }
    }
    return out;
  });
  const isService = chains.map((c) => isServiceChainName(c.name));

  // Base chains that lead (possibly through other base chains) to a per-service chain go last ("top").
  const leadsToService = jumpsToSegment.map((j, i) => j && !isServiceChainName(chains[i].name));
  let changed = true;
  while (changed) {
    changed = false;
    for (let i = 0; i < chains.length; i++) {
      if (isService[i] || leadsToService[i]) continue;
      if (targets[i].some((ti) => isService[ti] || leadsToService[ti])) {
        leadsToService[i] = true;
        changed = true;
      }
    }
  }

  const uf = unionFind(chains.length);
  for (let i = 0; i < chains.length; i++) {
    if (!isService[i]) continue;
    for (const ti of targets[i]) if (isService[ti]) uf.union(i, ti);
  }
  const units = new Map<number, number[]>();
  for (let i = 0; i < chains.length; i++) {
    if (!isService[i]) continue;
    const root = uf.find(i);
    let u = units.get(root);
    if (u === undefined) {
      u = [];
      units.set(root, u);
    }
    u.push(i);
  }

  const out: RestoreTransaction[] = [];
  const base = chains.filter((_, i) => !isService[i] && !leadsToService[i]);
  if (base.length > 0) {
    out.push({ table: t.table, step: "nat-base", lines: transactionLines(base), chainCount: base.length });
  }
  const packer = new Packer(t.table, "nat-services", maxChains, maxLines);
  for (const members of units.values()) packer.addUnit(leavesFirst(members, targets).map((i) => chains[i]));
  out.push(...packer.finish());
  out.push(...segmentTransactions(t.table, segments, maxChains, maxLines));
  const top = chains.filter((_, i) => leadsToService[i]);
  if (top.length > 0) {
    out.push({ table: t.table, step: "nat-top", lines: transactionLines(top), chainCount: top.length });
  }
  out.push(...chainRemovalTransactions(t.table, t.deleted, maxChains));
  return out;
}

/**
 * Packs whole segments (several service ports each) into transactions of at most `maxChains` chains and
 * `maxLines` lines, as text: the declarations of its segments, then their rules. A segment over a bound on
 * its own is read back into chains and split by service port, leaves first, as a parsed payload is.
 */
function segmentTransactions(
  table: string,
  segments: readonly ServiceChainSegment[],
  maxChains: number,
  maxLines: number,
): RestoreTransaction[] {
  const out: RestoreTransaction[] = [];
  let cur: ServiceChainSegment[] = [];
  let chains = 0;
  let lines = 0;
  const flush = () => {
    if (cur.length === 0) return;
    out.push(textTransaction(table, cur, chains));
    cur = [];
    chains = 0;
    lines = 0;
  };
  for (const seg of segments) {
    const segLines = seg.chains + seg.ruleLines;
    if (seg.chains > maxChains || segLines > maxLines) {
      flush();
      const { decls, rules } = seg.text();
      const [content] = parseRestorePayload([`*${table}\n`, decls, rules, "COMMIT\n"]);
      out.push(...planNat(content, maxChains, maxLines));
      continue;
    }
    if (chains + seg.chains > maxChains || lines + segLines > maxLines) flush();
    cur.push(seg);
    chains += seg.chains;
    lines += segLines;
  }
  flush();
  return out;
}

/**
 * A nat-services transaction of whole segments, streamed as their text: the segments are rendered when
 * the transaction is iterated (one transaction's text at a time), never kept; `lines` is split on read.
 */
function textTransaction(
  table: string,
  segs: readonly ServiceChainSegment[],
  chainCount: number,
): RestoreTransaction {
  const text: Iterable<string> = {
    *[Symbol.iterator]() {
      // Declarations first (each yielded as its segment is rendered), then the rules held meanwhile.
      const rules: string[] = [];
      for (const s of segs) {
        const t = s.text();
        rules.push(t.rules);
        yield t.decls;
      }
      for (let i = 0; i < rules.length; i++) {
        const r = rules[i];
        rules[i] = ""; // let go once written
        yield r;
      }
    },
  };
  return {
    table,
    step: "nat-services",
    text,
    chainCount,
    get lines(): readonly string[] {
      const out: string[] = [];
      for (const c of text) for (const l of c.split("\n")) if (l.length > 0) out.push(l);
      return out;
    },
  };
}

/**
 * Plans a full render's payload from its sections (RenderResult.sections): only `shared` is read back
 * (parseRestorePayload), the per-service chains are packed as the render's segments of text. Same order
 * and bounds as `splitRestorePayload`; legacy backends get `singleTransactionPlan` of the whole payload.
 * Throws `UnplannablePayloadError` as `splitRestorePayload` does.
 */
export function planSections(
  sections: SectionedPayload,
  payload: RestorePayload,
  opts: RestorePlanOptions = {},
): RestorePlan {
  if (opts.backend === "legacy") return splitRestorePayload(payload, opts);
  return planContent(parseRestorePayload(sections.shared), opts, sections.segments);
}

/**
 * Plans a rendered payload (text or `RestoreContent`) as bounded make-before-break transactions; see the
 * module comment for the order. Legacy backends get `singleTransactionPlan`. Throws
 * `UnplannablePayloadError` for text it cannot read (callers then restore the text unchanged).
 */
export function splitRestorePayload(
  input: RestorePayload | RestoreContent,
  opts: RestorePlanOptions = {},
): RestorePlan {
  const content = isRestoreContent(input) ? input : parseRestorePayload(input);
  if (opts.backend === "legacy") return singleTransactionPlan(content);
  return planContent(content, opts, []);
}

/** The nf_tables plan of parsed tables, nat last; `segments` are per-service nat chains declared apart. */
function planContent(
  content: RestoreContent,
  opts: RestorePlanOptions,
  segments: readonly ServiceChainSegment[],
): RestorePlan {
  const maxChains = Math.max(1, opts.maxChainsPerTransaction ?? DEFAULT_MAX_CHAINS_PER_TRANSACTION);
  const maxLines = Math.max(1, opts.maxLinesPerTransaction ?? DEFAULT_MAX_LINES_PER_TRANSACTION);
  const transactions: RestoreTransaction[] = [];
  const nat: TableContent[] = [];
  for (const t of content) {
    if (t.table === "nat") {
      nat.push(t);
      continue;
    }
    // Other tables are small and have no per-service chains: one transaction, stale chains last in it.
    const stale = t.deleted.map((name) => ({ name, rules: [] as string[] }));
    transactions.push({
      table: t.table,
      step: "table",
      lines: transactionLines([...t.chains, ...stale], t.deleted),
      chainCount: t.chains.length + t.deleted.length,
    });
  }
  if (segments.length > 0 && nat.length !== 1) {
    throw new UnplannablePayloadError(`per-service chains with ${nat.length} *nat tables`);
  }
  for (const t of nat) transactions.push(...planNat(t, maxChains, maxLines, segments));
  return { transactions };
}

/** RestoreContent (parsed tables) rather than payload text or chunks. */
function isRestoreContent(input: RestorePayload | RestoreContent): input is RestoreContent {
  return Array.isArray(input) && input.length > 0 && typeof input[0] !== "string";
}

/**
 * What the proxier calls to apply a rendered payload (text or chunks of whole lines): plans it for the
 * runner's backend (from `sections` when the render gave them: RenderResult.sections) and streams the
 * plan, in chunks, to one iptables-restore process. A payload the planner
 * cannot read is restored unchanged. Returns the plan used (null when restored unchanged). Errors are the
 * runner's (`RestoreError`).
 */
export async function restorePlanned(
  runner: Pick<IptablesRunner, "restore" | "version">,
  payload: RestorePayload,
  opts: Omit<RestorePlanOptions, "backend"> = {},
  sections: SectionedPayload | null = null,
): Promise<RestorePlan | null> {
  let plan: RestorePlan;
  try {
    const o = { ...opts, backend: runner.version.backend };
    plan = sections === null ? splitRestorePayload(payload, o) : planSections(sections, payload, o);
  } catch (e) {
    if (!(e instanceof UnplannablePayloadError)) throw e;
    await runner.restore(payload);
    return null;
  }
  await runner.restore(payloadChunksOf(plan));
  return plan;
}
