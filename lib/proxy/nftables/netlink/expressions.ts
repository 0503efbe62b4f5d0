/**
 * nf_tables expressions as netlink attributes (pure): each builder returns one NFTA_LIST_ELEM holding
 * NFTA_EXPR_NAME and NFTA_EXPR_DATA, with the attributes in the order nft 1.0.6 writes them (so a
 * captured nft batch and ours compare byte for byte). Registers are the kernel's numbers.
 */
import { attr, be32Attr, nest, type NlAttr, strAttr } from "./attrs.ts";

const NFTA_LIST_ELEM = 1;
const NFTA_EXPR_NAME = 1;
const NFTA_EXPR_DATA = 2;
const NFTA_DATA_VALUE = 1;
const NFTA_DATA_VERDICT = 2;
const NFTA_VERDICT_CODE = 1;
const NFTA_VERDICT_CHAIN = 2;

/** Verdict codes (NF_DROP, NF_ACCEPT, NFT_JUMP, NFT_GOTO, NFT_RETURN). */
export const VERDICT = { drop: 0, accept: 1, jump: -3, goto: -4, return: -5 } as const;
/** A verdict: its code and, for jump/goto, the target chain. */
export interface Verdict {
  readonly code: number;
  readonly chain?: string;
}

/** NFT_REG_VERDICT and NFT_REG_1 / NFT_REG_2 (16-byte registers). */
export const REG_VERDICT = 0;
export const REG_1 = 1;
export const REG_2 = 2;

/**
 * The register holding the 32-bit word `index` of the register file, as nft names it: a word starting
 * a 16-byte register is that register (NFT_REG_1 + index / 4), others are NFT_REG32_00 + index.
 */
export function reg32(index: number): number {
  return index % 4 === 0 ? REG_1 + index / 4 : 8 + index;
}

function expr(name: string, data: readonly NlAttr[]): NlAttr {
  return nest(NFTA_LIST_ELEM, [strAttr(NFTA_EXPR_NAME, name), nest(NFTA_EXPR_DATA, data)]);
}

/** NFTA_DATA_VALUE inside a nest of type `type`. */
export function dataValue(type: number, value: Uint8Array): NlAttr {
  return nest(type, [attr(NFTA_DATA_VALUE, value)]);
}

/** NFTA_DATA_VERDICT inside a nest of type `type`. */
export function dataVerdict(type: number, v: Verdict): NlAttr {
  const inner: NlAttr[] = [be32Attr(NFTA_VERDICT_CODE, v.code)];
  if (v.chain !== undefined) inner.push(strAttr(NFTA_VERDICT_CHAIN, v.chain));
  return nest(type, [nest(NFTA_DATA_VERDICT, inner)]);
}

/** Payload bases. */
export const PAYLOAD_NETWORK = 1;
export const PAYLOAD_TRANSPORT = 2;

/** `payload load <len>b @ <base> + <offset> => reg <dreg>`. */
export function payload(dreg: number, base: number, offset: number, len: number): NlAttr {
  return expr("payload", [be32Attr(1, dreg), be32Attr(2, base), be32Attr(3, offset), be32Attr(4, len)]);
}

/** cmp operators. */
export const CMP_EQ = 0;
export const CMP_NEQ = 1;

/** `cmp <op> reg <sreg> <data>`. */
export function cmp(sreg: number, op: number, data: Uint8Array): NlAttr {
  return expr("cmp", [be32Attr(1, sreg), be32Attr(2, op), dataValue(3, data)]);
}

/**
 * `bitwise reg <dreg> = (reg <sreg> & mask) ^ xor`. `withOp`: also NFTA_BITWISE_OP (NFT_BITWISE_BOOL),
 * which nft 1.0.6 writes for a mark statement and not for a match.
 */
export function bitwise(
  sreg: number,
  dreg: number,
  mask: Uint8Array,
  xor: Uint8Array,
  withOp = false,
): NlAttr {
  const data = [be32Attr(1, sreg), be32Attr(2, dreg)];
  if (withOp) data.push(be32Attr(6, 0));
  data.push(be32Attr(3, mask.length), dataValue(4, mask), dataValue(5, xor));
  return expr("bitwise", data);
}

