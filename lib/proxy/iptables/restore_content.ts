/**
 * Reads a rendered iptables-restore payload back into tables, chains and rules (RestoreContent): what
 * the restore planner (restore_plan.ts) reorders into bounded transactions. Also ruleTarget, the chain a
 * rule line jumps to, which the planner, the drift check and the cleanup use to follow jumps.
 */
import type { RestorePayload } from "./runner.ts";

/** A chain and its rule lines ("-A NAME …"), as rendered. */
export interface PlanChain {
  readonly name: string;
  readonly rules: readonly string[];
}

/** One table of a rendered payload. */
export interface TableContent {
  readonly table: string;
  /** Chains declared (":NAME - [0:0]", i.e. flushed and rewritten), in payload order, with their rules. */
  readonly chains: readonly PlanChain[];
  /** Chains deleted ("-X NAME"): stale chains. A chain both declared and deleted counts as deleted only. */
  readonly deleted: readonly string[];
}

/** A rendered payload, table by table in payload order. */
export type RestoreContent = readonly TableContent[];

/**
 * A full render's payload in the two parts the planner treats differently, so that it reads back only
 * the small one: the per-service nat chains, already grouped by service port (`segments`), and the rest
 * (`shared`: the tables, the shared, fixed and stale chains).
 */
export interface SectionedPayload {
  /**
   * The payload without the per-service chains' declarations and rules: a valid payload of its own
   * (chunks of whole lines), whose nat rules jump to chains the segments declare.
   */
  readonly shared: readonly string[];
  /** The per-service nat chains in payload order; a service port's chains are all in one segment. */
  readonly segments: readonly ServiceChainSegment[];
}

/**
 * Whole service ports' own nat chains: their counts, and their text rendered on demand, so that a plan
 * streams them into iptables-restore as it writes them and the payload's bulk is never held whole.
 */
export interface ServiceChainSegment {
  /** Chains declared (lines of the text's `decls`). */
  readonly chains: number;
  /** Lines of the text's `rules`. */
  readonly ruleLines: number;
  /** Renders the text; every call renders it anew (the same text), nothing is kept. */
  text(): SegmentText;
}

/** A segment's text. */
export interface SegmentText {
  /** ":NAME - [0:0]" lines, each ending with "\n". */
  readonly decls: string;
  /** The "-A NAME …" lines of those chains, each ending with "\n". */
  readonly rules: string;
}

/** Thrown by `parseRestorePayload` for a payload it cannot plan (the caller then restores it as is). */
export class UnplannablePayloadError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UnplannablePayloadError";
  }
}

/**
 * Reads a rendered payload ("*table", ":CHAIN - [0:0]", "-A CHAIN …", "-X CHAIN", "COMMIT") into
 * `RestoreContent`. Any other command ("-I", "-D", "-F", "-N", …) makes it unplannable. The payload is
 * one string or chunks of whole lines (RenderResult.payloadChunks), read without joining them.
 */
export function parseRestorePayload(payload: RestorePayload): RestoreContent {
  const out: TableContent[] = [];
  let table: string | null = null;
  let chains = new Map<string, string[]>();
  let deleted: string[] = [];
  let lineNo = 0;
  for (const text of typeof payload === "string" ? [payload] : payload) {
    let start = 0;
    const n = text.length;
    while (start < n) {
      let end = text.indexOf("\n", start);
      if (end === -1) end = n;
      lineNo++;
      const c = text.charCodeAt(start);
      if (end === start || c === 35 /* # */) {
        // blank or comment
      } else if (c === 42 /* * */) {
        if (table !== null) {
          throw new UnplannablePayloadError(`line ${lineNo}: "*" before COMMIT of *${table}`);
        }
        table = text.slice(start + 1, end).trim();
        chains = new Map();
        deleted = [];
      } else if (table === null) {
        throw new UnplannablePayloadError(`line ${lineNo}: outside a table: ${text.slice(start, end)}`);
      } else if (c === 58 /* : */) {
        const sp = text.indexOf(" ", start);
        const name = text.slice(start + 1, sp === -1 || sp > end ? end : sp);
        if (!chains.has(name)) chains.set(name, []);
      } else if (text.startsWith("-A ", start)) {
        const sp = text.indexOf(" ", start + 3);
        const name = text.slice(start + 3, sp === -1 || sp > end ? end : sp);
        const rules = chains.get(name);
        if (rules === undefined) {
          throw new UnplannablePayloadError(`line ${lineNo}: rule for undeclared chain ${name}`);
        }
        rules.push(text.slice(start, end));
      } else if (text.startsWith("-X ", start)) {
        deleted.push(text.slice(start + 3, end).trim());
      } else if (text.startsWith("COMMIT", start)) {
        const del = new Set(deleted);
        out.push({
          table,
          chains: [...chains].filter(([name]) => !del.has(name)).map(([name, rules]) => ({ name, rules })),
          deleted,
        });
        table = null;
      } else {
        throw new UnplannablePayloadError(`line ${lineNo}: unsupported line: ${text.slice(start, end)}`);
      }
      start = end + 1;
    }
  }
  if (table !== null) throw new UnplannablePayloadError(`*${table} has no COMMIT`);
  return out;
}

/** The chain a rule jumps or goes to (last "-j X" / "-g X"), or null. */
export function ruleTarget(rule: string): string | null {
  const j = rule.lastIndexOf(" -j ");
  const g = rule.lastIndexOf(" -g ");
  const at = Math.max(j, g);
  if (at === -1) return null;
  const s = at + 4;
  const sp = rule.indexOf(" ", s);
  return rule.slice(s, sp === -1 ? rule.length : sp);
}
