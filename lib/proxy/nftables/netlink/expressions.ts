/**
 * nf_tables expressions as netlink attributes, written into an {@link NlWriter}: each writes one
 * NFTA_LIST_ELEM holding NFTA_EXPR_NAME and NFTA_EXPR_DATA, with the attributes in the order nft 1.0.6
 * writes them (so a captured nft batch and ours compare byte for byte). Registers are the kernel's numbers.
 */
import type { NlWriter } from "./attrs.ts";

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

/** Starts expression `name`: its list element, name and data nest; {@link endExpr} closes both. */
function beginExpr(w: NlWriter, name: string): number {
  const elem = w.beginNest(NFTA_LIST_ELEM);
  w.str(NFTA_EXPR_NAME, name);
  w.beginNest(NFTA_EXPR_DATA);
  return elem;
}

/** Closes the expression begun at `elem`: its data nest (after the name attribute), then the element. */
function endExpr(w: NlWriter, elem: number): void {
  w.end(w.after(elem + 4));
  w.end(elem);
}

/** NFTA_DATA_VALUE `value` inside a nest of type `type`. */
export function dataValue(w: NlWriter, type: number, value: Uint8Array): void {
  const at = w.beginNest(type);
  w.attr(NFTA_DATA_VALUE, value);
  w.end(at);
}

/** NFTA_DATA_VALUE of a host-order (little-endian) u32 inside a nest of type `type`. */
export function dataValueU32le(w: NlWriter, type: number, value: number): void {
  const at = w.beginNest(type);
  w.u32le(NFTA_DATA_VALUE, value);
  w.end(at);
}

/** NFTA_DATA_VERDICT (`code`, and for jump/goto `chain`) inside a nest of type `type`. */
export function dataVerdict(w: NlWriter, type: number, code: number, chain?: string): void {
  const outer = w.beginNest(type);
  const inner = w.beginNest(NFTA_DATA_VERDICT);
  w.u32be(NFTA_VERDICT_CODE, code);
  if (chain !== undefined) w.str(NFTA_VERDICT_CHAIN, chain);
  w.end(inner);
  w.end(outer);
}

/** Payload bases. */
export const PAYLOAD_NETWORK = 1;
export const PAYLOAD_TRANSPORT = 2;

/** `payload load <len>b @ <base> + <offset> => reg <dreg>`. */
export function payload(w: NlWriter, dreg: number, base: number, offset: number, len: number): void {
  const e = beginExpr(w, "payload");
  w.u32be(1, dreg);
  w.u32be(2, base);
  w.u32be(3, offset);
  w.u32be(4, len);
  endExpr(w, e);
}

/** cmp operators. */
export const CMP_EQ = 0;
export const CMP_NEQ = 1;

/** `cmp <op> reg <sreg> <data>`. */
export function cmp(w: NlWriter, sreg: number, op: number, data: Uint8Array): void {
  const e = beginExpr(w, "cmp");
  w.u32be(1, sreg);
  w.u32be(2, op);
  dataValue(w, 3, data);
  endExpr(w, e);
}

/** `cmp <op> reg <sreg> <value>` of a host-order u32 (marks, ct state, fib results). */
export function cmpU32le(w: NlWriter, sreg: number, op: number, value: number): void {
  const e = beginExpr(w, "cmp");
  w.u32be(1, sreg);
  w.u32be(2, op);
  dataValueU32le(w, 3, value);
  endExpr(w, e);
}

/**
 * `bitwise reg <dreg> = (reg <sreg> & mask) ^ xor`. `withOp`: also NFTA_BITWISE_OP (NFT_BITWISE_BOOL),
 * which nft 1.0.6 writes for a mark statement and not for a match.
 */
export function bitwise(
  w: NlWriter,
  sreg: number,
  dreg: number,
  mask: Uint8Array,
  xor: Uint8Array,
  withOp = false,
): void {
  const e = beginExpr(w, "bitwise");
  w.u32be(1, sreg);
  w.u32be(2, dreg);
  if (withOp) w.u32be(6, 0);
  w.u32be(3, mask.length);
  dataValue(w, 4, mask);
  dataValue(w, 5, xor);
  endExpr(w, e);
}

/** {@link bitwise} of host-order u32 `mask` and `xor` (marks, ct state). */
export function bitwiseU32le(
  w: NlWriter,
  sreg: number,
  dreg: number,
  mask: number,
  xor: number,
  withOp = false,
): void {
  const e = beginExpr(w, "bitwise");
  w.u32be(1, sreg);
  w.u32be(2, dreg);
  if (withOp) w.u32be(6, 0);
  w.u32be(3, 4);
  dataValueU32le(w, 4, mask);
  dataValueU32le(w, 5, xor);
  endExpr(w, e);
}

