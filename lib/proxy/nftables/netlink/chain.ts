/**
 * The table's and chains' messages of a transaction: "add table" (with its comment), "delete table",
 * "add chain" (a regular chain, or a base chain with its type, hook and priority), "flush chain" and
 * "delete chain".
 */
import { NLM_F_CREATE } from "./attrs.ts";
import { type BatchLine, commentAttr, NFT_MSG, type Verb, writeNamed } from "./message.ts";
import { clauses, unquote } from "./syntax.ts";

/** NF_INET_* hook numbers of the hooks a base chain may name. */
const HOOKS: Readonly<Record<string, number>> = {
  prerouting: 0,
  input: 1,
  forward: 2,
  output: 3,
  postrouting: 4,
};

/** "<verb> table <family> <table>[ <rest>]": `rest` is "" or "{ comment "<c>" ; }". */
export function writeTable(line: BatchLine, verb: Verb, rest: string): void {
  const w = line.w;
  const table = line.table;
  if (verb === "add") {
    let comment: string | null = null;
    if (rest !== "") {
      const c = /^\{ comment ("(?:[^"\\]|\\.)*") ; \}$/.exec(rest);
      comment = c === null ? null : unquote(c[1]);
      if (comment === null) line.fail("table declaration");
    }
    const at = line.begin(NFT_MSG.NEWTABLE, 0);
    w.str(1, table);
    w.u32be(2, 0);
    if (comment !== null) commentAttr(w, 6, comment);
    w.endMessage(at);
  } else if (verb === "delete" && rest === "") {
    const at = line.begin(NFT_MSG.DELTABLE, 0);
    w.str(1, table);
    w.endMessage(at);
  } else line.fail(`${verb} table`);
}

/**
 * "<verb> chain <family> <table> <name>[ { <declaration> }]": `declaration` holds the clauses inside the
 * braces ("" without them): a base chain's "type <t> hook <h> priority <p>", a comment.
 */
export function writeChain(line: BatchLine, verb: Verb, name: string, declaration: string): void {
  if (verb === "flush") writeNamed(line, NFT_MSG.DELRULE, 2, name);
  else if (verb === "delete") writeNamed(line, NFT_MSG.DELCHAIN, 3, name);
  else {
    let base: RegExpExecArray | null = null;
    let comment: string | null = null;
    // Most chains are plain ("add chain ip kube-proxy service-…"): no clauses to read.
    if (declaration !== "") {
      for (const c of clauses(declaration)) {
        const b = /^type (filter|nat) hook (\w+) priority (-?\d+)$/.exec(c);
        const com = /^comment (".*")$/.exec(c);
        if (b !== null && HOOKS[b[2]] !== undefined) base = b;
        else if (com !== null && unquote(com[1]) !== null) comment = unquote(com[1]);
        else line.fail(`chain clause ${JSON.stringify(c)}`);
      }
    }
    const w = line.w;
    const at = line.begin(NFT_MSG.NEWCHAIN, NLM_F_CREATE);
    w.str(1, line.table);
    w.str(3, name);
    if (base !== null) {
      w.str(7, base[1]);
      const hook = w.beginNest(4);
      w.u32be(1, HOOKS[base[2]]);
      w.u32be(2, Number(base[3]));
      w.end(hook);
    }
    if (comment !== null) commentAttr(w, 12, comment);
    w.endMessage(at);
  }
}
