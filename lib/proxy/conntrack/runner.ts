/**
 * The conntrack table behind a narrow interface. The real implementation drives the `conntrack` CLI from
 * conntrack-tools (Debian package `conntrack`); upstream uses netlink directly, which a Bun executable
 * cannot do without native code.
 *
 * Measured on a 2-core VM (conntrack-tools 1.4.7, kernel 6.x) with 115k UDP entries in one namespace:
 * - `conntrack -L -p udp -o extended` takes 0.47-0.6 s and prints 17-20 MB. XML output takes 0.73 s and
 *   70 MB, so the extended text format is used.
 * - Parsing those lines here takes 0.13-0.3 s.
 * - Every `conntrack -D`, even with a full tuple, walks the whole table: about 0.22 s at 100k entries.
 *   `conntrack -R -` (1.4.6 and later) runs many -D lines in one process, but still walks the table once
 *   per line. So filters are deduplicated before they get here.
 */
import { existsSync } from "node:fs";
import type { IPFamily, Protocol } from "../types.ts";
import { log } from "../../log.ts";
import { runInProcessGroup, type RunResult } from "../../runtime/process_groups.ts";
import {
  type ConntrackDeleteFilter,
  type ConntrackFlow,
  deleteArgs,
  listArgs,
  parseConntrackLine,
} from "./flow.ts";

/** Lists and deletes conntrack entries. */
export interface ConntrackRunner {
  /**
   * Entries of one family and protocol. `keep` is applied while the output streams in, so uninteresting
   * entries of a big table are never held in memory.
   */
  listFlows(
    family: IPFamily,
    protocol: Protocol,
    keep?: (flow: ConntrackFlow) => boolean,
  ): Promise<ConntrackFlow[]>;
  /**
   * Deletes every entry matching any of the filters; returns how many entries were deleted. Throws after
   * trying every filter if some of them failed.
   */
  deleteFlows(filters: readonly ConntrackDeleteFilter[]): Promise<number>;
}

/** Where the conntrack binary usually lives (absolute paths only: no $PATH lookup at run time). */
export const CONNTRACK_PATHS = [
  "/usr/sbin/conntrack",
  "/sbin/conntrack",
  "/usr/bin/conntrack",
  "/usr/local/sbin/conntrack",
];

/** The first existing path from CONNTRACK_PATHS, or null when conntrack-tools is not installed. */
export function findConntrackBinary(candidates: readonly string[] = CONNTRACK_PATHS): string | null {
  return candidates.find((p) => existsSync(p)) ?? null;
}

/** Settings of CliConntrackRunner. */
export interface CliConntrackRunnerOptions {
  /** Absolute path of `conntrack`; defaults to findConntrackBinary() or /usr/sbin/conntrack. */
  readonly binary?: string;
  /** Prepended to every command, e.g. ["ip", "netns", "exec", "ns1"] in tests. */
  readonly commandPrefix?: readonly string[];
  /** Kills a conntrack command that runs longer than this (default 60 s). */
  readonly timeoutMs?: number;
}

const DELETED_RE = /(\d+) flow entries have been deleted/;

/** ConntrackRunner on the conntrack CLI. */
export class CliConntrackRunner implements ConntrackRunner {
  readonly binary: string;
  readonly #prefix: readonly string[];
  readonly #timeoutMs: number;
  /** Set once `conntrack -R` has been seen to fail, so later deletes go one filter per command. */
  #batchUnsupported = false;

  /** See CliConntrackRunnerOptions. */
  constructor(opts: CliConntrackRunnerOptions = {}) {
    this.binary = opts.binary ?? findConntrackBinary() ?? CONNTRACK_PATHS[0];
    if (!this.binary.startsWith("/")) {
      throw new Error(`conntrack binary must be an absolute path, got ${JSON.stringify(this.binary)}`);
    }
    this.#prefix = opts.commandPrefix ?? [];
    this.#timeoutMs = opts.timeoutMs ?? 60_000;
  }

  /** `conntrack -L -f <family> -p <protocol> -o extended`, parsed line by line as it streams. */
  async listFlows(
    family: IPFamily,
    protocol: Protocol,
    keep?: (flow: ConntrackFlow) => boolean,
  ): Promise<ConntrackFlow[]> {
    const flows: ConntrackFlow[] = [];
    const args = listArgs(family, protocol);
    const res = await this.#exec(args, undefined, (line) => {
      const flow = parseConntrackLine(line);
      if (flow !== null && flow.protocol === protocol && flow.family === family && (keep?.(flow) ?? true)) {
        flows.push(flow);
      }
    });
    if (res.code !== 0) throw this.#error(args, res);
    return flows;
  }

  /**
   * Runs all filters through one `conntrack -R -` (each deleted entry is printed on stdout, which gives
   * the count). If the batch fails (an older conntrack without -R, or a rejected line), falls back to one
   * `conntrack -D` per filter, where exit status 1 with "0 flow entries have been deleted" is success.
   */
  async deleteFlows(filters: readonly ConntrackDeleteFilter[]): Promise<number> {
    if (filters.length === 0) return 0;
    const argLists = filters.map((f) => deleteArgs(f)); // throws on a malformed filter, before any exec
    if (!this.#batchUnsupported && argLists.length > 1) {
      const input = argLists.map((a) => a.join(" ") + "\n").join("");
      const res = await this.#exec(["-R", "-"], input);
      if (res.code === 0) return res.stdoutLines;
      this.#batchUnsupported = true;
      log.warn(`${this.#error(["-R", "-"], res).message}; deleting one filter per command from now on`);
    }
    let deleted = 0;
    const failures: string[] = [];
    for (const args of argLists) {
      const res = await this.#exec(args);
      const m = DELETED_RE.exec(res.stderr);
      if (res.code === 0 || (res.code === 1 && m !== null && m[1] === "0")) {
        deleted += m !== null ? Number(m[1]) : res.stdoutLines;
      } else {
        failures.push(this.#error(args, res).message);
      }
    }
    if (failures.length > 0) {
      throw new Error(
        `${failures.length} of ${argLists.length} conntrack deletes failed (${deleted} entries deleted): ` +
          failures.join("; "),
      );
    }
    return deleted;
  }

  #error(args: readonly string[], res: RunResult): Error {
    const how = res.exit;
    const stderr = res.stderr.trim().split("\n").slice(0, 3).join(" | ");
    return new Error(`${[this.binary, ...args].join(" ")}: ${how}${stderr ? `: ${stderr}` : ""}`);
  }

  /**
   * Runs conntrack in its own process group (a timeout or the agent's shutdown kills it with anything it
   * started); streams stdout lines to `onLine` (or just counts them) and collects stderr.
   */
  #exec(args: readonly string[], stdin?: string, onLine?: (line: string) => void): Promise<RunResult> {
    return runInProcessGroup([...this.#prefix, this.binary, ...args], {
      stdin,
      // `-R -` opens /dev/stdin by name.
      stdinByPath: stdin !== undefined,
      timeoutMs: this.#timeoutMs,
      onStdoutLine: onLine ?? (() => {}),
    });
  }
}
