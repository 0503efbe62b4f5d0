/**
 * client-go's request metrics as component-base registers them in every Kubernetes component
 * (component-base/metrics/prometheus/restclient/metrics.go), fed by our apiserver transport:
 * - `rest_client_requests_total{code,host,method}`: one per request that finished, `code` the HTTP status
 *   or `<error>` when no response arrived;
 * - `rest_client_request_duration_seconds{verb,host}`: time to the response headers, `verb` the HTTP method
 *   as client-go passes it. Requests that got no response are counted but not timed.
 * Both are vectors: like client_golang, they show series only after the first request (none in manifests
 * mode).
 */
import type { RequestEvent } from "../k8s/stats.ts";
import type { Counter, Histogram, Registry } from "./registry.ts";

/** Buckets of rest_client_request_duration_seconds (5 ms .. 60 s), as component-base declares them. */
export const REST_CLIENT_LATENCY_BUCKETS: readonly number[] = [
  0.005,
  0.025,
  0.1,
  0.25,
  0.5,
  1,
  2,
  4,
  8,
  15,
  30,
  60,
];

/** HTTP method of a client-go verb (list, watch and get are GETs; create is a POST). */
export function httpMethodOf(verb: string): string {
  switch (verb) {
    case "create":
      return "POST";
    case "update":
      return "PUT";
    case "patch":
      return "PATCH";
    case "delete":
      return "DELETE";
    default:
      return "GET";
  }
}

/** The two rest_client_* families and the function that records one request into both. */
export interface RestClientMetrics {
  readonly requestsTotal: Counter;
  readonly requestDuration: Histogram;
  /** Records one finished apiserver request. */
  record(e: RequestEvent): void;
}

/** Registers rest_client_requests_total and rest_client_request_duration_seconds in `registry`. */
export function createRestClientMetrics(registry: Registry): RestClientMetrics {
  const requestDuration = registry.histogram({
    name: "rest_client_request_duration_seconds",
    help: "Request latency in seconds. Broken down by verb, and host.",
    labelNames: ["verb", "host"],
    buckets: REST_CLIENT_LATENCY_BUCKETS,
    stabilityLevel: "ALPHA",
  });
  // No StabilityLevel upstream: component-base defaults it to ALPHA, which shows in HELP.
  const requestsTotal = registry.counter({
    name: "rest_client_requests_total",
    help: "Number of HTTP requests, partitioned by status code, method, and host.",
    labelNames: ["code", "method", "host"],
    stabilityLevel: "ALPHA",
  });
  return {
    requestsTotal,
    requestDuration,
    record(e) {
      const method = httpMethodOf(e.verb);
      requestsTotal.inc({ code: e.code, method, host: e.host });
      if (e.latencyMs !== null) requestDuration.observe({ verb: method, host: e.host }, e.latencyMs / 1000);
    },
  };
}
