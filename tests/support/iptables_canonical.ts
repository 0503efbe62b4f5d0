/**
 * A canonical form of iptables-restore text for comparing and diffing rule sets, identical to upstream's
 * test helper sortIPTablesRules (pkg/proxy/iptables/proxier_test.go) over ParseIPTablesDump
 * (pkg/util/iptables/testing/parse.go); plus upstream's consistency check (checkIPTablesRuleJumps).
 * Upstream's own output order is Go map order, so diffs against it must go through this form.
 */

/** A parsed rule: the raw line plus the parameters the tests and the tracer look at. */
export interface ParsedRule {
  /** The line as written (trimmed). */
  readonly raw: string;
  readonly chain: string;
  readonly comment: MatchValue | null;
  readonly protocol: MatchValue | null;
  readonly sourceAddress: MatchValue | null;
  readonly sourceType: MatchValue | null;
  readonly destinationAddress: MatchValue | null;
  readonly destinationType: MatchValue | null;
  readonly destinationPort: MatchValue | null;
  readonly jump: MatchValue | null;
  readonly probability: MatchValue | null;
  readonly dnatDestination: MatchValue | null;
  /** `--rcheck` present (recent match: session affinity). */
  readonly affinityCheck: boolean;
  /** `--mark` present. */
  readonly markCheck: boolean;
  /** `--ctstate` present. */
  readonly ctStateCheck: boolean;
}

/** A parameter value and whether it was negated with "!". */
export interface MatchValue {
  readonly negated: boolean;
  readonly value: string;
}

/** One chain of a parsed dump. */
export interface DumpChain {
  name: string;
  packets: string;
  bytes: string;
  rules: ParsedRule[];
  /** A "-X name" line was present. */
  deleted: boolean;
}

/** One table of a parsed dump. */
export interface DumpTable {
  name: string;
  chains: DumpChain[];
}

/** A parsed iptables-save output or iptables-restore input. */
export interface IptablesDump {
  tables: DumpTable[];
}

const DECLARE_TABLE = /^\*(.*)$/;
const DECLARE_CHAIN = /^:([^ ]*) - \[([0-9]*):([0-9]*)\]$/;
const ADD_RULE = /^-A ([^ ]*) (.*)$/;
const DELETE_CHAIN = /^-X (.*)$/;
/** A word, or a double-quoted string, preceded by whitespace or at the start (upstream wordRegex). */
const WORD = /(?:^|\s)("[^"]*"|[^"]\S*)/g;

type ValueField =
  | "comment"
  | "protocol"
  | "sourceAddress"
  | "sourceType"
  | "destinationAddress"
  | "destinationType"
  | "destinationPort"
  | "jump"
  | "probability"
  | "dnatDestination";

const VALUE_PARAMS: Readonly<Record<string, ValueField>> = {
  "--comment": "comment",
  "-p": "protocol",
  "-s": "sourceAddress",
  "--src-type": "sourceType",
  "-d": "destinationAddress",
  "--dst-type": "destinationType",
  "--dport": "destinationPort",
  "-j": "jump",
  "--probability": "probability",
  "--to-destination": "dnatDestination",
};
/** Parameters taking a value that the tests do not look at (skipped with their value). */
const OTHER_VALUE_PARAMS = new Set([
  "--sport",
  "--match-set",
  "--name",
  "--seconds",
  "--mode",
  "--mark",
  "--ctstate",
]);

/** Splits a rule into words like upstream ParseRule (quoted strings are one word, quotes removed). */
export function splitWords(rule: string): string[] {
  const words: string[] = [];
  for (const m of rule.matchAll(WORD)) words.push(m[1].replace(/^"+|"+$/g, ""));
  return words;
}

/** Parses one "-A CHAIN ..." line (non-strict, as upstream: unknown parameters are skipped). */
export function parseRule(line: string): ParsedRule {
  const raw = line.trim();
  const words = splitWords(raw);
  if (words.length < 2 || words[0] !== "-A") {
    throw new Error(`bad iptables rule (does not start with "-A CHAIN"): ${raw}`);
  }
  if (words.length < 3) throw new Error(`bad iptables rule (no match rules): ${raw}`);
  const values: Partial<Record<ValueField, MatchValue>> = {};
  let affinityCheck = false, markCheck = false, ctStateCheck = false;
  let negated = false;
  for (let w = 2; w < words.length;) {
    const word = words[w];
    if (word === "-m" && w < words.length - 1) {
      w += 2;
      continue;
    }
    if (word === "!") {
      negated = true;
      w++;
      continue;
    }
    const field = VALUE_PARAMS[word];
    if (field !== undefined) {
      if (w === words.length - 1) {
        throw new Error(`parameter ${JSON.stringify(word)} requires an argument: ${raw}`);
      }
      values[field] = { negated, value: words[w + 1] };
      w += 2;
    } else if (OTHER_VALUE_PARAMS.has(word) && w < words.length - 1) {
      if (word === "--mark") markCheck = true;
      if (word === "--ctstate") ctStateCheck = true;
      w += 2;
    } else {
      if (word === "--rcheck") affinityCheck = true;
      w++;
    }
    negated = false;
  }
  return {
    raw,
    chain: words[1],
    comment: values.comment ?? null,
    protocol: values.protocol ?? null,
    sourceAddress: values.sourceAddress ?? null,
    sourceType: values.sourceType ?? null,
    destinationAddress: values.destinationAddress ?? null,
    destinationType: values.destinationType ?? null,
    destinationPort: values.destinationPort ?? null,
    jump: values.jump ?? null,
    probability: values.probability ?? null,
    dnatDestination: values.dnatDestination ?? null,
    affinityCheck,
    markCheck,
    ctStateCheck,
  };
}

