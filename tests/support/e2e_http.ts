/**
 * HTTP GET from inside a network namespace with curl (the agent's /healthz, /metrics and health-check node
 * ports listen only there). Never throws for HTTP or connection errors: status 0 means no HTTP answer.
 */
import type { Netns } from "./netns.ts";

/** What curl got: the status (0 = no HTTP answer), the body and the response headers (lower-case names). */
export interface HttpAnswer {
  readonly status: number;
  readonly body: string;
  readonly headers: Readonly<Record<string, string>>;
  /** curl's exit code and stderr when there was no answer. */
  readonly curlError: string;
}

const MARK = "\n--e2e-http-status--";

/** GETs `url` from inside `ns` with curl (`-m` timeout, default 3 s). */
export async function httpGetIn(
  ns: Netns,
  url: string,
  opts: { timeoutMs?: number } = {},
): Promise<HttpAnswer> {
  const seconds = ((opts.timeoutMs ?? 3000) / 1000).toFixed(1);
  const r = await ns.exec(
    ["curl", "-sS", "-D", "-", "-m", seconds, "-o", "-", "-w", `${MARK}%{http_code}`, url],
    { timeoutMs: (opts.timeoutMs ?? 3000) + 5000 },
  );
  // stdout: the header block (-D -; /dev/stderr cannot be opened under Bun, whose stdio are sockets), a
  // blank line, the body, then the marker and the status.
  const at = r.stdout.lastIndexOf(MARK);
  const status = at === -1 ? 0 : Number(r.stdout.slice(at + MARK.length).trim()) || 0;
  const all = at === -1 ? r.stdout : r.stdout.slice(0, at);
  const split = all.indexOf("\r\n\r\n");
  const head = split === -1 ? "" : all.slice(0, split);
  const body = split === -1 ? all : all.slice(split + 4);
  const headers: Record<string, string> = {};
  for (const line of head.split(/\r?\n/)) {
    const m = /^([A-Za-z0-9-]+):\s*(.*)$/.exec(line);
    if (m) headers[m[1].toLowerCase()] = m[2];
  }
  const curlError = status === 0 ? `curl exited ${r.code}: ${r.stderr.trim().split("\n").pop() ?? ""}` : "";
  return { status, body, headers, curlError };
}
