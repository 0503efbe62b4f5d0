/**
 * A full sync's transaction split into bounded transactions, so that no single commit holds the kernel
 * for long: a transaction's commit cost grows with its service ports (their anonymous sets: every
 * `numgen ... vmap { ... }` and `saddr != { ... }` rule) times the table's size, so one transaction for
 * 5k services took 27.5 s on kernel 6.18 / nft 1.0.6, and chunks of 200 service ports 0.1–1 s each
 * (bench/nftables_bench.ts).
 *
 * Make-before-break: nothing reachable ever jumps into a missing or half-written chain.
 *   1. A prelude creates the table and the fixed regular chains, without flushing anything.
 *   2. Chunks of whole service ports write the per-service chains, rules and affinity sets (each chain
 *      is flushed and refilled inside one transaction, so a chain live traffic already uses is replaced
 *      atomically). Nothing points at a new chain yet: only the dispatch maps do that.
 *   3. The last transaction is the rest of the full sync, in its order: the fixed part (base chains,
 *      fixed rules, map and set flushes), every element (the dispatch now points at populated chains;
 *      merged into few commands, see mergeElements) and the stale-chain flushes. An existing table
 *      switches over atomically here.
 * Applying the sequence leaves the same table as applying the full transaction at once
 * (tests/unit/proxy/nftables/incremental_test.ts).
 *
 * The sequence is made from the full sync's text ({@link firstSyncTransactions}) or, in the agent, from a
 * full sync rendered without its service ports' chains, which are rendered a chunk at a time as the
 * sequence is applied ({@link deferredFirstSyncTransactions}): the same transactions, byte for byte,
 * without the 41 MB of a 10k-Service full sync held during the ~40 s the kernel takes for them.
 */
import { AFFINITY_SET_PREFIX } from "./names.ts";
import { NFT_BASE_CHAINS } from "./setup.ts";
import { joinTransactionChunks } from "./transaction.ts";

const BASE_CHAINS = new Set(NFT_BASE_CHAINS.map((c) => c.name));

/** How to bound the transactions. */
export interface FirstSyncSplitOptions {
  /**
   * A fixed number of service ports per chunk transaction. Default: chunks shrink as the table grows,
   * keeping (ports in the chunk) × (ports in the table after it) within `budget`.
   */
  readonly servicePortsPerTransaction?: number;
  /** The adaptive bound (default {@link FIRST_SYNC_CHUNK_BUDGET}). */
  readonly budget?: number;
  /** Service ports already in the table (an existing table's), for the adaptive bound. */
  readonly existingServicePorts?: number;
  /** Told once the sync is known to go as bounded transactions, before the first of them is made. */
  readonly onSplit?: () => void;
}

/**
 * Default adaptive bound: 400 service ports into an empty table (FIRST_SYNC_MAX_CHUNK; the budget alone
 * would allow ~1000), ~190 at 5k, under 100 at 13k.
 * A chunk's cost grows with its service ports times the table's size: the kernel walks the table's list
 * of sets by name for every new anonymous set (three walks each with our netlink writer). The total over
 * a first sync does not depend on the chunking; the bound keeps each commit short. Kernel 6.18, loaded
 * 2-core machine, bench/nftables_bench.ts: 25 transactions of 0.15–0.55 s at 5k Services, 89 of
 * 0.3–0.57 s at 10k; a budget of 1.5M gave the same total at 10k with a longest transaction of 0.98 s.
 */
export const FIRST_SYNC_CHUNK_BUDGET = 1_000_000;

/**
 * At most this many service ports per adaptive chunk. Into an empty table the budget alone allows ~1000,
 * and rendering and encoding a chunk that size right after the full render set the first sync's peak: at
 * 10k Services (nftables_first_sync_peak.ts, rss_probe.ts) ~4 MiB lower in-process and ~5–7 in the agent
 * with 400, for 3 more transactions of 91 and no measurable time.
 */
export const FIRST_SYNC_MAX_CHUNK = 400;

/**
 * Service ports of the next adaptive chunk when `written` are in the table: c × (written + c) ≤ budget,
 * at most {@link FIRST_SYNC_MAX_CHUNK}, at least 25.
 */
export function adaptiveChunk(written: number, budget: number): number {
  const c = Math.floor((-written + Math.sqrt(written * written + 4 * budget)) / 2);
  return Math.max(25, Math.min(FIRST_SYNC_MAX_CHUNK, c));
}

