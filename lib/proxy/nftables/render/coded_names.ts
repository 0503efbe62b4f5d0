/**
 * A service port's chain and affinity-set names as the incremental renderer keeps them between syncs: one
 * string instead of an array of full names. Every such name is a prefix, an 8-character hash, "-", the
 * service port's base ("ns/name/tcp/port") and for an endpoint "__ip/port" (names.ts); the base is the
 * same in all of them and follows from the service port's key, so each name is kept as a code character
 * for its prefix, its hash and what follows the base. At 10k Services the ~85k names (4.5 MB) become
 * ~14k strings of 2.0 MB. Decoding gives back exactly the names coded: a name of another form is kept
 * whole.
 */
import {
  AFFINITY_SET_PREFIX,
  ENDPOINT_CHAIN_PREFIX,
  EXTERNAL_CHAIN_PREFIX,
  FIREWALL_CHAIN_PREFIX,
  LOCAL_CHAIN_PREFIX,
  SERVICE_CHAIN_PREFIX,
} from "./names.ts";

/** Names in coded form: one string ("" for none), or the names themselves when one holds a newline. */
export type CodedNames = string | readonly string[];

/** Prefixes by code character ("0" + index); none is a prefix of another. */
const PREFIXES: readonly string[] = [
  SERVICE_CHAIN_PREFIX,
  LOCAL_CHAIN_PREFIX,
  EXTERNAL_CHAIN_PREFIX,
  FIREWALL_CHAIN_PREFIX,
  ENDPOINT_CHAIN_PREFIX,
  AFFINITY_SET_PREFIX,
];
const HASH_LENGTH = 8;
/** Code of a name kept whole. */
const WHOLE = "~";
const SEPARATOR = "\n";

/** A protocol in lower case, without a new string for the usual ones. */
function lowerProtocol(p: string): string {
  switch (p) {
    case "TCP":
      return "tcp";
    case "UDP":
      return "udp";
    case "SCTP":
      return "sctp";
    default:
      return p.toLowerCase();
  }
}

/**
 * The base of a service port's names from its servicePortKey: "ns/name:port/TCP" → "ns/name/tcp/port",
 * "ns/name/TCP" → "ns/name/tcp/" (servicePortChainNameBase before its hash).
 */
export function nameBaseOfKey(key: string): string {
  const slash = key.lastIndexOf("/");
  const name = key.slice(0, slash);
  const colon = name.indexOf(":");
  const protocol = lowerProtocol(key.slice(slash + 1));
  return colon < 0 ? `${name}/${protocol}/` : `${name.slice(0, colon)}/${protocol}/${name.slice(colon + 1)}`;
}

/** Code characters by index in PREFIXES. */
const CODES = PREFIXES.map((_, i) => String.fromCharCode(48 + i));

/** The index in PREFIXES of the prefix `name` starts with, or -1 (one comparison for most names). */
function prefixOf(name: string): number {
  // The prefixes' first characters tell them apart, but for "external-" and "endpoint-".
  let i: number;
  switch (name.charCodeAt(0)) {
    case 115: // s
      i = 0;
      break;
    case 108: // l
      i = 1;
      break;
    case 101: // e
      i = name.charCodeAt(1) === 120 ? 2 : 4;
      break;
    case 102: // f
      i = 3;
      break;
    case 97: // a
      i = 5;
      break;
    default:
      return -1;
  }
  return name.startsWith(PREFIXES[i]) ? i : -1;
}

/**
 * Pushes one name's code onto `parts`: its prefix code, hash and what follows `base`; or WHOLE and the
 * name.
 */
function pushCode(parts: string[], name: string, base: string): void {
  const i = prefixOf(name);
  if (i >= 0) {
    const p = PREFIXES[i].length;
    const dash = p + HASH_LENGTH;
    if (name.length > dash && name.charCodeAt(dash) === 45 && name.startsWith(base, dash + 1)) {
      parts.push(CODES[i], name.slice(p, dash), name.slice(dash + 1 + base.length));
      return;
    }
  }
  parts.push(WHOLE, name);
}

/** `names` coded against `base` (see nameBaseOfKey), in order. */
export function codeNames(names: readonly string[], base: string): CodedNames {
  if (names.length === 0) return "";
  // One join of all the pieces: no string per code.
  const parts: string[] = [];
  for (const n of names) {
    if (n.includes(SEPARATOR)) return [...names];
    if (parts.length > 0) parts.push(SEPARATOR);
    pushCode(parts, n, base);
  }
  return parts.join("");
}

/** The name of one code. */
function nameOf(code: string, base: string): string {
  if (code[0] === WHOLE) return code.slice(1);
  return `${PREFIXES[code.charCodeAt(0) - 48]}${code.slice(1, 1 + HASH_LENGTH)}-${base}${
    code.slice(1 + HASH_LENGTH)
  }`;
}

/** The names `coded` holds, in the order they were coded (`base` as given to codeNames). */
export function decodeNames(coded: CodedNames, base: string): string[] {
  if (typeof coded !== "string") return [...coded];
  return coded === "" ? [] : coded.split(SEPARATOR).map((c) => nameOf(c, base));
}

/**
 * The names `coded` holds that `other` does not (both coded against `base`), in order: only those are
 * decoded, so a service port's names that stay cost no string building.
 */
export function decodeNamesNotIn(coded: CodedNames, other: CodedNames | null, base: string): string[] {
  if (coded === other) return [];
  if (typeof coded !== "string" || (other !== null && typeof other !== "string")) {
    // A side kept whole: compared by name (a name has one code per form).
    const keep = new Set(other === null ? [] : decodeNames(other, base));
    return decodeNames(coded, base).filter((n) => !keep.has(n));
  }
  const out: string[] = [];
  for (let at = 0; at < coded.length;) {
    let end = coded.indexOf(SEPARATOR, at);
    if (end < 0) end = coded.length;
    const c = coded.slice(at, end);
    if (other === null || !hasCode(other, c)) out.push(nameOf(c, base));
    at = end + 1;
  }
  return out;
}

/** True when `code` is one of the codes of `coded` (a string of codes; searched, not split). */
function hasCode(coded: string, code: string): boolean {
  for (let i = coded.indexOf(code); i >= 0; i = coded.indexOf(code, i + 1)) {
    const end = i + code.length;
    if ((i === 0 || coded[i - 1] === SEPARATOR) && (end === coded.length || coded[end] === SEPARATOR)) {
      return true;
    }
  }
  return false;
}
