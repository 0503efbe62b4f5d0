/**
 * `--userspace-portals=none`: the service addresses (cluster IPs, external IPs, load-balancer IPs) become
 * local addresses — /32 or /128 on the `kube-userspace0` dummy interface when the kernel has the dummy
 * driver, else on `lo` — so the listeners bind them directly and no netfilter rule is needed.
 *
 * ARP: Linux answers ARP requests for any local address on any interface by default (arp_ignore=0), so
 * every node would claim every service IP on the wire. Before adding addresses this sets arp_ignore=1
 * (answer only for addresses of the receiving interface) and arp_announce=2 (use the outgoing interface's
 * address as ARP source) on each interface that has an IPv4 address of its own — the node's links to other
 * hosts. Not on `all`: routed pod networks keep the pods' gateway address on lo and answer ARP for it on
 * the address-less pod veths, which arp_ignore=1 would stop.
 *
 * On lo the mode's addresses carry a mark, so a later run, a mode switch and `--cleanup` find and remove
 * them without touching lo's own: IPv4 ones the label {@link LO_ADDRESS_LABEL}, IPv6 ones (which have no
 * labels) the flags `nodad noprefixroute` on a /128.
 */
import { networkInterfaces } from "node:os";
import { runInProcessGroup } from "../../runtime/process_groups.ts";
import { ensureSysctl, isUnavailableError, ProcSysctl, type Sysctl } from "../../host/sysctl.ts";
import type { IPFamily } from "../types.ts";

/** The dummy interface the mode creates for service addresses. */
export const USERSPACE_INTERFACE = "kube-userspace0";

/** The label of the mode's IPv4 addresses on lo (at most 15 characters, starting with "lo:"). */
export const LO_ADDRESS_LABEL = "lo:kubeus";

/** Makes service addresses local. */
export interface ServiceAddressHost {
  /** Interface the addresses live on. */
  readonly device: string;
  /** Makes exactly `addresses` (of one family) ours on the interface: adds missing, removes stale. */
  sync(family: IPFamily, addresses: ReadonlySet<string>): Promise<void>;
  /** Removes what {@link sync} added (cleanup). */
  removeAll(family: IPFamily): Promise<void>;
  /**
   * The addresses {@link sync} made ours that are gone from the interface (deleted by an operator); they
   * are forgotten, so the next sync adds them again. Empty when nothing is missing.
   */
  missing?(family: IPFamily): Promise<string[]>;
  /**
   * The node's own addresses of a family on every interface, whatever its link state, without the service
   * addresses this host added (node ports bind these).
   */
  nodeAddresses(family: IPFamily): Promise<string[]>;
}

/** Runs `ip` with arguments; returns stdout, throws with stderr on failure. */
export type IpCommand = (args: readonly string[]) => Promise<string>;

/** The real `ip` binary. */
export const runIp: IpCommand = async (args) => {
  const r = await runInProcessGroup(["ip", ...args], { timeoutMs: 10_000 });
  if (r.code !== 0) throw new Error(`ip ${args.join(" ")}: ${r.exit}: ${r.stderr.trim()}`);
  return r.stdout.toString("utf8");
};

/**
 * Prepares the interface: creates the dummy (falls back to lo when the kernel has no dummy driver), sets
 * it up, and sets the ARP sysctls. `warn` hears what could not be done.
 */
export async function createServiceAddressHost(
  warn: (msg: string) => void,
  ip: IpCommand = runIp,
  sysctl: Sysctl = new ProcSysctl(),
): Promise<ServiceAddressHost> {
  let device = USERSPACE_INTERFACE;
  try {
    const links = await ip(["-o", "link", "show", "dev", device]).catch(() => "");
    if (links === "") await ip(["link", "add", device, "type", "dummy"]);
    await ip(["link", "set", device, "up"]);
  } catch (e) {
    warn(`cannot create dummy interface ${device} (${(e as Error).message}); using lo for service addresses`);
    device = "lo";
  }
  for (const ifname of hostLinks(device)) {
    for (const [key, value] of [["arp_ignore", 1], ["arp_announce", 2]] as const) {
      const name = `net/ipv4/conf/${ifname}/${key}`;
      try {
        await ensureSysctl(sysctl, name, value);
      } catch (e) {
        if (!isUnavailableError(e)) throw e;
        warn(`cannot set ${name}=${value}: other hosts may see ARP replies for service addresses`);
      }
    }
  }
  return new IpServiceAddressHost(device, ip);
}

