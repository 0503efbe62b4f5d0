/**
 * The agent: composes sources → StateStore → MetaProxier (one shared sync loop per IP family over the
 * mode's backend) → host, plus health and metrics servers, conntrack, the state cache and signal
 * handling. main.ts parses flags and config and calls `runAgent`; each step lives in its own file here
 * (backends.ts, proxiers.ts, sources.ts, servers.ts, shutdown.ts), and this file puts them in order.
 */
import { hostname } from "node:os";
import { stat } from "node:fs/promises";
import process from "node:process";
import type { EdgeproxyOptions, KubeProxyConfiguration } from "../config/types.ts";
import type { IPFamily } from "../proxy/types.ts";
import type { BackendContext } from "../proxy/provider.ts";
import type { MetaProxier } from "../proxy/meta_proxier.ts";
import type { SyncInfo } from "../proxy/proxier.ts";
import { log } from "../log.ts";
import { StateStore } from "../source/state_store.ts";
import { withNodeValidation } from "../source/node_validation.ts";
import { withServiceCIDRConfig } from "../source/service_cidrs.ts";
import { withListsStored } from "../source/lists_stored.ts";
import { StateCacheWriter } from "../source/state_cache_writer.ts";
import { localAddresses, primaryNodeIP } from "../proxy/node_addresses.ts";
import { RealClock } from "../runtime/clock.ts";
import { MemoryRelease, releaseMemory, requestCollection } from "../runtime/memory.ts";
import { pageOutExecutable, type PageOutResult } from "../runtime/code_pages.ts";
import { ApiStats } from "../k8s/stats.ts";
import { installShutdownSignals } from "./shutdown.ts";
import { killProcessGroups } from "../runtime/process_groups.ts";
import { backendFor } from "./backends.ts";
import { cleanupAllModes, cleanupOtherModes } from "./mode_leftovers.ts";
import { buildProxiers, NodeTracker } from "./proxiers.ts";
import { FirstSyncs } from "./first_syncs.ts";
import { startSources } from "./sources.ts";
import { createObservability, startServers } from "./servers.ts";

/**
 * Quiet time after the last full sync before the heap is collected and released: long enough for the
 * other family's sync and the state-cache write to be part of the same burst.
 */
const MEMORY_RELEASE_DELAY_MS = 2_000;

/** Longest the state-cache write and memory release wait for a family's first sync (first_syncs.ts). */
const FIRST_SYNCS_MAX_HOLD_MS = 120_000;

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

/** The node name kube-proxy uses: --hostname-override, else the host name, lower-cased. */
export function nodeNameFor(config: KubeProxyConfiguration): string {
  return (config.hostnameOverride.trim() || hostname()).toLowerCase();
}

/** Callbacks of {@link runAgent}. */
export interface AgentHooks {
  /** Called once the configuration and the apiserver credentials are resolved, before the host is touched. */
  setupDone?: () => void;
}

/** What the orderly shutdown stops, in this order. */
interface Running {
  memoryRelease: MemoryRelease;
  stopSource: () => Promise<void> | void;
  proxiers: MetaProxier;
  cacheWriter: StateCacheWriter | null;
  servers: { close(): Promise<void> };
}

/**
 * Stops in order, every step bounded (SHUTDOWN_STEP_MS). Whatever child process is still running after
 * the proxiers had their time (an iptables-restore that does not return, a conntrack) is killed with its
 * process group: a restore transaction is atomic, so the rules stay as they were.
 */
async function shutdownInOrder(r: Running): Promise<void> {
  r.memoryRelease.stop();
  await within(r.stopSource(), SHUTDOWN_STEP_MS.sources);
  const proxiersStopped = r.proxiers.stop();
  await within(proxiersStopped, SHUTDOWN_STEP_MS.proxiers);
  const killed = killProcessGroups("SIGKILL");
  if (killed > 0) {
    log.info(`killed ${killed} child process group(s) still running at shutdown (rules stay in place)`);
    await within(proxiersStopped, SHUTDOWN_STEP_MS.afterKill);
  }
  if (r.cacheWriter) {
    r.cacheWriter.stop();
    await within(r.cacheWriter.flush(), SHUTDOWN_STEP_MS.cacheFlush);
  }
  await within(r.servers.close(), SHUTDOWN_STEP_MS.servers);
}

