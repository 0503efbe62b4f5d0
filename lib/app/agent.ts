/**
 * The agent: wires sources → StateStore → proxiers (one per IP family) → host, plus health and metrics
 * servers, conntrack, the state cache and signal handling. main.ts parses flags and config and calls
 * `runAgent`; everything else is here so the CLI stays wiring-free.
 */
import { hostname } from "node:os";
import { stat } from "node:fs/promises";
import process from "node:process";
import type { EdgeproxyOptions, KubeProxyConfiguration } from "../config/types.ts";
import type { Node } from "../k8s/objects.ts";
import type { IPFamily } from "../proxy/types.ts";
import type { IptablesRunner } from "../proxy/iptables/runner.ts";
import type { ProxyHandlers } from "../proxy/handlers.ts";
import { log } from "../log.ts";
import { StateStore } from "../source/state_store.ts";
import { withNodeValidation } from "../source/node_validation.ts";
import { featureEnabled } from "../config/feature_gates.ts";
import { loadStateCache } from "../source/state_cache.ts";
import { StateCacheWriter } from "../source/state_cache_writer.ts";
import { startManifestsSource } from "../source/manifests.ts";
import { Proxier, type ProxierHost } from "../proxy/iptables/proxier.ts";
import { createDryRunHost } from "../proxy/iptables/dry_run_host.ts";
import { localAddresses, primaryNodeIP } from "../proxy/node_addresses.ts";
import { type DetectLocalMode, localDetectorFor } from "../proxy/iptables/local_detector.ts";
import { RealClock } from "../runtime/clock.ts";
import { MemoryRelease, releaseMemory } from "../runtime/memory.ts";
import { createAgentMetrics } from "../metrics/agent_metrics.ts";
import { createHealthzApp, healthTimeoutFor, ProxyHealthServer } from "../server/proxier_health.ts";
import { createMetricsApp } from "../server/metrics_app.ts";
import { startHealthServers } from "../server/health_servers.ts";
import { ServiceHealthServer } from "../server/service_health.ts";
import { parseCIDR } from "../net/go_net.ts";
import { ApiStats } from "../k8s/stats.ts";
import { CliConntrackRunner, findConntrackBinary } from "../proxy/conntrack/runner.ts";
import { createConntrackCleaner } from "../proxy/conntrack/cleaner.ts";
import { installShutdownSignals } from "./shutdown.ts";
import { killProcessGroups } from "../runtime/process_groups.ts";

/**
 * Quiet time after the last full sync before the heap is collected and released: long enough for the
 * other family's sync and the state-cache write to be part of the same burst.
 */
const MEMORY_RELEASE_DELAY_MS = 2_000;

/**
 * Budgets of the shutdown steps (ms); their sum stays under SHUTDOWN_BACKSTOP_MS so the orderly path
 * normally finishes on its own, well inside the 5 s bound.
 */
const SHUTDOWN_STEP_MS = { sources: 500, proxiers: 1500, afterKill: 300, cacheFlush: 1000, servers: 500 };

/** Waits for `p`, at most `ms`; never rejects (shutdown goes on whatever a step does). */
async function within(p: Promise<unknown> | unknown, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([
    Promise.resolve(p).catch((e) => log.warn(`during shutdown: ${(e as Error)?.message ?? e}`)),
    new Promise<void>((r) => (timer = setTimeout(r, ms))),
  ]);
  clearTimeout(timer);
}

/** Fans handler calls out to several handlers (upstream MetaProxier plus the health server's node handler). */
function fanOut(
  targets: ProxyHandlers[],
  nodeTargets: Array<Pick<ProxyHandlers, "onNodeAdd" | "onNodeUpdate" | "onNodeDelete">>,
): ProxyHandlers {
  return {
    onServiceAdd: (s) => targets.forEach((t) => t.onServiceAdd(s)),
    onServiceUpdate: (o, s) => targets.forEach((t) => t.onServiceUpdate(o, s)),
    onServiceDelete: (s) => targets.forEach((t) => t.onServiceDelete(s)),
    onServicesSynced: () => targets.forEach((t) => t.onServicesSynced()),
    onEndpointSliceAdd: (s) => targets.forEach((t) => t.onEndpointSliceAdd(s)),
    onEndpointSliceUpdate: (o, s) => targets.forEach((t) => t.onEndpointSliceUpdate(o, s)),
    onEndpointSliceDelete: (s) => targets.forEach((t) => t.onEndpointSliceDelete(s)),
    onEndpointSlicesSynced: () => targets.forEach((t) => t.onEndpointSlicesSynced()),
    onNodeAdd: (n) => {
      nodeTargets.forEach((t) => t.onNodeAdd(n));
      targets.forEach((t) => t.onNodeAdd(n));
    },
    onNodeUpdate: (o, n) => {
      nodeTargets.forEach((t) => t.onNodeUpdate(o, n));
      targets.forEach((t) => t.onNodeUpdate(o, n));
    },
    onNodeDelete: (n) => {
      nodeTargets.forEach((t) => t.onNodeDelete(n));
      targets.forEach((t) => t.onNodeDelete(n));
    },
    onNodeSynced: () => targets.forEach((t) => t.onNodeSynced()),
  };
}

