/**
 * Conntrack entries and delete filters, plus their text form for the `conntrack` CLI (conntrack-tools):
 * parsing `conntrack -L -o extended` lines and rendering `conntrack -D` arguments.
 *
 * An extended line looks like this (the second tuple is the reply direction; acct, zones, labels and
 * TCP/SCTP states add tokens):
 *
 *   ipv4     2 udp      17 28 src=10.0.0.1 dst=10.96.0.10 sport=40000 dport=53 [UNREPLIED]
 *     src=10.244.1.5 dst=10.0.0.1 sport=5353 dport=40000 mark=0 use=1
 *
 * (on one line). The parser takes the first src/dst/sport/dport as the original tuple and the second as
 * the reply tuple, and ignores every other token.
 */
import { ipVersion } from "../../net/ip.ts";
import type { IPFamily, Protocol } from "../types.ts";

/** One conntrack entry: the original and reply tuples (addresses as conntrack prints them). */
export interface ConntrackFlow {
  readonly family: IPFamily;
  readonly protocol: Protocol;
  readonly origSrc: string;
  readonly origDst: string;
  readonly origSrcPort: number;
  readonly origDstPort: number;
  readonly replySrc: string;
  readonly replyDst: string;
  readonly replySrcPort: number;
  readonly replyDstPort: number;
}

/**
 * Entries to delete: every field that is set must match (conntrack -D semantics). Upstream's reconciler
 * uses two shapes: service IP (origDst, origDstPort, replySrc, replySrcPort) and NodePort (origDstPort,
 * replySrc, replySrcPort).
 */
export interface ConntrackDeleteFilter {
  readonly family: IPFamily;
  readonly protocol: Protocol;
  readonly origDst?: string;
  readonly origDstPort?: number;
  readonly replySrc?: string;
  readonly replySrcPort?: number;
}

const PROTOCOLS: Record<string, Protocol> = { tcp: "TCP", udp: "UDP", sctp: "SCTP" };

/**
 * Parses one line of `conntrack -L` output (extended or default format). Returns null for lines that are
 * not a TCP/UDP/SCTP entry with complete tuples (ICMP entries, summaries, blank lines).
 *
 * It scans with indexOf rather than splitting into tokens: a busy node lists 100k+ entries per cleanup,
 * and this keeps parsing to about 1 µs a line.
 */
export function parseConntrackLine(line: string): ConntrackFlow | null {
  let pos = 0;
  while (line.charCodeAt(pos) === 32) pos++;
  let family: IPFamily | null = null;
  if (line.startsWith("ipv4 ", pos) || line.startsWith("ipv6 ", pos)) {
    family = line.charCodeAt(pos + 3) === 52 ? "IPv4" : "IPv6";
    pos = skipToken(line, skipToken(line, pos)); // family name and number
  }
  const protoEnd = line.indexOf(" ", pos);
  if (protoEnd < 0) return null;
  const protocol = PROTOCOLS[line.slice(pos, protoEnd)];
  if (protocol === undefined) return null;

  const cur = { pos: protoEnd };
  const origSrc = valueAfter(line, " src=", cur);
  const origDst = valueAfter(line, " dst=", cur);
  const origSrcPort = parsePort(valueAfter(line, " sport=", cur));
  const origDstPort = parsePort(valueAfter(line, " dport=", cur));
  const replySrc = valueAfter(line, " src=", cur);
  const replyDst = valueAfter(line, " dst=", cur);
  const replySrcPort = parsePort(valueAfter(line, " sport=", cur));
  const replyDstPort = parsePort(valueAfter(line, " dport=", cur));
  if (
    origSrc === undefined || origDst === undefined || replySrc === undefined || replyDst === undefined ||
    origSrcPort === null || origDstPort === null || replySrcPort === null || replyDstPort === null
  ) {
    return null;
  }
  const kind = ipVersion(origSrc);
  if (
    kind === 0 || ipVersion(origDst) !== kind || ipVersion(replySrc) !== kind || ipVersion(replyDst) !== kind
  ) return null;
  const inferred: IPFamily = kind === 6 ? "IPv6" : "IPv4";
  if (family !== null && family !== inferred) return null;
  return {
    family: inferred,
    protocol,
    origSrc,
    origDst,
    origSrcPort,
    origDstPort,
    replySrc,
    replyDst,
    replySrcPort,
    replyDstPort,
  };
}

