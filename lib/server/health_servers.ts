/**
 * Starts the proxy health server (healthzBindAddress) and the metrics server (metricsBindAddress) like
 * upstream's serveHealthz / serveMetrics (cmd/kube-proxy/app/server.go):
 * - an empty address disables that server;
 * - with bindAddressHardFail, a failed bind is fatal: this function rejects with
 *   `healthz server failed: cannot listen on …` or `starting metrics server failed: cannot listen on …`
 *   (the caller exits non-zero, as kube-proxy's Run returns the error);
 * - without it, the failure is logged and the bind is retried every 5 s (upstream's `wait.Until` period)
 *   until it succeeds, while the proxy keeps running.
 * A wildcard host listens dual-stack like Go (see listen.ts).
 */
import type { FetchApp, FetchHandler, ServedApp, ServeFn } from "../runtime/serve.ts";
import { serveApp } from "../runtime/serve.ts";
import { joinHostPort } from "../net/go_net.ts";
import { listen, parseBindAddress } from "./listen.ts";
import { processLogger, type ServerLogger } from "./logger.ts";

/** kube-proxy's default health port (ports.ProxyHealthzPort). */
export const DEFAULT_HEALTHZ_PORT = 10256;
/** kube-proxy's default metrics port (ports.ProxyStatusPort). */
export const DEFAULT_METRICS_PORT = 10249;
/** Upstream retries a failed server every 5 s. */
export const DEFAULT_RETRY_INTERVAL_MS = 5000;

/** Options of {@link startHealthServers}. */
export interface HealthServersOptions {
  /** e.g. "0.0.0.0:10256"; "" disables the health server. A bare IP gets port 10256. */
  readonly healthzBindAddress: string;
  /** e.g. "127.0.0.1:10249"; "" disables the metrics server. A bare IP gets port 10249. */
  readonly metricsBindAddress: string;
  /** --bind-address-hard-fail. */
  readonly bindAddressHardFail: boolean;
  /** The health server's app (createHealthzApp). */
  readonly healthzApp: FetchApp | FetchHandler;
  /** The metrics server's app (createMetricsApp). */
  readonly metricsApp: FetchApp | FetchHandler;
  /** Retry period without hard-fail; default 5000 ms. */
  readonly retryIntervalMs?: number;
  /** Listener factory (tests hand in a fake). */
  readonly serve?: ServeFn;
  readonly logger?: ServerLogger;
}

/** The running servers. */
export interface HealthServers {
  /** The health server's listener; null while disabled or not bound yet. */
  healthz(): ServedApp | null;
  /** The metrics server's listener; null while disabled or not bound yet. */
  metrics(): ServedApp | null;
  /** Stops retries and closes both listeners. */
  close(): Promise<void>;
}

/** One server that binds once, or keeps retrying. */
class RetryingServer {
  listener: ServedApp | null = null;
  #timer: ReturnType<typeof setTimeout> | null = null;
  #closed = false;

  constructor(
    readonly what: "healthz" | "metrics",
    readonly app: FetchApp | FetchHandler,
    readonly host: string,
    readonly port: number,
    readonly serve: ServeFn,
    readonly logger: ServerLogger,
  ) {}

  /** One bind attempt; resolves to the error (already prefixed like upstream) or null. */
  async attempt(): Promise<Error | null> {
    try {
      const l = await listen(this.app, this.host, this.port, this.serve);
      if (this.#closed) {
        await l.close();
        return null;
      }
      this.listener = l;
      this.logger.info(`${this.what} server listening`, { address: joinHostPort(l.hostname, l.port) });
      return null;
    } catch (e) {
      const reason = e instanceof Error ? e.message : String(e);
      return new Error(
        this.what === "healthz"
          ? `healthz server failed: ${reason}`
          : `starting metrics server failed: ${reason}`,
        { cause: e },
      );
    }
  }

  /** Retries every `intervalMs` until bound or closed, logging each failure. */
  retryEvery(intervalMs: number, first: Error): void {
    this.logger.error(`${first.message}; retrying every ${intervalMs / 1000}s`);
    const tick = async () => {
      this.#timer = null;
      if (this.#closed) return;
      const err = await this.attempt();
      if (err === null || this.#closed) return;
      this.logger.error(err.message);
      this.#timer = setTimeout(tick, intervalMs);
    };
    this.#timer = setTimeout(tick, intervalMs);
  }

  async close(): Promise<void> {
    this.#closed = true;
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
    const l = this.listener;
    this.listener = null;
    if (l) await l.close();
  }
}

/**
 * Starts both servers. Rejects on an unparsable address, and on a bind failure when `bindAddressHardFail`
 * (after closing whatever did start); otherwise resolves at once, with failed servers retrying.
 */
export async function startHealthServers(opts: HealthServersOptions): Promise<HealthServers> {
  const serve = opts.serve ?? serveApp;
  const logger = opts.logger ?? processLogger;
  const interval = opts.retryIntervalMs ?? DEFAULT_RETRY_INTERVAL_MS;
  const make = (
    what: "healthz" | "metrics",
    addr: string,
    defaultPort: number,
    app: FetchApp | FetchHandler,
  ) => {
    if (addr.trim() === "") return null;
    let parsed;
    try {
      parsed = parseBindAddress(addr, defaultPort);
    } catch (e) {
      throw new Error(
        `${what === "healthz" ? "healthzBindAddress" : "metricsBindAddress"}: ${(e as Error).message}`,
      );
    }
    return new RetryingServer(what, app, parsed.host, parsed.port, serve, logger);
  };
  const servers = [
    make("healthz", opts.healthzBindAddress, DEFAULT_HEALTHZ_PORT, opts.healthzApp),
    make("metrics", opts.metricsBindAddress, DEFAULT_METRICS_PORT, opts.metricsApp),
  ];
  const [healthz, metrics] = servers;
  const closeAll = async () => {
    await Promise.all(servers.map((s) => s?.close()));
  };

  const errors = await Promise.all(servers.map((s) => (s ? s.attempt() : Promise.resolve(null))));
  if (opts.bindAddressHardFail) {
    const fatal = errors.find((e) => e !== null);
    if (fatal) {
      await closeAll();
      throw fatal;
    }
  } else {
    errors.forEach((e, i) => {
      if (e) servers[i]!.retryEvery(interval, e);
    });
  }
  return {
    healthz: () => healthz?.listener ?? null,
    metrics: () => metrics?.listener ?? null,
    close: closeAll,
  };
}