/** The node name kube-proxy uses: --hostname-override, else the host name, lower-cased. */
export function nodeNameFor(config: KubeProxyConfiguration): string {
  return (config.hostnameOverride.trim() || hostname()).toLowerCase();
}

/**
 * Families to proxy: IPv4 always; IPv6 when the host can program it (or, in dry-run, when configured).
 * Also returns the IPv6 runner the probe created, for the IPv6 host.
 */
async function chooseFamilies(
  config: KubeProxyConfiguration,
  dryRun: boolean,
): Promise<{ families: IPFamily[]; ip6Runner: IptablesRunner | null }> {
  const v6Configured = config.clusterCIDR.split(",").some((c) => parseCIDR(c.trim())?.family === 6);
  if (dryRun) return { families: v6Configured ? ["IPv4", "IPv6"] : ["IPv4"], ip6Runner: null };
  const { usableIp6tablesRunner } = await import("../proxy/iptables/host.ts");
  const ip6Runner = await usableIp6tablesRunner();
  return { families: ip6Runner ? ["IPv4", "IPv6"] : ["IPv4"], ip6Runner };
}

/** Callbacks of {@link runAgent}. */
export interface AgentHooks {
  /** Called once the configuration and the apiserver credentials are resolved, before the host is touched. */
  setupDone?: () => void;
}

/**
 * Runs edgeproxy until SIGTERM/SIGINT (or, with --dry-run, until every family has printed one sync).
 * Resolves to the process exit code.
 */
