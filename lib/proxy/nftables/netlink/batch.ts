/**
 * A transaction of our renderer (nft syntax, one command per line; see render/transaction.ts) as the
 * nf_tables netlink messages nft 1.0.6 would send for it, without reading any kernel state first: add,
 * flush and delete of the table, chains, sets and maps, elements and rules. Pure. The encoder reads each
 * line in place and hands it to the writer of its kind (chain.ts, set.ts, element.ts; a rule's
 * expressions rule.ts). The messages are written straight into one reusable buffer (attrs.ts NlWriter), framed as one NFNL batch; each sequence
 * number keeps the line it came from, so the writer can name the statement the kernel refused. A line
 * this encoder does not know throws {@link NftNetlinkUnsupported}; the caller then applies the
 * transaction through nft.
 */
import {
  BATCH_FRAME_BYTES,
  nftMessageType,
  NLM_F_ACK,
  NLM_F_APPEND,
  NLM_F_CREATE,
  NLM_F_REQUEST,
  NlWriter,
  writeBatchBegin,
  writeBatchEnd,
} from "./attrs.ts";
import { type RuleContext, RuleEncoder } from "./rule.ts";
import { type BatchLine, commentAttr, NFT_MSG, type Verb } from "./message.ts";
import { writeChain, writeTable } from "./chain.ts";
import { type EncodeOptions, NftBatchSets } from "./set.ts";
import { unquote } from "./syntax.ts";
import { NftNetlinkUnsupported } from "./unsupported.ts";
import { type NftTransactionText, transactionLength } from "../render/transaction.ts";

// The batch's options and the anonymous set names are set.ts's; callers take them from here with the
// encoder.
export { anonymousSetNamer, type EncodeOptions } from "./set.ts";

/** NFPROTO_* of a line's family. */
const NFPROTO = { ip: 2, ip6: 10 } as const;

/** One nf_tables command of a batch, before framing: message type, flags, attributes, source line. */
export interface NftBatchMessage {
  readonly msg: number;
  readonly flags: number;
  readonly family: number;
  /** Its attributes, after the nfgenmsg. */
  readonly body: Uint8Array;
  /** The transaction line it encodes. */
  readonly statement: string;
}

/** A framed batch: its bytes and the statement of each sequence number. */
export interface FramedBatch {
  /** The batch (for {@link NftBatchEncoder.encode}, a view of its buffer, valid until the next call). */
  readonly bytes: Uint8Array;
  /** Messages between BATCH_BEGIN and BATCH_END. */
  readonly messages: number;
  /** Sequence number of the last message (it carries NLM_F_ACK). */
  readonly lastSeq: number;
  /** The statement of a message's sequence number, or undefined. */
  statementOf(seq: number): string | undefined;
}

/** The words a line starts with, as constants (a first sync's ~200k lines then allocate none for them). */
const VERBS = ["add", "flush", "delete"] as const;
const KINDS = ["table", "chain", "set", "map", "rule", "element"] as const;
const FAMILIES = ["ip", "ip6"] as const;
type Kind = (typeof KINDS)[number];

/** The word of `words` that `text` holds from `from` to `to`, or null. */
function wordOf<W extends string>(words: readonly W[], text: string, from: number, to: number): W | null {
  for (const w of words) if (w.length === to - from && text.startsWith(w, from)) return w;
  return null;
}

/** Whether `text` from `from` to `to` is blank (as `trim()` sees it). */
function blank(text: string, from: number, to: number): boolean {
  for (let k = from; k < to; k++) {
    const c = text.charCodeAt(k);
    if (c > 32 && c < 127) return false;
    if (c >= 127) return text.slice(from, to).trim() === "";
  }
  return true;
}

/**
 * Encodes transactions into one buffer that it keeps and grows, so a first sync's chunks (megabytes each)
 * reuse the same bytes (see NlWriter.reset for what it keeps). Lines are read in place, by offset: a line
 * becomes a string only for errors, statementOf and the rarer declarations, a rule only its tokens.
 */
