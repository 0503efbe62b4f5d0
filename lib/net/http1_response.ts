/**
 * Writing an HTTP/1.1 response whose body is already in hand, with the bytes Go's net/http writes for the
 * same handler: the handler's headers in canonical case sorted by name, then `Date` and `Content-Length`,
 * then `Connection: close` when the server closes after it. Used by the small server behind the
 * health-check node ports (lib/runtime/serve_small.ts).
 */

/** Go's StatusText for the statuses our servers answer; others get Go's "status code N" wording. */
const STATUS_TEXT: Record<number, string> = {
  200: "OK",
  204: "No Content",
  400: "Bad Request",
  404: "Not Found",
  405: "Method Not Allowed",
  431: "Request Header Fields Too Large",
  500: "Internal Server Error",
  503: "Service Unavailable",
  505: "HTTP Version Not Supported",
};

/** Go's textproto.CanonicalMIMEHeaderKey for a valid token: "x-load-balancing" → "X-Load-Balancing". */
export function canonicalHeaderKey(name: string): string {
  return name.toLowerCase().replace(/(^|-)([a-z])/g, (_, dash: string, c: string) => dash + c.toUpperCase());
}

/** What to write. */
export interface Http1Response {
  readonly status: number;
  /** Header fields (names in any case); Date, Content-Length and Connection are the writer's own. */
  readonly headers: Iterable<readonly [string, string]>;
  readonly body: Uint8Array;
  /** A response to HEAD: Content-Length of the body, no body bytes. */
  readonly head?: boolean;
  /** The connection closes after this response (`Connection: close` is sent). */
  readonly close?: boolean;
  /** The Date header's time (now when absent). */
  readonly date?: Date;
}

const OWN = new Set(["date", "content-length", "connection", "transfer-encoding"]);
const encoder = new TextEncoder();

/** The response's bytes: status line, headers, blank line, body. */
export function encodeHttp1Response(r: Http1Response): Uint8Array {
  const text = STATUS_TEXT[r.status];
  const lines = [
    text === undefined ? `HTTP/1.1 ${r.status} status code ${r.status}` : `HTTP/1.1 ${r.status} ${text}`,
  ];
  const fields: [string, string][] = [];
  for (const [name, value] of r.headers) {
    if (!OWN.has(name.toLowerCase())) fields.push([canonicalHeaderKey(name), value]);
  }
  fields.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  for (const [name, value] of fields) lines.push(`${name}: ${value}`);
  lines.push(`Date: ${(r.date ?? new Date()).toUTCString()}`);
  lines.push(`Content-Length: ${r.body.length}`);
  if (r.close) lines.push("Connection: close");
  const head = encoder.encode(lines.join("\r\n") + "\r\n\r\n");
  if (r.head || r.body.length === 0) return head;
  const out = new Uint8Array(head.length + r.body.length);
  out.set(head);
  out.set(r.body, head.length);
  return out;
}

/** Go's answer to a request it could not read: plain text naming the status, then the connection closes. */
export function encodeHttp1Error(status: number): Uint8Array {
  const text = STATUS_TEXT[status] ?? `status code ${status}`;
  return encoder.encode(
    `HTTP/1.1 ${status} ${text}\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n` +
      `${status} ${text}`,
  );
}