/** Upstream ParseIPTablesDump: tables, chain declarations, rules and "-X" lines. Throws on bad input. */
export function parseIptablesDump(data: string): IptablesDump {
  const dump: IptablesDump = { tables: [] };
  let state: "table" | "declarations" | "chains" = "table";
  let table: DumpTable | null = null;
  for (const rawLine of data.replace(/^\n+|\n+$/g, "").split("\n")) {
    const line = rawLine.trim();
    if (line === "" || line.startsWith("#")) continue;
    if (state === "table") {
      const m = DECLARE_TABLE.exec(line);
      if (m === null) {
        throw new Error(
          `could not parse iptables data (table ${dump.tables.length + 1} starts with ${
            JSON.stringify(line)
          } not a table name)`,
        );
      }
      table = { name: m[1], chains: [] };
      dump.tables.push(table);
      state = "declarations";
      continue;
    }
    if (state === "declarations") {
      const m = DECLARE_CHAIN.exec(line);
      if (m !== null) {
        table!.chains.push({ name: m[1], packets: m[2], bytes: m[3], rules: [], deleted: false });
        continue;
      }
      state = "chains";
    }
    const add = ADD_RULE.exec(line);
    if (add !== null) {
      const chain = table!.chains.find((c) => c.name === add[1]);
      if (chain === undefined) {
        throw new Error(
          `error parsing rule ${JSON.stringify(line)}: no such chain ${JSON.stringify(add[1])}`,
        );
      }
      if (chain.deleted) throw new Error(`cannot add rules to deleted chain ${JSON.stringify(add[1])}`);
      chain.rules.push(parseRule(line));
      continue;
    }
    const del = DELETE_CHAIN.exec(line);
    if (del !== null) {
      const chain = table!.chains.find((c) => c.name === del[1]);
      if (chain === undefined) {
        throw new Error(
          `error parsing rule ${JSON.stringify(line)}: no such chain ${JSON.stringify(del[1])}`,
        );
      }
      if (chain.rules.length !== 0) {
        throw new Error(`cannot delete chain ${JSON.stringify(del[1])} after adding rules`);
      }
      chain.deleted = true;
      continue;
    }
    if (line === "COMMIT") {
      state = "table";
      continue;
    }
    throw new Error(`error parsing rule ${JSON.stringify(line)}`);
  }
  if (state !== "table") throw new Error("could not parse iptables data (no COMMIT line?)");
  return dump;
}

/** Upstream IPTablesDump.String(): declarations, then rules chain by chain, then "-X" lines. */
export function formatIptablesDump(dump: IptablesDump): string {
  const out: string[] = [];
  for (const t of dump.tables) {
    out.push(`*${t.name}`);
    for (const c of t.chains) out.push(`:${c.name} - [${c.packets}:${c.bytes}]`);
    for (const c of t.chains) for (const r of c.rules) out.push(r.raw);
    for (const c of t.chains) if (c.deleted) out.push(`-X ${c.name}`);
    out.push("COMMIT");
  }
  return out.join("\n") + "\n";
}

/** Service name of a comment: up to the first space or colon (upstream orderByCommentServiceName). */
function commentServiceName(r: ParsedRule): string | null {
  if (r.comment === null) return null;
  const v = r.comment.value;
  const i = v.search(/[ :]/);
  return i === -1 ? v : v.slice(0, i);
}

function byCommentServiceName(a: ParsedRule, b: ParsedRule): number {
  const na = commentServiceName(a);
  const nb = commentServiceName(b);
  if (na === null || nb === null) return 0;
  return na < nb ? -1 : na > nb ? 1 : 0;
}

