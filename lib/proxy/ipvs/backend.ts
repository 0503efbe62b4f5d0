/**
 * The IPVS Provider of one family (upstream pkg/proxy/ipvs/proxier.go syncProxyRules): computes the
 * desired state with the pure model, reads the kernel back (ipset save, ipvsadm -Sn, kube-ipvs0's
 * addresses) and writes only the differences: one `ipset restore`, the iptables payload through the
 * iptables runner's restore, one `ipvsadm -R` batch, one `ip -batch`. Unchanged services cost nothing
 * but the read-back. Removed TCP real servers keep weight 0 until their connections drain.
 */
import type { IPFamily } from "../types.ts";
import { DriftFoundError, type Provider, type ProxyState, type SyncOutcome } from "../provider.ts";
import type { IptablesRunner } from "../iptables/runner.ts";
import type { NodePortAddresses } from "../nodeport_addresses.ts";
import { ensureJumpRules } from "../iptables/jump_rules.ts";
import { iptablesLocalDetector } from "../iptables/local_detector.ts";
import { computeIpvsState, type IpvsState } from "./state.ts";
import {
  drainedDeletes,
  type KernelVirtualServer,
  parseIpvsadmConnections,
  parseIpvsadmSave,
  planIpvsadm,
  type TerminatingRealServer,
} from "./ipvsadm.ts";
import { type KernelIPSet, parseIpsetSave, planIpsetRestore } from "./ipset_restore.ts";
import { ipsetInfo, ipsetName } from "./ipsets.ts";
import { joinHostPort } from "../../net/go_net.ts";
import { IPVS_JUMP_RULES } from "./chains.ts";
import { removeIptablesModeLeftovers } from "./leftovers.ts";
import type { IpvsHost } from "./host.ts";
import type { KubeProxyMetrics } from "../../metrics/kubeproxy.ts";

/** Upstream's iptablesJumpChain as jump rules (defined in chains.ts; exported here too for callers). */
export { IPVS_JUMP_RULES };

/** Up to this many draining virtual servers are listed one by one (`ipvsadm -Ln -t …`), not all. */
const DRAIN_LIST_ONE_BY_ONE = 16;

/** ipvsadm's error for a virtual server that does not exist. */
const NO_SUCH_SERVICE = /No such service/;

/** The sets as the last sync left them (every set of the list exists after a sync). */
function ipsetsOf(last: IpvsState, family: IPFamily): Map<string, KernelIPSet> {
  const out = new Map<string, KernelIPSet>();
  for (const [name, entries] of last.ipsets) {
    out.set(ipsetName(name, family), { type: ipsetInfo(name).type, entries: new Set(entries) });
  }
  return out;
}

/** The virtual servers as the last sync left them, with the real servers still draining at weight 0. */
function virtualServersOf(
  last: IpvsState,
  terminating: readonly TerminatingRealServer[],
): Map<string, KernelVirtualServer> {
  const out = new Map<string, KernelVirtualServer>();
  for (const [key, vs] of last.virtualServers) {
    out.set(key, {
      address: vs.address,
      port: vs.port,
      protocol: vs.protocol,
      scheduler: vs.scheduler,
      persistentTimeout: vs.persistentTimeout,
      flags: vs.sourceHash ? "flag-2" : "",
      realServers: new Map(vs.realServers.map((rs) => [joinHostPort(rs.address, rs.port), rs.weight])),
    });
  }
  for (const t of terminating) out.get(t.virtualServer)?.realServers.set(t.realServer, 0);
  return out;
}

/** Settings of one family's IPVS provider. */
export interface IpvsBackendOptions {
  readonly family: IPFamily;
  readonly nodeName: string;
  readonly host: IpvsHost;
  readonly iptables: IptablesRunner;
  readonly scheduler: string;
  readonly excludeCIDRs: readonly string[];
  readonly masqueradeAll: boolean;
  readonly masqueradeBit: number;
  readonly nodePortAddresses: NodePortAddresses;
  readonly primaryNodeIP: () => string | null;
  readonly preferSameTrafficDistribution: boolean;
  /** kubeproxy_sync_proxy_rules_iptables_restore_failures_total counts failed payload restores (absent: not counted). */
  readonly metrics?: Pick<KubeProxyMetrics, "iptablesRestoreFailuresTotal">;
  readonly log: { info(msg: string): void; warn(msg: string): void; debug(msg: string): void };
}

/** One family's IPVS proxier. */
export class IpvsBackend implements Provider {
  readonly #o: IpvsBackendOptions;
  #last: IpvsState | null = null;
  #terminating: TerminatingRealServer[] = [];
  #iptablesModeChecked = false;

  constructor(o: IpvsBackendOptions) {
    this.#o = o;
  }

  /** The state the last successful sync programmed (tests, drift). */
  get lastState(): IpvsState | null {
    return this.#last;
  }

  /** Real servers waiting for their connections to drain. */
  get terminating(): readonly TerminatingRealServer[] {
    return this.#terminating;
  }

