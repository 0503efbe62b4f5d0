/**
 * What the writers of each kind of nf_tables message (chain.ts, set.ts, element.ts, the rules in
 * batch.ts) share: the message types, the transaction line they write from ({@link BatchLine}) and the
 * attributes every kind writes the same way.
 */
import type { NlWriter } from "./attrs.ts";

/** nf_tables message types (NFT_MSG_*). */
export const NFT_MSG = {
  NEWTABLE: 0,
  DELTABLE: 2,
  NEWCHAIN: 3,
  DELCHAIN: 5,
  NEWRULE: 6,
  DELRULE: 8,
  NEWSET: 9,
  DELSET: 11,
  NEWSETELEM: 12,
  DELSETELEM: 14,
} as const;

/** A transaction line's verb. */
export type Verb = "add" | "flush" | "delete";

/** The line being encoded, as the encoder (batch.ts NftBatchEncoder) hands it to a message writer. */
export interface BatchLine {
  /** The batch's buffer. */
  readonly w: NlWriter;
  /** The table the line names. */
  readonly table: string;
  /** The table's family. */
  readonly family: "ip" | "ip6";
  /**
   * Starts a message of the line (its nlmsghdr and nfgenmsg; its attributes follow) and returns its
   * offset for NlWriter.endMessage.
   */
  begin(msg: number, flags: number): number;
  /** Refuses the line: throws NftNetlinkUnsupported naming `what`. */
  fail(what: string): never;
}

/** A message of `line` holding the table's name and the name attribute `nameType`. */
export function writeNamed(line: BatchLine, msg: number, nameType: number, name: string): void {
  const w = line.w;
  const at = line.begin(msg, 0);
  w.str(1, line.table);
  w.str(nameType, name);
  w.endMessage(at);
}

/** A comment as libnftnl user data in attribute `type`: one string entry. */
export function commentAttr(w: NlWriter, type: number, comment: string): void {
  const at = w.begin(type);
  w.udString(0, comment);
  w.end(at);
}
