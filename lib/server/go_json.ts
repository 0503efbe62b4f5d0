/**
 * Go encoding/json and time.Time formats, so bodies match upstream byte for byte:
 * - `goJSON`: JSON.stringify plus Go's HTML-safe escaping (`<`, `>`, `&`, U+2028, U+2029 as \uXXXX);
 * - `formatRFC3339Nano`: time.Time's JSON form (RFC 3339 with up to nine fraction digits, trailing zeros
 *   trimmed, UTC as `Z`); the zero time.Time is `0001-01-01T00:00:00Z`.
 */

/** `json.Marshal(v)` of a plain JSON value: compact, keys in insertion order, HTML-safe escapes. */
export function goJSON(v: unknown): string {
  // These characters can only occur inside strings in JSON.stringify's output, so a global replace is safe.
  return JSON.stringify(v).replace(
    /[<>&\u2028\u2029]/g,
    (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"),
  );
}

/** Go's zero time.Time in JSON. */
export const GO_ZERO_TIME = "0001-01-01T00:00:00Z";

/**
 * Formats a wall-clock time (ms since the Unix epoch, fraction allowed and kept to the microsecond) as Go's
 * `time.Time.MarshalJSON` does for a UTC time; null stands for the zero time.
 */
export function formatRFC3339Nano(ms: number | null): string {
  if (ms === null) return GO_ZERO_TIME;
  if (!Number.isFinite(ms)) throw new Error(`formatRFC3339Nano: not a finite time: ${ms}`);
  let whole = Math.floor(ms);
  let micros = Math.round((ms - whole) * 1000);
  if (micros === 1000) {
    whole += 1;
    micros = 0;
  }
  const msInSecond = ((whole % 1000) + 1000) % 1000;
  const seconds = new Date(whole - msInSecond).toISOString().slice(0, 19);
  const nanos = msInSecond * 1_000_000 + micros * 1000;
  const frac = nanos === 0 ? "" : "." + String(nanos).padStart(9, "0").replace(/0+$/, "");
  return `${seconds}${frac}Z`;
}
