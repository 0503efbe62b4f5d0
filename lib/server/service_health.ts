/**
 * Health-check node ports of externalTrafficPolicy=Local LoadBalancer Services, as upstream's
 * ServiceHealthServer (pkg/proxy/healthcheck/service_health.go):
 * - `syncServices` makes the given set active: listeners of Services no longer present (or whose port
 *   changed) are closed, new ones are opened on every node IP (nodePortAddresses) or on all addresses,
 *   unchanged ones are left alone. A listener that cannot open (port taken, ...) is logged and not kept,
 *   so the next sync tries again; a Service is open only when all its addresses are;
 * - `syncEndpoints` sets each Service's count of local ready endpoints (absent → 0);
 * - any request on the port answers 200 when local endpoints > 0 and the proxy is healthy, else 503, with
 *   `Content-Type: application/json`, `X-Content-Type-Options: nosniff`,
 *   `X-Load-Balancing-Endpoint-Weight: <count>` and upstream's tab-indented body.
 */
import type { ServedApp, ServeFn } from "../runtime/serve.ts";
import { serveSmall } from "../runtime/serve_small.ts";
import { joinHostPort } from "../net/go_net.ts";
import { listen } from "./listen.ts";
import { processLogger, type ServerLogger } from "./logger.ts";

/** Options of {@link ServiceHealthServer}. */
export interface ServiceHealthServerOptions {
  /** The proxy's health (ProxyHealthServer.isHealthy: proxiers only, node ignored, as upstream). */
  readonly proxyHealthy: () => boolean;
  /**
   * Addresses to listen on: the node IPs matching nodePortAddresses. Empty or absent: all addresses
   * (one dual-stack wildcard listener, as Go's 0.0.0.0).
   */
  readonly nodeIPs?: readonly string[];
  /** Node name, for messages. */
  readonly hostname?: string;
  /**
   * Listener factory (tests hand in a fake). Default: the small server (lib/runtime/serve_small.ts), about
   * half a `Bun.serve`'s memory per unprobed port — a node may hold hundreds of these.
   */
  readonly serve?: ServeFn;
  readonly logger?: ServerLogger;
}

/** One Service's listeners and its local endpoint count. */
interface HealthCheckInstance {
  readonly namespace: string;
  readonly name: string;
  readonly port: number;
  readonly listeners: ServedApp[];
  endpoints: number;
}

/** Upstream's body: dedent'ed Go template (tab indentation), trimmed of newlines. */
export function serviceHealthBody(
  namespace: string,
  name: string,
  localEndpoints: number,
  healthy: boolean,
): string {
  return [
    "{",
    '\t"service": {',
    `\t\t"namespace": ${JSON.stringify(namespace)},`,
    `\t\t"name": ${JSON.stringify(name)}`,
    "\t},",
    `\t"localEndpoints": ${localEndpoints},`,
    `\t"serviceProxyHealthy": ${healthy}`,
    "}",
  ].join("\n");
}

/** Splits "ns/name"; null when malformed. */
function splitKey(key: string): { namespace: string; name: string } | null {
  const i = key.indexOf("/");
  if (i <= 0 || i === key.length - 1 || key.indexOf("/", i + 1) >= 0) return null;
  return { namespace: key.slice(0, i), name: key.slice(i + 1) };
}

/** A valid local endpoint count for `key`, or 0. */
function countOf(counts: ReadonlyMap<string, number>, key: string): number {
  const n = counts.get(key);
  return n !== undefined && Number.isFinite(n) && n > 0 ? Math.floor(n) : 0;
}

/** Manages the health-check node-port listeners. */
export class ServiceHealthServer {
  readonly #opts: ServiceHealthServerOptions;
  readonly #serve: ServeFn;
  readonly #log: ServerLogger;
  readonly #nodeIPs: readonly string[];
  readonly #services = new Map<string, HealthCheckInstance>();
  /** syncServices calls run one after another (closing must finish before a port is reopened). */
  #queue: Promise<void> = Promise.resolve();
  #stopped = false;
  /** The last counts given to syncEndpoints, for listeners that finish opening afterwards. */
  #lastEndpoints: ReadonlyMap<string, number> = new Map();

  constructor(opts: ServiceHealthServerOptions) {
    this.#opts = opts;
    this.#serve = opts.serve ?? serveSmall;
    this.#log = opts.logger ?? processLogger;
    this.#nodeIPs = opts.nodeIPs && opts.nodeIPs.length > 0 ? [...opts.nodeIPs] : ["0.0.0.0"];
  }

