/**
 * The metrics server behind `metricsBindAddress` (default 127.0.0.1:10249), with the routes of upstream's
 * serveMetrics (cmd/kube-proxy/app/server.go):
 * - `/metrics`: the registry in text format 0.0.4 (gzip when the scraper accepts it, as promhttp does);
 * - `/metrics/slis`: component SLI metrics (kubernetes_healthcheck, kubernetes_healthchecks_total) for the
 *   `/healthz` checks of this server;
 * - `/healthz` (and `/healthz/ping`): the apiserver-style plain `ok` (`?verbose` lists the checks);
 * - `/proxyMode`: the mode string, `iptables`;
 * - `/configz`: `{"kubeproxy.config.k8s.io": <running KubeProxyConfiguration>}` as component-base configz
 *   writes it (lib/server/configz.ts: Go field names, Go duration strings);
 * - everything else: Go's 404. `/debug/pprof` (enableProfiling) has no equivalent here.
 */
import { Hono } from "hono";
import { gzipSync } from "node:zlib";
import { Registry, TEXT_CONTENT_TYPE } from "../metrics/registry.ts";
import type { KubeProxyConfiguration } from "../config/types.ts";
import { configzDocument } from "./configz.ts";
import { goJSON } from "./go_json.ts";
import { goNotFound } from "./proxier_health.ts";

/** The configz group name kube-proxy registers its configuration under. */
export const CONFIGZ_NAME = "kubeproxy.config.k8s.io";

/** Options of {@link createMetricsApp}. */
export interface MetricsAppOptions {
  /** The registry served on /metrics. */
  readonly registry: Registry;
  /** Served on /proxyMode; "iptables" unless told otherwise. */
  readonly proxyMode?: string;
  /**
   * The running configuration, called per request and served as upstream's configz does
   * ({@link configzDocument}); absent → `{}`.
   */
  readonly configz?: () => KubeProxyConfiguration;
}

const PLAIN = { "Content-Type": "text/plain; charset=utf-8", "X-Content-Type-Options": "nosniff" } as const;

/** True when an Accept-Encoding header allows gzip (q > 0). */
function acceptsGzip(header: string | null): boolean {
  if (!header) return false;
  return header.split(",").some((part) => {
    const [coding, ...params] = part.trim().split(";").map((s) => s.trim());
    if (coding.toLowerCase() !== "gzip") return false;
    const q = params.find((p) => p.startsWith("q="));
    return q === undefined || Number(q.slice(2)) > 0;
  });
}

/** Builds the metrics server's Hono app. */
export function createMetricsApp(opts: MetricsAppOptions): Hono {
  const proxyMode = opts.proxyMode ?? "iptables";
  const slis = new Registry();
  const healthcheck = slis.gauge({
    name: "kubernetes_healthcheck",
    help: "This metric records the result of a single healthcheck.",
    labelNames: ["name", "type"],
    stabilityLevel: "STABLE",
  });
  const healthchecks = slis.counter({
    name: "kubernetes_healthchecks_total",
    help: "This metric records the results of all healthcheck.",
    labelNames: ["name", "status", "type"],
    stabilityLevel: "STABLE",
  });
  // The only check kube-proxy's metrics server installs is "ping", which always passes.
  const ping = () => {
    healthcheck.set({ name: "ping", type: "healthz" }, 1);
    healthchecks.inc({ name: "ping", status: "success", type: "healthz" });
  };

  const metricsResponse = (registry: Registry, req: Request): Response => {
    const text = registry.metrics();
    if (acceptsGzip(req.headers.get("Accept-Encoding"))) {
      return new Response(gzipSync(new TextEncoder().encode(text)), {
        headers: { "Content-Type": TEXT_CONTENT_TYPE, "Content-Encoding": "gzip" },
      });
    }
    return new Response(text, { headers: { "Content-Type": TEXT_CONTENT_TYPE } });
  };

  const app = new Hono();
  app.all("/metrics", (c) => metricsResponse(opts.registry, c.req.raw));
  app.all("/metrics/slis", (c) => metricsResponse(slis, c.req.raw));
  app.all("/healthz", (c) => {
    ping();
    const verbose = new URL(c.req.url).searchParams.has("verbose");
    return new Response(verbose ? "[+]ping ok\nhealthz check passed\n" : "ok", { headers: PLAIN });
  });
  app.all("/healthz/ping", () => {
    ping();
    return new Response("ok", { headers: { "Content-Type": "text/plain; charset=utf-8" } });
  });
  app.all("/proxyMode", () => new Response(proxyMode, { headers: PLAIN }));
  app.all("/configz", () => {
    const config = opts.configz?.();
    const body = config === undefined ? {} : { [CONFIGZ_NAME]: configzDocument(config) };
    return new Response(goJSON(body), {
      headers: { "Content-Type": "application/json", "X-Content-Type-Options": "nosniff" },
    });
  });
  app.notFound(() => goNotFound());
  return app;
}