/** The words a line starts with, as constants: a first sync's ~400k lines then allocate only their names. */
const WORDS = ["add", "flush", "delete", "chain", "rule", "set", "map", "element", "table"];

/** The word of `text` from `from` to `to`, as one of WORDS when it is one (no allocation), else a slice. */
function wordAt(text: string, from: number, to: number): string {
  for (const w of WORDS) if (w.length === to - from && text.startsWith(w, from)) return w;
  return text.slice(from, to);
}

/** The first space in `text[at, to)`, or -1 (also for `at` -1). */
function spaceBefore(text: string, at: number, to: number): number {
  const i = at < 0 ? -1 : text.indexOf(" ", at);
  return i < 0 || i >= to ? -1 : i;
}

/** The object one line works on, read in place: its name is `text[nameFrom, nameTo)`. */
interface LineObject {
  verb: string;
  kind: string;
  nameFrom: number;
  nameTo: number;
}

/**
 * The object the line `text[from, to)` works on: "chain", "rule", "set", "map", "element", "table", with
 * its name (the fifth word), written into `o`. Read in place with indexOf, the verb and kind as constants,
 * the name as offsets: neither the line nor its name is cut out of the transaction, and one `o` serves
 * every line (a 10k-Service first sync has ~400k lines, 41 MB; a string and an object for each were
 * ~100 MiB of garbage at once).
 */
function objectOf(text: string, from: number, to: number, o: LineObject): LineObject {
  const space = (at: number) => spaceBefore(text, at, to);
  const a = space(from);
  const b = a < 0 ? -1 : space(a + 1);
  o.nameFrom = o.nameTo = 0;
  if (b < 0) {
    o.verb = a < 0 ? text.slice(from, to) : wordAt(text, from, a);
    o.kind = a < 0 ? "" : text.slice(a + 1, to);
    return o;
  }
  const c = space(b + 1);
  const d = c < 0 ? -1 : space(c + 1);
  const e = d < 0 ? -1 : space(d + 1);
  if (d >= 0) {
    o.nameFrom = d + 1;
    o.nameTo = e < 0 ? to : e;
  }
  o.verb = wordAt(text, from, a);
  o.kind = wordAt(text, a + 1, b);
  return o;
}

/** isServiceChainName of the line's name, in place. */
function namesServiceChain(text: string, o: LineObject): boolean {
  const slash = text.indexOf("/", o.nameFrom);
  return slash >= 0 && slash < o.nameTo;
}

/** isAffinitySetName of the line's name, in place. */
function namesAffinitySet(text: string, o: LineObject): boolean {
  return o.nameTo - o.nameFrom >= AFFINITY_SET_PREFIX.length &&
    text.startsWith(AFFINITY_SET_PREFIX, o.nameFrom);
}

/** True for a line on a per-service chain or an affinity set (not an element, not a stale flush). */
function isServiceLine(text: string, o: LineObject): boolean {
  if (o.kind === "chain" || o.kind === "rule") return namesServiceChain(text, o);
  if (o.kind === "set") return o.verb === "add" && namesAffinitySet(text, o);
  return false;
}

/**
 * Splits a full sync's transaction (renderNFTablesSync with partial null) into a prelude, chunks of
 * whole service ports and a final switch-over transaction; returns [transaction] unchanged when it
 * has no more service ports than its first chunk would hold. (All at once: {@link firstSyncTransactions}
 * gives the same transactions one at a time.)
 */
export function splitNFTablesFullSync(
  transaction: string | readonly string[],
  opts: FirstSyncSplitOptions = {},
): string[] {
  return [...firstSyncTransactions(transaction, opts)];
}

/**
 * The transactions of {@link splitNFTablesFullSync}, made one at a time as they are applied, from the full
 * sync's text. `transaction` is the text, or its chunks of whole lines each without its last newline
 * (NftRenderResult.transactionChunks): read in place, never joined into one string beside them. Only
 * the line offsets of the service ports' lines are kept between transactions. (The agent renders the
 * service ports' lines on demand instead: {@link deferredFirstSyncTransactions}.)
 */
