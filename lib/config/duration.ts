/**
 * Go durations, parsed and printed exactly like Go's time.ParseDuration and time.Duration.String().
 *
 * kube-proxy flags and the v1alpha1 config file both carry durations in Go syntax ("30s", "1m0s",
 * "1.5h", "500ms"), and `--write-config-to` prints them with Duration.String() ("15m0s", "24h0m0s").
 *
 * Precision: Go counts int64 nanoseconds. The parser and printer here work on exact bigint nanoseconds
 * (same overflow rules as Go); the millisecond helpers convert to and from a JavaScript number of
 * milliseconds, keeping sub-millisecond parts as a fraction (1ns = 0.000001 ms). Millisecond values are
 * exact for every whole-millisecond duration up to ±2^53 ms, which covers any realistic configuration.
 */

/** Nanoseconds per unit, as Go's unitMap (both micro signs are accepted, like Go). */
const UNIT_NS: ReadonlyMap<string, bigint> = new Map([
  ["ns", 1n],
  ["us", 1_000n],
  ["\u00b5s", 1_000n], // U+00B5 MICRO SIGN
  ["\u03bcs", 1_000n], // U+03BC GREEK SMALL LETTER MU
  ["ms", 1_000_000n],
  ["s", 1_000_000_000n],
  ["m", 60_000_000_000n],
  ["h", 3_600_000_000_000n],
]);

const MAX_U63 = 1n << 63n; // Go's 1<<63, the magnitude limit while accumulating
const MAX_INT64 = MAX_U63 - 1n;

/** The error Go's time package returns; `message` is Go's text, e.g. `time: missing unit in duration "5"`. */
export class DurationError extends Error {
  /** The text that failed to parse. */
  readonly input: string;
  constructor(message: string, input: string) {
    super(message);
    this.name = "DurationError";
    this.input = input;
  }
}

function quote(s: string): string {
  return `"${s}"`;
}

function isDigit(c: string): boolean {
  return c >= "0" && c <= "9";
}

/**
 * Parses a Go duration string into exact nanoseconds, like time.ParseDuration:
 * an optional sign, then one or more decimal numbers each with a unit (ns, us, µs, ms, s, m, h),
 * e.g. "300ms", "-1.5h", "2h45m". "0" alone needs no unit.
 * @throws DurationError with Go's message text
 */
export function parseDurationNs(input: string): bigint {
  const invalid = () => new DurationError("time: invalid duration " + quote(input), input);
  let s = input;
  let neg = false;
  if (s !== "" && (s[0] === "-" || s[0] === "+")) {
    neg = s[0] === "-";
    s = s.slice(1);
  }
  if (s === "0") return 0n;
  if (s === "") throw invalid();

  let d = 0n;
  while (s !== "") {
    if (!(s[0] === "." || isDigit(s[0]))) throw invalid();
    // Integer part.
    let i = 0;
    let v = 0n;
    while (i < s.length && isDigit(s[i])) {
      if (v > MAX_U63 / 10n) throw invalid();
      v = v * 10n + BigInt(s.charCodeAt(i) - 48);
      if (v > MAX_U63) throw invalid();
      i++;
    }
    const pre = i > 0;
    s = s.slice(i);
    // Fraction part: digits past int64 precision are consumed but ignored, as Go does.
    let f = 0n;
    let scale = 1;
    let post = false;
    if (s !== "" && s[0] === ".") {
      s = s.slice(1);
      let j = 0;
      let overflow = false;
      while (j < s.length && isDigit(s[j])) {
        if (!overflow) {
          if (f > MAX_INT64 / 10n) {
            overflow = true;
          } else {
            const y = f * 10n + BigInt(s.charCodeAt(j) - 48);
            if (y > MAX_U63) overflow = true;
            else {
              f = y;
              scale *= 10;
            }
          }
        }
        j++;
      }
      post = j > 0;
      s = s.slice(j);
    }
    if (!pre && !post) throw invalid(); // no digits, e.g. ".s"
    // Unit.
    let u = 0;
    while (u < s.length && s[u] !== "." && !isDigit(s[u])) u++;
    if (u === 0) throw new DurationError("time: missing unit in duration " + quote(input), input);
    const unitText = s.slice(0, u);
    s = s.slice(u);
    const unit = UNIT_NS.get(unitText);
    if (unit === undefined) {
      throw new DurationError(`time: unknown unit ${quote(unitText)} in duration ${quote(input)}`, input);
    }
    if (v > MAX_U63 / unit) throw invalid();
    v *= unit;
    if (f > 0n) {
      // Go: v += uint64(float64(f) * (float64(unit) / scale)) — same float64 arithmetic here.
      v += BigInt(Math.trunc(Number(f) * (Number(unit) / scale)));
      if (v > MAX_U63) throw invalid();
    }
    d += v;
    if (d > MAX_U63) throw invalid();
  }
  if (neg) return -d;
  if (d > MAX_INT64) throw invalid();
  return d;
}

/** Parses a Go duration string into milliseconds (fractional below 1ms). @throws DurationError */
export function parseDuration(input: string): number {
  return Number(parseDurationNs(input)) / 1e6;
}

/** Formats `v / 10**prec` as ".123" without trailing zeros (nothing when the fraction is 0); returns the rest. */
function fmtFrac(v: bigint, prec: number): [string, bigint] {
  let out = "";
  let print = false;
  for (let i = 0; i < prec; i++) {
    const digit = v % 10n;
    print = print || digit !== 0n;
    if (print) out = digit.toString() + out;
    v /= 10n;
  }
  return [print ? "." + out : "", v];
}

/** Formats exact nanoseconds like Go's Duration.String(): "0s", "1.5µs", "500ms", "1m30s", "24h0m0s". */
export function formatDurationNs(ns: bigint): string {
  const neg = ns < 0n;
  let u = neg ? -ns : ns;
  let out: string;
  if (u < 1_000_000_000n) {
    if (u === 0n) return "0s";
    let prec: number;
    let unit: string;
    if (u < 1_000n) {
      prec = 0;
      unit = "ns";
    } else if (u < 1_000_000n) {
      prec = 3;
      unit = "\u00b5s";
    } else {
      prec = 6;
      unit = "ms";
    }
    const [frac, whole] = fmtFrac(u, prec);
    out = whole.toString() + frac + unit;
  } else {
    const [frac, whole] = fmtFrac(u, 9);
    u = whole;
    out = (u % 60n).toString() + frac + "s";
    u /= 60n;
    if (u > 0n) {
      out = (u % 60n).toString() + "m" + out;
      u /= 60n;
      if (u > 0n) out = u.toString() + "h" + out;
    }
  }
  return neg ? "-" + out : out;
}

/** Formats milliseconds like Go's Duration.String() (rounded to whole nanoseconds). */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) throw new RangeError(`duration out of range: ${ms}ms`);
  return formatDurationNs(BigInt(Math.round(ms * 1e6)));
}
