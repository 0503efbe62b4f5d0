/**
 * A problem with one configuration field, printed as one line:
 * `<field.path>: <problem> (got <value>)`.
 */

/** One invalid field. `got` is the offending value as the user wrote it (already formatted), if any. */
export interface FieldError {
  /** The v1alpha1 JSON path, e.g. "iptables.masqueradeBit" or "nodePortAddresses[1]". */
  path: string;
  problem: string;
  got?: string;
}

/** Formats a value for the "(got ...)" part: strings quoted, other values as JSON (truncated). */
export function gotValue(v: unknown): string {
  let s: string;
  if (typeof v === "string") s = JSON.stringify(v);
  else {
    try {
      s = JSON.stringify(v) ?? String(v);
    } catch {
      s = String(v);
    }
  }
  return s.length > 80 ? s.slice(0, 77) + "..." : s;
}

/** Builds a FieldError; `value` (when not undefined) is formatted for the "(got ...)" part. */
export function fieldError(path: string, problem: string, value?: unknown): FieldError {
  return value === undefined ? { path, problem } : { path, problem, got: gotValue(value) };
}

/** `path: problem (got value)`. */
export function formatFieldError(e: FieldError): string {
  return `${e.path}: ${e.problem}${e.got !== undefined ? ` (got ${e.got})` : ""}`;
}
