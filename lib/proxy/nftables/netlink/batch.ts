/**
 * A transaction of our renderer (nft syntax, one command per line; see render/transaction.ts) as the
 * nf_tables netlink messages nft 1.0.6 would send for it, without reading any kernel state first: add,
 * flush and delete of the table, chains, sets and maps, elements and rules. Pure. The messages are
 * written straight into one reusable buffer (attrs.ts NlWriter), framed as one NFNL batch; each sequence
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
  NLM_F_EXCL,
  NLM_F_REQUEST,
  NlWriter,
  writeBatchBegin,
  writeBatchEnd,
} from "./attrs.ts";
import { dataValue, dataValueU32le, dataVerdict, VERDICT, type Verdict } from "./expressions.ts";
import {
  encodeKey,
  keyFields,
  keyLength,
  keyTypeId,
  NFT_DATA_VERDICT_TYPE,
  type NftDatatype,
  TYPE_INTEGER,
} from "./datatypes.ts";
import { nextAddress, type RuleContext, RuleEncoder } from "./rule.ts";
import { NftNetlinkUnsupported } from "./unsupported.ts";
import {
  CLUSTER_IPS_SET,
  FIREWALL_IPS_MAP,
  NO_ENDPOINT_NODEPORTS_MAP,
  NO_ENDPOINT_SERVICES_MAP,
  NODEPORT_IPS_SET,
  SERVICE_IPS_MAP,
  SERVICE_NODEPORTS_MAP,
} from "../render/names.ts";

/** nf_tables message types. */
const MSG = {
  NEWTABLE: 0,
  DELTABLE: 2,
  NEWCHAIN: 3,
  DELCHAIN: 5,
  NEWRULE: 6,
  DELRULE: 8,
  NEWSET: 9,
  DELSET: 11,
  NEWSETELEM: 12,
  DELSETELEM: 14,
} as const;

/** NFT_SET_* flags. */
const SET_ANONYMOUS = 0x1;
const SET_CONSTANT = 0x2;
const SET_INTERVAL = 0x4;
/** NFT_SET_ELEM_INTERVAL_END. */
const ELEM_INTERVAL_END = 0x1;
/**
 * The `typeof` user data nft stores for an anonymous set of a header address (payload expression: its
 * protocol description and field ids), per family and field.
 */
const ADDRESS_TYPEOF = {
  ip: { desc: 12, saddr: 11, daddr: 12, type: "ipv4_addr" },
  ip6: { desc: 13, saddr: 8, daddr: 9, type: "ipv6_addr" },
} as const;
const SET_MAP = 0x8;
const SET_TIMEOUT = 0x10;
const SET_EVAL = 0x20;

const HOOKS: Readonly<Record<string, number>> = {
  prerouting: 0,
  input: 1,
  forward: 2,
  output: 3,
  postrouting: 4,
};
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

/** A quoted comment (Go %q of ASCII, as the renderer writes it) or null when `s` is not one. */
function unquote(s: string): string | null {
  try {
    const v = JSON.parse(s);
    return typeof v === "string" ? v : null;
  } catch {
    return null;
  }
}

/** Splits `body` ("a ; b ; ") of a `{ ... }` declaration into its clauses. */
function clauses(body: string): string[] {
  const out: string[] = [];
  let cur = "";
  let quoted = false;
  for (let k = 0; k < body.length; k++) {
    const c = body[k];
    if (c === '"' && body[k - 1] !== "\\") quoted = !quoted;
    if (c === ";" && !quoted) {
      if (cur.trim() !== "") out.push(cur.trim());
      cur = "";
    } else cur += c;
  }
  if (cur.trim() !== "") out.push(cur.trim());
  return out;
}

/** nft's description of a ": verdict" map's data whose key ends in a port (user data entry 3). */
const VERDICT_MAP_DATA_DESC = Uint8Array.of(0x00, 0x04, 0x0d, 0x00, 0x00, 0x00, 0x01, 0x00);
/** The same for an anonymous numgen map (user data entry 4). */
const NUMGEN_MAP_DATA_DESC = Uint8Array.of(0x00, 0x04, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00);

