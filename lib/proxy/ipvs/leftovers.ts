/**
 * What the IPVS mode leaves on a host, and removing it (upstream's ipvs CleanupLeftovers, run by
 * platformCleanup when another mode starts, and by `--cleanup`).
 *
 * When another mode starts (`all: false`) only what IPVS mode alone owns goes, so a running iptables mode
 * — whose chains share names with IPVS mode's (KUBE-SERVICES, KUBE-POSTROUTING, KUBE-MARK-MASQ,
 * KUBE-FORWARD, KUBE-PROXY-FIREWALL) — keeps working even on a plain restart:
 *  - the IPVS virtual servers on kube-ipvs0's addresses and the NodePort ones (ports in the
 *    KUBE-NODE-PORT-* sets); other IPVS users' virtual servers stay (upstream flushes them all);
 *  - the rules that match our ipsets or jump to an IPVS-only chain, in any chain; then the IPVS-only chains
 *    (nat KUBE-NODE-PORT, KUBE-LOAD-BALANCER; filter KUBE-NODE-PORT, KUBE-SOURCE-RANGES-FIREWALL,
 *    KUBE-IPVS-FILTER, KUBE-IPVS-OUT-FILTER);
 *  - kube-ipvs0, and then our ipsets (a set still referenced by a rule cannot be destroyed).
 * `--cleanup` (`all: true`) also flushes every virtual server and removes the shared chains and IPVS
 * mode's jump rules, as upstream does. A host without IPVS in its kernel, without ipvsadm or ipset, or
 * without anything of ours is left alone, silently.
 */
import type { IPFamily } from "../types.ts";
import type { IptablesRunner, IptablesTable } from "../iptables/runner.ts";
import { iptablesArgs } from "../iptables/runner.ts";
import { deleteJumpRule } from "../iptables/jump_rules.ts";
import { parseIptablesSave } from "../iptables/save_parse.ts";
import { ruleTarget } from "../iptables/restore_content.ts";
import {
  isServiceChainName,
  KUBE_EXTERNAL_SERVICES,
  KUBE_NODEPORTS,
  KUBE_PROXY_CANARY,
  KUBE_SERVICES,
} from "../iptables/chain_names.ts";
import {
  DEFAULT_DUMMY_DEVICE,
  IPVS_CHAINS,
  IPVS_JUMP_RULES,
  KUBE_IPVS_FILTER,
  KUBE_IPVS_OUT_FILTER,
} from "./chains.ts";
import {
  KUBE_LOAD_BALANCER,
  KUBE_NODE_PORT,
  KUBE_SOURCE_RANGES_FIREWALL,
  type TableChain,
} from "./chains.ts";
import { ourIpsetNames, parseIpsetSave } from "./ipset_restore.ts";
import {
  ipsetName,
  KUBE_NODE_PORT_SCTP_SET,
  KUBE_NODE_PORT_TCP_SET,
  KUBE_NODE_PORT_UDP_SET,
} from "./ipsets.ts";
import { parseIpvsadmSave } from "./ipvsadm.ts";
import { joinHostPort, parseIP } from "../../net/go_net.ts";

/** Chains only IPVS mode creates (iptables mode has none of these names). */
export const IPVS_ONLY_CHAINS: readonly TableChain[] = Object.freeze([
  { table: "nat", chain: KUBE_NODE_PORT },
  { table: "nat", chain: KUBE_LOAD_BALANCER },
  { table: "filter", chain: KUBE_NODE_PORT },
  { table: "filter", chain: KUBE_SOURCE_RANGES_FIREWALL },
  { table: "filter", chain: KUBE_IPVS_FILTER },
  { table: "filter", chain: KUBE_IPVS_OUT_FILTER },
]);

const OUR_SETS: ReadonlySet<string> = new Set([...ourIpsetNames("IPv4"), ...ourIpsetNames("IPv6")]);

/**
 * The iptables-restore payload that removes one mode's own part of a table from its `iptables-save` text:
 * the rules in the remaining chains that jump to an `owned` chain or match `ruleOwned`, then the owned
 * chains (flushed, then deleted). "" when the table holds none of it. Pure.
 */
function planOwnedRemoval(
  table: IptablesTable,
  saveText: string,
  owned: (chain: string) => boolean,
  ruleOwned: (words: readonly string[]) => boolean = () => false,
): string {
  const saved = parseIptablesSave(saveText).get(table);
  if (!saved) return "";
  const present = [...saved.chains.keys()].filter(owned);
  const deletes: string[] = [];
  for (const chain of saved.chains.values()) {
    if (owned(chain.name)) continue;
    for (const rule of chain.rules) {
      const target = ruleTarget(rule);
      if ((target !== null && owned(target)) || ruleOwned(rule.split(" "))) {
        deletes.push("-D" + rule.slice(2));
      }
    }
  }
  if (deletes.length === 0 && present.length === 0) return "";
  const out = [`*${table}`, ...deletes, ...present.map((c) => `:${c} - [0:0]`), "COMMIT"];
  if (present.length > 0) out.push(`*${table}`, ...present.map((c) => `-X ${c}`), "COMMIT");
  return out.join("\n") + "\n";
}