export function firstSyncTransactions(
  transaction: string | readonly string[],
  opts: FirstSyncSplitOptions = {},
): Generator<string, void, undefined> {
  const texts = typeof transaction === "string" ? [transaction] : transaction;
  const o: LineObject = { verb: "", kind: "", nameFrom: 0, nameTo: 0 };
  const ends = texts.map((t) => t.endsWith("\n") ? t.length - 1 : t.length);
  // (Stale chains are only flushed, after every service port's "add" lines: search from the end.)
  let lastServiceText = -1;
  let lastServiceLineEnd = -1;
  search: for (let t = texts.length - 1; t >= 0; t--) {
    const text = texts[t];
    for (let to = ends[t]; to > 0;) {
      const from = text.lastIndexOf("\n", to - 1) + 1;
      objectOf(text, from, to, o);
      if (o.verb === "add" && isServiceLine(text, o)) {
        lastServiceText = t;
        lastServiceLineEnd = to;
        break search;
      }
      if (from === 0) break;
      to = from - 1;
    }
  }
  const rest: string[] = [];
  // The service ports' lines as [start, end) offsets into texts[lineText].
  const lineText: number[] = [];
  const lineFrom: number[] = [];
  const lineTo: number[] = [];
  for (let t = 0; t < texts.length; t++) {
    const text = texts[t];
    const end = ends[t];
    for (let from = 0; from <= end;) {
      let to = text.indexOf("\n", from);
      if (to < 0 || to > end) to = end;
      if (to > from) {
        objectOf(text, from, to, o);
        // Stale flushes come after the last service port's lines: they stay with the switch-over.
        const beforeLast = t < lastServiceText || (t === lastServiceText && to <= lastServiceLineEnd);
        if (beforeLast && isServiceLine(text, o)) {
          lineText.push(t);
          lineFrom.push(from);
          lineTo.push(to);
        } else {
          rest.push(text.slice(from, to));
        }
      }
      from = to + 1;
    }
  }
  function* serviceLines(): Generator<string, void, undefined> {
    for (let i = 0; i < lineFrom.length; i++) yield texts[lineText[i]].slice(lineFrom[i], lineTo[i]);
  }
  return boundedTransactions(
    rest,
    serviceLines(),
    () => typeof transaction === "string" ? transaction : joinTransactionChunks(transaction),
    opts,
  );
}

/** A full sync rendered with its service ports' chains left out (renderNFTablesSync's deferServicePortChains). */
export interface DeferredFullSync {
  /** The transaction without them, as chunks of whole lines each without its last newline. */
  readonly rest: readonly string[];
  /** The service ports' chain, rule and affinity-set lines, in the full transaction's order, made as read. */
  serviceLines(): Iterable<string>;
  /** How many service ports `serviceLines` renders at most (each starts one group of lines). */
  readonly servicePorts: number;
  /** The whole transaction, rendered anew. */
  whole(): string;
}

/**
 * The transactions {@link firstSyncTransactions} makes of the whole full sync, byte for byte, made from a
 * {@link DeferredFullSync}: each chunk's service ports are rendered as the chunk is made, so that at no
 * time more than one chunk of them is held (at 10k Services the whole text is 41 MB, the rest ~4). Whether
 * the sync is split is known once more service ports than the first chunk holds were rendered; when it
 * is not, the whole transaction is rendered anew. A table whose service ports all fit in the first chunk
 * is not split: the whole transaction is rendered at once, its service ports not twice.
 */
export function deferredFirstSyncTransactions(
  sync: DeferredFullSync,
  opts: FirstSyncSplitOptions = {},
): Generator<string, void, undefined> {
  if (sync.servicePorts <= chunkSizer(opts)(0)) {
    return (function* () {
      yield sync.whole();
    })();
  }
  const rest = { [Symbol.iterator]: () => linesOf(sync.rest) };
  return boundedTransactions(rest, sync.serviceLines(), () => sync.whole(), opts);
}

/** The service ports of the chunk that follows `written` of them (`opts`' fixed or adaptive bound). */
function chunkSizer(opts: FirstSyncSplitOptions): (written: number) => number {
  const fixed = opts.servicePortsPerTransaction === undefined
    ? null
    : Math.max(1, opts.servicePortsPerTransaction);
  const budget = opts.budget ?? FIRST_SYNC_CHUNK_BUDGET;
  const existing = opts.existingServicePorts ?? 0;
  return (written) => fixed ?? adaptiveChunk(existing + written, budget);
}

/** The lines of chunks of whole lines (each without its last newline), made as read. */
function* linesOf(chunks: readonly string[]): Generator<string, void, undefined> {
  for (const chunk of chunks) {
    for (let from = 0; from <= chunk.length;) {
      let to = chunk.indexOf("\n", from);
      if (to < 0) to = chunk.length;
      if (to > from) yield chunk.slice(from, to);
      from = to + 1;
    }
  }
}