/**
 * Upstream exits when its config file changes so that the DaemonSet (here: systemd) restarts it: calls
 * `changed` once the file's mtime, size or inode differ from now. Returns the stop function.
 */
async function watchConfigFile(file: string, changed: () => void): Promise<() => void> {
  const sig = (st: { mtimeMs: number; size: number; ino: number } | null) =>
    st ? `${st.mtimeMs}/${st.size}/${st.ino}` : "missing";
  const first = sig(await stat(file).catch(() => null));
  const timer = setInterval(async () => {
    const now = sig(await stat(file).catch(() => null));
    if (now !== first) {
      log.error(
        `content of the configuration file ${file} was updated: exiting so the service manager restarts edgeproxy with it`,
      );
      changed();
    }
  }, 5000);
  return () => clearInterval(timer);
}

/** Logs the heap after a memory release (debug). */
function logReleased(ms: number): void {
  const m = process.memoryUsage();
  const mib = (b: number) => (b / 1048576).toFixed(1);
  log.debug(
    `released memory after a full sync (collection took ${Math.round(ms)}ms): rss ${mib(m.rss)} MiB, ` +
      `heap ${mib(m.heapUsed)}/${mib(m.heapTotal)} MiB, external ${mib(m.external)} MiB`,
  );
}

/**
 * Services + EndpointSlices from which the start-up code is paged out as soon as the lists are stored. A
 * large cluster's first sync has its memory peak ahead (~10 MiB lower without the start-up code mapped, at
 * 10k Services); a small one's has no peak to speak of, and its code mapping back in cost ~30–100 ms of a
 * 1000-Service start from the state cache (bench/README.md). Both page out after the first sync.
 */
const PAGE_OUT_AT_LISTS_MIN_OBJECTS = 4000;

/**
 * Pages out the executable's start-up code and logs what that gave back. Twice per process: once the
 * lists are stored (flags, config, the lists' decoding are done; the first sync's peak follows, and its
 * code maps back in as it runs), and after the first full sync (what only that sync ran).
 */
