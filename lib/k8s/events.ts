/**
 * The "Starting" event upstream kube-proxy records for its Node when it starts (server.go birthCry, through
 * the events.k8s.io/v1 recorder with reportingController "kube-proxy"). Best effort: a failure is logged at
 * debug level and never stops the proxy.
 */
import { hostname } from "node:os";
import { type ApiTransport, errorChain, type Logger, silentLogger } from "./transport.ts";

/** Options of {@link recordStartingEvent}; all for tests except `log`. */
export interface StartingEventOptions {
  log?: Logger;
  /** Wall clock (ms). */
  now?: () => number;
  /** Host name for reportingInstance (default os.hostname()). */
  hostname?: string;
  signal?: AbortSignal;
}

/** Builds the events.k8s.io/v1 Event object upstream kube-proxy posts at start. */
export function startingEvent(nodeName: string, nowMs: number, host: string): Record<string, unknown> {
  // Event names are "<regarding name>.<hex nanoseconds>", as the Go recorder makes them.
  const nanos = (BigInt(Math.floor(nowMs)) * 1_000_000n).toString(16);
  return {
    apiVersion: "events.k8s.io/v1",
    kind: "Event",
    metadata: { name: `${nodeName}.${nanos}`, namespace: "default" },
    eventTime: microTime(nowMs),
    reportingController: "kube-proxy",
    reportingInstance: `kube-proxy-${host}`,
    action: "StartKubeProxy",
    reason: "Starting",
    // The Node reference kube-proxy builds: its UID is the node name.
    regarding: { kind: "Node", name: nodeName, uid: nodeName, namespace: "" },
    note: "Starting kube-proxy.",
    type: "Normal",
  };
}

/** metav1.MicroTime text: RFC 3339 with exactly six fractional digits. */
function microTime(ms: number): string {
  return new Date(ms).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

/**
 * POSTs the Starting event for `nodeName` (namespace "default", where events about cluster-scoped objects
 * go). Resolves true when the apiserver accepted it, false otherwise; never rejects.
 */
export async function recordStartingEvent(
  transport: ApiTransport,
  nodeName: string,
  opts: StartingEventOptions = {},
): Promise<boolean> {
  const log = opts.log ?? transport.log ?? silentLogger;
  const ev = startingEvent(nodeName, (opts.now ?? Date.now)(), opts.hostname ?? hostname());
  try {
    await transport.request({
      method: "POST",
      path: "/apis/events.k8s.io/v1/namespaces/default/events",
      body: ev,
      verb: "create",
      resource: "events",
      signal: opts.signal,
      timeoutMs: 10_000,
    });
    return true;
  } catch (e) {
    log.debug(`recording the Starting event for node ${nodeName} failed (ignored): ${errorChain(e)}`);
    return false;
  }
}
