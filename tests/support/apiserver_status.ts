/**
 * meta/v1 Status bodies as the real apiserver renders them (field order kind, apiVersion, metadata, status,
 * message, reason, details, code), and the reason the apiserver pairs with each HTTP code.
 */

/** A meta/v1 Status object. */
export interface StatusBody {
  kind: "Status";
  apiVersion: "v1";
  metadata: Record<string, never>;
  status: "Failure";
  message: string;
  reason: string;
  details?: Record<string, unknown>;
  code: number;
}

/** The StatusReason the apiserver uses for an HTTP code. */
export const REASONS: Record<number, string> = {
  400: "BadRequest",
  401: "Unauthorized",
  403: "Forbidden",
  404: "NotFound",
  405: "MethodNotAllowed",
  406: "NotAcceptable",
  409: "AlreadyExists",
  410: "Expired",
  422: "Invalid",
  429: "TooManyRequests",
  500: "InternalError",
  503: "ServiceUnavailable",
  504: "Timeout",
};

/** Builds a Failure Status. */
export function statusBody(
  code: number,
  message: string,
  reason = REASONS[code] ?? "Unknown",
  details?: Record<string, unknown>,
): StatusBody {
  const s: StatusBody = {
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message,
    reason,
    code,
  };
  if (details) {
    // keep the apiserver's field order: details before code
    const { code: c, ...rest } = s;
    return { ...rest, details, code: c } as StatusBody;
  }
  return s;
}

/** The message of a 410 for a resourceVersion older than the compaction mark (etcd3 wording). */
export function tooOldMessage(rv: number | string, compacted: number): string {
  return `too old resource version: ${rv} (${compacted})`;
}

/** The message of a 410 for an expired `continue` token (apiserver wording). */
export const CONTINUE_EXPIRED_MESSAGE =
  "The provided continue parameter is too old to display a consistent list " +
  "result. You can start a new list without the continue parameter, or use the continue token in this response " +
  "to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent " +
  "list - objects that were created, modified, or deleted between the time the first chunk was returned and " +
  "now may show up in the list.";
