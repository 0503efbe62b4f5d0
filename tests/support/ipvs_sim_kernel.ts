/**
 * A simulated kernel behind an IpvsHost and an iptables runner, for running the IPVS provider
 * (lib/proxy/ipvs/backend.ts) and tracing packets through what its writers actually left: `ipset -exist
 * restore` input (create / add / del), `ipvsadm -R` lines (-A/-E/-D virtual servers, -a/-e/-d real
 * servers), kube-ipvs0 address changes, and the iptables payload (IPVS mode redeclares all its chains, so
 * the last payload is the rule set). `ipvsadm -Ln` lists every real server with no connection, so removed
 * ones are deleted as soon as the provider checks. {@link SimulatedIpvsKernel.view} is what
 * tests/support/ipvs_tracer.ts reads.
 */
import type { IPFamily, Protocol } from "../../lib/proxy/types.ts";
import type { IpvsHost } from "../../lib/proxy/ipvs/host.ts";
import type { IptablesRunner } from "../../lib/proxy/iptables/runner.ts";
import { joinHostPort, splitHostPort } from "../../lib/net/go_net.ts";
import { virtualServerKey } from "../../lib/proxy/ipvs/state.ts";
import type { IpvsKernelView, TracedVirtualServer } from "./ipvs_tracer.ts";

interface SimVS {
  address: string;
  port: number;
  protocol: Protocol;
  scheduler: string;
  persistentTimeout: number;
  flags: string;
  /** "ip:port" → weight */
  realServers: Map<string, number>;
}

const FLAG_PROTO: Record<string, Protocol> = { "-t": "TCP", "-u": "UDP", "--sctp-service": "SCTP" };
const PROTO_FLAG: Record<Protocol, string> = { TCP: "-t", UDP: "-u", SCTP: "--sctp-service" };

/** The simulated kernel of one family. */
export class SimulatedIpvsKernel {
  readonly virtualServers = new Map<string, SimVS>();
  readonly ipsets = new Map<string, { type: string; entries: Set<string> }>();
  readonly dummy = new Set<string>();
  iptables = "";
  /** Every ipvsadm line applied, in order (for "unchanged services cost nothing" checks). */
  readonly ipvsLog: string[] = [];

  constructor(readonly family: IPFamily, readonly nodeAddresses: readonly string[]) {}