/** Interfaces with an IPv4 address of their own, except lo and `device` (links to other hosts). */
export function hostLinks(device: string): string[] {
  return Object.entries(networkInterfaces())
    .filter(([name, addrs]) =>
      name !== "lo" && name !== device && /^[A-Za-z0-9_.-]+$/.test(name) &&
      (addrs ?? []).some((a) => a.family === "IPv4" && !a.internal)
    )
    .map(([name]) => name)
    .sort();
}

/** Addresses kept with `ip addr`. */
export class IpServiceAddressHost implements ServiceAddressHost {
  readonly #ip: IpCommand;
  /** Addresses this process put on the interface, per family. */
  readonly #owned = new Map<IPFamily, Set<string>>();
  #adopted = new Set<IPFamily>();

  constructor(readonly device: string, ip: IpCommand) {
    this.#ip = ip;
  }

  /** @inheritdoc */
  async sync(family: IPFamily, addresses: ReadonlySet<string>): Promise<void> {
    const owned = await this.#ownedOf(family);
    const prefix = family === "IPv6" ? 128 : 32;
    for (const a of addresses) {
      if (owned.has(a)) continue;
      const args = ["addr", "add", `${a}/${prefix}`, "dev", this.device];
      // IPv6: no duplicate address detection (the address is ours by definition) so it is usable at once.
      if (family === "IPv6") args.push("nodad");
      // On lo: the mark that tells ours from lo's own (see the module comment).
      if (this.device === "lo") {
        args.push(...(family === "IPv6" ? ["noprefixroute"] : ["label", LO_ADDRESS_LABEL]));
      }
      try {
        await this.#ip(args);
      } catch (e) {
        if (!/File exists|already assigned/.test((e as Error).message)) throw e;
      }
      owned.add(a);
    }
    for (const a of [...owned]) {
      if (addresses.has(a)) continue;
      await this.#ip(["addr", "del", `${a}/${prefix}`, "dev", this.device]).catch(() => {});
      owned.delete(a);
    }
  }

  /** @inheritdoc */
  async removeAll(family: IPFamily): Promise<void> {
    await this.sync(family, new Set());
  }

  /** @inheritdoc */
  async nodeAddresses(family: IPFamily): Promise<string[]> {
    const owned = await this.#ownedOf(family);
    const out = await this.#ip([family === "IPv6" ? "-6" : "-4", "-o", "addr", "show"]);
    const found = new Set<string>();
    for (const m of out.matchAll(/\binet6? ([0-9a-fA-F:.]+)\/\d+ .*?scope (\w+)/g)) {
      if (m[2] !== "link" && !owned.has(m[1])) found.add(m[1]);
    }
    return [...found].sort();
  }

  /** @inheritdoc */
  async missing(family: IPFamily): Promise<string[]> {
    const owned = await this.#ownedOf(family);
    const present = new Set(await this.#marked(family));
    const gone = [...owned].filter((a) => !present.has(a)).sort();
    for (const a of gone) owned.delete(a);
    return gone;
  }

  /**
   * What we own: what this process added, and, once, what an earlier run left (on the dummy interface every
   * /32 or /128; on lo those with the mark), so a restart removes stale ones.
   */
  async #ownedOf(family: IPFamily): Promise<Set<string>> {
    let owned = this.#owned.get(family);
    if (!owned) {
      owned = new Set();
      this.#owned.set(family, owned);
    }
    if (!this.#adopted.has(family)) {
      this.#adopted.add(family);
      for (const a of await this.#marked(family)) owned.add(a);
    }
    return owned;
  }

  /** The addresses of `family` on the interface that are the mode's (see {@link #ownedOf}). */
  async #marked(family: IPFamily): Promise<string[]> {
    const v6 = family === "IPv6";
    const out = await this.#ip([v6 ? "-6" : "-4", "-o", "addr", "show", "dev", this.device]);
    const found: string[] = [];
    for (const line of out.split("\n")) {
      const m = /\binet6? ([0-9a-fA-F:.]+)\/(\d+) (.*)$/.exec(line);
      if (!m || m[2] !== (v6 ? "128" : "32")) continue;
      if (this.device === "lo") {
        const words = m[3].split(/[\s\\]+/);
        const marked = v6
          ? words.includes("nodad") && words.includes("noprefixroute")
          : words.includes(LO_ADDRESS_LABEL);
        if (!marked) continue;
      }
      found.push(m[1]);
    }
    return found;
  }
}

/**
 * Removes the mode's addresses from lo (the fallback when there is no dummy driver): `--cleanup` and a
 * switch to another mode. The dummy interface is deleted whole elsewhere.
 */
export async function removeLoServiceAddresses(ip: IpCommand = runIp): Promise<void> {
  const lo = new IpServiceAddressHost("lo", ip);
  for (const family of ["IPv4", "IPv6"] as const) await lo.removeAll(family);
}
