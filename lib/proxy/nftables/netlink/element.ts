/**
 * The element messages of a transaction: "add element" / "delete element" of a set or map, with keys,
 * verdicts and comments, split over several messages when a command's list outgrows a netlink
 * attribute; and the key types of kube-proxy's fixed sets and maps, which partial syncs write to without
 * declaring them.
 */
import { NLM_F_CREATE } from "./attrs.ts";
import { dataValue, dataVerdict, VERDICT } from "./expressions.ts";
import { encodeKeyAt, keyFields, type NftDatatype } from "./datatypes.ts";
import { type BatchLine, commentAttr, NFT_MSG, type Verb } from "./message.ts";
import { unquote } from "./syntax.ts";
import {
  CLUSTER_IPS_SET,
  FIREWALL_IPS_MAP,
  NO_ENDPOINT_NODEPORTS_MAP,
  NO_ENDPOINT_SERVICES_MAP,
  NODEPORT_IPS_SET,
  SERVICE_IPS_MAP,
  SERVICE_NODEPORTS_MAP,
} from "../render/names.ts";

/** Bytes of encoded elements per NEWSETELEM / DELSETELEM message (the nest's u16 length). */
const ELEMENT_LIST_BYTES = 60_000;

/** A set's or map's key fields, and whether it is a map (its elements then carry a verdict). */
export interface ContainerType {
  readonly fields: NftDatatype[];
  readonly map: boolean;
}

/**
 * The key type of kube-proxy's fixed sets and maps (declared by a full sync, written to by partial
 * syncs without redeclaring them), or null for any other name.
 */
export function knownContainer(name: string, family: "ip" | "ip6"): ContainerType | null {
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
 * "<add|delete> element <family> <table> <set> { k1 [comment "c"] [: v1], k2 ... }" of a set of type
 * `decl`: `set` and `elements` (between the braces) read from the line, `id` the set's batch id when the
 * same batch adds it.
 */
export function writeElements(
  line: BatchLine,
  verb: Verb,
  set: string,
  elements: string,
  decl: ContainerType,
  id: number | undefined,
): void {
  const w = line.w;
  const table = line.table;
  const msg = verb === "add" ? NFT_MSG.NEWSETELEM : NFT_MSG.DELSETELEM;
  /** Starts a message of this command's elements; returns [message, element list] offsets. */
  const startList = (): [number, number] => {
    const at = line.begin(msg, verb === "add" ? NLM_F_CREATE : 0);
    w.str(1, table);
    w.str(2, set);
    if (id !== undefined) w.u32be(4, id);
    return [at, w.beginNest(3)];
  };
  let [at, list] = startList();
  // Elements are ", "-separated (an empty one, as in "{ a, }", is refused below).
  for (let k = 0, pos = 0; pos <= elements.length; k++) {
    let stop = elements.indexOf(", ", pos);
    if (stop < 0) stop = elements.length;
    const start = w.length;
    // nft numbers the elements of a command 1, 2, ... across its messages.
    const elem = w.beginNest(k + 1);
    if (!writePlainElement(line, verb, decl, elements, pos, stop)) {
      writeElement(line, verb, decl, elements.slice(pos, stop));
    }
    pos = stop + 2;
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

/** Room for the longest key (three fields of at most 16 bytes each), with a view per key length. */
const KEY = new Uint8Array(48);
const KEY_VIEWS: Uint8Array[] = [];

/**
 * The attributes of element `text[from, to)` written in place, when it is in the form the renderer
 * writes nearly always: a key of plain values and, for a map, `goto <chain>`, `jump <chain>` or a bare
 * verdict; no comment. Nothing is cut out of the list but the chain's name: a 10k-Service switch-over
 * has ~30k elements, and a match, a split and typed arrays for each were ~20 MiB of garbage at once.
 * False, with nothing written, for any other form ({@link writeElement} reads it, and words the error).
 */
export function writePlainElement(
  line: BatchLine,
  verb: Verb,
  decl: ContainerType,
  text: string,
  from: number,
  to: number,
): boolean {
  // The first " : " with a key before it and a value after it (as writeElement's match finds it).
  let sep = -1;
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x22) return false; // a comment
    if (
      sep < 0 && c === 0x3a && i - 1 > from && i + 2 < to && text.charCodeAt(i - 1) === 0x20 &&
      text.charCodeAt(i + 1) === 0x20
    ) sep = i - 1;
  }
  const n = encodeKeyAt(decl.fields, text, from, sep < 0 ? to : sep, KEY);
  if (n < 0) return false;
  let code = 0;
  let chain: string | undefined;
  if (verb === "add" && sep >= 0) {
    const v = sep + 3;
    if (text.startsWith("goto ", v) || text.startsWith("jump ", v)) {
      if (v + 5 >= to) return false;
      for (let i = v + 5; i < to; i++) {
        const c = text.charCodeAt(i);
        if (c <= 0x20 || c >= 0x7f) return false;
      }
      code = text.startsWith("goto", v) ? VERDICT.goto : VERDICT.jump;
      chain = text.slice(v + 5, to);
    } else if (to - v === 4 && text.startsWith("drop", v)) code = VERDICT.drop;
    else if (to - v === 6 && text.startsWith("accept", v)) code = VERDICT.accept;
    else if (to - v === 6 && text.startsWith("return", v)) code = VERDICT.return;
    else return false;
  }
  if (verb === "add" && decl.map !== (sep >= 0)) line.fail("element value");
  const w = line.w;
  dataValue(w, 1, KEY_VIEWS[n] ??= KEY.subarray(0, n));
  if (verb === "add" && sep >= 0) dataVerdict(w, 2, code, chain);
  return true;
}

/** The attributes of element `e` (key, value, comment), read the general way. */
export function writeElement(line: BatchLine, verb: Verb, decl: ContainerType, e: string): void {
  const w = line.w;
  const x = /^(.+?)(?: comment ("(?:[^"\\]|\\.)*"))?(?: : (.+))?$/.exec(e);
  if (x === null) line.fail("element");
  const n = encodeKeyAt(decl.fields, x[1], 0, x[1].length, KEY);
  if (n < 0) line.fail(`element key ${JSON.stringify(x[1])}`);
  dataValue(w, 1, KEY_VIEWS[n] ??= KEY.subarray(0, n));
  if (verb === "add") {
    if (decl.map !== (x[3] !== undefined)) line.fail("element value");
    if (x[3] !== undefined) {
      const v = /^(?:(jump|goto) (\S+)|(drop|accept|return))$/.exec(x[3]);
      if (v === null) line.fail(`element value ${JSON.stringify(x[3])}`);
      if (v[1] !== undefined) dataVerdict(w, 2, VERDICT[v[1] as "jump" | "goto"], v[2]);
      else dataVerdict(w, 2, VERDICT[v[3] as "drop" | "accept" | "return"]);
    }
    if (x[2] !== undefined) {
      const c = unquote(x[2]);
      if (c === null) line.fail("element comment");
      commentAttr(w, 6, c);
    }
  }
}