  async sync(state: ProxyState, opts: { readonly full: boolean }): Promise<SyncOutcome> {
    const o = this.#o;
    const { host, family } = o;
    const nodeAddresses = await host.nodeAddresses(family);
    const model = computeIpvsState({
      family,
      services: state.services.values(),
      endpoints: state.endpoints,
      nodeName: o.nodeName,
      nodeLabels: state.nodeLabels,
      nodeIP: o.primaryNodeIP(),
      nodeAddresses,
      nodePortAddresses: o.nodePortAddresses,
      scheduler: o.scheduler,
      masqueradeAll: o.masqueradeAll,
      masqueradeBit: o.masqueradeBit,
      localDetector: iptablesLocalDetector(state.localDetection),
      randomFully: o.iptables.features.hasRandomFully,
      preferSameTrafficDistribution: o.preferSameTrafficDistribution,
    });
    // Full syncs (and the first) diff against what the kernel has; partial ones against what the last
    // successful sync programmed, so a one-endpoint change reads nothing back. A failed sync makes the
    // loop force a full one, and the drift check forces one when someone else changed the kernel.
    const last = opts.full ? null : this.#last;
    if (!last) await host.ensureDummy();
    const currentSets = last ? ipsetsOf(last, family) : parseIpsetSave(await host.ipsetSave());
    const ipsetText = planIpsetRestore(model.ipsets, currentSets, family);
    await host.ipsetRestore(ipsetText);
    if (!last) await ensureJumpRules(o.iptables, IPVS_JUMP_RULES);
    try {
      await o.iptables.restore(model.iptables);
    } catch (e) {
      o.metrics?.iptablesRestoreFailuresTotal.inc({ ip_family: family }); // as upstream's IPVS proxier
      throw e;
    }
    if (!this.#iptablesModeChecked) {
      // Switching from iptables mode: its service chains are cut off now that the shared chains hold
      // IPVS mode's rules; remove them once (a failure is only logged, as upstream's cleanups).
      this.#iptablesModeChecked = true;
      await removeIptablesModeLeftovers(o.iptables, o.log);
    }
    const bound = new Set(last ? last.bindAddresses : await host.dummyAddresses(family));
    const want = new Set(model.bindAddresses);
    await host.changeDummyAddresses(model.bindAddresses.filter((a) => !bound.has(a)), []);
    const currentVS = last
      ? virtualServersOf(last, this.#terminating)
      : parseIpvsadmSave(await host.ipvsSave());
    const plan = planIpvsadm(model.virtualServers, currentVS, {
      family,
      excludeCIDRs: o.excludeCIDRs,
    });
    await host.ipvsRestore(plan.lines);
    this.#terminating = [...plan.terminating];
    // A virtual server deleted behind our back is drift: a partial sync hands over to a full one at once,
    // which repairs it (a full one fails, and the retry repairs it).
    const gone = await this.#deleteDrained();
    if (gone !== null) throw new DriftFoundError(gone);
    await host.changeDummyAddresses([], [...bound].filter((a) => !want.has(a)));
    this.#last = model;
    const c = plan.counts;
    o.log.debug(
      `ipvs ${family}: ${model.virtualServers.size} virtual servers (+${c.vsAdded} ~${c.vsEdited} -${c.vsDeleted}), ` +
        `${c.rsChanged} real server changes, ${this.#terminating.length} terminating`,
    );
    return {
      kind: opts.full ? "full" : "partial",
      bytes: model.iptables.length + ipsetText.length + plan.lines.reduce((n, l) => n + l.length + 1, 0),
      noLocalEndpoints: model.noLocalEndpoints,
    };
  }

  /**
   * Deletes terminating real servers whose connections have drained (upstream's graceful delete list).
   * Returns the drift found instead when a draining real server's virtual server is gone from the kernel
   * (someone deleted it since the last read), so the caller repairs it rather than failing.
   */
  async #deleteDrained(): Promise<string | null> {
    if (this.#terminating.length === 0) return null;
    // A few virtual servers are listed one by one; many at once with one full listing.
    const vss = [...new Set(this.#terminating.map((t) => t.vsArgs))];
    let listing: string;
    if (vss.length <= DRAIN_LIST_ONE_BY_ONE) {
      const parts = await Promise.all(vss.map((v) =>
        this.#o.host.ipvsList(v).catch((e: unknown) => {
          if (NO_SUCH_SERVICE.test(e instanceof Error ? e.message : String(e))) return null;
          throw e;
        })
      ));
      const gone = vss.find((_, i) => parts[i] === null);
      if (gone !== undefined) return `IPVS virtual server ${gone} (draining real servers) is missing`;
      listing = parts.join("\n");
    } else {
      listing = await this.#o.host.ipvsList();
    }
    const { lines, remaining } = drainedDeletes(this.#terminating, parseIpvsadmConnections(listing));
    await this.#o.host.ipvsRestore(lines);
    this.#terminating = remaining;
    return null;
  }

  async checkDrift(): Promise<string | null> {
    const last = this.#last;
    if (last === null) return null;
    const current = parseIpvsadmSave(await this.#o.host.ipvsSave());
    for (const [key, vs] of last.virtualServers) {
      const have = current.get(key);
      if (!have) return `IPVS virtual server ${key} is missing`;
      for (const rs of vs.realServers) {
        const rsKey = rs.address.includes(":") ? `[${rs.address}]:${rs.port}` : `${rs.address}:${rs.port}`;
        if (have.realServers.get(rsKey) !== rs.weight) {
          return `IPVS real server ${rsKey} of ${key} is missing or reweighted`;
        }
      }
    }
    const bound = new Set(await this.#o.host.dummyAddresses(this.#o.family));
    for (const a of last.bindAddresses) if (!bound.has(a)) return `${a} is missing from kube-ipvs0`;
    // Only now: listing a draining real server's virtual server fails when someone deleted it, and that
    // failure must not hide the drift the full sync repairs (nor may a deletion after the read above).
    return await this.#deleteDrained();
  }
}
