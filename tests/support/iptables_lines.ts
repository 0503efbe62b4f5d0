/**
 * Streaming for fake iptables runners: the `execLines` / `saveLines` of a fake derived from its `exec` /
 * `save`, with the lines split as the real runner's spawner splits them (lib/runtime/process_groups.ts
 * `onStdoutLine`: on "\n", a last unterminated line included).
 */
import type { ExecResult, IptablesRunner, IptablesTable } from "../../lib/proxy/iptables/runner.ts";

/** Hands `text`'s lines to `onLine` one by one. */
export function streamLines(text: string, onLine: (line: string) => void): void {
  const parts = text.split("\n");
  const last = parts.pop()!;
  for (const l of parts) onLine(l);
  if (last !== "") onLine(last);
}

/** An `execLines` answering as `exec` does, its stdout streamed instead of returned. */
export function execLinesVia(
  exec: (args: readonly string[]) => Promise<ExecResult>,
): IptablesRunner["execLines"] {
  return async (args, onLine) => {
    const r = await exec(args);
    streamLines(r.stdout, onLine);
    return { ...r, stdout: "" };
  };
}

/** A `saveLines` answering as `save` does, streamed. */
export function saveLinesVia(save: (table: IptablesTable) => Promise<string>): IptablesRunner["saveLines"] {
  return async (table, onLine) => streamLines(await save(table), onLine);
}