/**
 * IPVS mode's own part of one table (see planOwnedRemoval): the IPVS-only chains, and the rules that jump
 * to them or match one of our sets. Pure.
 */
export function planIpvsIptablesLeftovers(table: IptablesTable, saveText: string): string {
  const only = new Set(IPVS_ONLY_CHAINS.filter((c) => c.table === table).map((c) => c.chain));
  return planOwnedRemoval(table, saveText, (c) => only.has(c), (words) => {
    const at = words.indexOf("--match-set");
    return at >= 0 && OUR_SETS.has(words[at + 1]);
  });
}

/** Chains only iptables mode creates, by table (its per-service chains are found by prefix in nat). */
const IPTABLES_ONLY_CHAINS: Readonly<Record<IptablesTable, readonly string[]>> = {
  nat: [KUBE_NODEPORTS, KUBE_PROXY_CANARY],
  filter: [KUBE_SERVICES, KUBE_EXTERNAL_SERVICES, KUBE_NODEPORTS, KUBE_PROXY_CANARY],
  mangle: [KUBE_PROXY_CANARY],
};

/**
 * iptables mode's own part of one table, for IPVS mode's first sync on a node that ran iptables mode: its
 * service chains (KUBE-SVC-*, KUBE-SEP-*, ...), KUBE-NODEPORTS, filter KUBE-SERVICES,
 * KUBE-EXTERNAL-SERVICES, the canaries, and the jumps into them. The chains both modes share were just
 * redeclared by IPVS mode's payload, so nothing of ours is touched. Pure.
 */
export function planIptablesModeLeftovers(table: IptablesTable, saveText: string): string {
  const only = new Set(IPTABLES_ONLY_CHAINS[table]);
  return planOwnedRemoval(table, saveText, (c) => only.has(c) || (table === "nat" && isServiceChainName(c)));
}

/** Node ports IPVS mode served, from `ipset save` (both families' sets). */
function nodePortsOf(ipsetSave: string): Set<string> {
  const sets = parseIpsetSave(ipsetSave);
  const out = new Set<string>();
  for (const family of ["IPv4", "IPv6"] as const) {
    for (const [set, proto] of [[KUBE_NODE_PORT_TCP_SET, "TCP"], [KUBE_NODE_PORT_UDP_SET, "UDP"]] as const) {
      for (const port of sets.get(ipsetName(set, family))?.entries ?? []) out.add(`${proto}/*:${port}`);
    }
    for (const e of sets.get(ipsetName(KUBE_NODE_PORT_SCTP_SET, family))?.entries ?? []) {
      const [ip, pp] = e.split(",");
      out.add(`SCTP/${parseIP(ip) ?? ip}:${pp.replace(/^sctp:/, "")}`);
    }
  }
  return out;
}

/**
 * `ipvsadm -R` lines deleting the virtual servers IPVS mode made: those on kube-ipvs0's addresses and the
 * NodePorts listed in its sets. Pure.
 */
export function planIpvsVirtualServerLeftovers(
  ipvsSave: string,
  dummyAddresses: readonly string[],
  ipsetSave: string,
): string[] {
  const onDummy = new Set(dummyAddresses.map((a) => parseIP(a) ?? a));
  const nodePorts = nodePortsOf(ipsetSave);
  const flag = { TCP: "-t", UDP: "-u", SCTP: "--sctp-service" } as const;
  const out: string[] = [];
  for (const vs of parseIpvsadmSave(ipvsSave).values()) {
    const ip = parseIP(vs.address) ?? vs.address;
    const ours = onDummy.has(ip) || nodePorts.has(`${vs.protocol}/*:${vs.port}`) ||
      nodePorts.has(`${vs.protocol}/${ip}:${vs.port}`);
    if (ours) out.push(`-D ${flag[vs.protocol]} ${joinHostPort(vs.address, vs.port)}`);
  }
  return out;
}

/** What cleaning up needs from the host (unit tests hand in a fake). */
export interface IpvsLeftoverHost {
  /** `ipvsadm -Sn`; null when the kernel has no IPVS loaded or ipvsadm is not installed. */
  ipvsSave(): Promise<string | null>;
  /** `ipvsadm -R` with these lines. */
  ipvsRestore(lines: readonly string[]): Promise<void>;
  /** `ipvsadm -C` (every virtual server). */
  ipvsFlush(): Promise<void>;
  /** `ipset save`; null when ipset is not installed. */
  ipsetSave(): Promise<string | null>;
  ipsetDestroy(name: string): Promise<void>;
  /** kube-ipvs0's addresses (both families); null when there is no kube-ipvs0. */
  dummyAddresses(): Promise<string[] | null>;
  deleteDummy(): Promise<void>;
  /** The iptables runner of a family; null when that family's iptables does not work here. */
  iptables(family: IPFamily): Promise<IptablesRunner | null>;
}