/** Meta keys. */
export const META_MARK = 3;
export const META_IIFNAME = 6;
export const META_L4PROTO = 16;

/** `meta load <key> => reg <dreg>`. */
export function metaLoad(key: number, dreg: number): NlAttr {
  return expr("meta", [be32Attr(2, key), be32Attr(1, dreg)]);
}

/** `meta set <key> with reg <sreg>`. */
export function metaSet(key: number, sreg: number): NlAttr {
  return expr("meta", [be32Attr(2, key), be32Attr(3, sreg)]);
}

/** ct key state. */
export const CT_STATE = 0;

/** `ct load <key> => reg <dreg>`. */
export function ctLoad(key: number, dreg: number): NlAttr {
  return expr("ct", [be32Attr(2, key), be32Attr(1, dreg)]);
}

/**
 * `lookup reg <sreg> set <set> [dreg <dreg>]`; `setId` for a set added in the same batch; `invert` for
 * a `!=` match (NFT_LOOKUP_F_INV).
 */
export function lookup(
  sreg: number,
  set: string,
  setId: number | null,
  dreg: number | null,
  invert = false,
): NlAttr {
  const data = [be32Attr(2, sreg)];
  if (dreg !== null) data.push(be32Attr(3, dreg));
  data.push(strAttr(1, set));
  if (setId !== null) data.push(be32Attr(4, setId));
  if (invert) data.push(be32Attr(5, 1));
  return expr("lookup", data);
}

/** `immediate reg 0 <verdict>`. */
export function immediateVerdict(v: Verdict): NlAttr {
  return expr("immediate", [be32Attr(1, REG_VERDICT), dataVerdict(2, v)]);
}

/** `immediate reg <dreg> <value>`. */
export function immediateValue(dreg: number, value: Uint8Array): NlAttr {
  return expr("immediate", [be32Attr(1, dreg), dataValue(2, value)]);
}

/** `numgen reg <dreg> = random mod <modulus>`. */
export function numgenRandom(dreg: number, modulus: number): NlAttr {
  return expr("numgen", [be32Attr(1, dreg), be32Attr(2, modulus), be32Attr(3, 1), be32Attr(4, 0)]);
}

/** NF_NAT_RANGE_PROTO_SPECIFIED, NF_NAT_RANGE_PROTO_RANDOM_FULLY. */
const NAT_PROTO_SPECIFIED = 0x2;
export const NAT_RANDOM_FULLY = 0x10;

/** `nat dnat <family> addr_min reg <addrReg> proto_min reg <protoReg>`. */
export function dnat(nfproto: number, addrReg: number, protoReg: number): NlAttr {
  return expr("nat", [
    be32Attr(1, 1),
    be32Attr(2, nfproto),
    be32Attr(3, addrReg),
    be32Attr(5, protoReg),
    be32Attr(7, NAT_PROTO_SPECIFIED),
  ]);
}

/** `masq flags <flags>`. */
export function masq(flags: number): NlAttr {
  return expr("masq", [be32Attr(1, flags)]);
}

/** `reject type <type> code <code>` (NFT_REJECT_ICMP_UNREACH is type 0). */
export function reject(type: number, code: number): NlAttr {
  return expr("reject", [be32Attr(1, type), attr(2, Uint8Array.of(code))]);
}

/** fib flags and results. */
export const FIB_SADDR = 1;
export const FIB_DADDR = 2;
export const FIB_RESULT_ADDRTYPE = 3;

/** `fib <flags> type => reg <dreg>`. */
export function fib(flags: number, result: number, dreg: number): NlAttr {
  return expr("fib", [be32Attr(3, flags), be32Attr(2, result), be32Attr(1, dreg)]);
}

/** `dynset update reg_key <sreg> set <set>`. */
export function dynsetUpdate(sreg: number, set: string, setId: number | null): NlAttr {
  const data = [be32Attr(4, sreg), be32Attr(3, 1), strAttr(1, set)];
  if (setId !== null) data.push(be32Attr(2, setId));
  return expr("dynset", data);
}
