/**
 * A small Prometheus registry with the text exposition format 0.0.4, written to produce the same bytes as
 * client_golang's expfmt for the same samples, so a scrape of edgeproxy diffs cleanly against kube-proxy:
 * - families sorted by name, series sorted by label values (label pairs sorted by name), `le` last;
 * - numbers formatted like Go's `strconv.FormatFloat(v, 'g', -1, 64)` (`1e+06`, `1.7e+09`, `+Inf`);
 * - HELP escapes `\` and newline; label values also escape `"`;
 * - a metric without labels is exported from the start (value 0), a labelled one only once a series
 *   exists (`initSeries` creates one at zero), and a family with no series is left out (no HELP/TYPE
 *   lines), as client_golang's Gather does;
 * - component-base metrics carry their stability level in HELP (`[ALPHA] ...`), see `stabilityLevel`.
 * Collector metrics compute their samples at scrape time from a callback.
 */
import { log } from "../log.ts";

/** Label values keyed by label name. */
export type Labels = Readonly<Record<string, string>>;

/** Prometheus metric types this registry writes. */
export type MetricType = "counter" | "gauge" | "histogram" | "untyped";

/** Kubernetes component-base stability levels; written as a `[LEVEL] ` prefix of HELP. */
export type StabilityLevel = "ALPHA" | "BETA" | "STABLE";

/** The Content-Type of a text-format scrape (client_golang's FmtText). */
export const TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

/** Options shared by every metric. */
export interface MetricOptions {
  /** Full metric name, e.g. `kubeproxy_sync_proxy_rules_duration_seconds`. */
  readonly name: string;
  /** Help text as upstream declares it (without the stability prefix). */
  readonly help: string;
  /** Label names, in declaration order (the output sorts them by name anyway). */
  readonly labelNames?: readonly string[];
  /** When set, HELP reads `[LEVEL] help`, as component-base metrics do. */
  readonly stabilityLevel?: StabilityLevel;
}

/** Options of a histogram. */
export interface HistogramOptions extends MetricOptions {
  /** Upper bounds, strictly increasing; `+Inf` is added automatically. */
  readonly buckets: readonly number[];
}

/** One sample a collector returns. */
export interface CollectedSample {
  readonly labels?: Labels;
  readonly value: number;
}

/** A metric family whose samples are computed at scrape time. */
export interface CollectorOptions extends MetricOptions {
  readonly type: Exclude<MetricType, "histogram">;
  /** Called on every scrape; throwing leaves the family out of that scrape (and logs). */
  collect(): Iterable<CollectedSample>;
}

/** Where a collector error is reported; defaults to the process logger. */
export type ErrorReporter = (message: string, error: unknown) => void;

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*$/;

/**
 * Formats a number as expfmt does (Go's `strconv.FormatFloat(v, 'g', -1, 64)`): the shortest digits that
 * round-trip, in exponent form when the decimal exponent is < -4 or >= 6, e.g. `1e+06`, `1.7356e+09`,
 * `123456`, `0.001`, `1e-05`; plus `+Inf`, `-Inf`, `NaN`, and `0` for both zeros.
 */
export function formatGoFloat(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  if (v === 0) return "0";
  // Integers below 1e6 print the same in both languages (the common case: counts, bucket totals).
  if (Number.isInteger(v) && v > -1e6 && v < 1e6) return String(v);
  const neg = v < 0;
  // toExponential() without an argument yields the shortest round-tripping digits (ECMA-262), the same
  // digits Go's shortest formatting picks.
  const [mant, expStr] = Math.abs(v).toExponential().split("e");
  const digits = mant.replace(".", "");
  const exp = Number(expStr);
  let out: string;
  if (exp < -4 || exp >= 6) {
    const frac = digits.length > 1 ? "." + digits.slice(1) : "";
    const e = Math.abs(exp);
    out = `${digits[0]}${frac}e${exp < 0 ? "-" : "+"}${e < 10 ? "0" + e : String(e)}`;
  } else {
    const dp = exp + 1; // position of the decimal point within digits
    if (dp <= 0) out = "0." + "0".repeat(-dp) + digits;
    else if (dp >= digits.length) out = digits + "0".repeat(dp - digits.length);
    else out = digits.slice(0, dp) + "." + digits.slice(dp);
  }
  return neg ? "-" + out : out;
}