/** Index just past the token at `pos` and the spaces after it. */
function skipToken(line: string, pos: number): number {
  let i = line.indexOf(" ", pos);
  if (i < 0) return line.length;
  while (line.charCodeAt(i) === 32) i++;
  return i;
}

/** The value of the next ` key=` after cur.pos (up to the next space); advances cur.pos past it. */
function valueAfter(line: string, key: string, cur: { pos: number }): string | undefined {
  const at = line.indexOf(key, cur.pos);
  if (at < 0) return undefined;
  const start = at + key.length;
  let end = line.indexOf(" ", start);
  if (end < 0) end = line.length;
  cur.pos = end;
  return line.slice(start, end);
}

function parsePort(s: string | undefined): number | null {
  if (s === undefined || !/^\d{1,5}$/.test(s)) return null;
  const n = Number(s);
  return n <= 65535 ? n : null;
}

/** Parses a whole `conntrack -L` output; lines that are not flows are skipped. */
export function parseConntrackOutput(text: string): ConntrackFlow[] {
  const flows: ConntrackFlow[] = [];
  for (const line of text.split("\n")) {
    const flow = parseConntrackLine(line);
    if (flow !== null) flows.push(flow);
  }
  return flows;
}

/** `conntrack -L` arguments for one family and protocol, in the format parseConntrackLine reads. */
export function listArgs(family: IPFamily, protocol: Protocol): string[] {
  return ["-L", "-f", family === "IPv6" ? "ipv6" : "ipv4", "-p", protocol.toLowerCase(), "-o", "extended"];
}

/**
 * `conntrack -D` arguments for a filter, e.g. `-D -p udp --orig-dst 10.96.0.10 --orig-port-dst 53
 * --reply-src 10.244.1.5 --reply-port-src 5353`. Throws on a malformed filter (an address of the wrong
 * family, a port out of range, no match field at all), naming the field and value: a filter must never
 * turn into "delete everything".
 */
export function deleteArgs(filter: ConntrackDeleteFilter): string[] {
  const args = ["-D"];
  if (filter.family === "IPv6") args.push("-f", "ipv6");
  args.push("-p", filter.protocol.toLowerCase());
  const want = filter.family === "IPv6" ? 6 : 4;
  let fields = 0;
  const addr = (flag: string, field: string, v: string | undefined) => {
    if (v === undefined) return;
    if (ipVersion(v) !== want) {
      throw new Error(
        `conntrack delete filter: ${field} ${JSON.stringify(v)} is not an ${filter.family} address`,
      );
    }
    args.push(flag, v);
    fields++;
  };
  const port = (flag: string, field: string, v: number | undefined) => {
    if (v === undefined) return;
    if (!Number.isInteger(v) || v < 1 || v > 65535) {
      throw new Error(`conntrack delete filter: ${field} ${v} is not a port number`);
    }
    args.push(flag, String(v));
    fields++;
  };
  addr("--orig-dst", "origDst", filter.origDst);
  port("--orig-port-dst", "origDstPort", filter.origDstPort);
  addr("--reply-src", "replySrc", filter.replySrc);
  port("--reply-port-src", "replySrcPort", filter.replySrcPort);
  if (fields === 0) throw new Error("conntrack delete filter: no match field set");
  return args;
}

/** True when the flow matches every field the filter sets (what `conntrack -D` with it would delete). */
export function filterMatches(filter: ConntrackDeleteFilter, flow: ConntrackFlow): boolean {
  return filter.family === flow.family &&
    filter.protocol === flow.protocol &&
    (filter.origDst === undefined || filter.origDst === flow.origDst) &&
    (filter.origDstPort === undefined || filter.origDstPort === flow.origDstPort) &&
    (filter.replySrc === undefined || filter.replySrc === flow.replySrc) &&
    (filter.replySrcPort === undefined || filter.replySrcPort === flow.replySrcPort);
}

/** A stable text key for a filter (dedup and sort): its conntrack arguments. */
export function filterKey(filter: ConntrackDeleteFilter): string {
  return deleteArgs(filter).join(" ");
}
