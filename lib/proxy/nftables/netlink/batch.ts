/**
 * A transaction of our renderer (nft syntax, one command per line; see render/transaction.ts) as the
 * nf_tables netlink messages nft 1.0.6 would send for it, without reading any kernel state first: add,
 * flush and delete of the table, chains, sets and maps, elements and rules. Pure. Each message keeps the
 * line it came from, so the writer can name the statement the kernel refused. A line this encoder does
 * not know throws {@link NftNetlinkUnsupported}; the caller then applies the transaction through nft.
 */
import {
  attr,
  BATCH_FRAME_BYTES,
  be32Attr,
  be64Attr,
  encodeAttrs,
  nest,
  nftMessageSize,
  type NlAttr,
  NLM_F_ACK,
  NLM_F_APPEND,
  NLM_F_CREATE,
  NLM_F_EXCL,
  NLM_F_REQUEST,
  strAttr,
  udata,
  udataString,
  udataU32,
  writeBatchBegin,
  writeBatchEnd,
  writeNftMessage,
} from "./attrs.ts";
import { dataValue, dataVerdict, VERDICT, type Verdict } from "./expressions.ts";
import {
  encodeKey,
  keyFields,
  keyLength,
  keyTypeId,
  NFT_DATA_VERDICT_TYPE,
  type NftDatatype,
  TYPE_INTEGER,
} from "./datatypes.ts";
import { encodeRule, nextAddress } from "./rule.ts";
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
  /** Its attributes, laid out (the attribute tree is dropped at once: a first sync's chunk holds many). */
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

/** The user data nft 1.0.6 stores for a named verdict map keyed by `fields` (read back by `nft list`). */
function verdictMapUdata(fields: readonly NftDatatype[], comment: string | null): Uint8Array {
  const entries: [number, Uint8Array][] = [
    [0, udataU32(fields.length === 1 ? fields[0].byteorder : 0)],
    [1, udataU32(0)],
    // The data type's description, as nft writes it for a ": verdict" map whose key ends in a port.
    [3, Uint8Array.of(0x00, 0x04, 0x0d, 0x00, 0x00, 0x00, 0x01, 0x00)],
    [6, udataU32(0)],
  ];
  if (comment !== null) entries.push([7, udataString(comment)]);
  return udata(entries);
}

/** Bytes of encoded elements per NEWSETELEM / DELSETELEM message (the nest's u16 length). */
const ELEMENT_LIST_BYTES = 60_000;

