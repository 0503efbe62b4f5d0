/** Small timing and statistics helpers shared by the benchmarks. */

/** Summary of repeated measurements (milliseconds unless said otherwise). */
export interface Summary {
  readonly median: number;
  readonly min: number;
  readonly max: number;
  readonly n: number;
}

/** Median, min, max of the samples; throws on an empty list (a benchmark that measured nothing). */
export function summarize(samples: readonly number[]): Summary {
  if (samples.length === 0) throw new Error("summarize: no samples");
  const s = [...samples].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  const median = s.length % 2 === 1 ? s[mid] : (s[mid - 1] + s[mid]) / 2;
  return { median: round(median), min: round(s[0]), max: round(s[s.length - 1]), n: s.length };
}

/** Rounds to 0.1 (figures are printed and stored with one decimal). */
export function round(x: number, digits = 1): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/** Runs `fn` and returns its result and the wall time in ms. */
export async function timed<T>(fn: () => Promise<T> | T): Promise<{ value: T; ms: number }> {
  const t0 = performance.now();
  const value = await fn();
  return { value, ms: performance.now() - t0 };
}

/** Lines of a payload (newline-terminated lines; a trailing fragment counts as one). */
export function countLines(text: string): number {
  let n = 0;
  for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", i + 1)) n++;
  if (text.length > 0 && !text.endsWith("\n")) n++;
  return n;
}

/** UTF-8 byte length of a string. */
export function byteLength(text: string): number {
  return new TextEncoder().encode(text).length;
}

/**
 * Exponent k of t ≈ c·n^k fitted by least squares on log-log points (needs ≥ 2 points with t > 0),
 * or null. Used to show how a restore mode scales with the number of Services.
 */
export function scalingExponent(points: ReadonlyArray<readonly [number, number]>): number | null {
  const p = points.filter(([n, t]) => n > 0 && t > 0).map(([n, t]) => [Math.log(n), Math.log(t)] as const);
  if (p.length < 2) return null;
  const mx = p.reduce((a, [x]) => a + x, 0) / p.length;
  const my = p.reduce((a, [, y]) => a + y, 0) / p.length;
  let num = 0;
  let den = 0;
  for (const [x, y] of p) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? null : round(num / den, 2);
}

/** Promise that resolves after `ms`. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