  #applyIpvs(line: string): void {
    const f = line.trim().split(/\s+/);
    const proto = FLAG_PROTO[f[1]];
    const hp = splitHostPort(f[2]);
    if (!proto || !hp) throw new Error(`ipvsadm -R: cannot parse ${JSON.stringify(line)}`);
    const key = virtualServerKey({ address: hp.host, port: Number(hp.port), protocol: proto });
    const opt = (n: string) => (f.indexOf(n) >= 0 ? f[f.indexOf(n) + 1] : null);
    const vs = this.virtualServers.get(key);
    switch (f[0]) {
      case "-A":
        if (vs) throw new Error(`ipvsadm -R: ${line}: Service already exists`);
        this.virtualServers.set(key, {
          address: hp.host,
          port: Number(hp.port),
          protocol: proto,
          scheduler: opt("-s") ?? "wlc",
          persistentTimeout: f.includes("-p") ? Number(opt("-p") ?? 300) : 0,
          flags: opt("-b") ?? "",
          realServers: new Map(),
        });
        return;
      case "-E":
      case "-D":
      case "-a":
      case "-e":
      case "-d":
        if (!vs) throw new Error(`ipvsadm -R: ${line}: No such service`);
    }
    const rs = opt("-r");
    switch (f[0]) {
      case "-E":
        vs!.scheduler = opt("-s") ?? vs!.scheduler;
        vs!.persistentTimeout = f.includes("-p") ? Number(opt("-p") ?? 300) : 0;
        vs!.flags = opt("-b") ?? "";
        return;
      case "-D":
        this.virtualServers.delete(key);
        return;
      case "-a":
        if (vs!.realServers.has(rs!)) throw new Error(`ipvsadm -R: ${line}: Destination already exists`);
        vs!.realServers.set(rs!, Number(opt("-w") ?? 1));
        return;
      case "-e":
        if (!vs!.realServers.has(rs!)) throw new Error(`ipvsadm -R: ${line}: No such destination`);
        vs!.realServers.set(rs!, Number(opt("-w") ?? 1));
        return;
      case "-d":
        if (!vs!.realServers.delete(rs!)) throw new Error(`ipvsadm -R: ${line}: No such destination`);
        return;
      default:
        throw new Error(`ipvsadm -R: unknown command ${JSON.stringify(line)}`);
    }
  }

  #applyIpset(line: string): void {
    const f = line.trim().split(/\s+/);
    if (f.length === 0 || f[0] === "") return;
    if (f[0] === "create") {
      if (!this.ipsets.has(f[1])) this.ipsets.set(f[1], { type: f[2], entries: new Set() });
      return;
    }
    const set = this.ipsets.get(f[1]);
    if (!set) throw new Error(`ipset restore: ${line}: set does not exist`);
    if (f[0] === "add") set.entries.add(f[2]);
    else if (f[0] === "del") set.entries.delete(f[2]); // -exist: a missing entry is fine
    else throw new Error(`ipset restore: unknown command ${JSON.stringify(line)}`);
  }

  /** `ipvsadm -Sn` of the simulated state. */
  ipvsSave(): string {
    const out: string[] = [];
    for (const vs of this.virtualServers.values()) {
      const args = `${PROTO_FLAG[vs.protocol]} ${joinHostPort(vs.address, vs.port)}`;
      let line = `-A ${args} -s ${vs.scheduler}`;
      if (vs.persistentTimeout > 0) line += ` -p ${vs.persistentTimeout}`;
      if (vs.flags) line += ` -b ${vs.flags}`;
      out.push(line);
      for (const [rs, w] of vs.realServers) out.push(`-a ${args} -r ${rs} -m -w ${w}`);
    }
    return out.join("\n") + (out.length ? "\n" : "");
  }

  /** The host the provider writes through. */
  host(): IpvsHost {
    const v6 = this.family === "IPv6";
    return {
      ipvsSave: () => Promise.resolve(this.ipvsSave()),
      ipvsList: () => {
        const out = ["IP Virtual Server version 1.2.1 (size=4096)", "Prot LocalAddress:Port Scheduler Flags"];
        for (const vs of this.virtualServers.values()) {
          out.push(`${vs.protocol}  ${joinHostPort(vs.address, vs.port)} ${vs.scheduler}`);
          for (const [rs, w] of vs.realServers) {
            out.push(`  -> ${rs}          Masq    ${w}      0          0`);
          }
        }
        return Promise.resolve(out.join("\n") + "\n");
      },
      ipvsRestore: (lines) => {
        for (const l of lines) {
          this.#applyIpvs(l);
          this.ipvsLog.push(l);
        }
        return Promise.resolve();
      },
      ipvsSetTimeouts: () => Promise.resolve(),
      ipsetSave: () => {
        const out: string[] = [];
        for (const [name, s] of this.ipsets) {
          out.push(`create ${name} ${s.type}`);
          for (const e of s.entries) out.push(`add ${name} ${e}`);
        }
        return Promise.resolve(out.join("\n") + "\n");
      },
      ipsetRestore: (text) => {
        for (const l of text.split("\n")) this.#applyIpset(l);
        return Promise.resolve();
      },
      ensureDummy: () => Promise.resolve(),
      dummyAddresses: () => Promise.resolve([...this.dummy].filter((a) => a.includes(":") === v6)),
      changeDummyAddresses: (add, del) => {
        for (const a of add) this.dummy.add(a);
        for (const a of del) this.dummy.delete(a);
        return Promise.resolve();
      },
      nodeAddresses: () => Promise.resolve(this.nodeAddresses.filter((a) => a.includes(":") === v6)),
    };
  }

  /** An iptables runner keeping the last payload (jump rules are the tracer's own). */
  iptablesRunner(): IptablesRunner {
    return {
      family: this.family,
      version: { parts: [1, 8, 9], text: "1.8.9", backend: "nf_tables" },
      versionNote: "",
      features: { hasCheck: true, hasRandomFully: true, waitFlags: [], restoreWaitFlags: [] },
      binaries: { iptables: "iptables", save: "iptables-save", restore: "iptables-restore" },
      restore: (p) => {
        this.iptables = typeof p === "string" ? p : [...p].join("");
        return Promise.resolve();
      },
      save: () => Promise.resolve(""),
      saveLines: () => Promise.resolve(),
      exec: () => Promise.resolve({ code: 0, stdout: "", stderr: "" }),
      execLines: () => Promise.resolve({ code: 0, stdout: "", stderr: "" }),
    };
  }

  /** What the tracer reads. */
  view(): IpvsKernelView {
    const virtualServers = new Map<string, TracedVirtualServer>();
    for (const [key, vs] of this.virtualServers) {
      virtualServers.set(key, {
        address: vs.address,
        port: vs.port,
        protocol: vs.protocol,
        persistentTimeout: vs.persistentTimeout,
        realServers: [...vs.realServers].map(([rs, weight]) => {
          const hp = splitHostPort(rs)!;
          return { address: hp.host, port: Number(hp.port), weight };
        }),
      });
    }
    return {
      family: this.family,
      virtualServers,
      ipsets: this.ipsets,
      iptables: this.iptables,
      dummyAddresses: [...this.dummy],
    };
  }
}
