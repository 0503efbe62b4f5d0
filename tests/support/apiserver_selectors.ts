/**
 * Label and field selectors with the apiserver's grammar and matching rules
 * (k8s.io/apimachinery/pkg/labels/selector.go and pkg/fields/selector.go), for the test apiserver.
 * Label grammar: comma-separated requirements `key`, `!key`, `key=v`, `key==v`, `key!=v`,
 * `key in (a,b)`, `key notin (a)`, `key>N`, `key<N`. `!=` and `notin` also match objects without the key.
 */

/** A label selector requirement operator. */
export type LabelOperator = "exists" | "!" | "=" | "!=" | "in" | "notin" | "gt" | "lt";

/** One parsed label requirement. */
export interface LabelRequirement {
  key: string;
  op: LabelOperator;
  values: string[];
}

/** A parsed label selector: every requirement must match (an empty list matches everything). */
export type LabelSelector = LabelRequirement[];

/** A syntax or validation error in a selector; the apiserver answers 400 BadRequest with its message. */
export class SelectorError extends Error {}

const NAME_RE = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const DNS1123_SUBDOMAIN_RE = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

function validateKey(key: string): void {
  const slash = key.lastIndexOf("/");
  const [prefix, name] = slash >= 0 ? [key.slice(0, slash), key.slice(slash + 1)] : ["", key];
  if (slash >= 0 && (prefix.length === 0 || prefix.length > 253 || !DNS1123_SUBDOMAIN_RE.test(prefix))) {
    throw new SelectorError(
      `unable to parse requirement: key: Invalid value: "${key}": prefix part must be a lowercase RFC 1123 subdomain`,
    );
  }
  if (name.length === 0 || name.length > 63 || !NAME_RE.test(name)) {
    throw new SelectorError(
      `unable to parse requirement: key: Invalid value: "${key}": name part must consist of alphanumeric ` +
        `characters, '-', '_' or '.', and must start and end with an alphanumeric character (at most 63 characters)`,
    );
  }
}

function validateValue(v: string): void {
  if (v.length > 63 || (v !== "" && !NAME_RE.test(v))) {
    throw new SelectorError(
      `unable to parse requirement: values[0]: Invalid value: "${v}": a valid label must be an empty string or ` +
        `consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character`,
    );
  }
}

type Token =
  | { t: "id"; v: string }
  | { t: "op"; v: "!" | "!=" | "=" | "==" | ">" | "<" | "(" | ")" | "," }
  | { t: "end"; v: "" };

function lex(s: string): Token[] {
  const out: Token[] = [];
  let i = 0;
  const special = "!=<>(),";
  while (i < s.length) {
    const c = s[i];
    if (c === " " || c === "\t" || c === "\n" || c === "\r") {
      i++;
    } else if (special.includes(c)) {
      const two = s.slice(i, i + 2);
      if (two === "!=" || two === "==") {
        out.push({ t: "op", v: two });
        i += 2;
      } else {
        out.push({ t: "op", v: c as "!" });
        i++;
      }
    } else {
      let j = i;
      while (j < s.length && !special.includes(s[j]) && !" \t\n\r".includes(s[j])) j++;
      out.push({ t: "id", v: s.slice(i, j) });
      i = j;
    }
  }
  out.push({ t: "end", v: "" });
  return out;
}

function describe(tok: Token): string {
  return tok.t === "end" ? "" : tok.v;
}

/** Parses a label selector string; throws SelectorError with an apiserver-like message on bad syntax. */
export function parseLabelSelector(selector: string): LabelSelector {
  const toks = lex(selector);
  let p = 0;
  const reqs: LabelSelector = [];
  if (toks[0].t === "end") return reqs;
  for (;;) {
    let tok = toks[p++];
    let key: string;
    let op: LabelOperator;
    let values: string[] = [];
    if (tok.t === "op" && tok.v === "!") {
      tok = toks[p++];
      if (tok.t !== "id") {
        throw new SelectorError(
          `unable to parse requirement: found '${describe(tok)}', expected: identifier`,
        );
      }
      key = tok.v;
      validateKey(key);
      op = "!";
    } else if (tok.t === "id") {
      key = tok.v;
      validateKey(key);
      const next = toks[p];
      if (next.t === "end" || (next.t === "op" && next.v === ",")) {
        op = "exists";
      } else {
        p++;
        if (next.t === "id" && (next.v === "in" || next.v === "notin")) {
          op = next.v;
          const open = toks[p++];
          if (!(open.t === "op" && open.v === "(")) {
            throw new SelectorError(`unable to parse requirement: found '${describe(open)}', expected: '('`);
          }
          // Values list: identifiers separated by commas; an empty slot is the empty value.
          let expectValue = true;
          for (;;) {
            const v = toks[p++];
            if (v.t === "op" && v.v === ")") {
              if (expectValue && values.length > 0) values.push("");
              break;
            }
            if (v.t === "op" && v.v === ",") {
              if (expectValue) values.push("");
              expectValue = true;
              continue;
            }
            if (v.t === "id" && expectValue) {
              values.push(v.v);
              expectValue = false;
              continue;
            }
            throw new SelectorError(
              `unable to parse requirement: found '${describe(v)}', expected: ',', ')' or identifier`,
            );
          }
          if (values.length === 0) {
            throw new SelectorError(
              "unable to parse requirement: values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty",
            );
          }
        } else if (next.t === "op" && (next.v === "=" || next.v === "==" || next.v === "!=")) {
          op = next.v === "!=" ? "!=" : "=";
          const v = toks[p];
          if (v.t === "id") {
            values = [v.v];
            p++;
          } else if (v.t === "end" || (v.t === "op" && v.v === ",")) {
            values = [""];
          } else {
            throw new SelectorError(
              `unable to parse requirement: found '${describe(v)}', expected: identifier`,
            );
          }
        } else if (next.t === "op" && (next.v === ">" || next.v === "<")) {
          op = next.v === ">" ? "gt" : "lt";
          const v = toks[p++];
          if (v.t !== "id" || !/^-?[0-9]+$/.test(v.v)) {
            throw new SelectorError(
              `unable to parse requirement: values[0]: Invalid value: "${
                describe(v)
              }": for 'Gt', 'Lt' operators, ` +
                `the value must be an integer`,
            );
          }
          values = [v.v];
        } else {
          throw new SelectorError(
            `unable to parse requirement: found '${describe(next)}', expected: in, notin, =, ==, !=, gt, lt`,
          );
        }
      }
    } else {
      throw new SelectorError(
        `unable to parse requirement: found '${describe(tok)}', expected: !, identifier`,
      );
    }
    if (op !== "gt" && op !== "lt") values.forEach(validateValue);
    reqs.push({ key, op, values });
    const sep = toks[p++];
    if (sep.t === "end") break;
    if (!(sep.t === "op" && sep.v === ",")) {
      throw new SelectorError(`found '${describe(sep)}', expected: ',' or 'end of string'`);
    }
    if (toks[p].t === "end") {
      throw new SelectorError("unable to parse requirement: found '', expected: !, identifier");
    }
  }
  return reqs;
}

