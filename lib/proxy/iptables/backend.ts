/**
 * The iptables backend of one IP family (upstream pkg/proxy/iptables/proxier.go's iptables half): renders
 * the proxy state into an iptables-restore payload, hands it to its host, installs the jump rules after
 * full syncs, and remembers what it wrote: the render state, which makes partial syncs incremental and
 * from which the drift check derives the rule counts it expects, and the active nat chains. Everything mode-neutral is the shared loop's
 * (lib/proxy/proxier.ts).
 */
import type { IPFamily } from "../types.ts";
import type { KubeProxyMetrics } from "../../metrics/kubeproxy.ts";
import type { Provider, ProxyState, SyncOutcome } from "../provider.ts";
import type { LocalDetection } from "../local_detect.ts";
import { type RenderFeatures, renderIptablesRules, type RenderState } from "./render/render.ts";
import { iptablesLocalDetector, type LocalTrafficDetector } from "./local_detector.ts";
import type { SectionedPayload } from "./restore_content.ts";
import { COLLECT_BEFORE_FULL_RENDER, releaseMemory } from "../../runtime/memory.ts";

/** The host side of one family (real iptables in the agent, a fake in tests, a printer in --dry-run). */
export interface IptablesHost {
  /**
   * iptables-restore --noflush --counters of the payload, given as chunks that each end with "\n" (no line
   * spans two chunks; a single string is one chunk); throws with the failing line on error. `sections`
   * (RenderResult.sections) is the same payload split for the restore planner; a host may ignore it. The
   * chunks are made when first iterated: a host that plans from `sections` never makes them.
   */
  restore(payload: string | Iterable<string>, sections?: SectionedPayload | null): Promise<void>;
  /** Chains now in the nat table, or null when they cannot be read (dry-run). */
  natChains(): Promise<Set<string> | null>;
  /**
   * Ensures the jump rules from built-in chains and the canary chains (full syncs only, after the
   * payload's restore, so the jumps lead into populated chains).
   */
  ensureBaseRules(): Promise<void>;
  /**
   * Compares the kernel with what the sync that produced `state` left there (rule counts per chain per
   * table, drift.ts expectationFromState) and returns a reason when they differ, or null. Called every
   * syncPeriod.
   */
  checkDrift(state: RenderState): Promise<string | null>;
}

/** What the iptables backend of one family needs besides the proxy state. */
export interface IptablesBackendOptions {
  family: IPFamily;
  nodeName: string;
  host: IptablesHost;
  log: { warn(msg: string): void };
  metrics: KubeProxyMetrics;
  masqueradeAll: boolean;
  masqueradeBit: number;
  localhostNodePorts: boolean;
  nodePortAddresses: readonly string[];
  features: RenderFeatures;
  /** Local addresses of this family (for nodePortAddresses); called on every sync. */
  nodeIPs: () => readonly string[];
  /** The node's primary IP of this family, or null. */
  primaryNodeIP: () => string | null;
}

/** One family's iptables backend. */
export class IptablesBackend implements Provider {
  readonly #o: IptablesBackendOptions;
  #activeNatChains = new Set<string>();
  /**
   * What the applied payloads left in the kernel: makes partial syncs incremental, and is what the drift
   * check compares with. Null until a sync succeeds, and after a failed one.
   */
  #renderState: RenderState | null = null;
  /** The detector rendered for the last detection seen (the loop hands the same object until it changes). */
  #detector: { from: LocalDetection; detector: LocalTrafficDetector } | null = null;

  constructor(o: IptablesBackendOptions) {
    this.#o = o;
  }

  /** @inheritdoc */
  async sync(state: ProxyState, { full }: { readonly full: boolean }): Promise<SyncOutcome> {
    const o = this.#o;
    const fam = { ip_family: o.family };
    let result;
    try {
      // Stale chains: on full syncs ask the kernel (leftovers of an earlier process); on partial syncs
      // what we created is enough, which saves an iptables-save per sync. Handing the renderer its own
      // previous set (not a copy) lets it find them from the changed service ports alone.
      const natChains = full ? o.host.natChains() : null;
      // While iptables-save runs (COLLECT_BEFORE_FULL_RENDER).
      if (full && state.services.size >= COLLECT_BEFORE_FULL_RENDER) releaseMemory();
      const existing = natChains === null ? this.#activeNatChains : await natChains;
      result = renderIptablesRules({
        family: o.family,
        services: state.services,
        endpoints: state.endpoints,
        nodeName: o.nodeName,
        nodeLabels: state.nodeLabels,
        primaryNodeIP: o.primaryNodeIP(),
        nodeIPs: o.nodeIPs(),
        masqueradeAll: o.masqueradeAll,
        masqueradeBit: o.masqueradeBit,
        localhostNodePorts: o.localhostNodePorts,
        nodePortAddresses: o.nodePortAddresses,
        localDetector: this.#localDetector(state.localDetection),
        features: o.features,
        full,
        changedServices: state.changedServices,
        existingNatChains: !full || existing === null
          ? existing
          : new Set([...existing, ...this.#activeNatChains]),
        // Full syncs rewrite everything but reuse the state's hashes for unchanged service ports.
      }, this.#renderState);
      for (const w of result.warnings) o.log.warn(w);
      // The chunks only if the host reads them: planned from the sections, the per-service chains are
      // rendered as iptables-restore takes them, never held whole (the first sync's peak memory).
      const r = result;
      await o.host.restore({ [Symbol.iterator]: () => r.payloadChunks[Symbol.iterator]() }, result.sections);
      // Jump rules after the restore (make-before-break): the built-in chains then jump into fully
      // populated chains, and the first rules are programmed without waiting for the base-rule reads.
      if (full) await o.host.ensureBaseRules();
    } catch (e) {
      o.metrics.iptablesRestoreFailuresTotal.inc(fam);
      if (!full) o.metrics.iptablesPartialRestoreFailuresTotal.inc(fam);
      // Part of the payload may have been applied (one transaction per table): the render state is
      // unknown, and the loop's next sync is a full one.
      this.#renderState = null;
      throw e;
    }

    this.#activeNatChains = result.activeNatChains;
    this.#renderState = result.state;

    o.metrics.iptablesRulesLastSync.set({ ...fam, table: "filter" }, result.rulesWritten.filter);
    o.metrics.iptablesRulesLastSync.set({ ...fam, table: "nat" }, result.rulesWritten.nat);
    o.metrics.iptablesRulesTotal.set({ ...fam, table: "filter" }, result.rulesTotal.filter);
    o.metrics.iptablesRulesTotal.set({ ...fam, table: "nat" }, result.rulesTotal.nat);
    return {
      kind: result.mode,
      bytes: result.payloadLength,
      noLocalEndpoints: result.noLocalEndpoints,
    };
  }

  /** @inheritdoc */
  checkDrift(): Promise<string | null> {
    // Null state: the last sync failed, so the loop's next sync is a full one; nothing to compare yet.
    return this.#renderState === null ? Promise.resolve(null) : this.#o.host.checkDrift(this.#renderState);
  }

  #localDetector(detection: LocalDetection): LocalTrafficDetector {
    if (this.#detector?.from !== detection) {
      this.#detector = { from: detection, detector: iptablesLocalDetector(detection) };
    }
    return this.#detector.detector;
  }
}
