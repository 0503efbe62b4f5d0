/**
 * A command-line parser with spf13/pflag semantics (what kube-proxy uses through cobra), plus the
 * value parsers of the Go flag types kube-proxy declares.
 *
 * Syntax, as pflag: `--flag=value`, `--flag value`, `--bool` (true), `--bool=false` (but `--bool false`
 * leaves "false" as a positional argument), shorthand `-v=4`, `-v 4`, `-v4`, `--` ends flags, a lone
 * `-` is positional, flags and positionals may be interleaved. Underscores in long names are read as
 * dashes (cliflag.WordSepNormalizeFunc). Errors use pflag's wording: `unknown flag: --x`,
 * `flag needs an argument: --config`, `invalid argument "x" for "--kube-api-qps" flag: ...`.
 */

/** A command-line error; `message` is the one line to print. */
export class FlagError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "FlagError";
  }
}

/** A value that cannot be parsed; the parser wraps it as `invalid argument "v" for "--f" flag: <reason>`. */
export class FlagValueError extends Error {
  constructor(reason: string) {
    super(reason);
    this.name = "FlagValueError";
  }
}

/** What the parser needs to know about one flag. */
export interface FlagSyntax {
  name: string;
  shorthand?: string;
  /** Value used when the flag is given without `=value` (pflag NoOptDefVal), e.g. "true" for booleans. */
  noOptDefVal?: string;
}

/** Parser output: positional arguments in order. Flags are delivered through the `set` callback. */
export interface ParseResult {
  positional: string[];
}

function normalizeName(name: string): string {
  return name.replaceAll("_", "-");
}

/** pflag's name for a flag in error messages: "--name" or "-v, --v". */
export function flagDisplayName(f: FlagSyntax): string {
  return f.shorthand ? `-${f.shorthand}, --${f.name}` : `--${f.name}`;
}

/**
 * Parses `argv` like pflag. For each flag occurrence, calls `set(flag, rawValue)` in order; a
 * FlagValueError thrown by `set` becomes pflag's `invalid argument ...` error.
 * @throws FlagError on the first problem
 */
export function parseArgv<F extends FlagSyntax>(
  argv: readonly string[],
  flags: readonly F[],
  set: (flag: F, raw: string) => void,
): ParseResult {
  const byName = new Map<string, F>();
  const byShort = new Map<string, F>();
  for (const f of flags) {
    byName.set(f.name, f);
    if (f.shorthand) byShort.set(f.shorthand, f);
  }
  const apply = (f: F, raw: string) => {
    try {
      set(f, raw);
    } catch (e) {
      if (e instanceof FlagValueError) {
        throw new FlagError(
          `invalid argument ${JSON.stringify(raw)} for ${
            JSON.stringify(flagDisplayName(f))
          } flag: ${e.message}`,
        );
      }
      throw e;
    }
  };
  const positional: string[] = [];
  const args = [...argv];
  while (args.length > 0) {
    const s = args.shift()!;
    if (s.length < 2 || s[0] !== "-") {
      positional.push(s);
      continue;
    }
    if (s[1] === "-") {
      if (s.length === 2) {
        positional.push(...args);
        break;
      }
      const body = s.slice(2);
      if (body[0] === "-" || body[0] === "=") throw new FlagError(`bad flag syntax: ${s}`);
      const eq = body.indexOf("=");
      const name = eq >= 0 ? body.slice(0, eq) : body;
      const flag = byName.get(normalizeName(name));
      if (flag === undefined) throw new FlagError(`unknown flag: --${name}`);
      let value: string;
      if (eq >= 0) value = body.slice(eq + 1);
      else if (flag.noOptDefVal !== undefined) value = flag.noOptDefVal;
      else if (args.length > 0) value = args.shift()!;
      else throw new FlagError(`flag needs an argument: ${s}`);
      apply(flag, value);
      continue;
    }
    // Shorthands: "-v4", "-v=4", "-v 4"; several boolean shorthands may be combined ("-hv4").
    let shorts = s.slice(1);
    while (shorts.length > 0) {
      const c = shorts[0];
      const flag = byShort.get(c);
      if (flag === undefined) throw new FlagError(`unknown shorthand flag: '${c}' in -${shorts}`);
      let value: string;
      let rest = shorts.slice(1);
      if (shorts.length > 2 && shorts[1] === "=") {
        value = shorts.slice(2);
        rest = "";
      } else if (flag.noOptDefVal !== undefined) {
        value = flag.noOptDefVal;
      } else if (shorts.length > 1) {
        value = shorts.slice(1);
        rest = "";
      } else if (args.length > 0) {
        value = args.shift()!;
      } else {
        throw new FlagError(`flag needs an argument: '${c}' in -${shorts}`);
      }
      apply(flag, value);
      shorts = rest;
    }
  }
  return { positional };
}