/** Meta keys. */
export const META_MARK = 3;
export const META_IIFNAME = 6;
export const META_L4PROTO = 16;

/** `meta load <key> => reg <dreg>`. */
export function metaLoad(w: NlWriter, key: number, dreg: number): void {
  const e = beginExpr(w, "meta");
  w.u32be(2, key);
  w.u32be(1, dreg);
  endExpr(w, e);
}

/** `meta set <key> with reg <sreg>`. */
export function metaSet(w: NlWriter, key: number, sreg: number): void {
  const e = beginExpr(w, "meta");
  w.u32be(2, key);
  w.u32be(3, sreg);
  endExpr(w, e);
}

/** ct key state. */
export const CT_STATE = 0;

/** `ct load <key> => reg <dreg>`. */
export function ctLoad(w: NlWriter, key: number, dreg: number): void {
  const e = beginExpr(w, "ct");
  w.u32be(2, key);
  w.u32be(1, dreg);
  endExpr(w, e);
}

/**
 * `lookup reg <sreg> set <set> [dreg <dreg>]`; `setId` for a set added in the same batch; `invert` for
 * a `!=` match (NFT_LOOKUP_F_INV).
 */
export function lookup(
  w: NlWriter,
  sreg: number,
  set: string,
  setId: number | null,
  dreg: number | null,
  invert = false,
): void {
  const e = beginExpr(w, "lookup");
  w.u32be(2, sreg);
  if (dreg !== null) w.u32be(3, dreg);
  w.str(1, set);
  if (setId !== null) w.u32be(4, setId);
  if (invert) w.u32be(5, 1);
  endExpr(w, e);
}

/** `immediate reg 0 <verdict>` (`code`, and for jump/goto `chain`). */
export function immediateVerdict(w: NlWriter, code: number, chain?: string): void {
  const e = beginExpr(w, "immediate");
  w.u32be(1, REG_VERDICT);
  dataVerdict(w, 2, code, chain);
  endExpr(w, e);
}

/** `immediate reg <dreg> <value>`. */
export function immediateValue(w: NlWriter, dreg: number, value: Uint8Array): void {
  const e = beginExpr(w, "immediate");
  w.u32be(1, dreg);
  dataValue(w, 2, value);
  endExpr(w, e);
}

/** `numgen reg <dreg> = random mod <modulus>`. */
export function numgenRandom(w: NlWriter, dreg: number, modulus: number): void {
  const e = beginExpr(w, "numgen");
  w.u32be(1, dreg);
  w.u32be(2, modulus);
  w.u32be(3, 1);
  w.u32be(4, 0);
  endExpr(w, e);
}

/** NF_NAT_RANGE_PROTO_SPECIFIED, NF_NAT_RANGE_PROTO_RANDOM_FULLY. */
const NAT_PROTO_SPECIFIED = 0x2;
export const NAT_RANDOM_FULLY = 0x10;

/** `nat dnat <family> addr_min reg <addrReg> proto_min reg <protoReg>`. */
export function dnat(w: NlWriter, nfproto: number, addrReg: number, protoReg: number): void {
  const e = beginExpr(w, "nat");
  w.u32be(1, 1);
  w.u32be(2, nfproto);
  w.u32be(3, addrReg);
  w.u32be(5, protoReg);
  w.u32be(7, NAT_PROTO_SPECIFIED);
  endExpr(w, e);
}

/** `masq flags <flags>`. */
export function masq(w: NlWriter, flags: number): void {
  const e = beginExpr(w, "masq");
  w.u32be(1, flags);
  endExpr(w, e);
}

/** `reject type <type> code <code>` (NFT_REJECT_ICMP_UNREACH is type 0). */
export function reject(w: NlWriter, type: number, code: number): void {
  const e = beginExpr(w, "reject");
  w.u32be(1, type);
  w.u8(2, code);
  endExpr(w, e);
}

/** fib flags and results. */
export const FIB_SADDR = 1;
export const FIB_DADDR = 2;
export const FIB_RESULT_ADDRTYPE = 3;

/** `fib <flags> type => reg <dreg>`. */
export function fib(w: NlWriter, flags: number, result: number, dreg: number): void {
  const e = beginExpr(w, "fib");
  w.u32be(3, flags);
  w.u32be(2, result);
  w.u32be(1, dreg);
  endExpr(w, e);
}

/** `dynset update reg_key <sreg> set <set>`. */
export function dynsetUpdate(w: NlWriter, sreg: number, set: string, setId: number | null): void {
  const e = beginExpr(w, "dynset");
  w.u32be(4, sreg);
  w.u32be(3, 1);
  w.str(1, set);
  if (setId !== null) w.u32be(2, setId);
  endExpr(w, e);
}
