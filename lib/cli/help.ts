/**
 * `--help`: the flags grouped by topic, pflag-style lines (`      --config string   The path ...`) with
 * defaults, wrapped for a terminal. Deprecated flags are hidden (as pflag does) but named at the end.
 */
import { FLAG_GROUPS, type FlagDef, FLAGS, newFlagState } from "./flags.ts";
import { UPSTREAM_KUBE_PROXY_VERSION, versionLine } from "./version.ts";

const WIDTH = 100;
const MAX_NAME_COLUMN = 40;

function flagColumn(f: FlagDef): string {
  const names = f.shorthand ? `  -${f.shorthand}, --${f.name}` : `      --${f.name}`;
  const type = f.type === "bool" ? "" : f.type === "version" ? " version[=true]" : ` ${f.type}`;
  return names + type;
}

/** Greedy word wrap; `keep` (e.g. "(default 30s)") is never split across lines. */
function wrap(text: string, width: number, keep = ""): string[] {
  const words = text.split(/\s+/).filter((w) => w !== "");
  if (keep !== "") words.push(keep);
  const lines: string[] = [];
  let line = "";
  for (const word of words) {
    if (line !== "" && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else {
      line = line === "" ? word : `${line} ${word}`;
    }
  }
  if (line !== "") lines.push(line);
  return lines;
}

/** The full --help text (ends with a newline). */
export function renderHelp(): string {
  const state = newFlagState();
  const visible = FLAGS.filter((f) => f.deprecated === undefined);
  const nameWidth = Math.min(MAX_NAME_COLUMN, Math.max(...visible.map((f) => flagColumn(f).length)));
  const descWidth = WIDTH - nameWidth - 3;
  const out: string[] = [
    versionLine(),
    "kube-proxy for edge and bare-metal nodes (iptables, nftables or userspace mode): keeps this node's",
    `rules equal to what kube-proxy ${UPSTREAM_KUBE_PROXY_VERSION} would write, and keeps them in place while the`,
    `apiserver is unreachable. Flags, configuration, health, metrics and logs follow kube-proxy ${UPSTREAM_KUBE_PROXY_VERSION}.`,
    "",
    "Usage:",
    "  edgeproxy [flags]",
    "",
    ...wrap(
      "Flags take kube-proxy's syntax: --flag=value or --flag value, --bool or --bool=false, durations " +
        "such as 500ms, 30s, 1m0s, 1h30m, lists comma-separated (repeating a list flag appends).",
      WIDTH,
    ),
  ];
  for (const group of FLAG_GROUPS) {
    const flags = visible.filter((f) => f.group === group);
    if (flags.length === 0) continue;
    out.push("", `${group}:`);
    for (const f of flags) {
      const dflt = f.defaultText(state);
      const col = flagColumn(f);
      const lines = wrap(f.usage, descWidth, dflt !== "" ? `(default ${dflt})` : "");
      if (col.length > nameWidth) {
        out.push(col);
        for (const l of lines) out.push(" ".repeat(nameWidth + 3) + l);
      } else {
        out.push(col.padEnd(nameWidth + 3) + (lines[0] ?? ""));
        for (const l of lines.slice(1)) out.push(" ".repeat(nameWidth + 3) + l);
      }
    }
  }
  const deprecated = FLAGS.filter((f) => f.deprecated !== undefined).map((f) => `--${f.name}`);
  out.push(
    "",
    ...wrap(`Deprecated kube-proxy flags, accepted with a warning: ${deprecated.join(", ")}.`, WIDTH),
    "Compatibility with every kube-proxy flag and the --config precedence rules: docs/flags.md.",
  );
  return out.join("\n") + "\n";
}