  /**
   * Makes `newServices` ("namespace/name" → healthCheckNodePort) the active set. Resolves when listeners are
   * open or closed; never rejects (failures are logged and retried on the next call).
   */
  syncServices(newServices: ReadonlyMap<string, number>): Promise<void> {
    const wanted = new Map(newServices);
    const run = this.#queue.then(() => this.#syncServices(wanted));
    this.#queue = run.catch(() => {});
    return run;
  }

  async #syncServices(newServices: Map<string, number>): Promise<void> {
    if (this.#stopped) return;
    for (const [key, svc] of [...this.#services]) {
      if (newServices.get(key) !== svc.port) {
        this.#log.info("Closing healthcheck", { service: key, port: svc.port });
        this.#services.delete(key);
        await this.#closeAll(key, svc.listeners);
      }
    }
    for (const key of [...newServices.keys()].sort()) {
      if (this.#services.has(key)) continue;
      const port = newServices.get(key)!;
      const nsn = splitKey(key);
      if (nsn === null) {
        this.#log.error(`healthcheck: service key "${key}" is not "namespace/name"; skipped`);
        continue;
      }
      if (!Number.isInteger(port) || port < 1 || port > 65535) {
        this.#log.error(
          `healthcheck: service "${key}" has healthCheckNodePort ${port}, not in 1..65535; skipped`,
        );
        continue;
      }
      this.#log.info("Opening healthcheck", { service: key, port });
      const listeners: ServedApp[] = [];
      try {
        for (const ip of this.#nodeIPs) {
          listeners.push(await listen((req) => this.#handle(key, req), ip, port, this.#serve));
        }
      } catch (e) {
        // Close what did open, so a retry (or another owner of the port) starts clean.
        await this.#closeAll(key, listeners);
        const reason = e instanceof Error ? e.message : String(e);
        this.#log.error(
          `node ${this.#opts.hostname ?? ""} failed to start healthcheck "${key}" on port ${port}: ${reason}`,
        );
        continue;
      }
      if (this.#stopped) {
        await this.#closeAll(key, listeners);
        return;
      }
      // Endpoints may have been reported before the listener finished opening (same sync): start from them.
      this.#services.set(key, { ...nsn, port, listeners, endpoints: countOf(this.#lastEndpoints, key) });
    }
  }

  /**
   * Sets local ready endpoint counts ("namespace/name" → count); Services not in the map get 0, entries for
   * Services without a listener are ignored.
   */
  syncEndpoints(newEndpoints: ReadonlyMap<string, number>): void {
    this.#lastEndpoints = new Map(newEndpoints);
    for (const [key, svc] of this.#services) svc.endpoints = countOf(newEndpoints, key);
  }

  /** Open health checks: "namespace/name" → port and bound addresses. */
  listening(): Map<string, { port: number; addresses: string[] }> {
    const out = new Map<string, { port: number; addresses: string[] }>();
    for (const key of [...this.#services.keys()].sort()) {
      const s = this.#services.get(key)!;
      out.set(key, { port: s.port, addresses: s.listeners.map((l) => joinHostPort(l.hostname, l.port)) });
    }
    return out;
  }

  /** Closes every listener; later syncServices calls do nothing. */
  stop(): Promise<void> {
    this.#stopped = true;
    const run = this.#queue.then(async () => {
      const all = [...this.#services];
      this.#services.clear();
      await Promise.all(all.map(([key, s]) => this.#closeAll(key, s.listeners)));
    });
    this.#queue = run.catch(() => {});
    return run;
  }

  async #closeAll(key: string, listeners: ServedApp[]): Promise<void> {
    await Promise.all(listeners.map(async (l) => {
      try {
        await l.close();
      } catch (e) {
        this.#log.error(
          `healthcheck: closing ${joinHostPort(l.hostname, l.port)} of service "${key}" failed`,
          e,
        );
      }
    }));
  }

  #handle(key: string, _req: Request): Response {
    const svc = this.#services.get(key);
    if (!svc) {
      // Upstream writes nothing (an empty 200) for a listener that is being closed.
      this.#log.error("Received request for closed healthcheck", { service: key });
      return new Response(null, { status: 200 });
    }
    const healthy = this.#opts.proxyHealthy();
    const count = svc.endpoints;
    return new Response(serviceHealthBody(svc.namespace, svc.name, count, healthy), {
      status: count !== 0 && healthy ? 200 : 503,
      headers: {
        "Content-Type": "application/json",
        "X-Content-Type-Options": "nosniff",
        "X-Load-Balancing-Endpoint-Weight": String(count),
      },
    });
  }
}