type Log = { info(msg: string): void; warn(msg: string): void };

/** Removes IPVS mode's leftovers (see the file comment). Returns 0, or 1 when a step failed (logged). */
export async function cleanupIpvsLeftovers(
  log: Log,
  host: IpvsLeftoverHost,
  opts: { readonly all: boolean },
): Promise<number> {
  let code = 0;
  const step = async <T>(what: string, f: () => Promise<T>): Promise<T | null> => {
    try {
      return await f();
    } catch (e) {
      log.warn(`ipvs leftovers: ${what}: ${(e as Error).message}`);
      code = 1;
      return null;
    }
  };
  const dummy = await step("reading kube-ipvs0", () => host.dummyAddresses());
  const ipsets = (await step("ipset save", () => host.ipsetSave())) ?? "";
  const ipvs = await step("ipvsadm -Sn", () => host.ipvsSave());
  if (ipvs !== null && ipvs.trim() !== "") {
    if (opts.all) {
      await step("ipvsadm -C", () => host.ipvsFlush());
      log.info("ipvs leftovers: flushed every IPVS virtual server");
    } else {
      const lines = planIpvsVirtualServerLeftovers(ipvs, dummy ?? [], ipsets);
      if (lines.length > 0) {
        await step("ipvsadm -R", () => host.ipvsRestore(lines));
        log.info(`ipvs leftovers: deleted ${lines.length} IPVS virtual servers of IPVS mode`);
      }
    }
  }
  const present = [...parseIpsetSave(ipsets).keys()].filter((n) => OUR_SETS.has(n));
  // IPVS mode's rules match its sets, which exist from its first sync until its cleanup (a set in use
  // cannot be destroyed): without them and kube-ipvs0 there is nothing to look for (no iptables-save,
  // which is large on an iptables-mode node, at every start).
  const iptablesToo = opts.all || dummy !== null || present.length > 0;
  for (const family of iptablesToo ? ["IPv4", "IPv6"] as const : [] as const) {
    const runner = await step(`${family} iptables`, () => host.iptables(family));
    if (!runner) continue;
    if (opts.all) {
      for (const rule of IPVS_JUMP_RULES) {
        await step(`jump ${rule.fromChain} -> ${rule.toChain}`, () => deleteJumpRule(runner, rule));
      }
    }
    for (const table of ["nat", "filter"] as const) {
      const save = await step(`${family} iptables-save -t ${table}`, () => runner.save(table));
      if (save === null) continue;
      const payload = planIpvsIptablesLeftovers(table, save);
      if (payload !== "") {
        await step(`${family} ${table} restore`, () => runner.restore(payload));
        log.info(`ipvs leftovers: removed IPVS mode's ${family} ${table} rules and chains`);
      }
    }
    if (opts.all) {
      // The chains IPVS mode shares with iptables mode, as upstream's cleanupIptablesLeftovers.
      for (const op of ["-F", "-X"]) {
        for (const c of IPVS_CHAINS) {
          const r = await step(
            `iptables ${op} ${c.table} ${c.chain}`,
            () => runner.exec(iptablesArgs(runner, op, c.table, c.chain)),
          );
          if (r === null || r.code === 0 || /No chain|does not exist|No such file/.test(r.stderr)) continue;
          if (/Too many links|Device or resource busy/.test(r.stderr)) {
            // Still referenced by iptables mode's chains: its cleanup (run after this one) removes both.
            log.info(`ipvs leftovers: ${family} ${c.table} ${c.chain} kept: still referenced`);
            continue;
          }
          log.warn(`ipvs leftovers: iptables ${op} ${c.table} ${c.chain}: ${r.stderr.trim()}`);
          code = 1;
        }
      }
    }
  }
  if (dummy !== null) {
    await step(`deleting ${DEFAULT_DUMMY_DEVICE}`, () => host.deleteDummy());
    log.info(`ipvs leftovers: deleted ${DEFAULT_DUMMY_DEVICE}`);
  }
  for (const name of present) await step(`ipset destroy ${name}`, () => host.ipsetDestroy(name));
  if (present.length > 0) log.info(`ipvs leftovers: destroyed ${present.length} ipsets`);
  return code;
}

/**
 * Removes iptables mode's own chains (planIptablesModeLeftovers) from nat, filter and mangle; called by
 * IPVS mode's first sync, after its payload. Failures are logged, never thrown.
 */
export async function removeIptablesModeLeftovers(
  runner: IptablesRunner,
  log: { info(msg: string): void; warn(msg: string): void },
): Promise<void> {
  for (const table of ["nat", "filter", "mangle"] as const) {
    try {
      const payload = planIptablesModeLeftovers(table, await runner.save(table));
      if (payload === "") continue;
      await runner.restore(payload);
      log.info(`removed iptables mode's ${runner.family} ${table} chains (switched to ipvs mode)`);
    } catch (e) {
      log.warn(`iptables mode leftovers (${runner.family} ${table}): ${(e as Error).message}`);
    }
  }
}