export class NftBatchEncoder {
  readonly #batch = new NlWriter();
  /** A rule's expressions, written before its message: its anonymous sets' messages come first. */
  readonly #rule = new NlWriter(4096);
  readonly #rules = new RuleEncoder();

  // The transaction being encoded and its current line (state of #messages, in fields so that a line
  // allocates no closures).
  #tx = "";
  #from = 0;
  #to = 0;
  #family = 0;
  #fam: "ip" | "ip6" = "ip";
  #table = "";
  /** The last chain name read, reused while lines name the same chain. */
  #chain = "";
  #seq = 0;
  #lastAt = -1;
  #starts: number[] = [];

  readonly #sets = new NftBatchSets();
  /** The current line as the message writers see it (one object for the encoder's life). */
  readonly #at: BatchLine;
  /** What a rule needs from the batch (one object for the encoder's life). */
  readonly #ctx: RuleContext;

  constructor() {
    // deno-lint-ignore no-this-alias -- the getters below read this encoder's private fields
    const encoder = this;
    this.#at = {
      w: this.#batch,
      get table() {
        return encoder.#table;
      },
      get family() {
        return encoder.#fam;
      },
      begin: (msg, flags) => this.#begin(msg, flags),
      fail: (what) => this.#fail(what),
    };
    this.#ctx = {
      setId: (n) => this.#sets.id(n) ?? null,
      anonymousVerdictMap: (verdicts) => this.#sets.anonymousVerdictMap(this.#at, verdicts),
      anonymousIntervalSet: (field, ranges) => this.#sets.anonymousIntervalSet(this.#at, field, ranges),
      statement: () => this.#line(),
    };
  }

  /** Bytes the encoder holds between batches. */
  get retainedBytes(): number {
    return this.#batch.capacity + this.#rule.capacity;
  }

  /**
   * Strings read from the last transaction that the encoder still holds (0 between batches): each is a
   * substring of it, and a substring keeps the whole text alive.
   */
  get retainedNames(): number {
    return this.#sets.heldNames + [this.#tx, this.#table, this.#chain].filter((s) => s !== "").length;
  }

  /**
   * Drops buffers over RETAIN_BYTES: a first sync's last batch (1.3 MB of text at 10k Services, a 2.6
   * MiB buffer) would otherwise stay allocated until two more batches were encoded, which an idle agent
   * may not see for hours. The last batch's bytes are invalid afterwards.
   */
  trim(): void {
    this.#batch.trim();
    this.#rule.trim();
  }

  /**
   * `transaction` as one NFNL batch, sequence numbers from `firstSeq`: BATCH_BEGIN, its messages (the
   * last with NLM_F_ACK, so the reader knows the kernel got to the end), BATCH_END. Chunks of whole lines
   * are read one after the other, never joined.
   */
  encode(transaction: NftTransactionText, firstSeq: number, opts: EncodeOptions = {}): FramedBatch {
    const texts = typeof transaction === "string" ? [transaction] : transaction;
    const w = this.#batch;
    w.reset();
    // A batch takes up to ~2 bytes per byte of transaction (rules; elements ~1.2): sized once.
    w.reserve(2 * transactionLength(transaction) + 2 * BATCH_FRAME_BYTES);
    writeBatchBegin(w, firstSeq);
    this.#seq = firstSeq + 1;
    this.#lastAt = -1;
    this.#starts = [];
    this.#sets.reset(opts);
    // The first message of each chunk (the messages' offsets in #starts are into their chunk).
    const firsts: number[] = [];
    try {
      for (const text of texts) {
        firsts.push(this.#starts.length);
        this.#tx = text;
        this.#messages();
      }
    } finally {
      // Names read from the transaction are substrings of it: none is kept past the batch.
      this.#tx = "";
      this.#table = "";
      this.#chain = "";
      this.#rules.clear();
      this.#sets.clear();
    }
    if (this.#lastAt >= 0) w.addMessageFlags(this.#lastAt, NLM_F_ACK);
    // The batch's statementOf keeps the line offsets (and the texts) for as long as the batch lives.
    const starts = this.#starts;
    this.#starts = [];
    return framed(w, firstSeq, starts.length, (k) => {
      let c = firsts.length - 1;
      while (firsts[c] > k) c--;
      return lineAt(texts[c], starts[k]);
    });
  }

  /** The current line. */
  #line(): string {
    return this.#tx.slice(this.#from, this.#to);
  }

  #fail(what: string): never {
    throw new NftNetlinkUnsupported(this.#line(), what);
  }

  /** Starts a message of the current line (its attributes follow; NlWriter.endMessage closes it). */
  #begin(msg: number, flags: number): number {
    this.#starts.push(this.#from);
    this.#lastAt = this.#batch.beginMessage(
      nftMessageType(msg),
      NLM_F_REQUEST | flags,
      this.#seq++,
      this.#family,
    );
    return this.#lastAt;
  }

  /** The end of the word of the current line starting at `from` (the next space, or the line's end). */
  #wordEnd(from: number): number {
    const sp = this.#tx.indexOf(" ", from);
    return sp < 0 || sp > this.#to ? this.#to : sp;
  }

  /** The name from `from` to `to`: `last` when it is the same (lines name the same table, chain). */
  #name(last: string, from: number, to: number): string {
    return last.length === to - from && this.#tx.startsWith(last, from) ? last : this.#tx.slice(from, to);
  }

  /** Writes the messages of the transaction into the batch buffer. */
  #messages(): void {
    const tx = this.#tx;
    for (let from = 0; from < tx.length;) {
      let to = tx.indexOf("\n", from);
      if (to < 0) to = tx.length;
      this.#from = from;
      this.#to = to;
      from = to + 1;
      if (blank(tx, this.#from, to)) continue;
      // "<verb> <kind> <family> <table>[ <rest>]", single spaces.
      const a = this.#wordEnd(this.#from);
      const b = a < to ? this.#wordEnd(a + 1) : to;
      const c = b < to ? this.#wordEnd(b + 1) : to;
      const d = c < to ? this.#wordEnd(c + 1) : to;
      const verb = wordOf(VERBS, tx, this.#from, a);
      const kind = a < to ? wordOf(KINDS, tx, a + 1, b) : null;
      const fam = b < to ? wordOf(FAMILIES, tx, b + 1, c) : null;
      if (verb === null || kind === null || fam === null || c >= to || d === c + 1) this.#fail("command");
      const table = this.#name(this.#table, c + 1, d);
      if (/\s/.test(table)) this.#fail("command");
      this.#table = table;
      this.#fam = fam;
      this.#family = NFPROTO[fam];
      const restFrom = d < to ? d + 1 : to;
      if (kind === "rule") this.#ruleLine(verb, restFrom);
      else if (kind === "chain" && this.#wordEnd(restFrom) === to) this.#plainChainLine(verb, restFrom);
      else this.#declarationLine(verb, kind, tx.slice(restFrom, to));
    }
  }

  /** "<verb> chain <family> <table> <name>" (no declaration): the name read in place. */
  #plainChainLine(verb: Verb, from: number): void {
    if (from >= this.#to) this.#fail("chain name");
    const name = this.#name(this.#chain, from, this.#to);
    if (/\s/.test(name)) this.#fail("chain name");
    this.#chain = name;
    writeChain(this.#at, verb, name, "");
  }

  /** "add rule <family> <table> <chain> <rule>[ comment "<c>"]". */
  #ruleLine(verb: Verb, from: number): void {
    const tx = this.#tx;
    const to = this.#to;
    if (verb !== "add") this.#fail(`${verb} rule`);
    const sp = tx.indexOf(" ", from);
    if (sp < 0 || sp >= to) this.#fail("rule without a body");
    const chain = this.#name(this.#chain, from, sp);
    this.#chain = chain;
    let comment: string | null = null;
    let body: string = tx;
    let bodyFrom = sp + 1;
    let bodyTo = to;
    if (tx.charCodeAt(to - 1) === 0x22) {
      // Ends in a quote: maybe a comment (few rules have one; the body is then read as a string).
      body = tx.slice(sp + 1, to);
      bodyFrom = 0;
      bodyTo = body.length;
      const cm = / comment ("(?:[^"\\]|\\.)*")$/.exec(body);
      if (cm !== null) {
        comment = unquote(cm[1]);
        if (comment === null) this.#fail("rule comment");
        bodyTo = cm.index;
      }
    }
    const exprs = this.#rule;
    exprs.reset();
    this.#rules.encode(exprs, this.#fam, this.#ctx, body, bodyFrom, bodyTo);
    const w = this.#batch;
    const at = this.#begin(NFT_MSG.NEWRULE, NLM_F_CREATE | NLM_F_APPEND);
    w.str(1, this.#table);
    w.str(2, chain);
    const list = w.beginNest(4);
    w.raw(exprs.bytes());
    w.end(list);
    if (comment !== null) commentAttr(w, 7, comment);
    w.endMessage(at);
  }

  /** Table, chain (with a declaration), set, map and element lines: `rest` follows the table's name. */
  #declarationLine(verb: Verb, kind: Exclude<Kind, "rule">, rest: string): void {
    if (kind === "table") writeTable(this.#at, verb, rest);
    else if (kind === "chain") {
      const cm = /^(\S+)(?: \{(.*)\})?$/.exec(rest);
      if (cm === null) this.#fail("chain name");
      writeChain(this.#at, verb, cm[1], cm[2] ?? "");
    } else if (kind === "element") this.#sets.writeElementLine(this.#at, verb, rest);
    else this.#sets.writeSet(this.#at, verb, kind, rest);
  }
}

/** The line of `text` starting at `from`. */
function lineAt(text: string, from: number): string {
  const to = text.indexOf("\n", from);
  return text.slice(from, to < 0 ? text.length : to);
}

/**
 * The batch framed in `w` (BATCH_BEGIN at 0, `messages` messages from `firstSeq` + 1), ended with
 * BATCH_END; `statement(k)` is the line of the k-th message.
 */
function framed(
  w: NlWriter,
  firstSeq: number,
  messages: number,
  statement: (k: number) => string,
): FramedBatch {
  const base = firstSeq + 1;
  const lastSeq = base + messages - 1;
  writeBatchEnd(w, lastSeq + 1);
  return {
    bytes: w.bytes(),
    messages,
    lastSeq,
    statementOf: (seq) => seq >= base && seq <= lastSeq ? statement(seq - base) : undefined,
  };
}

/**
 * Encodes a transaction: the messages in order, unframed, each body a copy (tests compare them with nft's
 * messages; the writer frames with {@link NftBatchEncoder.encode}, the same bytes).
 */
export function encodeTransaction(transaction: string, opts: EncodeOptions = {}): NftBatchMessage[] {
  const { bytes, statementOf, lastSeq } = new NftBatchEncoder().encode(transaction, 0, opts);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out: NftBatchMessage[] = [];
  let off = BATCH_FRAME_BYTES;
  for (let seq = 1; seq <= lastSeq; seq++) {
    const len = view.getUint32(off, true);
    out.push({
      msg: view.getUint16(off + 4, true) & 0xff,
      // NLM_F_ACK marks the batch's last message: the frame's, not the statement's.
      flags: view.getUint16(off + 6, true) & ~NLM_F_ACK,
      family: bytes[off + 16],
      body: bytes.slice(off + 20, off + len),
      statement: statementOf(seq)!,
    });
    off += len;
  }
  return out;
}

/**
 * Frames `messages` (from {@link encodeTransaction}) into one NFNL batch, sequence numbers from
 * `firstSeq`: the bytes {@link NftBatchEncoder.encode} writes for their transaction.
 */
export function frameBatch(messages: readonly NftBatchMessage[], firstSeq: number): FramedBatch {
  const w = new NlWriter();
  writeBatchBegin(w, firstSeq);
  let last = -1;
  messages.forEach((m, k) => {
    last = w.beginMessage(nftMessageType(m.msg), m.flags, firstSeq + 1 + k, m.family);
    w.raw(m.body);
    w.endMessage(last);
  });
  if (last >= 0) w.addMessageFlags(last, NLM_F_ACK);
  return framed(w, firstSeq, messages.length, (k) => messages[k].statement);
}
