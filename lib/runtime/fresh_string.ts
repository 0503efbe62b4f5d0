/**
 * A string's characters in a new string of their own. JavaScriptCore allocates string cells in blocks
 * shared with every other string of the moment and never moves them: a few long-lived strings made among a
 * burst of short-lived ones (a full sync's hundreds of thousands of rule lines) keep most of those blocks
 * from being released, and the heap's capacity stays at the burst's (bench/README.md, "nftables mode's
 * settled heap"). Copying the long-lived ones once the burst is over puts them in blocks of their own.
 * The usual ways of copying a string in JavaScript return the same cell or a view that keeps the old
 * one alive (`slice` of a concatenation, template literals); a round trip through bytes does not.
 */
import { Buffer } from "node:buffer";

/** Bytes a latin1 copy goes through, grown to the longest string so far (no Buffer per string). */
let scratch = Buffer.alloc(4096);

/**
 * A new string equal to `s` that shares no cell or buffer with it (lossless for every string, lone
 * surrogates included: latin1 when it holds the characters, else UTF-16).
 */
export function freshString(s: string): string {
  if (s.length === 0) return s;
  if (s.length > scratch.length) scratch = Buffer.alloc(2 * s.length);
  const latin1 = scratch.toString("latin1", 0, scratch.write(s, 0, "latin1"));
  return latin1 === s ? latin1 : Buffer.from(s, "utf16le").toString("utf16le");
}
