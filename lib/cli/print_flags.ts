/**
 * component-base's cliflag.PrintFlags: at `-v=1`, one `FLAG: --name="value"` line per flag, sorted by
 * name (pflag's VisitAll order), with the value as pflag's `Value.String()` prints it, quoted with Go's
 * `%q`. Like upstream, the values are those of the command line (defaults plus the flags given): the
 * flags are bound to the configuration before `--config` replaces it, so a file's settings do not show.
 */
import { formatDuration, parseDuration } from "../config/duration.ts";
import { type FlagDef, FLAGS, type FlagState, newFlagState } from "./flags.ts";
import { parseArgv, parseGoBool } from "./pflag.ts";
import { infoVf } from "../log.ts";
import { goQuote } from "../log/klog_text.ts";
import type { VModuleItem } from "../config/types.ts";

/** strconv.FormatFloat(v, 'g', -1, 32): the exponent form from 1e+06 and below 1e-04. */
export function goFloatText(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (!Number.isFinite(v)) return v > 0 ? "+Inf" : "-Inf";
  const [mant, exp] = v.toExponential().split("e");
  const e = Number(exp);
  if (e < -4 || e >= 6) return `${mant}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  return String(v);
}

function configValue(state: FlagState, path: string): unknown {
  let cur: unknown = state.config;
  for (const p of path.split(".")) cur = (cur as Record<string, unknown> | undefined)?.[p];
  return cur;
}

/** pflag's zero value text for a flag type. */
function zeroText(type: string): string {
  switch (type) {
    case "bool":
    case "version":
      return "false";
    case "duration":
      return "0s";
    case "int32":
    case "Level":
      return "0";
    case "strings":
      return "[]";
    default:
      return "";
  }
}

/** A raw command-line value as pflag prints it back after parsing. */
function normalizedRaw(type: string, raw: string): string {
  switch (type) {
    case "bool":
      return String(parseGoBool(raw));
    case "duration":
      return formatDuration(parseDuration(raw));
    default:
      return raw;
  }
}

/** A configuration field as its flag's Value.String() prints it, or undefined if it is not that type. */
function configText(type: string, v: unknown): string | undefined {
  switch (type) {
    case "bool":
      return typeof v === "boolean" ? String(v) : undefined;
    case "int32":
    case "Level":
      return typeof v === "number" ? String(v) : undefined;
    case "float32":
      return typeof v === "number" ? goFloatText(v) : undefined;
    case "duration":
      return typeof v === "number" ? formatDuration(v) : undefined;
    case "strings":
      return `[${((v as string[] | null | undefined) ?? []).join(",")}]`;
    case "mapStringBool": {
      const m = (v as Record<string, boolean> | undefined) ?? {};
      return Object.keys(m).sort().map((k) => `${k}=${m[k]}`).join(",");
    }
    case "pattern=N,...":
      return ((v as VModuleItem[] | undefined) ?? []).map((i) => `${i.filePattern}=${i.verbosity}`).join(",");
    default:
      return v === undefined || v === null ? "" : String(v);
  }
}

/** The value text of one flag after parsing the command line. */
function valueText(f: FlagDef, state: FlagState, raw: string | undefined): string {
  if (f.configPath !== undefined) {
    const text = configText(f.type, configValue(state, f.configPath));
    if (text !== undefined) return text;
  }
  if (raw !== undefined) return normalizedRaw(f.type, raw);
  const dflt = f.defaultText(newFlagState());
  if (dflt === "") return zeroText(f.type);
  return dflt.startsWith('"') ? JSON.parse(dflt) as string : dflt;
}

/**
 * Every flag and its value on this command line, sorted by name.
 * @throws FlagError for a command line that does not parse (resolveInvocation has rejected it before)
 */
export function flagValues(argv: readonly string[]): Array<[string, string]> {
  const state = newFlagState();
  const last = new Map<string, string>();
  parseArgv(argv, FLAGS, (f, raw) => {
    f.set(state, raw);
    last.set(f.name, raw);
  });
  return [...FLAGS]
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
    .map((f) => [f.name, valueText(f, state, last.get(f.name))]);
}

/** Logs `FLAG: --name="value"` for every flag at verbosity 1, as upstream's cliflag.PrintFlags. */
export function printFlags(argv: readonly string[]): void {
  for (const [name, value] of flagValues(argv)) infoVf(1, `FLAG: --${name}=${goQuote(value)}`);
}