/** Bytes of encoded elements per NEWSETELEM / DELSETELEM message (the nest's u16 length). */
const ELEMENT_LIST_BYTES = 60_000;

/** A comment as libnftnl user data in attribute `type`: one string entry. */
function commentAttr(w: NlWriter, type: number, comment: string): void {
  const at = w.begin(type);
  w.udString(0, comment);
  w.end(at);
}

/**
 * Where the encoder departs from nft's bytes to spare the kernel walks over the table's set list (a plain
 * list: every lookup by name visits each set of the table, so a first sync creating one anonymous map per
 * service port is quadratic in the service ports). Without options the messages are nft 1.0.6's.
 */
export interface EncodeOptions {
  /**
   * Names each anonymous set or map instead of nft's "__set%d" / "__map%d", for which the kernel parses
   * the name of every set of the table to pick the lowest free number. Called once per anonymous set; must
   * never return a name of a set the table holds (see anonymousSetNamer); such a set is created with
   * NLM_F_EXCL, so a collision is refused, not merged.
   */
  readonly anonymousSetName?: (kind: "set" | "map") => string;
  /**
   * Addresses the elements of an anonymous set by its batch id only, without its name: the kernel then
   * finds it among the batch's newest messages instead of walking the table's sets. (Not for named sets:
   * an "add set" of an existing set creates nothing the kernel could find by id.)
   */
  readonly elementsById?: boolean;
}

/**
 * Anonymous set names of one writer: "__map" / "__set", then `token`, "_" and a counter of the namer's.
 * `token` starts with a letter, so the kernel's "__map%d" allocation for nft's own sets (the fallback
 * writer's) never parses ours as a number, and must differ from every earlier writer's on the same table
 * (e.g. the writer's start time and a random part): an agent restart meets the old run's sets.
 */