/** `items` in runs of at most `max` bytes (each run holds at least one item). */
function chunkBySize(items: readonly NlAttr[], max: number): NlAttr[][] {
  const out: NlAttr[][] = [];
  let cur: NlAttr[] = [];
  let size = 0;
  for (const it of items) {
    if (cur.length > 0 && size + it.size > max) {
      out.push(cur);
      cur = [];
      size = 0;
    }
    cur.push(it);
    size += it.size;
  }
  if (cur.length > 0) out.push(cur);
  return out;
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

/** Encodes a transaction: the messages in order (without the batch frame). */
export function encodeTransaction(transaction: string, opts: EncodeOptions = {}): NftBatchMessage[] {
  const out: NftBatchMessage[] = [];
  const anonymousName = opts.anonymousSetName;
  // A name of ours must be new: should it ever meet a set of the table, the kernel refuses the batch
  // (EEXIST) instead of taking the existing set (nft's "%d" names are always new).
  const newAnonymousExcl = anonymousName === undefined ? 0 : NLM_F_EXCL;
  /** Sets and maps added in this batch → their batch id. */
  const setIds = new Map<string, number>();
  let nextSetId = 1;
  /** Key fields of sets declared in this batch (elements of other sets need their type: unsupported). */
  const declared = new Map<string, { fields: NftDatatype[]; map: boolean }>();

  for (const line of transaction.split("\n")) {
    if (line.trim() === "") continue;
    const fail = (what: string): never => {
      throw new NftNetlinkUnsupported(line, what);
    };
    const m = /^(add|flush|delete) (table|chain|set|map|rule|element) (ip6?) (\S+)(?: (.*))?$/.exec(line);
    if (m === null) fail("command");
    const [, verb, kind, fam, table, rest0] = m!;
    const family = NFPROTO[fam as "ip" | "ip6"];
    const rest = rest0 ?? "";
    const push = (msg: number, flags: number, attrs: NlAttr[]) =>
      out.push({ msg, flags: NLM_F_REQUEST | flags, family, body: encodeAttrs(attrs), statement: line });
    const tableAttr = strAttr(1, table);
    /** The head of an anonymous set's element list: the set by name and batch id, or by id alone. */
    const elementListHead = (set: string, id: number): NlAttr[] =>
      opts.elementsById === true
        ? [tableAttr, be32Attr(4, id)]
        : [tableAttr, strAttr(2, set), be32Attr(4, id)];

    if (kind === "table") {
      if (verb === "add") {
        const attrs = [tableAttr, be32Attr(2, 0)];
        if (rest !== "") {
          const c = /^\{ comment ("(?:[^"\\]|\\.)*") ; \}$/.exec(rest);
          const comment = c === null ? null : unquote(c[1]);
          if (comment === null) fail("table declaration");
          attrs.push(attr(6, udata([[0, udataString(comment!)]])));
        }
        push(MSG.NEWTABLE, 0, attrs);
      } else if (verb === "delete" && rest === "") push(MSG.DELTABLE, 0, [tableAttr]);
      else fail(`${verb} table`);
      continue;
    }

    if (kind === "chain") {
      const cm = /^(\S+)(?: \{(.*)\})?$/.exec(rest);
      if (cm === null) fail("chain name");
      const name = cm![1];
      if (verb === "flush") push(MSG.DELRULE, 0, [tableAttr, strAttr(2, name)]);
      else if (verb === "delete") push(MSG.DELCHAIN, 0, [tableAttr, strAttr(3, name)]);
      else {
        const attrs = [tableAttr, strAttr(3, name)];
        let comment: string | null = null;
        for (const c of clauses(cm![2] ?? "")) {
          const base = /^type (filter|nat) hook (\w+) priority (-?\d+)$/.exec(c);
          const com = /^comment (".*")$/.exec(c);
          if (base !== null && HOOKS[base[2]] !== undefined) {
            attrs.push(strAttr(7, base[1]));
            attrs.push(nest(4, [be32Attr(1, HOOKS[base[2]]), be32Attr(2, Number(base[3]))]));
          } else if (com !== null && unquote(com[1]) !== null) comment = unquote(com[1]);
          else fail(`chain clause ${JSON.stringify(c)}`);
        }
        if (comment !== null) attrs.push(attr(12, udata([[0, udataString(comment)]])));
        push(MSG.NEWCHAIN, NLM_F_CREATE, attrs);
      }
      continue;
    }

    if (kind === "set" || kind === "map") {
      const sm = /^(\S+)(?: \{(.*)\})?$/.exec(rest);
      if (sm === null) fail("set name");
      const name = sm![1];
      if (verb === "flush") {
        push(MSG.DELSETELEM, 0, [strAttr(2, name), tableAttr]);
        continue;
      }
      if (verb === "delete") {
        push(MSG.DELSET, 0, [tableAttr, strAttr(2, name)]);
        continue;
      }
      let type: string | null = null;
      let flags: string[] = [];
      let timeout: number | null = null;
      let comment: string | null = null;
      for (const c of clauses(sm![2] ?? "")) {
        let x: RegExpExecArray | null;
        if ((x = /^type (.+)$/.exec(c)) !== null) type = x[1];
        else if ((x = /^flags ([\w,]+)$/.exec(c)) !== null) flags = x[1].split(",");
        else if ((x = /^timeout (\d+)s$/.exec(c)) !== null) timeout = Number(x[1]);
        else if ((x = /^comment (".*")$/.exec(c)) !== null && unquote(x[1]) !== null) comment = unquote(x[1]);
        else fail(`set clause ${JSON.stringify(c)}`);
      }
      if (type === null) fail("set without a type");
      const [keyType, dataType] = type!.split(" : ");
      const fields = keyFields(keyType);
      if (fields === null) fail(`set key type ${JSON.stringify(keyType)}`);
      const isMap = kind === "map";
      if (isMap !== (dataType !== undefined)) fail("set/map type");
      if (isMap && (dataType !== "verdict" || fields![fields!.length - 1].name !== "inet_service")) {
        fail(`map type ${JSON.stringify(type)}`);
      }
      const dynamic = flags.length === 2 && flags.includes("dynamic") && flags.includes("timeout");
      if (flags.length > 0 && !dynamic) fail(`set flags ${flags.join(",")}`);
      if ((timeout !== null) !== dynamic || (dynamic && (isMap || comment !== null))) fail("set timeout");
      const id = nextSetId++;
      setIds.set(name, id);
      declared.set(name, { fields: fields!, map: isMap });
      const attrs = [
        tableAttr,
        strAttr(2, name),
        be32Attr(3, (isMap ? SET_MAP : 0) | (dynamic ? SET_TIMEOUT | SET_EVAL : 0)),
        be32Attr(4, keyTypeId(fields!)),
        be32Attr(5, keyLength(fields!)),
      ];
      if (isMap) attrs.push(be32Attr(6, NFT_DATA_VERDICT_TYPE), be32Attr(7, 0));
      attrs.push(be32Attr(10, id));
      if (timeout !== null) attrs.push(be64Attr(11, timeout * 1000));
      if (isMap) attrs.push(attr(13, verdictMapUdata(fields!, comment)));
      else {
        const entries: [number, Uint8Array][] = [[
          0,
          udataU32(fields!.length === 1 ? fields![0].byteorder : 0),
        ]];
        if (comment !== null) entries.push([7, udataString(comment)]);
        attrs.push(attr(13, udata(entries)));
      }
      push(MSG.NEWSET, NLM_F_CREATE, attrs);
      continue;
    }

    if (kind === "rule") {
      if (verb !== "add") fail(`${verb} rule`);
      const sp = rest.indexOf(" ");
      if (sp < 0) fail("rule without a body");
      const chain = rest.slice(0, sp);
      let body = rest.slice(sp + 1);
      let comment: string | null = null;
      const cm = / comment ("(?:[^"\\]|\\.)*")$/.exec(body);
      if (cm !== null) {
        comment = unquote(cm[1]);
        if (comment === null) fail("rule comment");
        body = body.slice(0, cm.index);
      }
      const exprs = encodeRule(body, {
        family: fam as "ip" | "ip6",
        setId: (n) => setIds.get(n) ?? null,
        anonymousVerdictMap: (verdicts) => {
          const id = nextSetId++;
          const name = anonymousName?.("map") ?? "__map%d";
          out.push({
            msg: MSG.NEWSET,
            flags: NLM_F_REQUEST | NLM_F_CREATE | newAnonymousExcl,
            family,
            statement: line,
            body: encodeAttrs([
              tableAttr,
              strAttr(2, name),
              be32Attr(3, SET_ANONYMOUS | SET_CONSTANT | SET_MAP),
              be32Attr(4, TYPE_INTEGER),
              be32Attr(5, 4),
              be32Attr(6, NFT_DATA_VERDICT_TYPE),
              be32Attr(7, 0),
              be32Attr(10, id),
              nest(9, [be32Attr(1, verdicts.length)]),
              attr(
                13,
                udata([
                  [0, udataU32(1)],
                  [1, udataU32(0)],
                  [4, Uint8Array.of(0x00, 0x04, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00)],
                  [6, udataU32(0)],
                ]),
              ),
            ]),
          });
          const elems = verdicts.map((v: Verdict, k) => {
            const key = new Uint8Array(4);
            new DataView(key.buffer).setUint32(0, k, true);
            // nft numbers the list's elements 1, 2, ... (the kernel ignores the type).
            return nest(k + 1, [dataValue(1, key), dataVerdict(2, v)]);
          });
          out.push({
            msg: MSG.NEWSETELEM,
            flags: NLM_F_REQUEST | NLM_F_CREATE,
            family,
            statement: line,
            body: encodeAttrs(elementListHead(name, id).concat(nest(3, elems))),
          });
          return { name, id };
        },
        anonymousIntervalSet: (field, ranges) => {
          const id = nextSetId++;
          const name = anonymousName?.("set") ?? "__set%d";
          const t = ADDRESS_TYPEOF[fam as "ip" | "ip6"];
          const dt = keyFields(t.type)![0];
          const elems: NlAttr[] = [];
          const add = (key: Uint8Array, end: boolean) => {
            const parts = end ? [be32Attr(3, ELEM_INTERVAL_END), dataValue(1, key)] : [dataValue(1, key)];
            elems.push(nest(elems.length + 1, parts));
          };
          // nft's interval encoding: a closing element at address 0 when the first range starts later,
          // then each range's start and (unless it reaches the last address) the address after its end.
          const leading = ranges[0][0].some((b) => b !== 0);
          if (leading) add(new Uint8Array(dt.size), true);
          for (const [first, last] of ranges) {
            const after = nextAddress(last);
            if (after !== null) {
              add(first, false);
              add(after, true);
            } else {
              // A range up to the last address has no closing element: nft marks its start as open.
              elems.push(nest(elems.length + 1, [dataValue(1, first), attr(6, udata([[1, udataU32(1)]]))]));
            }
          }
          const typeofData = udata([[0, udataU32(t.desc)], [1, udataU32(t[field])]]);
          out.push({
            msg: MSG.NEWSET,
            flags: NLM_F_REQUEST | NLM_F_CREATE | newAnonymousExcl,
            family,
            statement: line,
            body: encodeAttrs([
              tableAttr,
              strAttr(2, name),
              be32Attr(3, SET_ANONYMOUS | SET_CONSTANT | SET_INTERVAL),
              be32Attr(4, dt.id),
              be32Attr(5, dt.size),
              be32Attr(10, id),
              // nft counts a closing element for every range, also one it leaves out.
              nest(9, [be32Attr(1, (leading ? 1 : 0) + 2 * ranges.length)]),
              attr(
                13,
                udata([
                  [0, udataU32(dt.byteorder)],
                  [2, udataU32(1)],
                  [3, udata([[0, udataU32(7)], [1, typeofData]])],
                ]),
              ),
            ]),
          });
          out.push({
            msg: MSG.NEWSETELEM,
            flags: NLM_F_REQUEST | NLM_F_CREATE,
            family,
            statement: line,
            body: encodeAttrs(elementListHead(name, id).concat(nest(3, elems))),
          });
          return { name, id };
        },
      }, line);
      const attrs = [tableAttr, strAttr(2, chain), nest(4, exprs)];
      if (comment !== null) attrs.push(attr(7, udata([[0, udataString(comment)]])));
      push(MSG.NEWRULE, NLM_F_CREATE | NLM_F_APPEND, attrs);
      continue;
    }

    // Elements: "<set> { k1 [comment "c"] [: v1], k2 ... }".
    if (verb === "flush") fail("flush element");
    const em = /^(\S+) \{ (.*) \}$/.exec(rest);
    if (em === null) fail("element list");
    const set = em![1];
    const decl = declared.get(set) ?? knownContainer(set, fam as "ip" | "ip6");
    if (decl === null) fail(`elements of ${set} (its type is not known here)`);
    const elems: NlAttr[] = [];
    for (const e of em![2].split(/, /)) {
      const x = /^(.+?)(?: comment ("(?:[^"\\]|\\.)*"))?(?: : (.+))?$/.exec(e);
      if (x === null) fail("element");
      const key = encodeKey(decl!.fields, x![1].split(" . "));
      if (key === null) fail(`element key ${JSON.stringify(x![1])}`);
      const parts = [dataValue(1, key!)];
      if (verb === "add") {
        if (decl!.map !== (x![3] !== undefined)) fail("element value");
        if (x![3] !== undefined) {
          const v = /^(?:(jump|goto) (\S+)|(drop|accept|return))$/.exec(x![3]);
          if (v === null) fail(`element value ${JSON.stringify(x![3])}`);
          parts.push(
            dataVerdict(
              2,
              v![1] !== undefined
                ? { code: VERDICT[v![1] as "jump" | "goto"], chain: v![2] }
                : { code: VERDICT[v![3] as "drop" | "accept" | "return"] },
            ),
          );
        }
        if (x![2] !== undefined) {
          const c = unquote(x![2]);
          if (c === null) fail("element comment");
          parts.push(attr(6, udata([[0, udataString(c!)]])));
        }
      }
      elems.push(nest(elems.length + 1, parts));
    }
    const id = setIds.get(set);
    // A netlink attribute's length is 16 bits: the element list of one message stays well below 64 KiB
    // (nft splits the same way), a long command becomes several messages of one batch.
    for (const chunk of chunkBySize(elems, ELEMENT_LIST_BYTES)) {
      const attrs = [tableAttr, strAttr(2, set)];
      if (id !== undefined) attrs.push(be32Attr(4, id));
      attrs.push(nest(3, chunk));
      push(verb === "add" ? MSG.NEWSETELEM : MSG.DELSETELEM, verb === "add" ? NLM_F_CREATE : 0, attrs);
    }
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

/** A framed batch: its bytes and the statement of each sequence number. */
export interface FramedBatch {
  readonly bytes: Uint8Array;
  /** Sequence number of the last message (it carries NLM_F_ACK). */
  readonly lastSeq: number;
  /** The statement of a message's sequence number, or undefined. */
  statementOf(seq: number): string | undefined;
}

/**
 * Frames `messages` into one NFNL batch, sequence numbers from `firstSeq`: BATCH_BEGIN, the messages
 * (the last with NLM_F_ACK, so the reader knows the kernel got to the end), BATCH_END.
 */
export function frameBatch(messages: readonly NftBatchMessage[], firstSeq: number): FramedBatch {
  const base = firstSeq + 1;
  let n = 2 * BATCH_FRAME_BYTES;
  for (const m of messages) n += nftMessageSize(m.body.length);
  const out = new Uint8Array(n);
  const view = new DataView(out.buffer);
  let off = writeBatchBegin(out, view, 0, firstSeq);
  messages.forEach((m, k) => {
    const flags = k === messages.length - 1 ? m.flags | NLM_F_ACK : m.flags;
    off = writeNftMessage(out, view, off, { ...m, flags, seq: base + k });
  });
  const lastSeq = base + messages.length - 1;
  writeBatchEnd(out, view, off, lastSeq + 1);
  return {
    bytes: out,
    lastSeq,
    statementOf: (seq) => messages[seq - base]?.statement,
  };
}