// ---------------------------------------------------------------------------------------------------
// Value parsers for Go flag types. Each throws FlagValueError with Go's reason text.

/** strconv.ParseBool. */
export function parseGoBool(s: string): boolean {
  if (["1", "t", "T", "TRUE", "true", "True"].includes(s)) return true;
  if (["0", "f", "F", "FALSE", "false", "False"].includes(s)) return false;
  throw new FlagValueError(`strconv.ParseBool: parsing ${JSON.stringify(s)}: invalid syntax`);
}

/** Checks Go's rule for '_' in number literals: only between digits or after a base prefix. */
function underscoresOK(s: string): boolean {
  let saw = "^";
  let i = 0;
  if (s.length >= 1 && (s[0] === "-" || s[0] === "+")) s = s.slice(1);
  let hex = false;
  if (s.length >= 2 && s[0] === "0" && "bBoOxX".includes(s[1])) {
    i = 2;
    saw = "0";
    hex = s[1] === "x" || s[1] === "X";
  }
  for (; i < s.length; i++) {
    const c = s[i];
    if ((c >= "0" && c <= "9") || (hex && /[a-fA-F]/.test(c))) {
      saw = "0";
      continue;
    }
    if (c === "_") {
      if (saw !== "0") return false;
      saw = "_";
      continue;
    }
    if (saw === "_") return false;
    saw = "!";
  }
  return saw !== "_";
}

/** strconv.ParseInt(s, 0, bits): sign, 0x/0o/0b/0 prefixes, '_' separators. */
export function parseGoInt(s: string, bits = 32): number {
  const syntax = () => new FlagValueError(`strconv.ParseInt: parsing ${JSON.stringify(s)}: invalid syntax`);
  const range = () =>
    new FlagValueError(`strconv.ParseInt: parsing ${JSON.stringify(s)}: value out of range`);
  if (s === "") throw syntax();
  let t = s;
  let neg = false;
  if (t[0] === "+" || t[0] === "-") {
    neg = t[0] === "-";
    t = t.slice(1);
  }
  let base = 10;
  let digits = t;
  if (t.length >= 2 && t[0] === "0") {
    const p = t[1].toLowerCase();
    if (p === "x") [base, digits] = [16, t.slice(2)];
    else if (p === "o") [base, digits] = [8, t.slice(2)];
    else if (p === "b") [base, digits] = [2, t.slice(2)];
    else [base, digits] = [8, t.slice(1)];
  }
  if (t.includes("_") && !underscoresOK(s)) throw syntax();
  digits = digits.replaceAll("_", "");
  const valid = { 2: /^[01]+$/, 8: /^[0-7]+$/, 10: /^[0-9]+$/, 16: /^[0-9a-fA-F]+$/ }[base]!;
  if (!valid.test(digits)) throw syntax();
  let v = 0n;
  for (const ch of digits) v = v * BigInt(base) + BigInt(parseInt(ch, 16));
  if (neg) v = -v;
  const limit = 1n << BigInt(bits - 1);
  if (v < -limit || v >= limit) throw range();
  return Number(v);
}