/** Escapes HELP text as expfmt does: backslash and newline. */
export function escapeHelp(s: string): string {
  return s.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
}

/** Escapes a label value as expfmt does: backslash, double quote and newline. */
export function escapeLabelValue(s: string): string {
  return s.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

/** `a, b, c` with quotes, for error messages. */
function quoteList(xs: readonly string[]): string {
  return xs.length === 0 ? "(none)" : xs.map((x) => `"${x}"`).join(", ");
}

/** Validates names and returns the label-name permutation that sorts them. */
function checkOptions(opts: MetricOptions, reserved: readonly string[]): readonly string[] {
  if (!METRIC_NAME.test(opts.name)) {
    throw new Error(`metric name "${opts.name}" is not a valid Prometheus name`);
  }
  const names = opts.labelNames ?? [];
  const seen = new Set<string>();
  for (const l of names) {
    if (!LABEL_NAME.test(l) || l.startsWith("__")) {
      throw new Error(`metric ${opts.name}: label name "${l}" is not a valid Prometheus label name`);
    }
    if (reserved.includes(l)) throw new Error(`metric ${opts.name}: label name "${l}" is reserved`);
    if (seen.has(l)) throw new Error(`metric ${opts.name}: label name "${l}" is declared twice`);
    seen.add(l);
  }
  return names;
}

/**
 * Base of the stored metrics: label handling and series storage. Series are keyed by their label values
 * in declaration order.
 */
abstract class LabelledMetric<S> {
  /** Full metric name. */
  readonly name: string;
  /** Help text as declared (without stability prefix). */
  readonly help: string;
  /** Declared label names. */
  readonly labelNames: readonly string[];
  /** Stability level, if any. */
  readonly stabilityLevel: StabilityLevel | undefined;
  /** Series keyed by label values joined with NUL. */
  protected readonly series = new Map<string, { values: readonly string[]; state: S }>();

  constructor(opts: MetricOptions, reserved: readonly string[] = []) {
    this.labelNames = checkOptions(opts, reserved);
    this.name = opts.name;
    this.help = opts.help;
    this.stabilityLevel = opts.stabilityLevel;
    if (this.labelNames.length === 0) this.stateFor({});
  }

  /** A fresh series state. */
  protected abstract initial(): S;

  /** Label values in declaration order; throws naming the metric when the label set is wrong. */
  protected valuesOf(labels: Labels): string[] {
    const given = Object.keys(labels);
    const ok = given.length === this.labelNames.length &&
      this.labelNames.every((n) => Object.hasOwn(labels, n));
    if (!ok) {
      throw new Error(
        `metric ${this.name}: labels ${quoteList(given.sort())} do not match the declared labels ${
          quoteList([...this.labelNames].sort())
        }`,
      );
    }
    return this.labelNames.map((n) => {
      const v = labels[n];
      if (typeof v !== "string") {
        throw new Error(`metric ${this.name}: label "${n}" must be a string, got ${typeof v}`);
      }
      return v;
    });
  }

  /** The state of the series for `labels`, created on first use. */
  protected stateFor(labels: Labels): S {
    const values = this.valuesOf(labels);
    const key = values.join("\u0000");
    let s = this.series.get(key);
    if (!s) {
      s = { values, state: this.initial() };
      this.series.set(key, s);
    }
    return s.state;
  }

  /**
   * Creates the series for `labels` at its zero value if it does not exist yet (client_golang's
   * `WithLabelValues` without an update), so a labelled family is exported from the first scrape.
   */
  initSeries(labels: Labels): void {
    this.stateFor(labels);
  }

  /** Drops the series for `labels` (labelled metrics only); returns whether it existed. */
  remove(labels: Labels): boolean {
    if (this.labelNames.length === 0) {
      throw new Error(`metric ${this.name}: has no labels, nothing to remove`);
    }
    return this.series.delete(this.valuesOf(labels).join("\u0000"));
  }

  /** Drops every series (labelled) or zeroes the single series (unlabelled). */
  reset(): void {
    this.series.clear();
    if (this.labelNames.length === 0) this.stateFor({});
  }

  /** Series as label pairs (sorted by name) plus state, for the encoder. */
  entries(): Array<{ pairs: Array<[string, string]>; state: S }> {
    const order = this.labelNames.map((n, i) => [n, i] as const).sort((a, b) => (a[0] < b[0] ? -1 : 1));
    return [...this.series.values()].map((s) => ({
      pairs: order.map(([n, i]) => [n, s.values[i]] as [string, string]),
      state: s.state,
    }));
  }
}

/** A monotonically increasing counter. */
export class Counter extends LabelledMetric<{ v: number }> {
  /** Metric type for the encoder. */
  readonly type = "counter" as const;

  protected initial(): { v: number } {
    return { v: 0 };
  }

  /** Adds `by` (default 1, must be >= 0) to the series for `labels`. */
  inc(labels: Labels = {}, by = 1): void {
    if (!(by >= 0)) throw new Error(`metric ${this.name}: a counter cannot change by ${by}`);
    this.stateFor(labels).v += by;
  }

  /** Current value of the series (0 when it does not exist). */
  get(labels: Labels = {}): number {
    return this.series.get(this.valuesOf(labels).join("\u0000"))?.state.v ?? 0;
  }

  /** Binds label values once, for hot paths. */
  labels(labels: Labels): { inc(by?: number): void } {
    this.valuesOf(labels);
    return { inc: (by = 1) => this.inc(labels, by) };
  }
}

/** A value that goes up and down. */
export class Gauge extends LabelledMetric<{ v: number }> {
  /** Metric type for the encoder. */
  readonly type = "gauge" as const;

  protected initial(): { v: number } {
    return { v: 0 };
  }

  /** Sets the series for `labels` to `value`. */
  set(labels: Labels, value: number): void {
    this.stateFor(labels).v = value;
  }

  /** Adds `by` (may be negative) to the series for `labels`. */
  inc(labels: Labels = {}, by = 1): void {
    this.stateFor(labels).v += by;
  }

  /** Subtracts `by` from the series for `labels`. */
  dec(labels: Labels = {}, by = 1): void {
    this.stateFor(labels).v -= by;
  }

  /** Current value of the series (0 when it does not exist). */
  get(labels: Labels = {}): number {
    return this.series.get(this.valuesOf(labels).join("\u0000"))?.state.v ?? 0;
  }

  /** Binds label values once, for hot paths. */
  labels(labels: Labels): { set(value: number): void; inc(by?: number): void } {
    this.valuesOf(labels);
    return { set: (v) => this.set(labels, v), inc: (by = 1) => this.inc(labels, by) };
  }
}

/** State of one histogram series: per-bucket (non-cumulative) counts, the +Inf overflow, sum, count. */
interface HistogramState {
  counts: number[];
  sum: number;
  count: number;
}

/** A histogram with fixed buckets (cumulative `_bucket{le}` lines, `_sum`, `_count`). */
export class Histogram extends LabelledMetric<HistogramState> {
  /** Metric type for the encoder. */
  readonly type = "histogram" as const;
  /** Upper bounds without +Inf. */
  readonly buckets: readonly number[];

  constructor(opts: HistogramOptions) {
    const b = [...opts.buckets];
    if (b.length > 0 && b[b.length - 1] === Infinity) b.pop();
    for (let i = 0; i < b.length; i++) {
      if (!Number.isFinite(b[i]) || (i > 0 && !(b[i] > b[i - 1]))) {
        throw new Error(
          `metric ${opts.name}: buckets must be finite and strictly increasing (at index ${i}: ${b[i]})`,
        );
      }
    }
    // `buckets` must exist before the base constructor creates the unlabelled series.
    super({ ...opts, labelNames: opts.labelNames ?? [] }, ["le"]);
    this.buckets = b;
    if (this.labelNames.length === 0) this.reset();
  }

  protected initial(): HistogramState {
    return { counts: new Array((this.buckets?.length ?? 0) + 1).fill(0), sum: 0, count: 0 };
  }

  /** Records one observation in the series for `labels`. */
  observe(labels: Labels, value: number): void {
    const s = this.stateFor(labels);
    // First bucket whose upper bound is >= value, as client_golang's sort.SearchFloat64s.
    let i = 0;
    while (i < this.buckets.length && value > this.buckets[i]) i++;
    s.counts[i]++;
    s.sum += value;
    s.count++;
  }

  /** Count and sum of the series (zeros when it does not exist). */
  get(labels: Labels = {}): { count: number; sum: number } {
    const s = this.series.get(this.valuesOf(labels).join("\u0000"))?.state;
    return { count: s?.count ?? 0, sum: s?.sum ?? 0 };
  }

  /** Binds label values once, for hot paths. */
  labels(labels: Labels): { observe(value: number): void } {
    this.valuesOf(labels);
    return { observe: (v) => this.observe(labels, v) };
  }
}

/** A family computed by a callback on every scrape. */
export class CollectorMetric {
  /** Full metric name. */
  readonly name: string;
  /** Help text as declared. */
  readonly help: string;
  /** Declared label names. */
  readonly labelNames: readonly string[];
  /** Stability level, if any. */
  readonly stabilityLevel: StabilityLevel | undefined;
  /** Metric type. */
  readonly type: Exclude<MetricType, "histogram">;
  readonly #collect: () => Iterable<CollectedSample>;

  constructor(opts: CollectorOptions) {
    this.labelNames = checkOptions(opts, []);
    this.name = opts.name;
    this.help = opts.help;
    this.stabilityLevel = opts.stabilityLevel;
    this.type = opts.type;
    this.#collect = opts.collect;
  }

  /** Runs the callback and validates every sample's label set. */
  samples(): Array<{ pairs: Array<[string, string]>; value: number }> {
    const sortedNames = [...this.labelNames].sort();
    const out: Array<{ pairs: Array<[string, string]>; value: number }> = [];
    const seen = new Set<string>();
    for (const s of this.#collect()) {
      const labels = s.labels ?? {};
      const keys = Object.keys(labels).sort();
      if (keys.length !== sortedNames.length || keys.some((k, i) => k !== sortedNames[i])) {
        throw new Error(
          `collector ${this.name}: sample labels ${quoteList(keys)} do not match the declared labels ${
            quoteList(sortedNames)
          }`,
        );
      }
      const pairs = sortedNames.map((n) => [n, String(labels[n])] as [string, string]);
      const key = pairs.map((p) => p[1]).join("\u0000");
      if (seen.has(key)) {
        throw new Error(
          `collector ${this.name}: duplicate series {${pairs.map(([n, v]) => `${n}="${v}"`).join(",")}}`,
        );
      }
      seen.add(key);
      out.push({ pairs, value: s.value });
    }
    return out;
  }
}

/** Any metric a registry holds. */
export type Metric = Counter | Gauge | Histogram | CollectorMetric;

/** Writes `{a="x",b="y"}` (or nothing). */
function labelText(pairs: ReadonlyArray<readonly [string, string]>): string {
  return pairs.length === 0 ? "" : `{${pairs.map(([n, v]) => `${n}="${escapeLabelValue(v)}"`).join(",")}}`;
}

/** Orders series like client_golang: label values compared in label-name order. */
function compareSeries(a: { pairs: Array<[string, string]> }, b: { pairs: Array<[string, string]> }): number {
  for (let i = 0; i < a.pairs.length; i++) {
    const x = a.pairs[i][1], y = b.pairs[i][1];
    if (x !== y) return x < y ? -1 : 1;
  }
  return 0;
}

/** A set of metric families, rendered together. */
export class Registry {
  readonly #metrics = new Map<string, Metric>();
  readonly #report: ErrorReporter;

  /** `report` receives collector failures (default: the process logger at error level). */
  constructor(report?: ErrorReporter) {
    this.#report = report ?? ((message, error) => log.error(message, error));
  }

  /** Adds a metric; a second metric of the same name is an error. Returns the metric. */
  register<M extends Metric>(metric: M): M {
    if (this.#metrics.has(metric.name)) throw new Error(`metric ${metric.name} is already registered`);
    this.#metrics.set(metric.name, metric);
    return metric;
  }

  /** Creates and registers a counter. */
  counter(opts: MetricOptions): Counter {
    return this.register(new Counter(opts));
  }

  /** Creates and registers a gauge. */
  gauge(opts: MetricOptions): Gauge {
    return this.register(new Gauge(opts));
  }

  /** Creates and registers a histogram. */
  histogram(opts: HistogramOptions): Histogram {
    return this.register(new Histogram(opts));
  }

  /** Creates and registers a family computed at scrape time. */
  collector(opts: CollectorOptions): CollectorMetric {
    return this.register(new CollectorMetric(opts));
  }

  /** The metric registered under `name`, if any. */
  get(name: string): Metric | undefined {
    return this.#metrics.get(name);
  }

  /** Names of every registered family, sorted. */
  names(): string[] {
    return [...this.#metrics.keys()].sort();
  }

  /** The whole registry in text exposition format 0.0.4. */
  metrics(): string {
    const out: string[] = [];
    for (const name of this.names()) {
      const m = this.#metrics.get(name)!;
      let lines: string[];
      try {
        lines = renderFamily(m);
      } catch (e) {
        this.#report(`metrics: collecting ${name} failed; left out of this scrape`, e);
        continue;
      }
      if (lines.length === 0) continue;
      const help = m.stabilityLevel ? `[${m.stabilityLevel}] ${m.help}` : m.help;
      out.push(`# HELP ${name} ${escapeHelp(help)}`, `# TYPE ${name} ${m.type}`, ...lines);
    }
    return out.length === 0 ? "" : out.join("\n") + "\n";
  }
}

/** The sample lines of one family (empty when it has no series). */
function renderFamily(m: Metric): string[] {
  const lines: string[] = [];
  if (m instanceof CollectorMetric) {
    for (const s of m.samples().sort(compareSeries)) {
      lines.push(`${m.name}${labelText(s.pairs)} ${formatGoFloat(s.value)}`);
    }
    return lines;
  }
  if (m instanceof Histogram) {
    const les = m.buckets.map(formatGoFloat);
    for (const { pairs, state } of m.entries().sort(compareSeries)) {
      let cumulative = 0;
      // Every bucket line of a series shares its labels; only `le` differs.
      const prefix = `${m.name}_bucket{${
        pairs.map(([n, v]) => `${n}="${escapeLabelValue(v)}",`).join("")
      }le="`;
      for (let i = 0; i < les.length; i++) {
        cumulative += state.counts[i];
        lines.push(`${prefix}${les[i]}"} ${formatGoFloat(cumulative)}`);
      }
      lines.push(`${prefix}+Inf"} ${formatGoFloat(state.count)}`);
      lines.push(`${m.name}_sum${labelText(pairs)} ${formatGoFloat(state.sum)}`);
      lines.push(`${m.name}_count${labelText(pairs)} ${formatGoFloat(state.count)}`);
    }
    return lines;
  }
  for (const { pairs, state } of m.entries().sort(compareSeries)) {
    lines.push(`${m.name}${labelText(pairs)} ${formatGoFloat(state.v)}`);
  }
  return lines;
}