/** Whether `labels` satisfy every requirement of `selector`. */
export function matchLabels(selector: LabelSelector, labels: Record<string, string> | undefined): boolean {
  const l = labels ?? {};
  return selector.every(({ key, op, values }) => {
    const has = Object.hasOwn(l, key);
    const v = l[key];
    switch (op) {
      case "exists":
        return has;
      case "!":
        return !has;
      case "=":
      case "in":
        return has && values.includes(v);
      case "!=":
      case "notin":
        return !has || !values.includes(v);
      case "gt":
      case "lt": {
        if (!has || !/^-?[0-9]+$/.test(v)) return false;
        return op === "gt" ? Number(v) > Number(values[0]) : Number(v) < Number(values[0]);
      }
    }
  });
}

/** One field selector term (`field=value`, `field==value` or `field!=value`). */
export interface FieldRequirement {
  field: string;
  op: "=" | "!=";
  value: string;
}

/** Splits on unescaped commas, as fields.ParseSelector does. */
function splitTerms(s: string): string[] {
  const out: string[] = [];
  let cur = "";
  for (let i = 0; i < s.length; i++) {
    if (s[i] === "\\" && i + 1 < s.length) {
      cur += s[i] + s[i + 1];
      i++;
    } else if (s[i] === ",") {
      out.push(cur);
      cur = "";
    } else {
      cur += s[i];
    }
  }
  out.push(cur);
  return out;
}

function unescape(v: string, term: string): string {
  let out = "";
  for (let i = 0; i < v.length; i++) {
    if (v[i] === "\\") {
      const n = v[i + 1];
      if (n === "\\" || n === "," || n === "=") {
        out += n;
        i++;
        continue;
      }
      throw new SelectorError(`invalid field selector: invalid escape sequence in '${term}'`);
    }
    if (v[i] === "," || v[i] === "=") {
      throw new SelectorError(`invalid field selector: invalid selector: '${term}'; unescaped '${v[i]}'`);
    }
    out += v[i];
  }
  return out;
}

/**
 * Parses a field selector and checks every field against `supported` (the per-resource field label
 * conversion of the apiserver): unknown fields give `field label not supported: <field>`.
 */
export function parseFieldSelector(selector: string, supported: readonly string[]): FieldRequirement[] {
  if (selector.trim() === "") return [];
  return splitTerms(selector).map((term) => {
    let field: string | undefined;
    let op: "=" | "!=" = "=";
    let value = "";
    for (const o of ["!=", "==", "="] as const) {
      const i = term.indexOf(o);
      if (i >= 0) {
        field = term.slice(0, i);
        op = o === "!=" ? "!=" : "=";
        value = unescape(term.slice(i + o.length), term);
        break;
      }
    }
    if (field === undefined) {
      throw new SelectorError(`invalid selector: '${selector}'; can't understand '${term}'`);
    }
    field = field.trim();
    if (!supported.includes(field)) throw new SelectorError(`field label not supported: ${field}`);
    return { field, op, value };
  });
}

/** Value of a field path on an object, as the apiserver's field set renders it (booleans as "true"/"false"). */
export function fieldValue(obj: Record<string, unknown>, field: string): string {
  let cur: unknown = obj;
  for (const part of field.split(".")) {
    cur = cur !== null && typeof cur === "object" ? (cur as Record<string, unknown>)[part] : undefined;
  }
  if (cur === undefined || cur === null) return field === "spec.unschedulable" ? "false" : "";
  return String(cur);
}

/** Whether `obj` satisfies every field requirement. */
export function matchFields(reqs: FieldRequirement[], obj: Record<string, unknown>): boolean {
  return reqs.every(({ field, op, value }) => (fieldValue(obj, field) === value) === (op === "="));
}
