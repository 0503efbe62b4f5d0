/**
 * Source wiring: where the agent's Services, EndpointSlices and own Node come from — manifest files, or
 * the apiserver (list/watch or poll) with the last-known-state cache as a start-up fallback when the
 * apiserver is not reachable within --cache-start-deadline. Everything goes into the StateStore.
 */
import type { EdgeproxyOptions, KubeProxyConfiguration } from "../config/types.ts";
import type { RestConfig } from "../k8s/rest_config.ts";
import type { ApiStats } from "../k8s/stats.ts";
import type { StateStore } from "../source/state_store.ts";
import { startManifestsSource } from "../source/manifests.ts";
import { loadStateCache } from "../source/state_cache.ts";
import { log } from "../log.ts";

/** What {@link startSources} needs from the agent. */
export interface SourceWiring {
  readonly config: KubeProxyConfiguration;
  readonly options: EdgeproxyOptions;
  readonly nodeName: string;
  readonly store: StateStore;
  readonly apiStats: ApiStats;
  /** The apiserver wiring module and its resolved credentials (null with --manifests). */
  readonly apiserver: { wiring: typeof import("./apiserver_wiring.ts"); restConfig?: RestConfig } | null;
  /** Resolves when the agent is told to stop: a pending apiserver connection set-up is not waited for. */
  readonly stopping: Promise<unknown>;
  /** Called when the state cache is loaded, with the time it was written (ms since the epoch). */
  readonly onCacheLoaded: (writtenAtMs: number) => void;
}

/** Starts the source; resolves to its stop function (a no-op when the agent was stopped first). */
export async function startSources(w: SourceWiring): Promise<() => Promise<void> | void> {
  const { options, nodeName, store } = w;
  if (options.manifests) {
    const src = startManifestsSource(options.manifests, store, { nodeName, warn: (m) => log.warn(m) });
    log.info(`reading Services, EndpointSlices and Node ${nodeName} from ${options.manifests}`);
    return () => src.stop();
  }
  const starting = w.apiserver!.wiring.startApiserver(
    w.config,
    options,
    nodeName,
    store,
    w.apiStats,
    w.apiserver!.restConfig,
  );
  starting.catch(() => {}); // a failure surfaces through the race below, unless shutdown came first
  // Setting up the connection can wait on things outside our control (an exec credential plugin that
  // does not answer): a shutdown must not wait for it.
  const src = await Promise.race([starting, w.stopping.then(() => null)]);
  if (src === null) {
    void starting.then((s) => s.stop(), () => {});
    return () => {};
  }
  if (options.stateDir && !options.dryRun) startFromCacheAfterDeadline(w, src.synced);
  return () => src.stop();
}

/**
 * When the apiserver has not delivered its first list within --cache-start-deadline, programs the last
 * state cache written under --state-dir (unless a live list arrived meanwhile).
 */
function startFromCacheAfterDeadline(w: SourceWiring, synced: Promise<void>): void {
  const { options, nodeName, store } = w;
  const deadline = new Promise<"deadline">((r) =>
    setTimeout(() => r("deadline"), options.cacheStartDeadline)
  );
  void Promise.race([synced.then(() => "synced" as const), deadline]).then(async (first) => {
    if (first === "synced") return;
    const loaded = await loadStateCache(options.stateDir, nodeName, Date.now());
    if (!loaded.ok) {
      if (loaded.missing) {
        log.info(`apiserver not reachable yet and no state cache: waiting (${loaded.reason})`);
      } else log.warn(`ignoring state cache: ${loaded.reason}`);
      return;
    }
    if (store.liveSynced) return;
    w.onCacheLoaded(Date.parse(loaded.header.writtenAt));
    log.warn(
      `apiserver not reachable within ${options.cacheStartDeadline}ms: programming ${loaded.state.services.length} Services ` +
        `and ${loaded.state.endpointSlices.length} EndpointSlices from the state cache written ${loaded.header.writtenAt}`,
    );
    store.loadFromCache(loaded.state);
  });
}
