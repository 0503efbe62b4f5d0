/**
 * Canonical order of an nft transaction or table dump for comparison in tests, as upstream's
 * sortNFTablesTransaction (pkg/proxy/nftables/helpers_test.go): blank lines and "#" comments dropped;
 * lines sorted by object type (table, chain, rule, set, map, element, then anything else), then by
 * object name; rules keep their order within a chain; other lines of the same object sort by text.
 */

const OBJECT_ORDER: Readonly<Record<string, number>> = {
  table: 10,
  chain: 9,
  rule: 8,
  set: 7,
  map: 6,
  element: 5,
};

/** Sorts the lines of `tx` into upstream's canonical order (stable). */
export function sortNFTablesTransaction(tx: string): string {
  const lines = tx.split("\n").filter((l) => l !== "" && !l.startsWith("#"));
  const keyed = lines.map((line, index) => ({ line, index, words: line.split(" ") }));
  keyed.sort((a, b) => {
    const wi = a.words, wj = b.words;
    if (wi.length >= 5 && wj.length >= 5) {
      if (wi[1] !== wj[1]) return (OBJECT_ORDER[wj[1]] ?? 0) - (OBJECT_ORDER[wi[1]] ?? 0);
      if (wi[4] !== wj[4]) return wi[4] < wj[4] ? -1 : 1;
      if (wi[1] !== "rule" && a.line !== b.line) return a.line < b.line ? -1 : 1;
    }
    return a.index - b.index;
  });
  return keyed.map((k) => k.line).join("\n");
}

/** Strips each line's common leading whitespace (Go's dedent.Dedent, for transcribed goldens). */
export function dedentNft(text: string): string {
  const lines = text.split("\n").map((l) => l.trim());
  return lines.join("\n");
}
