/**
 * The `--probability` value of the statistic match: upstream computeProbability,
 * `fmt.Sprintf("%0.10f", 1.0/float64(n))`, memoised.
 *
 * Go formats the exact binary value of the double and rounds half to even; JavaScript's toFixed rounds
 * exact ties up. They differ where 1/n has an exact tie at the 11th decimal: n = 2048 gives
 * 0.00048828125, which Go prints as 0.0004882812 and toFixed as 0.0004882813. So the decimal expansion is
 * computed exactly here with BigInt.
 */

const SCALE = 10n ** 10n;

/**
 * Formats a non-negative finite double with 10 decimals exactly as Go's `%0.10f` does
 * (exact decimal value of the double, round half to even).
 */
export function formatFixed10(x: number): string {
  if (!Number.isFinite(x) || x < 0) throw new RangeError(`formatFixed10: unsupported value ${x}`);
  // Decompose x = mantissa * 2^exponent with an integer mantissa.
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const hi = view.getUint32(0);
  const lo = view.getUint32(4);
  const biased = (hi >>> 20) & 0x7ff;
  let mantissa = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
  let exponent: number;
  if (biased === 0) {
    exponent = -1074;
  } else {
    mantissa |= 1n << 52n;
    exponent = biased - 1075;
  }
  // scaled = x * 10^10 = mantissa * 10^10 * 2^exponent, as quotient + remainder over 2^-exponent.
  let quotient: bigint;
  let roundUp = false;
  if (exponent >= 0) {
    quotient = (mantissa * SCALE) << BigInt(exponent);
  } else {
    const shift = BigInt(-exponent);
    const numerator = mantissa * SCALE;
    quotient = numerator >> shift;
    const remainder = numerator - (quotient << shift);
    const twice = remainder << 1n;
    const denominator = 1n << shift;
    if (twice > denominator) roundUp = true;
    else if (twice === denominator) roundUp = (quotient & 1n) === 1n;
  }
  if (roundUp) quotient += 1n;
  const digits = quotient.toString().padStart(11, "0");
  return `${digits.slice(0, -10)}.${digits.slice(-10)}`;
}

/** Upstream computeProbability(n): the 1/n string, uncached. */
export function computeProbability(n: number): string {
  return formatFixed10(1 / n);
}

// Index 0 mirrors upstream's "<bad value>" placeholder.
const precomputed: string[] = ["<bad value>"];

/** computeProbability(n), memoised for every n up to the largest one asked for so far. */
export function probability(n: number): string {
  if (!Number.isInteger(n) || n < 1) {
    throw new RangeError(`probability: endpoint count must be >= 1, got ${n}`);
  }
  for (let i = precomputed.length; i <= n; i++) precomputed.push(computeProbability(i));
  return precomputed[n];
}
