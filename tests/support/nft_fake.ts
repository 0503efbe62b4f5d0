/**
 * A fake nftables table for tests, in the spirit of knftables.Fake: applies the transactions the renderer
 * writes (add/flush/delete of table, chain, set, map; add rule; add/delete element), atomically and with
 * nft's errors for missing objects, and dumps the resulting table as "add ..." lines like Fake.Dump, so
 * upstream's goldens (which are dumps of a fake after syncProxyRules) can be compared directly.
 */

interface FakeChain {
  /** The "add chain" line as first added (its properties). */
  readonly decl: string;
  rules: string[];
}

interface FakeSet {
  readonly decl: string;
  /** Element lines by key. */
  elements: Map<string, string>;
}

/** Table state. */
interface TableState {
  decl: string | null;
  chains: Map<string, FakeChain>;
  sets: Map<string, FakeSet>;
  maps: Map<string, FakeSet>;
}

function cloneState(s: TableState): TableState {
  const copy = (m: Map<string, FakeSet>) =>
    new Map([...m].map(([k, v]) => [k, { decl: v.decl, elements: new Map(v.elements) }]));
  return {
    decl: s.decl,
    chains: new Map([...s.chains].map(([k, v]) => [k, { decl: v.decl, rules: [...v.rules] }])),
    sets: copy(s.sets),
    maps: copy(s.maps),
  };
}

/** The key of an element line: text between "{ " and " comment", " :" or " }". */
function elementKey(rest: string): string {
  const open = rest.indexOf("{ ");
  const body = rest.slice(open + 2, rest.lastIndexOf(" }"));
  const cut = [body.indexOf(" comment "), body.indexOf(" : ")].filter((i) => i >= 0);
  return cut.length === 0 ? body : body.slice(0, Math.min(...cut));
}

/** One table of one family. */
export class FakeNftTable {
  #state: TableState = { decl: null, chains: new Map(), sets: new Map(), maps: new Map() };

  /** A fake for `table` in `family` (e.g. "ip", "kube-proxy"). */
  constructor(readonly family: string, readonly table: string) {}

  /** Chains now in the table (sorted), as `nft list chains` would name them. */
  chains(): string[] {
    return [...this.#state.chains.keys()].sort();
  }

  /** Sets now in the table (sorted). */
  sets(): string[] {
    return [...this.#state.sets.keys()].sort();
  }

  /** True when the table exists. */
  exists(): boolean {
    return this.#state.decl !== null;
  }

  /** Rules of a chain (without the "add rule <family> <table> <chain> " prefix), or null. */
  rules(chain: string): string[] | null {
    const c = this.#state.chains.get(chain);
    if (c === undefined) return null;
    const prefix = `add rule ${this.family} ${this.table} ${chain} `;
    return c.rules.map((r) => r.slice(prefix.length));
  }

  /** Elements of a set or map as key and value parts (split on " . "), or null when there is none. */
  elements(name: string): { key: string[]; value: string[] }[] | null {
    const m = this.#state.sets.get(name) ?? this.#state.maps.get(name);
    if (m === undefined) return null;
    return [...m.elements].map(([key, line]) => {
      const body = line.slice(line.indexOf("{ ") + 2, line.lastIndexOf(" }"));
      const colon = body.indexOf(" : ");
      return { key: key.split(" . "), value: colon < 0 ? [] : body.slice(colon + 3).split(" . ") };
    });
  }

  /** Applies `tx` atomically; throws (leaving the table unchanged) on the first failing command. */
  run(tx: string): void {
    const s = cloneState(this.#state);
    const prefix = `${this.family} ${this.table}`;
    tx.split("\n").forEach((line, i) => {
      if (line === "") return;
      const fail = (why: string): never => {
        throw new Error(`line ${i + 1}: ${why}: ${line}`);
      };
      const words = line.split(" ");
      const [verb, kind] = words;
      if (words.slice(2, 4).join(" ") !== prefix) fail("wrong family or table");
      if (kind === "table") {
        if (verb === "add") s.decl ??= line;
        else if (verb === "delete") {
          if (s.decl === null) fail("no such table");
          s.decl = null;
          s.chains.clear();
          s.sets.clear();
          s.maps.clear();
        } else fail("unsupported");
        return;
      }
      if (s.decl === null) fail("no such table");
      const name = words[4];
      switch (`${verb} ${kind}`) {
        case "add chain":
          if (!s.chains.has(name)) s.chains.set(name, { decl: line, rules: [] });
          return;
        case "flush chain": {
          const c = s.chains.get(name) ?? fail("no such chain");
          c.rules = [];
          return;
        }
        case "delete chain": {
          // The kernel deletes a chain with its rules, but not while a rule or map element jumps to it.
          if (!s.chains.has(name)) fail("no such chain");
          const refs = (text: string) => text.split(" ").includes(name);
          for (const [other, c] of s.chains) {
            if (other !== name && c.rules.some(refs)) fail("chain in use");
          }
          for (const m of s.maps.values()) if ([...m.elements.values()].some(refs)) fail("chain in use");
          s.chains.delete(name);
          return;
        }
        case "add rule": {
          const c = s.chains.get(name) ?? fail("no such chain");
          c.rules.push(line);
          return;
        }
        case "add set":
        case "add map": {
          const m = kind === "set" ? s.sets : s.maps;
          if (!m.has(name)) m.set(name, { decl: line, elements: new Map() });
          return;
        }
        case "flush set":
        case "flush map": {
          const m = (kind === "set" ? s.sets : s.maps).get(name) ?? fail(`no such ${kind}`);
          m.elements.clear();
          return;
        }
        case "delete set":
        case "delete map": {
          const m = kind === "set" ? s.sets : s.maps;
          if (!m.delete(name)) fail(`no such ${kind}`);
          return;
        }
        case "add element":
        case "delete element": {
          const target = s.sets.get(name) ?? s.maps.get(name) ?? fail("no such set or map");
          const key = elementKey(line);
          if (verb === "add") {
            if (!target.elements.has(key)) target.elements.set(key, line);
          } else if (!target.elements.delete(key)) fail("no such element");
          return;
        }
        default:
          fail("unsupported command");
      }
    });
    this.#state = s;
  }

  /** The table as "add ..." lines (knftables Fake.Dump), "" when it does not exist. */
  dump(): string {
    const s = this.#state;
    if (s.decl === null) return "";
    const out = [s.decl];
    for (const c of s.chains.values()) out.push(c.decl);
    for (const m of [s.sets, s.maps]) for (const x of m.values()) out.push(x.decl);
    for (const c of s.chains.values()) out.push(...c.rules);
    for (const m of [s.sets, s.maps]) for (const x of m.values()) out.push(...x.elements.values());
    return out.join("\n") + "\n";
  }
}

/**
 * `tx` with merged "add element ... { e1, e2 }" commands (render/incremental_first_sync.ts mergeElements)
 * split into one line per element, the form FakeNftTable applies.
 */
export function expandElementLists(tx: string): string {
  return tx.split("\n").flatMap((line) => {
    if (!line.startsWith("add element ")) return [line];
    const head = line.split(" ", 5).join(" ");
    const bodies = line.slice(line.indexOf("{ ") + 2, line.lastIndexOf(" }")).split(", ");
    return bodies.map((b) => `${head} { ${b} }`);
  }).join("\n");
}
