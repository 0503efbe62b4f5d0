/**
 * A service port's chain and affinity-set names as the incremental renderer keeps them between syncs: one
 * string instead of an array of full names. Every such name is a prefix, an 8-character hash, "-", the
 * service port's base ("ns/name/tcp/port") and for an endpoint "__ip/port" (names.ts); the base is the
 * same in all of them and follows from the service port's key, so each name is kept as a code character
 * for its prefix, its hash and what follows the base. At 10k Services this keeps ~80k names in ~13k
 * strings a third of their length. Decoding gives back exactly the names coded: a name of another form is
 * kept whole.
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

/**
 * The base of a service port's names from its servicePortKey: "ns/name:port/TCP" → "ns/name/tcp/port",
 * "ns/name/TCP" → "ns/name/tcp/" (servicePortChainNameBase before its hash).
 */
export function nameBaseOfKey(key: string): string {
  const slash = key.lastIndexOf("/");
  const name = key.slice(0, slash);
  const colon = name.indexOf(":");
  const protocol = key.slice(slash + 1).toLowerCase();
  return colon < 0 ? `${name}/${protocol}/` : `${name.slice(0, colon)}/${protocol}/${name.slice(colon + 1)}`;
}

/** One name's code: prefix code, hash and what follows `base`; or the whole name. */
function codeOf(name: string, base: string): string {
  for (let i = 0; i < PREFIXES.length; i++) {
    const p = PREFIXES[i];
    if (!name.startsWith(p)) continue;
    const dash = p.length + HASH_LENGTH;
    if (name.length > dash && name[dash] === "-" && name.startsWith(base, dash + 1)) {
      return String.fromCharCode(48 + i) + name.slice(p.length, dash) + name.slice(dash + 1 + base.length);
    }
    break;
  }
  return WHOLE + name;
}

/** `names` coded against `base` (see nameBaseOfKey), in order. */
export function codeNames(names: readonly string[], base: string): CodedNames {
  if (names.length === 0) return "";
  if (names.some((n) => n.includes(SEPARATOR))) return [...names];
  return names.map((n) => codeOf(n, base)).join(SEPARATOR);
}

/** The names `coded` holds, in the order they were coded (`base` as given to codeNames). */
export function decodeNames(coded: CodedNames, base: string): string[] {
  if (typeof coded !== "string") return [...coded];
  if (coded === "") return [];
  return coded.split(SEPARATOR).map((c) => {
    if (c[0] === WHOLE) return c.slice(1);
    const p = PREFIXES[c.charCodeAt(0) - 48];
    return `${p}${c.slice(1, 1 + HASH_LENGTH)}-${base}${c.slice(1 + HASH_LENGTH)}`;
  });
}