export async function runAgent(
  config: KubeProxyConfiguration,
  options: EdgeproxyOptions,
  hooks: AgentHooks = {},
): Promise<number> {
  const nodeName = nodeNameFor(config);
  const dryRun = options.dryRun;

  if (options.cleanup) {
    const { cleanupAll } = await import("../proxy/iptables/host.ts");
    return await cleanupAll((m) => log.info(m), (m) => log.warn(m));
  }

  // Setup errors (kubeconfig, credentials, no apiserver) are reported before anything on the host changes.
  const apiserverWiring = options.manifests ? null : await import("./apiserver_wiring.ts");
  const restConfig = await apiserverWiring?.resolveApiserverConfig(config, options);
  hooks.setupDone?.();

  if (!dryRun) {
    const { privilegedInit } = await import("../host/privileged_init.ts");
    await privilegedInit(config);
    if (options.initOnly) return 0;
  }

  // From here on a SIGTERM/SIGINT stops the agent in order, bounded (lib/app/shutdown.ts).
  const signals = installShutdownSignals();
  signals.takeOver();

  const clock = new RealClock();
  const memoryRelease = new MemoryRelease(
    clock,
    MEMORY_RELEASE_DELAY_MS,
    releaseMemory,
    (ms) => {
      const m = process.memoryUsage();
      const mib = (b: number) => (b / 1048576).toFixed(1);
      log.debug(
        `released memory after a full sync (collection took ${Math.round(ms)}ms): rss ${mib(m.rss)} MiB, ` +
          `heap ${mib(m.heapUsed)}/${mib(m.heapTotal)} MiB, external ${mib(m.external)} MiB`,
      );
    },
  );
  const apiStats = new ApiStats();
  let store: StateStore | null = null;
  let cacheAgeBaseMs: number | null = null;
  const cacheState = {
    cacheState: () => ({
      servingFromCache: store?.servingFromCache ?? false,
      cacheAgeSeconds: store?.servingFromCache && cacheAgeBaseMs !== null
        ? (Date.now() - cacheAgeBaseMs) / 1000
        : null,
    }),
  };
  const agentMetrics = createAgentMetrics({ apiStats: options.manifests ? undefined : apiStats, cacheState });
  const { registry, kubeproxy: metrics, edgeproxy: edgeMetrics } = agentMetrics;
  const health = new ProxyHealthServer({
    healthTimeoutMs: healthTimeoutFor(config.iptables.syncPeriod),
    metrics,
    cacheState,
    // Without an apiserver the Node may never arrive; do not report the node ineligible for that.
    nodeEligibleWhenUnknown: options.manifests !== "",
  });

  const { families, ip6Runner } = await chooseFamilies(config, dryRun);
  agentMetrics.initIPFamilies(families);
  const out = (text: string) => process.stdout.write(text);
  let resolveDone: (code: number) => void = () => {};
  const done = new Promise<number>((r) => (resolveDone = r));
  void signals.requested.then((sig) => {
    log.info(`received ${sig}, shutting down (rules stay in place)`);
    resolveDone(0);
  });
  const printed = new Set<IPFamily>();
  let cacheWriter: StateCacheWriter | null = null;

  const serviceHealth = dryRun ? undefined : new ServiceHealthServer({
    proxyHealthy: () => health.isHealthy(),
    hostname: nodeName,
  });

  const conntrackBinary = dryRun ? null : findConntrackBinary();
  if (!dryRun && conntrackBinary === null) {
    log.warn(
      "conntrack binary not found: stale UDP conntrack entries will not be cleaned up (install conntrack)",
    );
  }
  const proxiers: Proxier[] = [];
  const detectorWarnings = new Set<string>(); // each detector warning once, not on every Node update
  let node: Node | null = null;
  for (const family of families) {
    let host: ProxierHost;
    let features = {
      randomFully: true,
      nfacct: false,
      dropInvalid: !config.conntrack.tcpBeLiberal,
      preferSameTrafficDistribution: featureEnabled(config.featureGates, "PreferSameTrafficDistribution"),
    };
    if (dryRun) {
      host = createDryRunHost(family, out);
    } else {
      const { createIptablesHost } = await import("../proxy/iptables/host.ts");
      const h = await createIptablesHost(
        family,
        (m) => log.warn(m),
        family === "IPv6" ? ip6Runner ?? undefined : undefined,
      );
      host = h.host;
      features = { ...features, randomFully: h.randomFully };
    }
    const mode = (config.detectLocalMode || "ClusterCIDR") as DetectLocalMode;
    const detectorFor = (n: Node | null) => {
      const choice = localDetectorFor(family, {
        mode,
        clusterCIDR: config.clusterCIDR,
        nodePodCIDRs: n?.spec?.podCIDRs?.length ? n.spec.podCIDRs : n?.spec?.podCIDR ? [n.spec.podCIDR] : [],
        bridgeInterface: config.detectLocal.bridgeInterface,
        interfaceNamePrefix: config.detectLocal.interfaceNamePrefix,
      });
      const warning = choice.warning ? `${family}: ${choice.warning}` : null;
      if (warning && (mode !== "NodeCIDR" || n !== null) && !detectorWarnings.has(warning)) {
        detectorWarnings.add(warning);
        log.warn(warning);
      }
      return choice.detector;
    };
    proxiers.push(
      new Proxier({
        family,
        nodeName,
        host,
        clock,
        log,
        metrics,
        health,
        serviceHealth: family === families[0] ? serviceHealth : undefined,
        conntrack: conntrackBinary === null ? undefined : createConntrackCleaner(
          family,
          new CliConntrackRunner({ binary: conntrackBinary }),
          metrics,
          Date.now,
        ),
        minSyncPeriodMs: config.iptables.minSyncPeriod,
        syncPeriodMs: dryRun ? 0 : config.iptables.syncPeriod,
        masqueradeAll: config.iptables.masqueradeAll,
        masqueradeBit: config.iptables.masqueradeBit,
        localhostNodePorts: config.iptables.localhostNodePorts,
        nodePortAddresses: config.nodePortAddresses ?? [],
        localDetector: detectorFor,
        features,
        nodeIPs: () => (dryRun ? [] : localAddresses(family)),
        primaryNodeIP: () => primaryNodeIP(family, node, config.bindAddress),
        onDrift: (fam) => edgeMetrics.driftRepairsTotal.inc({ ip_family: fam }),
        onSynced: (info) => {
          if (dryRun) {
            printed.add(info.family);
            if (printed.size === families.length) resolveDone(0);
            return;
          }
          cacheWriter?.afterSync(); // writes only a live-confirmed state (see StateCacheWriter)
          if (info.full) memoryRelease.schedule();
        },
      }),
    );
  }

  const nodeTracker = {
    onNodeAdd: (n: Node) => (node = n),
    onNodeUpdate: (_o: Node, n: Node) => (node = n),
    onNodeDelete: () => (node = null),
  };
  store = new StateStore(withNodeValidation(fanOut(proxiers, [health, nodeTracker]), (m) => log.warn(m)));
  if (options.stateDir && !dryRun) {
    cacheWriter = new StateCacheWriter(store, {
      dir: options.stateDir,
      nodeName,
      minIntervalMs: 10_000,
      now: () => Date.now(),
      warn: (m) => log.warn(m),
    });
  }

  let servers: { close(): Promise<void> } | null = null;
  if (!dryRun) {
    servers = await startHealthServers({
      healthzBindAddress: config.healthzBindAddress,
      metricsBindAddress: config.metricsBindAddress,
      bindAddressHardFail: config.bindAddressHardFail,
      healthzApp: createHealthzApp(health),
      metricsApp: createMetricsApp({ registry, configz: () => config }),
      logger: log,
    });
  }
  for (const p of proxiers) p.start();

  // Sources.
  let stopSource: () => Promise<void> | void = () => {};
  if (options.manifests) {
    const src = startManifestsSource(options.manifests, store, { nodeName, warn: (m) => log.warn(m) });
    stopSource = () => src.stop();
    log.info(`reading Services, EndpointSlices and Node ${nodeName} from ${options.manifests}`);
  } else {
    const starting = apiserverWiring!.startApiserver(config, options, nodeName, store, apiStats, restConfig);
    starting.catch(() => {}); // a failure surfaces through the race below, unless shutdown came first
    // Setting up the connection can wait on things outside our control (an exec credential plugin that
    // does not answer): a shutdown must not wait for it.
    const src = await Promise.race([starting, done.then(() => null)]);
    if (src === null) void starting.then((s) => s.stop(), () => {});
    else stopSource = () => src.stop();
    if (src !== null && options.stateDir && !dryRun) {
      const deadline = new Promise<"deadline">((r) =>
        setTimeout(() => r("deadline"), options.cacheStartDeadline)
      );
      void Promise.race([src.synced.then(() => "synced" as const), deadline]).then(async (first) => {
        if (first === "synced") return;
        const loaded = await loadStateCache(options.stateDir, nodeName, Date.now());
        if (!loaded.ok) {
          if (loaded.missing) {
            log.info(`apiserver not reachable yet and no state cache: waiting (${loaded.reason})`);
          } else log.warn(`ignoring state cache: ${loaded.reason}`);
          return;
        }
        if (store!.liveSynced) return;
        cacheAgeBaseMs = Date.parse(loaded.header.writtenAt);
        log.warn(
          `apiserver not reachable within ${options.cacheStartDeadline}ms: programming ${loaded.state.services.length} Services ` +
            `and ${loaded.state.endpointSlices.length} EndpointSlices from the state cache written ${loaded.header.writtenAt}`,
        );
        store!.loadFromCache(loaded.state);
      });
    }
  }

  /**
   * Stops in order, every step bounded (SHUTDOWN_STEP_MS). Whatever child process is still running after
   * the proxiers had their time (an iptables-restore that does not return, a conntrack) is killed with its
   * process group: a restore transaction is atomic, so the rules stay as they were.
   */
  const shutdown = async (code: number) => {
    memoryRelease.stop();
    await within(stopSource(), SHUTDOWN_STEP_MS.sources);
    const proxiersStopped = Promise.all(proxiers.map((p) => p.stop()));
    await within(proxiersStopped, SHUTDOWN_STEP_MS.proxiers);
    const killed = killProcessGroups("SIGKILL");
    if (killed > 0) {
      log.info(`killed ${killed} child process group(s) still running at shutdown (rules stay in place)`);
      await within(proxiersStopped, SHUTDOWN_STEP_MS.afterKill);
    }
    if (cacheWriter) {
      cacheWriter.stop();
      await within(cacheWriter.flush(), SHUTDOWN_STEP_MS.cacheFlush);
    }
    await within(Promise.all([serviceHealth?.stop(), servers?.close()]), SHUTDOWN_STEP_MS.servers);
    return code;
  };

  let configWatch: ReturnType<typeof setInterval> | null = null;
  if (options.configFile && !dryRun) {
    // Upstream exits when its config file changes so that the DaemonSet (here: systemd) restarts it.
    const file = options.configFile;
    const sig = (st: { mtimeMs: number; size: number; ino: number } | null) =>
      st ? `${st.mtimeMs}/${st.size}/${st.ino}` : "missing";
    const first = sig(await stat(file).catch(() => null));
    configWatch = setInterval(async () => {
      const now = sig(await stat(file).catch(() => null));
      if (now !== first) {
        log.error(
          `content of the configuration file ${file} was updated: exiting so the service manager restarts edgeproxy with it`,
        );
        resolveDone(1);
      }
    }, 5000);
  }

  const code = await done;
  if (configWatch) clearInterval(configWatch);
  return await shutdown(code);
}
