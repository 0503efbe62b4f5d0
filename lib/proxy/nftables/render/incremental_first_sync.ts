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
 */
import { isAffinitySetName, isServiceChainName } from "./names.ts";
import { NFT_BASE_CHAINS } from "./setup.ts";

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
}

/**
 * Default adaptive bound: about 1000 service ports into an empty table, 180 at 5k, under 100 at 13k.
 * A chunk's cost grows with its service ports times the table's size: the kernel walks the table's list
 * of sets by name for every new anonymous set (three walks each with our netlink writer). The total over
 * a first sync does not depend on the chunking; the bound keeps each commit short. Kernel 6.18, loaded
 * 2-core machine, bench/nftables_bench.ts: 25 transactions of 0.15–0.55 s at 5k Services, 89 of
 * 0.3–0.57 s at 10k; a budget of 1.5M gave the same total at 10k with a longest transaction of 0.98 s.
 */
export const FIRST_SYNC_CHUNK_BUDGET = 1_000_000;

/** Service ports of the next chunk when `written` are in the table: c × (written + c) ≤ budget. */
function adaptiveChunk(written: number, budget: number): number {
  const c = Math.floor((-written + Math.sqrt(written * written + 4 * budget)) / 2);
  return Math.max(25, c);
}

/** The words a line starts with, as constants: a first sync's ~200k lines then allocate only their names. */
const WORDS = ["add", "flush", "delete", "chain", "rule", "set", "map", "element", "table"];

/** The word of `line` from `from` to `to`, as one of WORDS when it is one (no allocation), else a slice. */
function wordAt(line: string, from: number, to: number): string {
  for (const w of WORDS) if (w.length === to - from && line.startsWith(w, from)) return w;
  return line.slice(from, to);
}

/**
 * The object a line works on: "chain", "rule", "set", "map", "element", "table", with its name (the
 * fifth word). Cut with indexOf, not split, and the verb and kind as constants: a 5k-Service first sync
 * has ~200k lines, and per-line arrays and strings were a large share of its peak memory.
 */
function objectOf(line: string): { verb: string; kind: string; name: string } {
  const a = line.indexOf(" ");
  const b = a < 0 ? -1 : line.indexOf(" ", a + 1);
  if (b < 0) {
    return { verb: a < 0 ? line : wordAt(line, 0, a), kind: a < 0 ? "" : line.slice(a + 1), name: "" };
  }
  const c = line.indexOf(" ", b + 1);
  const d = c < 0 ? -1 : line.indexOf(" ", c + 1);
  const e = d < 0 ? -1 : line.indexOf(" ", d + 1);
  const name = d < 0 ? "" : line.slice(d + 1, e < 0 ? line.length : e);
  return { verb: wordAt(line, 0, a), kind: wordAt(line, a + 1, b), name };
}

/** True for a line on a per-service chain or an affinity set (not an element, not a stale flush). */
function isServiceLine(verb: string, kind: string, name: string): boolean {
  if (kind === "chain" || kind === "rule") return isServiceChainName(name);
  if (kind === "set") return isAffinitySetName(name) && verb === "add";
  return false;
}

/**
 * Splits a full sync's transaction (renderNFTablesSync with partial null) into a prelude, chunks of
 * whole service ports and a final switch-over transaction; returns [transaction] unchanged when it
 * has no more service ports than its first chunk would hold.
 */
export function splitNFTablesFullSync(transaction: string, opts: FirstSyncSplitOptions = {}): string[] {
  const fixed = opts.servicePortsPerTransaction === undefined
    ? null
    : Math.max(1, opts.servicePortsPerTransaction);
  const lines = transaction.split("\n");
  if (lines[lines.length - 1] === "") lines.pop();
  const prelude: string[] = [];
  const groups: string[][] = [];
  const rest: string[] = [];
  // (Stale chains are only flushed, after every service port's "add" lines: search from the end.)
  let lastServiceLine = -1;
  for (let i = lines.length - 1; i >= 0; i--) {
    const o = objectOf(lines[i]);
    if (o.verb === "add" && isServiceLine(o.verb, o.kind, o.name)) {
      lastServiceLine = i;
      break;
    }
  }
  let prevWasChainDecl = false;
  lines.forEach((line, i) => {
    if (line === "") return;
    const o = objectOf(line);
    if (o.kind === "table" && o.verb === "add") prelude.push(line);
    // Regular fixed chains may be created early: an unreferenced new chain changes nothing that runs.
    if (o.kind === "chain" && o.verb === "add" && !isServiceChainName(o.name) && !BASE_CHAINS.has(o.name)) {
      prelude.push(line);
    }
    // Stale flushes come after the last service port's lines: they stay with the switch-over.
    if (i <= lastServiceLine && isServiceLine(o.verb, o.kind, o.name)) {
      const chainDecl = o.kind === "chain";
      // A service port starts with its chain declarations; its rules follow them.
      if (groups.length === 0 || (chainDecl && o.verb === "add" && !prevWasChainDecl)) groups.push([]);
      groups[groups.length - 1].push(line);
      prevWasChainDecl = chainDecl;
      return;
    }
    rest.push(line);
  });
  const budget = opts.budget ?? FIRST_SYNC_CHUNK_BUDGET;
  const existing = opts.existingServicePorts ?? 0;
  const chunkAt = (written: number) => fixed ?? adaptiveChunk(existing + written, budget);
  if (groups.length <= chunkAt(0)) return [transaction];
  const out = [prelude.join("\n") + "\n"];
  for (let i = 0; i < groups.length;) {
    const n = chunkAt(i);
    out.push(groups.slice(i, i + n).flat().join("\n") + "\n");
    i += n;
  }
  out.push(mergeElements(rest).join("\n") + "\n");
  return out;
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
export function mergeElements(lines: readonly string[]): string[] {
  const out: string[] = [];
  // Per container: where its first element line was, and its element bodies in order.
  const byContainer = new Map<string, { at: number; bodies: string[] }>();
  for (const line of lines) {
    if (!line.startsWith("add element ")) {
      out.push(line);
      continue;
    }
    const head = line.split(" ", 5).join(" ");
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