/** strconv.ParseUint(s, 10, bits). */
export function parseGoUint(s: string, bits = 32): number {
  if (!/^[0-9]+$/.test(s)) {
    throw new FlagValueError(`strconv.ParseUint: parsing ${JSON.stringify(s)}: invalid syntax`);
  }
  const v = BigInt(s);
  if (v >= 1n << BigInt(bits)) {
    throw new FlagValueError(`strconv.ParseUint: parsing ${JSON.stringify(s)}: value out of range`);
  }
  return Number(v);
}

/** strconv.ParseFloat(s, 32) for decimal syntax (with exponent and '_'), Inf and NaN. */
export function parseGoFloat32(s: string): number {
  const syntax = () => new FlagValueError(`strconv.ParseFloat: parsing ${JSON.stringify(s)}: invalid syntax`);
  const lower = s.toLowerCase();
  const m = /^[+-]?(inf|infinity|nan)$/.exec(lower);
  if (m) return m[1] === "nan" ? NaN : lower.startsWith("-") ? -Infinity : Infinity;
  if (!/^[+-]?([0-9_]+(\.[0-9_]*)?|\.[0-9_]+)([eE][+-]?[0-9_]+)?$/.test(s)) throw syntax();
  if (
    s.includes("_") && !/^[+-]?[0-9]+(_[0-9]+)*(\.[0-9]+(_[0-9]+)*)?([eE][+-]?[0-9]+(_[0-9]+)*)?$/.test(s)
  ) {
    throw syntax();
  }
  const v = Number(s.replaceAll("_", ""));
  if (Math.abs(v) > 3.4028234663852886e38) {
    throw new FlagValueError(`strconv.ParseFloat: parsing ${JSON.stringify(s)}: value out of range`);
  }
  // Kept as a double: Go rounds to float32, but prints the float32 back as the shortest decimal, which is
  // the text written here for any value with fewer than 7 significant digits.
  return v;
}

/** One CSV record, as pflag's string slices read their value (encoding/csv, comma separator). */
export function parseCSVRecord(s: string): string[] {
  if (s === "") return [];
  const out: string[] = [];
  let i = 0;
  for (;;) {
    let field = "";
    if (s[i] === '"') {
      i++;
      for (;;) {
        if (i >= s.length) {
          throw new FlagValueError(
            `parse error on line 1, column ${i + 1}: extraneous or missing " in quoted-field`,
          );
        }
        if (s[i] === '"') {
          if (s[i + 1] === '"') {
            field += '"';
            i += 2;
            continue;
          }
          i++;
          break;
        }
        field += s[i++];
      }
      if (i < s.length && s[i] !== ",") {
        throw new FlagValueError(
          `parse error on line 1, column ${i + 1}: extraneous or missing " in quoted-field`,
        );
      }
    } else {
      const end = s.indexOf(",", i);
      field = end < 0 ? s.slice(i) : s.slice(i, end);
      const q = field.indexOf('"');
      if (q >= 0) {
        throw new FlagValueError(`parse error on line 1, column ${i + q + 1}: bare " in non-quoted-field`);
      }
      i = end < 0 ? s.length : end;
    }
    out.push(field);
    if (i >= s.length) break;
    i++; // the comma
    if (i >= s.length) {
      out.push("");
      break;
    }
  }
  return out;
}

/** cliflag.MapStringBool: "A=true,B=false" (spaces trimmed, empty items skipped). */
export function parseMapStringBool(s: string): Record<string, boolean> {
  const out: Record<string, boolean> = {};
  for (const item of s.split(",")) {
    const t = item.trim();
    if (t === "") continue;
    const eq = t.indexOf("=");
    if (eq < 0) throw new FlagValueError(`missing bool value for ${t}`);
    const k = t.slice(0, eq).trim();
    const v = t.slice(eq + 1).trim();
    try {
      out[k] = parseGoBool(v);
    } catch (e) {
      throw new FlagValueError(`invalid value of ${k}=${v}, err: ${(e as Error).message}`);
    }
  }
  return out;
}