export function anonymousSetNamer(token: string): (kind: "set" | "map") => string {
  if (!/^[a-z][a-z0-9]*$/.test(token)) {
    throw new Error(
      `anonymous set name token ${JSON.stringify(token)}: want a letter, then letters and digits`,
    );
  }
  let n = 0;
  return (kind) => `__${kind}${token}_${n++}`;
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
  #opts: EncodeOptions = {};
  #excl = 0;
  #setIds = new Map<string, number>();
  #nextSetId = 1;
  #declared = new Map<string, { fields: NftDatatype[]; map: boolean }>();
  /** What a rule needs from the batch (one object for the encoder's life). */
  readonly #ctx: RuleContext;

  constructor() {
    this.#ctx = {
      setId: (n) => this.#setIds.get(n) ?? null,
      anonymousVerdictMap: (verdicts) => this.#anonymousVerdictMap(verdicts),
      anonymousIntervalSet: (field, ranges) => this.#anonymousIntervalSet(field, ranges),
      statement: () => this.#line(),
    };
  }

  /** Bytes the encoder holds between batches. */
  get retainedBytes(): number {
    return this.#batch.capacity + this.#rule.capacity;
  }

  /**
   * `transaction` as one NFNL batch, sequence numbers from `firstSeq`: BATCH_BEGIN, its messages (the
   * last with NLM_F_ACK, so the reader knows the kernel got to the end), BATCH_END.
   */
  encode(transaction: string, firstSeq: number, opts: EncodeOptions = {}): FramedBatch {
    const w = this.#batch;
    w.reset();
    // A batch takes up to ~2 bytes per byte of transaction (rules; elements ~1.2): sized once.
    w.reserve(2 * transaction.length + 2 * BATCH_FRAME_BYTES);
    writeBatchBegin(w, firstSeq);
    this.#tx = transaction;
    this.#seq = firstSeq + 1;
    this.#lastAt = -1;
    this.#starts = [];
    this.#opts = opts;
    // A name of ours must be new: should it ever meet a set of the table, the kernel refuses the batch
    // (EEXIST) instead of taking the existing set (nft's "%d" names are always new).
    this.#excl = opts.anonymousSetName === undefined ? 0 : NLM_F_EXCL;
    this.#setIds = new Map();
    this.#nextSetId = 1;
    this.#declared = new Map();
    try {
      this.#messages();
    } finally {
      // Names read from the transaction are substrings of it: none is kept past the batch.
      this.#tx = "";
      this.#table = "";
      this.#chain = "";
      this.#rules.clear();
    }
    if (this.#lastAt >= 0) w.addMessageFlags(this.#lastAt, NLM_F_ACK);
    const starts = this.#starts;
    return framed(w, firstSeq, starts.length, (k) => lineAt(transaction, starts[k]));
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

  /** A message of the current line holding the table's name and a name attribute. */
  #named(msg: number, nameType: number, name: string): void {
    const w = this.#batch;
    const at = this.#begin(msg, 0);
    w.str(1, this.#table);
    w.str(nameType, name);
    w.endMessage(at);
  }

  /** The head of an anonymous set's element list: the set by name and batch id, or by id alone. */
  #elementListHead(set: string, id: number): void {
    const w = this.#batch;
    w.str(1, this.#table);
    if (this.#opts.elementsById !== true) w.str(2, set);
    w.u32be(4, id);
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
  #plainChainLine(verb: "add" | "flush" | "delete", from: number): void {
    if (from >= this.#to) this.#fail("chain name");
    const name = this.#name(this.#chain, from, this.#to);
    if (/\s/.test(name)) this.#fail("chain name");
    this.#chain = name;
    if (verb === "flush") this.#named(MSG.DELRULE, 2, name);
    else if (verb === "delete") this.#named(MSG.DELCHAIN, 3, name);
    else {
      const w = this.#batch;
      const at = this.#begin(MSG.NEWCHAIN, NLM_F_CREATE);
      w.str(1, this.#table);
      w.str(3, name);
      w.endMessage(at);
    }
  }

  /** "add rule <family> <table> <chain> <rule>[ comment "<c>"]". */
  #ruleLine(verb: "add" | "flush" | "delete", from: number): void {
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
    const at = this.#begin(MSG.NEWRULE, NLM_F_CREATE | NLM_F_APPEND);
    w.str(1, this.#table);
    w.str(2, chain);
    const list = w.beginNest(4);
    w.raw(exprs.bytes());
    w.end(list);
    if (comment !== null) commentAttr(w, 7, comment);
    w.endMessage(at);
  }

  #anonymousVerdictMap(verdicts: readonly Verdict[]): { name: string; id: number } {
    const w = this.#batch;
    const id = this.#nextSetId++;
    const name = this.#opts.anonymousSetName?.("map") ?? "__map%d";
    const set = this.#begin(MSG.NEWSET, NLM_F_CREATE | this.#excl);
    w.str(1, this.#table);
    w.str(2, name);
    w.u32be(3, SET_ANONYMOUS | SET_CONSTANT | SET_MAP);
    w.u32be(4, TYPE_INTEGER);
    w.u32be(5, 4);
    w.u32be(6, NFT_DATA_VERDICT_TYPE);
    w.u32be(7, 0);
    w.u32be(10, id);
    const desc = w.beginNest(9);
    w.u32be(1, verdicts.length);
    w.end(desc);
    const ud = w.begin(13);
    w.udU32(0, 1);
    w.udU32(1, 0);
    w.udBytes(4, NUMGEN_MAP_DATA_DESC);
    w.udU32(6, 0);
    w.end(ud);
    w.endMessage(set);
    const elems = this.#begin(MSG.NEWSETELEM, NLM_F_CREATE);
    this.#elementListHead(name, id);
    const list = w.beginNest(3);
    for (let k = 0; k < verdicts.length; k++) {
      // nft numbers the list's elements 1, 2, ... (the kernel ignores the type).
      const e = w.beginNest(k + 1);
      dataValueU32le(w, 1, k);
      dataVerdict(w, 2, verdicts[k].code, verdicts[k].chain);
      w.end(e);
    }
    w.end(list);
    w.endMessage(elems);
    return { name, id };
  }

  #anonymousIntervalSet(
    field: "saddr" | "daddr",
    ranges: readonly (readonly [Uint8Array, Uint8Array])[],
  ): { name: string; id: number } {
    const w = this.#batch;
    const id = this.#nextSetId++;
    const name = this.#opts.anonymousSetName?.("set") ?? "__set%d";
    const t = ADDRESS_TYPEOF[this.#fam];
    const dt = keyFields(t.type)![0];
    // nft's interval encoding: a closing element at address 0 when the first range starts later,
    // then each range's start and (unless it reaches the last address) the address after its end.
    const leading = ranges[0][0].some((b) => b !== 0);
    const set = this.#begin(MSG.NEWSET, NLM_F_CREATE | this.#excl);
    w.str(1, this.#table);
    w.str(2, name);
    w.u32be(3, SET_ANONYMOUS | SET_CONSTANT | SET_INTERVAL);
    w.u32be(4, dt.id);
    w.u32be(5, dt.size);
    w.u32be(10, id);
    // nft counts a closing element for every range, also one it leaves out.
    const desc = w.beginNest(9);
    w.u32be(1, (leading ? 1 : 0) + 2 * ranges.length);
    w.end(desc);
    const ud = w.begin(13);
    w.udU32(0, dt.byteorder);
    w.udU32(2, 1);
    const typeofExpr = w.udBegin(3);
    w.udU32(0, 7);
    const typeofData = w.udBegin(1);
    w.udU32(0, t.desc);
    w.udU32(1, t[field]);
    w.udEnd(typeofData);
    w.udEnd(typeofExpr);
    w.end(ud);
    w.endMessage(set);
    const elems = this.#begin(MSG.NEWSETELEM, NLM_F_CREATE);
    this.#elementListHead(name, id);
    const list = w.beginNest(3);
    let k = 0;
    const add = (key: Uint8Array, end: boolean) => {
      const e = w.beginNest(++k);
      if (end) w.u32be(3, ELEM_INTERVAL_END);
      dataValue(w, 1, key);
      w.end(e);
    };
    if (leading) add(new Uint8Array(dt.size), true);
    for (const [first, last] of ranges) {
      const after = nextAddress(last);
      if (after !== null) {
        add(first, false);
        add(after, true);
      } else {
        // A range up to the last address has no closing element: nft marks its start as open.
        const e = w.beginNest(++k);
        dataValue(w, 1, first);
        const open = w.begin(6);
        w.udU32(1, 1);
        w.end(open);
        w.end(e);
      }
    }
    w.end(list);
    w.endMessage(elems);
    return { name, id };
  }

  /** Table, chain (with a declaration), set, map and element lines: `rest` follows the table's name. */
  #declarationLine(verb: "add" | "flush" | "delete", kind: string, rest: string): void {
    const w = this.#batch;
    const table = this.#table;
    const fam = this.#fam;
    if (kind === "table") {
      if (verb === "add") {
        let comment: string | null = null;
        if (rest !== "") {
          const c = /^\{ comment ("(?:[^"\\]|\\.)*") ; \}$/.exec(rest);
          comment = c === null ? null : unquote(c[1]);
          if (comment === null) this.#fail("table declaration");
        }
        const at = this.#begin(MSG.NEWTABLE, 0);
        w.str(1, table);
        w.u32be(2, 0);
        if (comment !== null) commentAttr(w, 6, comment);
        w.endMessage(at);
      } else if (verb === "delete" && rest === "") {
        const at = this.#begin(MSG.DELTABLE, 0);
        w.str(1, table);
        w.endMessage(at);
      } else this.#fail(`${verb} table`);
      return;
    }

    if (kind === "chain") {
      const cm = /^(\S+)(?: \{(.*)\})?$/.exec(rest);
      if (cm === null) this.#fail("chain name");
      const name = cm[1];
      if (verb === "flush") this.#named(MSG.DELRULE, 2, name);
      else if (verb === "delete") this.#named(MSG.DELCHAIN, 3, name);
      else {
        let base: RegExpExecArray | null = null;
        let comment: string | null = null;
        for (const c of clauses(cm[2] ?? "")) {
          const b = /^type (filter|nat) hook (\w+) priority (-?\d+)$/.exec(c);
          const com = /^comment (".*")$/.exec(c);
          if (b !== null && HOOKS[b[2]] !== undefined) base = b;
          else if (com !== null && unquote(com[1]) !== null) comment = unquote(com[1]);
          else this.#fail(`chain clause ${JSON.stringify(c)}`);
        }
        const at = this.#begin(MSG.NEWCHAIN, NLM_F_CREATE);
        w.str(1, table);
        w.str(3, name);
        if (base !== null) {
          w.str(7, base[1]);
          const hook = w.beginNest(4);
          w.u32be(1, HOOKS[base[2]]);
          w.u32be(2, Number(base[3]));
          w.end(hook);
        }
        if (comment !== null) commentAttr(w, 12, comment);
        w.endMessage(at);
      }
      return;
    }

    if (kind === "set" || kind === "map") {
      const sm = /^(\S+)(?: \{(.*)\})?$/.exec(rest);
      if (sm === null) this.#fail("set name");
      const name = sm[1];
      if (verb === "flush") {
        const at = this.#begin(MSG.DELSETELEM, 0);
        w.str(2, name);
        w.str(1, table);
        w.endMessage(at);
        return;
      }
      if (verb === "delete") {
        this.#named(MSG.DELSET, 2, name);
        return;
      }
      let type: string | null = null;
      let flags: string[] = [];
      let timeout: number | null = null;
      let comment: string | null = null;
      for (const c of clauses(sm[2] ?? "")) {
        let x: RegExpExecArray | null;
        if ((x = /^type (.+)$/.exec(c)) !== null) type = x[1];
        else if ((x = /^flags ([\w,]+)$/.exec(c)) !== null) flags = x[1].split(",");
        else if ((x = /^timeout (\d+)s$/.exec(c)) !== null) timeout = Number(x[1]);
        else if ((x = /^comment (".*")$/.exec(c)) !== null && unquote(x[1]) !== null) comment = unquote(x[1]);
        else this.#fail(`set clause ${JSON.stringify(c)}`);
      }
      if (type === null) this.#fail("set without a type");
      const [keyType, dataType] = type.split(" : ");
      const fields = keyFields(keyType);
      if (fields === null) this.#fail(`set key type ${JSON.stringify(keyType)}`);
      const isMap = kind === "map";
      if (isMap !== (dataType !== undefined)) this.#fail("set/map type");
      if (isMap && (dataType !== "verdict" || fields[fields.length - 1].name !== "inet_service")) {
        this.#fail(`map type ${JSON.stringify(type)}`);
      }
      const dynamic = flags.length === 2 && flags.includes("dynamic") && flags.includes("timeout");
      if (flags.length > 0 && !dynamic) this.#fail(`set flags ${flags.join(",")}`);
      if ((timeout !== null) !== dynamic || (dynamic && (isMap || comment !== null))) {
        this.#fail("set timeout");
      }
      const id = this.#nextSetId++;
      this.#setIds.set(name, id);
      this.#declared.set(name, { fields, map: isMap });
      const at = this.#begin(MSG.NEWSET, NLM_F_CREATE);
      w.str(1, table);
      w.str(2, name);
      w.u32be(3, (isMap ? SET_MAP : 0) | (dynamic ? SET_TIMEOUT | SET_EVAL : 0));
      w.u32be(4, keyTypeId(fields));
      w.u32be(5, keyLength(fields));
      if (isMap) {
        w.u32be(6, NFT_DATA_VERDICT_TYPE);
        w.u32be(7, 0);
      }
      w.u32be(10, id);
      if (timeout !== null) w.u64be(11, timeout * 1000);
      // The user data nft 1.0.6 stores for the set (read back by `nft list`).
      const ud = w.begin(13);
      w.udU32(0, fields.length === 1 ? fields[0].byteorder : 0);
      if (isMap) {
        w.udU32(1, 0);
        w.udBytes(3, VERDICT_MAP_DATA_DESC);
        w.udU32(6, 0);
      }
      if (comment !== null) w.udString(7, comment);
      w.end(ud);
      w.endMessage(at);
      return;
    }

    // Elements: "<set> { k1 [comment "c"] [: v1], k2 ... }".
    if (verb === "flush") this.#fail("flush element");
    const em = /^(\S+) \{ (.*) \}$/.exec(rest);
    if (em === null) this.#fail("element list");
    const set = em[1];
    const decl = this.#declared.get(set) ?? knownContainer(set, fam);
    if (decl === null) this.#fail(`elements of ${set} (its type is not known here)`);
    const id = this.#setIds.get(set);
    const msg = verb === "add" ? MSG.NEWSETELEM : MSG.DELSETELEM;
    /** Starts a message of this command's elements; returns [message, element list] offsets. */
    const startList = (): [number, number] => {
      const at = this.#begin(msg, verb === "add" ? NLM_F_CREATE : 0);
      w.str(1, table);
      w.str(2, set);
      if (id !== undefined) w.u32be(4, id);
      return [at, w.beginNest(3)];
    };
    let [at, list] = startList();
    const elements = em[2];
    // Elements are ", "-separated (an empty one, as in "{ a, }", is refused below).
    for (let k = 0, pos = 0; pos <= elements.length; k++) {
      let stop = elements.indexOf(", ", pos);
      if (stop < 0) stop = elements.length;
      const e = elements.slice(pos, stop);
      pos = stop + 2;
      const x = /^(.+?)(?: comment ("(?:[^"\\]|\\.)*"))?(?: : (.+))?$/.exec(e);
      if (x === null) this.#fail("element");
      const key = encodeKey(decl.fields, x[1].split(" . "));
      if (key === null) this.#fail(`element key ${JSON.stringify(x[1])}`);
      const start = w.length;
      // nft numbers the elements of a command 1, 2, ... across its messages.
      const elem = w.beginNest(k + 1);
      dataValue(w, 1, key);
      if (verb === "add") {
        if (decl.map !== (x[3] !== undefined)) this.#fail("element value");
        if (x[3] !== undefined) {
          const v = /^(?:(jump|goto) (\S+)|(drop|accept|return))$/.exec(x[3]);
          if (v === null) this.#fail(`element value ${JSON.stringify(x[3])}`);
          if (v[1] !== undefined) dataVerdict(w, 2, VERDICT[v[1] as "jump" | "goto"], v[2]);
          else dataVerdict(w, 2, VERDICT[v[3] as "drop" | "accept" | "return"]);
        }
        if (x[2] !== undefined) {
          const c = unquote(x[2]);
          if (c === null) this.#fail("element comment");
          commentAttr(w, 6, c);
        }
      }
      w.end(elem);
      // A netlink attribute's length is 16 bits: the element list of one message stays well below 64
      // KiB (nft splits the same way), a long command becomes several messages of one batch. The
      // element that does not fit moves to the next message (a copy once per message, not per element).
      if (w.length - list - 4 > ELEMENT_LIST_BYTES && start > list + 4) {
        const moved = w.bytes(start).slice();
        w.truncate(start);
        w.end(list);
        w.endMessage(at);
        [at, list] = startList();
        w.raw(moved);
      }
    }
    w.end(list);
    w.endMessage(at);
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
 * The key type of kube-proxy's fixed sets and maps (declared by a full sync, written to by partial
 * syncs without redeclaring them), or null for any other name.
 */
function knownContainer(name: string, family: "ip" | "ip6"): { fields: NftDatatype[]; map: boolean } | null {
  const addr = family === "ip6" ? "ipv6_addr" : "ipv4_addr";
  switch (name) {
    case CLUSTER_IPS_SET:
    case NODEPORT_IPS_SET:
      return { fields: keyFields(addr)!, map: false };
    case SERVICE_IPS_MAP:
    case FIREWALL_IPS_MAP:
    case NO_ENDPOINT_SERVICES_MAP:
      return { fields: keyFields(`${addr} . inet_proto . inet_service`)!, map: true };
    case SERVICE_NODEPORTS_MAP:
    case NO_ENDPOINT_NODEPORTS_MAP:
      return { fields: keyFields("inet_proto . inet_service")!, map: true };
  }
  return null;
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