/**
 * The bounded sequence of a full sync given apart: `rest` (every line that is not a service port's
 * chain, rule or affinity set, in order; read twice: for the prelude, and for the switch-over) and
 * `serviceLines` (those, in order; read once, as the chunks are made). `whole` is the unsplit
 * transaction, asked for only when the sync is not split.
 */
function* boundedTransactions(
  rest: Iterable<string>,
  serviceLines: Iterable<string>,
  whole: () => string,
  opts: FirstSyncSplitOptions,
): Generator<string, void, undefined> {
  const chunkAt = chunkSizer(opts);
  const o: LineObject = { verb: "", kind: "", nameFrom: 0, nameTo: 0 };
  // Groups (service ports) written in earlier chunks, and the current chunk's groups and lines.
  let written = 0;
  let groups = 0;
  let lines: string[] = [];
  let split = false;
  let prevWasChainDecl = false;
  for (const line of serviceLines) {
    objectOf(line, 0, line.length, o);
    const chainDecl = o.kind === "chain";
    // A service port starts with its chain declarations; its rules follow them.
    if (written + groups === 0 || (chainDecl && o.verb === "add" && !prevWasChainDecl)) {
      if (groups === chunkAt(written)) {
        if (!split) {
          split = true;
          opts.onSplit?.();
          yield preludeOf(rest);
        }
        yield lines.join("\n") + "\n";
        written += groups;
        groups = 0;
        lines = [];
      }
      groups++;
    }
    lines.push(line);
    prevWasChainDecl = chainDecl;
  }
  if (!split) {
    yield whole();
    return;
  }
  yield lines.join("\n") + "\n";
  lines = [];
  yield mergeElements(rest).join("\n") + "\n";
}

/** The prelude: the table and the fixed regular chains, from `rest`. */
function preludeOf(rest: Iterable<string>): string {
  const o: LineObject = { verb: "", kind: "", nameFrom: 0, nameTo: 0 };
  const prelude: string[] = [];
  for (const line of rest) {
    objectOf(line, 0, line.length, o);
    if (o.kind === "table" && o.verb === "add") prelude.push(line);
    // Regular fixed chains may be created early: an unreferenced new chain changes nothing that runs.
    if (
      o.kind === "chain" && o.verb === "add" && !namesServiceChain(line, o) &&
      !BASE_CHAINS.has(line.slice(o.nameFrom, o.nameTo))
    ) {
      prelude.push(line);
    }
  }
  return prelude.join("\n") + "\n";
}

/** Elements per merged `add element` command. */
const ELEMENTS_PER_COMMAND = 1000;

/**
 * `lines` with the "add element" lines of each set or map merged into commands of up to
 * ELEMENTS_PER_COMMAND elements ("{ e1, e2, ... }"), placed where its first element line was. The kernel
 * pays per netlink message, and nft sends one per command: one command per element makes the
 * switch-over of 5k services take seconds, merged it takes a fraction (bench/nftables_bench.ts).
 * Sound for a full sync's lines: each container is flushed before its first element and not touched
 * again, and every chain an element points at is declared before it.
 */
export function mergeElements(lines: Iterable<string>): string[] {
  const out: string[] = [];
  // Per container: where its first element line was, and its element bodies in order.
  const byContainer = new Map<string, { at: number; bodies: string[] }>();
  // Element lines of one container mostly follow each other: their head is read once, not per line.
  let last = "";
  for (const line of lines) {
    if (!line.startsWith("add element ")) {
      out.push(line);
      continue;
    }
    // "add element <family> <table> <container>": up to the fifth space.
    let head = last;
    if (last === "" || !line.startsWith(last) || line.charCodeAt(last.length) !== 0x20) {
      let sp = -1;
      for (let n = 0; n < 5; n++) {
        sp = line.indexOf(" ", sp + 1);
        if (sp < 0) break;
      }
      head = last = sp < 0 ? line : line.slice(0, sp);
    }
    let c = byContainer.get(head);
    if (c === undefined) byContainer.set(head, c = { at: out.length, bodies: [] });
    c.bodies.push(line.slice(line.indexOf("{ ") + 2, line.lastIndexOf(" }")));
  }
  // From the last position back, so earlier positions stay valid.
  for (const [head, c] of [...byContainer].reverse()) {
    const merged: string[] = [];
    for (let i = 0; i < c.bodies.length; i += ELEMENTS_PER_COMMAND) {
      merged.push(`${head} { ${c.bodies.slice(i, i + ELEMENTS_PER_COMMAND).join(", ")} }`);
    }
    out.splice(c.at, 0, ...merged);
  }
  return out;
}
