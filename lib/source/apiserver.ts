/**
 * The apiserver source: three list+watch reflectors (or pollers with --api-mode=poll) for Services,
 * EndpointSlices (both with upstream's label selector) and the proxy's own Node, feeding ProxyHandlers,
 * plus one for ServiceCIDRs when asked (the nftables mode). Each resource's Synced callback fires once,
 * after its first complete list; the proxier itself waits for both Services and EndpointSlices before its
 * first sync, as upstream does. Nothing waits for ServiceCIDRs: an apiserver that does not serve them (404)
 * or forbids them (403) is retried with backoff, as upstream's informer does, and the rules are programmed
 * without them meanwhile.
 */
import type { EndpointSlice, Node, Service, ServiceCIDR } from "../k8s/objects.ts";
import { Poller } from "../k8s/poller.ts";
import { Reflector, type ReflectorTimings } from "../k8s/reflector.ts";
import {
  ENDPOINTSLICES_RESOURCE,
  nodeResource,
  type ResourceEventHandler,
  type ResourceSpec,
  SERVICECIDRS_RESOURCE,
  SERVICES_RESOURCE,
} from "../k8s/resource.ts";
import { ApiStats } from "../k8s/stats.ts";
import { type ApiTransport, type Logger, silentLogger } from "../k8s/transport.ts";
import type { ProxyHandlers } from "../proxy/handlers.ts";
import type { KubeObject, ObjectStore } from "../k8s/store.ts";

/** Options of {@link startApiserverSource}. */
export interface ApiserverSourceOptions {
  /** The apiserver connection (see lib/k8s/transport.ts). */
  connection: ApiTransport;
  /** This node's name (hostnameOverride or the host name). */
  nodeName: string;
  handlers: ProxyHandlers;
  mode: "watch" | "poll";
  /** Also list and watch ServiceCIDRs (default false: only the nftables mode uses them). */
  serviceCIDRs?: boolean;
  /** Poll period (ms) for mode "poll". */
  pollIntervalMs?: number;
  /** Counters; defaults to the connection's, else a new instance. */
  stats?: ApiStats;
  log?: Logger;
  /** Shorter timings for tests. */
  timings?: ReflectorTimings;
}

/** A running apiserver source. */
export interface ApiserverSource {
  /** Stops every loop; resolves when all have ended. */
  stop(): Promise<void>;
  /**
   * Resolves once Services, EndpointSlices and the Node list have each completed their first list
   * (ServiceCIDRs are not waited for).
   */
  synced: Promise<void>;
  /** Last time (ms since epoch) the apiserver answered anything, or null before the first answer. */
  lastContact(): number | null;
  /** The current objects per resource (read-only use). */
  stores: {
    services: ObjectStore<Service>;
    endpointSlices: ObjectStore<EndpointSlice>;
    nodes: ObjectStore<Node>;
    /** Absent unless ServiceCIDRs are watched. */
    serviceCIDRs?: ObjectStore<ServiceCIDR>;
  };
}

interface Loop<T extends KubeObject> {
  start(): void;
  stop(): Promise<void>;
  synced: Promise<void>;
  sink: { store: ObjectStore<T> };
}

/** Starts the three loops and returns at once. */
export function startApiserverSource(opts: ApiserverSourceOptions): ApiserverSource {
  const log = opts.log ?? opts.connection.log ?? silentLogger;
  const stats = opts.stats ?? opts.connection.stats ?? new ApiStats();
  const h = opts.handlers;
  if (opts.mode === "poll" && !(Number(opts.pollIntervalMs) > 0)) {
    throw new Error(`--api-mode=poll needs a positive poll interval, got ${opts.pollIntervalMs}`);
  }

  const make = <T extends KubeObject>(spec: ResourceSpec, handler: ResourceEventHandler<T>): Loop<T> =>
    opts.mode === "poll"
      ? new Poller<T>({
        transport: opts.connection,
        spec,
        handler,
        intervalMs: opts.pollIntervalMs!,
        timings: opts.timings,
        log,
        stats,
      })
      : new Reflector<T>({ transport: opts.connection, spec, handler, timings: opts.timings, log, stats });

  const services = make<Service>(SERVICES_RESOURCE, {
    onAdd: (s) => h.onServiceAdd(s),
    onUpdate: (o, s) => h.onServiceUpdate(o, s),
    onDelete: (s) => h.onServiceDelete(s),
    onSynced: () => h.onServicesSynced(),
  });
  const slices = make<EndpointSlice>(ENDPOINTSLICES_RESOURCE, {
    onAdd: (s) => h.onEndpointSliceAdd(s),
    onUpdate: (o, s) => h.onEndpointSliceUpdate(o, s),
    onDelete: (s) => h.onEndpointSliceDelete(s),
    onSynced: () => h.onEndpointSlicesSynced(),
  });
  // The field selector should only ever return our Node; anything else is a server bug, logged and dropped
  // (upstream's proxier logs such events as errors too).
  const ours = (n: Node, what: string): boolean => {
    if (n.metadata?.name === opts.nodeName) return true;
    log.error(`node ${what} for "${n.metadata?.name}" ignored: this proxy runs on node "${opts.nodeName}"`);
    return false;
  };
  const nodes = make<Node>(nodeResource(opts.nodeName), {
    onAdd: (n) => ours(n, "add") && h.onNodeAdd(n),
    onUpdate: (o, n) => ours(n, "update") && h.onNodeUpdate(o, n),
    onDelete: (n) => ours(n, "delete") && h.onNodeDelete(n),
    onSynced: () => h.onNodeSynced(),
  });

  const cidrs = opts.serviceCIDRs
    ? make<ServiceCIDR>(SERVICECIDRS_RESOURCE, {
      onAdd: (c) => h.onServiceCIDRAdd?.(c),
      onUpdate: (o, c) => h.onServiceCIDRUpdate?.(o, c),
      onDelete: (c) => h.onServiceCIDRDelete?.(c),
      onSynced: () => h.onServiceCIDRsSynced?.(),
    })
    : null;

  const required = [services, slices, nodes] as unknown as Loop<KubeObject>[];
  const loops = cidrs === null ? required : [...required, cidrs as unknown as Loop<KubeObject>];
  log.info(
    `apiserver source: ${opts.mode === "poll" ? `polling every ${opts.pollIntervalMs} ms` : "watching"} ` +
      `${opts.connection.config.server} (${opts.connection.config.source}) for services, endpointslices` +
      `${cidrs === null ? " and" : ", servicecidrs and"} node ${opts.nodeName}`,
  );
  for (const l of loops) l.start();

  let stopped: Promise<void> | null = null;
  return {
    stop: () => (stopped ??= Promise.all(loops.map((l) => l.stop())).then(() => {})),
    synced: Promise.all(required.map((l) => l.synced)).then(() => {}),
    lastContact: () => stats.lastContact(),
    stores: {
      services: services.sink.store,
      endpointSlices: slices.sink.store,
      nodes: nodes.sink.store,
      ...(cidrs === null ? {} : { serviceCIDRs: cidrs.sink.store }),
    },
  };
}
