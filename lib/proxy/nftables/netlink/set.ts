/**
 * The sets and maps of one batch: "add set" / "add map" declarations (a named set's key type, flags,
 * timeout and comment), their flush and delete, the anonymous sets a rule adds before itself (a numgen
 * verdict map, an address interval set) and their names, and the batch ids by which later messages of
 * the batch refer to them. Element lines are resolved here against the sets declared so far and written
 * by element.ts.
 */
import { NLM_F_CREATE, NLM_F_EXCL } from "./attrs.ts";
import { dataValue, dataValueU32le, dataVerdict, type Verdict } from "./expressions.ts";
import { keyFields, keyLength, keyTypeId, NFT_DATA_VERDICT_TYPE, TYPE_INTEGER } from "./datatypes.ts";
import { type ContainerType, knownContainer, writeElements } from "./element.ts";
import { type BatchLine, NFT_MSG, type Verb, writeNamed } from "./message.ts";
import { nextAddress } from "./rule.ts";
import { clauses, unquote } from "./syntax.ts";

/** NFT_SET_* flags. */
const SET_ANONYMOUS = 0x1;
const SET_CONSTANT = 0x2;
const SET_INTERVAL = 0x4;
const SET_MAP = 0x8;
const SET_TIMEOUT = 0x10;
const SET_EVAL = 0x20;
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

/** nft's description of a ": verdict" map's data whose key ends in a port (user data entry 3). */
const VERDICT_MAP_DATA_DESC = Uint8Array.of(0x00, 0x04, 0x0d, 0x00, 0x00, 0x00, 0x01, 0x00);
/** The same for an anonymous numgen map (user data entry 4). */
const NUMGEN_MAP_DATA_DESC = Uint8Array.of(0x00, 0x04, 0x01, 0x00, 0x00, 0x00, 0x01, 0x00);

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

/** The sets of the batch being encoded: what it declared, their batch ids, the anonymous sets' names. */
export class NftBatchSets {
  #opts: EncodeOptions = {};
  #excl = 0;
  #ids = new Map<string, number>();
  #nextId = 1;
  #declared = new Map<string, ContainerType>();

  /** Starts a batch encoded with `opts`. */
  reset(opts: EncodeOptions): void {
    this.#opts = opts;
    // A name of ours must be new: should it ever meet a set of the table, the kernel refuses the batch
    // (EEXIST) instead of taking the existing set (nft's "%d" names are always new).
    this.#excl = opts.anonymousSetName === undefined ? 0 : NLM_F_EXCL;
    this.#ids = new Map();
    this.#nextId = 1;
    this.#declared = new Map();
  }

  /**
   * Forgets the batch's sets once it is encoded: their names are substrings of its transaction, and a
   * substring keeps the whole text alive (a 10k first sync's switch-over, ~1.3 MB, stayed until the next
   * batch, for ever on a quiet single-stack node).
   */
  clear(): void {
    this.#ids = new Map();
    this.#declared = new Map();
  }

  /** How many names of the batch this holds (0 once {@link clear}ed). */
  get heldNames(): number {
    return this.#ids.size + this.#declared.size;
  }

  /** The batch id of a set or map the batch added, or undefined. */
  id(name: string): number | undefined {
    return this.#ids.get(name);
  }

  /** The head of an anonymous set's element list: the set by name and batch id, or by id alone. */
  #elementListHead(line: BatchLine, set: string, id: number): void {
    const w = line.w;
    w.str(1, line.table);
    if (this.#opts.elementsById !== true) w.str(2, set);
    w.u32be(4, id);
  }

