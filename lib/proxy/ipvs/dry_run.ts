/**
 * The --dry-run side of the IPVS mode: a host and an iptables runner that print, as shell here-documents,
 * what a sync would write (the `ipset restore` transaction, the iptables-restore payload and jump rules,
 * the `ipvsadm -R` batch, the kube-ipvs0 `ip -batch`) and read an empty kernel, so every sync prints the
 * whole state. Nothing on the host is changed and no IPVS kernel module or binary is needed.
 */
import type { IPFamily } from "../types.ts";
import type { IpvsHost } from "./host.ts";
import type { ExecResult, IptablesRunner, RestorePayload } from "../iptables/runner.ts";
import { DEFAULT_DUMMY_DEVICE } from "./chains.ts";

/** A here-document around `body` (which ends with a newline, or is empty). */
function heredoc(command: string, body: string): string {
  return `# ${command} <<EOF\n${body}# EOF\n`;
}

/**
 * The printing host. `nodeAddresses` supplies the node's addresses (read, never written): NodePort
 * virtual servers are made for them.
 */
export function createDryRunIpvsHost(
  family: IPFamily,
  write: (text: string) => void,
  nodeAddresses: (family: IPFamily) => readonly string[],
): IpvsHost {
  const prefix = (a: string) => `${a}/${a.includes(":") ? 128 : 32}`;
  return {
    ipvsSave: () => Promise.resolve(""),
    ipvsList: () => Promise.resolve(""),
    ipvsRestore(lines) {
      if (lines.length > 0) write(heredoc(`ipvsadm -R (${family})`, lines.join("\n") + "\n"));
      return Promise.resolve();
    },
    ipvsSetTimeouts(tcp, tcpFin, udp) {
      write(`# ipvsadm --set ${tcp} ${tcpFin} ${udp}\n`);
      return Promise.resolve();
    },
    ipsetSave: () => Promise.resolve(""),
    ipsetRestore(text) {
      if (text !== "") write(heredoc(`ipset -exist restore (${family})`, text));
      return Promise.resolve();
    },
    ensureDummy() {
      write(`# ip link add ${DEFAULT_DUMMY_DEVICE} type dummy (unless it exists)\n`);
      return Promise.resolve();
    },
    dummyAddresses: () => Promise.resolve([]),
    changeDummyAddresses(add, del) {
      const cmds = [
        ...add.map((a) => `addr add ${prefix(a)} dev ${DEFAULT_DUMMY_DEVICE}`),
        ...del.map((a) => `addr del ${prefix(a)} dev ${DEFAULT_DUMMY_DEVICE}`),
      ];
      if (cmds.length > 0) write(heredoc(`ip -batch - (${family})`, cmds.join("\n") + "\n"));
      return Promise.resolve();
    },
    nodeAddresses: (f) => Promise.resolve([...nodeAddresses(f)]),
  };
}

/**
 * An iptables runner that prints instead of running: restores as here-documents, `-N` / `-I` (the jump
 * rules a full sync ensures) as commands; `-C` answers "missing" so every jump rule is printed.
 */
export function createDryRunIptablesRunner(family: IPFamily, write: (text: string) => void): IptablesRunner {
  const bin = family === "IPv6" ? "ip6tables" : "iptables";
  const exec = (args: readonly string[]): Promise<ExecResult> => {
    if (args.includes("-C")) return Promise.resolve({ code: 1, stdout: "", stderr: "" });
    const quoted = args.map((
      a,
    ) => (/^[A-Za-z0-9_./:,=+-]+$/.test(a) ? a : `'${a.replaceAll("'", `'\\''`)}'`));
    write(`# ${bin} ${quoted.join(" ")}\n`);
    return Promise.resolve({ code: 0, stdout: "", stderr: "" });
  };
  return {
    family,
    version: { parts: [1, 8, 9], text: "1.8.9", backend: "unknown" },
    versionNote: "dry run: no iptables was run",
    features: {
      hasCheck: true,
      hasRandomFully: true,
      waitFlags: ["-w", "5", "-W", "100000"],
      restoreWaitFlags: ["-w", "5", "-W", "100000"],
    },
    binaries: { iptables: bin, save: `${bin}-save`, restore: `${bin}-restore` },
    restore(payload: RestorePayload): Promise<void> {
      write(`# ${bin}-restore -w 5 -W 100000 --noflush --counters <<EOF\n`);
      for (const chunk of typeof payload === "string" ? [payload] : payload) write(chunk);
      write("# EOF\n");
      return Promise.resolve();
    },
    save: () => Promise.resolve(""),
    saveLines: () => Promise.resolve(),
    exec,
    // Nothing is listed, so there are no lines to stream.
    execLines: (args: readonly string[]) => exec(args),
  };
}