function pageOutStartup(when: "lists stored" | "first sync done"): void {
  pageOutExecutable().then((r: PageOutResult | null) => {
    if (r === null) return;
    const mib = (kib: number) => (kib / 1024).toFixed(1);
    const text = `paged out the executable's start-up code (${when}): resident file pages ` +
      `${mib(r.rssFileKiBBefore)} → ${mib(r.rssFileKiBAfter)} MiB`;
    if (r.error !== undefined) log.warn(`${text}; madvise refused a mapping: ${r.error}`);
    else log.info(text);
  }, (e: Error) => log.warn(`paging out start-up code (${when}): ${e.message}`));
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
  const backend = backendFor(config.mode);

  if (options.cleanup) return await cleanupAllModes(config.mode, log);

  // Setup errors (kubeconfig, credentials, no apiserver) are reported before anything on the host changes.
  const apiserverWiring = options.manifests ? null : await import("./apiserver_wiring.ts");
  const restConfig = await apiserverWiring?.resolveApiserverConfig(config, options);
  hooks.setupDone?.();

  // Switching modes: what another mode left on this host must not handle packets beside ours. The removal
  // runs while the rest starts (servers, sources, the state cache's lists into the change trackers); the
  // proxiers, the only writers of rules, start once it is done.
  let leftoversRemoved: Promise<void> = Promise.resolve();
  if (!dryRun) {
    const { privilegedInit } = await import("../host/privileged_init.ts");
    await privilegedInit(config);
    if (options.initOnly) return 0;
    leftoversRemoved = cleanupOtherModes(config.mode, log).catch((e: Error) =>
      log.warn(`removing other modes' leftovers: ${e.message}`)
    );
  }

  // From here on a SIGTERM/SIGINT stops the agent in order, bounded (lib/app/shutdown.ts).
  const signals = installShutdownSignals();
  signals.takeOver();

  const clock = new RealClock();
  // The first release follows the first full sync: start-up is over, so its code pages go too.
  let startupPagedOut = false;
  const release = () => {
    const ran = releaseMemory();
    if (!startupPagedOut) {
      startupPagedOut = true;
      pageOutStartup("first sync done");
    }
    return ran;
  };
  const memoryRelease = new MemoryRelease(clock, MEMORY_RELEASE_DELAY_MS, release, logReleased);
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
  const { syncPeriodMs } = backend.syncPeriods(config);
  const observability = createObservability(
    options,
    nodeName,
    apiStats,
    cacheState,
    syncPeriodMs,
    config.mode === "nftables" || config.mode === "ipvs" ? config.mode : "iptables",
  );
  const { metrics, health, serviceHealth } = observability;

  const nodeTracker = new NodeTracker();
  const ctx: BackendContext = {
    config,
    options,
    dryRun,
    nodeName,
    log,
    metrics: metrics.kubeproxy,
    registry: metrics.registry,
    out: (text) => process.stdout.write(text),
    nodeIPs: (family) => (dryRun ? [] : localAddresses(family)),
    primaryNodeIP: (family) => primaryNodeIP(family, nodeTracker.node, config.bindAddress),
  };
  const families = await backend.families(ctx);
  metrics.initIPFamilies(families);

  let resolveDone: (code: number) => void = () => {};
  const done = new Promise<number>((r) => (resolveDone = r));
  void signals.requested.then((sig) => {
    log.info(`received ${sig}, shutting down (rules stay in place)`);
    resolveDone(0);
  });

  const printed = new Set<IPFamily>();
  const firstSyncs = new FirstSyncs(families, FIRST_SYNCS_MAX_HOLD_MS);
  let cacheWriter: StateCacheWriter | null = null;
  const onSynced = (info: SyncInfo) => {
    if (dryRun) {
      printed.add(info.family);
      if (printed.size === families.length) resolveDone(0);
      return;
    }
    // Not while another family's first sync is still running (first_syncs.ts).
    if (!firstSyncs.synced(info.family, clock.now())) return;
    cacheWriter?.afterSync(); // writes only a live-confirmed state (see StateCacheWriter)
    if (info.full) memoryRelease.schedule();
  };
  const proxiers = await buildProxiers({
    backend,
    ctx,
    families,
    clock,
    health,
    serviceHealth,
    edgeMetrics: metrics.edgeproxy,
    nodeHandlers: [nodeTracker],
    onSynced,
  });

  const warn = (m: string) => log.warn(m);
  // At 10k Services the first sync's peak came with ~20 MiB of start-up code still mapped (bench/README.md).
  const downstream = withServiceCIDRConfig(withNodeValidation(proxiers, warn), warn);
  store = new StateStore(
    dryRun ? downstream : withListsStored(downstream, (objects) => {
      if (objects >= PAGE_OUT_AT_LISTS_MIN_OBJECTS) pageOutStartup("lists stored");
    }),
  );
  if (options.stateDir && !dryRun) {
    cacheWriter = new StateCacheWriter(store, {
      dir: options.stateDir,
      nodeName,
      minIntervalMs: 10_000,
      now: () => Date.now(),
      warn: (m) => log.warn(m),
      // The write's encoded objects are garbage at once: collected as it goes, not piled on the sync's peak.
      collect: () => void requestCollection(),
    });
  }

  const servers = await startServers(config, options, observability);
  let stopping = false;
  const proxiersStarted = leftoversRemoved.then(() => {
    if (!stopping) proxiers.start();
  });
  const stopSource = await startSources({
    config,
    options,
    nodeName,
    store,
    apiStats,
    apiserver: apiserverWiring ? { wiring: apiserverWiring, restConfig } : null,
    stopping: done,
    onCacheLoaded: (writtenAtMs) => (cacheAgeBaseMs = writtenAtMs),
  });

  const stopConfigWatch = options.configFile && !dryRun
    ? await watchConfigFile(options.configFile, () => resolveDone(1))
    : () => {};

  const code = await done;
  stopping = true;
  await proxiersStarted;
  stopConfigWatch();
  await shutdownInOrder({ memoryRelease, stopSource, proxiers, cacheWriter, servers });
  return code;
}