  /**
   * An anonymous constant verdict map with integer keys 0..n-1 (a rule's numgen), and its elements;
   * returns its name and batch id.
   */
  anonymousVerdictMap(line: BatchLine, verdicts: readonly Verdict[]): { name: string; id: number } {
    const w = line.w;
    const id = this.#nextId++;
    const name = this.#opts.anonymousSetName?.("map") ?? "__map%d";
    const set = line.begin(NFT_MSG.NEWSET, NLM_F_CREATE | this.#excl);
    w.str(1, line.table);
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
    const elems = line.begin(NFT_MSG.NEWSETELEM, NLM_F_CREATE);
    this.#elementListHead(line, name, id);
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

  /**
   * An anonymous constant interval set of `ranges` (sorted, merged, inclusive [first, last] addresses)
   * for a rule's match on address field `field`, and its elements; returns its name and batch id.
   */
  anonymousIntervalSet(
    line: BatchLine,
    field: "saddr" | "daddr",
    ranges: readonly (readonly [Uint8Array, Uint8Array])[],
  ): { name: string; id: number } {
    const w = line.w;
    const id = this.#nextId++;
    const name = this.#opts.anonymousSetName?.("set") ?? "__set%d";
    const t = ADDRESS_TYPEOF[line.family];
    const dt = keyFields(t.type)![0];
    // nft's interval encoding: a closing element at address 0 when the first range starts later,
    // then each range's start and (unless it reaches the last address) the address after its end.
    const leading = ranges[0][0].some((b) => b !== 0);
    const set = line.begin(NFT_MSG.NEWSET, NLM_F_CREATE | this.#excl);
    w.str(1, line.table);
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
    const elems = line.begin(NFT_MSG.NEWSETELEM, NLM_F_CREATE);
    this.#elementListHead(line, name, id);
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

  /** "<verb> set|map <family> <table> <rest>": `rest` is the name and, for "add", its declaration. */
  writeSet(line: BatchLine, verb: Verb, kind: "set" | "map", rest: string): void {
    const w = line.w;
    const table = line.table;
    const sm = /^(\S+)(?: \{(.*)\})?$/.exec(rest);
    if (sm === null) line.fail("set name");
    const name = sm[1];
    if (verb === "flush") {
      const at = line.begin(NFT_MSG.DELSETELEM, 0);
      w.str(2, name);
      w.str(1, table);
      w.endMessage(at);
      return;
    }
    if (verb === "delete") {
      writeNamed(line, NFT_MSG.DELSET, 2, name);
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
      else line.fail(`set clause ${JSON.stringify(c)}`);
    }
    if (type === null) line.fail("set without a type");
    const [keyType, dataType] = type.split(" : ");
    const fields = keyFields(keyType);
    if (fields === null) line.fail(`set key type ${JSON.stringify(keyType)}`);
    const isMap = kind === "map";
    if (isMap !== (dataType !== undefined)) line.fail("set/map type");
    if (isMap && (dataType !== "verdict" || fields[fields.length - 1].name !== "inet_service")) {
      line.fail(`map type ${JSON.stringify(type)}`);
    }
    const dynamic = flags.length === 2 && flags.includes("dynamic") && flags.includes("timeout");
    if (flags.length > 0 && !dynamic) line.fail(`set flags ${flags.join(",")}`);
    if ((timeout !== null) !== dynamic || (dynamic && (isMap || comment !== null))) {
      line.fail("set timeout");
    }
    const id = this.#nextId++;
    this.#ids.set(name, id);
    this.#declared.set(name, { fields, map: isMap });
    const at = line.begin(NFT_MSG.NEWSET, NLM_F_CREATE);
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
  }

  /**
   * "<verb> element <family> <table> <set> { ... }" (`rest` from the set's name on), for a set this
   * batch declared or one of kube-proxy's fixed sets.
   */
  writeElementLine(line: BatchLine, verb: Verb, rest: string): void {
    if (verb === "flush") line.fail("flush element");
    const em = /^(\S+) \{ (.*) \}$/.exec(rest);
    if (em === null) line.fail("element list");
    const set = em[1];
    const decl = this.#declared.get(set) ?? knownContainer(set, line.family);
    if (decl === null) line.fail(`elements of ${set} (its type is not known here)`);
    writeElements(line, verb, set, em[2], decl, this.#ids.get(set));
  }
}
