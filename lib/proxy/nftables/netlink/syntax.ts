/**
 * The declaration syntax of our renderer's transactions that the netlink encoder reads: quoted strings
 * (comments) and the `{ a ; b ; }` clauses of a table, chain or set declaration.
 */

/** A quoted comment (Go %q of ASCII, as the renderer writes it) or null when `s` is not one. */
export function unquote(s: string): string | null {
  try {
    const v = JSON.parse(s);
    return typeof v === "string" ? v : null;
  } catch {
    return null;
  }
}

/** Splits `body` ("a ; b ; ") of a `{ ... }` declaration into its clauses. */
export function clauses(body: string): string[] {
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