function chainOrder(a: string, b: string): number {
  if (a === b) return 0;
  if (a === "KUBE-NODEPORTS") return -1;
  if (b === "KUBE-NODEPORTS") return 1;
  if (a === "KUBE-SERVICES") return -1;
  if (b === "KUBE-SERVICES") return 1;
  const ka = a.startsWith("KUBE-"), kb = b.startsWith("KUBE-");
  if (ka !== kb) return ka ? -1 : 1;
  return a < b ? -1 : 1;
}

const MUST_BE_LAST = "must be the last rule";

/**
 * Upstream sortIPTablesRules: tables by name; chains KUBE-NODEPORTS, KUBE-SERVICES, other KUBE-*
 * alphabetically, then the rest; rules of KUBE-NODEPORTS and KUBE-SERVICES (both tables) stably by
 * service name, keeping the "must be the last rule" rule last; other chains keep their rule order.
 */
export function sortIptablesRules(ruleData: string): string {
  const dump = parseIptablesDump(ruleData);
  dump.tables.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const t of dump.tables) {
    t.chains.sort((a, b) => chainOrder(a.name, b.name));
    for (const c of t.chains) {
      if (c.name === "KUBE-NODEPORTS" || (c.name === "KUBE-SERVICES" && t.name === "filter")) {
        c.rules.sort(byCommentServiceName);
      } else if (c.name === "KUBE-SERVICES" && t.name === "nat") {
        c.rules.sort((a, b) => {
          const la = a.comment !== null && a.comment.value.includes(MUST_BE_LAST);
          const lb = b.comment !== null && b.comment.value.includes(MUST_BE_LAST);
          if (la || lb) return la === lb ? 0 : la ? 1 : -1;
          return byCommentServiceName(a, b);
        });
      }
    }
  }
  return formatIptablesDump(dump);
}

/** Counts "-A" rules in one table of the text (upstream test helper countRules). */
export function countRules(ruleData: string, table: string): number {
  const t = parseIptablesDump(ruleData).tables.find((x) => x.name === table);
  if (t === undefined) throw new Error(`no such table ${JSON.stringify(table)}`);
  return t.chains.reduce((n, c) => n + c.rules.length, 0);
}

const BUILTIN_TARGETS = new Set(["ACCEPT", "REJECT", "DROP", "MARK", "RETURN", "DNAT", "SNAT", "MASQUERADE"]);
const TOP_LEVEL_CHAINS = new Set([
  "KUBE-SERVICES",
  "KUBE-EXTERNAL-SERVICES",
  "KUBE-NODEPORTS",
  "KUBE-POSTROUTING",
  "KUBE-FORWARD",
  "KUBE-MARK-MASQ",
  "KUBE-PROXY-FIREWALL",
  "KUBE-FIREWALL",
]);

function matchesOf(lines: readonly string[], re: RegExp): Set<string> {
  const out = new Set<string>();
  for (const l of lines) {
    const m = re.exec(l);
    if (m !== null) out.add(m[1]);
  }
  return out;
}

/**
 * Upstream checkIPTablesRuleJumps over a full (not partial) payload: every jumped-to or filled chain is
 * declared, every jumped-to chain has rules (KUBE-NODEPORTS excepted), every declared chain is used
 * (top-level chains excepted). Returns null when consistent, else the first problem found.
 */
export function checkIptablesRuleJumps(ruleData: string): string | null {
  const text = ruleData.replace(/^\n+/, "");
  const raw = text.split("COMMIT\n");
  if (raw.length - 1 < 2 || raw[raw.length - 1] !== "") return `bad ruleData (${raw.length - 1} tables)`;
  for (const block of raw.slice(0, -1)) {
    const lines = block.replace(/^\n+|\n+$/g, "").split("\n");
    const table = lines[0].slice(1);
    const created = matchesOf(lines, /^:([^ ]*)/);
    for (const x of matchesOf(lines, /-X ([^ ]*)/)) created.delete(x);
    const filled = matchesOf(lines, /-A ([^ ]*)/);
    const jumped = matchesOf(lines, /-j ([^ ]*)/);
    for (const b of BUILTIN_TARGETS) jumped.delete(b);
    const missing = [...jumped, ...filled].filter((c) => !created.has(c));
    if (missing.length > 0) {
      return `some chains in ${table} are used but were not created: ${
        [...new Set(missing)].sort().join(", ")
      }`;
    }
    const empty = [...jumped].filter((c) => !filled.has(c) && c !== "KUBE-NODEPORTS");
    if (empty.length > 0) {
      return `some chains in ${table} are jumped to but have no rules: ${empty.sort().join(", ")}`;
    }
    const extra = [...created].filter((c) => !jumped.has(c) && !TOP_LEVEL_CHAINS.has(c));
    if (extra.length > 0) {
      return `some chains in ${table} are created but not used: ${extra.sort().join(", ")}`;
    }
  }
  return null;
}
