/**
 * Runs a shell script inside a user-mode-linux guest: a Linux kernel with IPVS, ipset, dummy and veth as
 * an ordinary process, with the host's root as its filesystem (hostfs). The host kernel of these machines
 * has no IPVS; the guest has, so IPVS tests run there.
 *
 * Kernels, first found wins: $EDGEPROXY_UML_ROOT; the one tests/support/uml_kernel.sh builds from
 * tests/support/uml_kernel.config (IPVS, ipset, iptables legacy and nf_tables, all built in); Debian's
 * prebuilt user-mode-linux that script falls back to; Debian's user-mode-linux package.
 *
 * Safety: every write to / inside the guest reaches the host's files. The guest therefore mounts tmpfs
 * over /run and over its private scratch directory (`$UML_SCRATCH`, also HOME and TMPDIR), loads modules
 * through a module root built in that tmpfs (modprobe -d), and picks iptables: the host's own `iptables`
 * when it works in the guest kernel (the built kernel: `UML_IPTABLES=nf_tables` or `legacy`, as the
 * host's alternative is set); else, when the kernel has legacy iptables only (Debian's 6.1 UML), iptables'
 * legacy binary bind-mounted over the iptables paths inside the guest only (`UML_IPTABLES=legacy`); else
 * (Debian unstable's 7.x UML has neither) `UML_IPTABLES=none`: iptables cannot be used in the guest.
 * The only host-visible writes are the script's output and exit status, into this run's own
 * temporary directory, which is removed afterwards. The guest always goes away: `poweroff -f` at the end,
 * SIGKILL to its process group on timeout, and on process exit.
 *
 *   const r = await runInUml("ipvsadm -Ln");
 *   // r.code, r.output (stdout+stderr of the script), r.bootMs
 */
import { spawn } from "node:child_process";
import {
  accessSync,
  constants as fsConstants,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { sha256 } from "../../lib/util/sha256.ts";

/** A user-mode-linux kernel and its modules. */
export interface UmlKernel {
  readonly binary: string;
  readonly modulesDir: string;
  readonly version: string;
}

/** What a guest run returned. */
export interface UmlResult {
  /** The script's exit status (-1 when the guest never reported one: boot failure, timeout). */
  readonly code: number;
  /** The script's stdout and stderr, interleaved. */
  readonly output: string;
  /** The guest kernel's console (boot messages, module load errors). */
  readonly console: string;
  /** From spawning the kernel to the script's start, in milliseconds (-1 when it never started). */
  readonly bootMs: number;
  /** Whole run, spawn to exit, in milliseconds. */
  readonly totalMs: number;
  readonly timedOut: boolean;
}

/** Modules the IPVS mode needs (upstream's list plus what iptables-legacy and the tests use). */
export const UML_MODULES: readonly string[] = [
  "ip_vs",
  "ip_vs_rr",
  "ip_vs_wrr",
  "ip_vs_lc",
  "ip_vs_sh",
  "ip_vs_mh",
  "ip_vs_wlc",
  "nf_conntrack",
  "nf_nat",
  "nf_tables",
  "nft_compat",
  "ip_tables",
  "iptable_filter",
  "iptable_nat",
  "iptable_mangle",
  "xt_addrtype",
  "xt_comment",
  "xt_conntrack",
  "xt_mark",
  "xt_MASQUERADE",
  "xt_nat",
  "xt_tcpudp",
  "xt_multiport",
  "xt_physdev",
  "xt_statistic",
  "xt_set",
  "xt_ipvs",
  "ip_set",
  "ip_set_hash_ip",
  "ip_set_hash_ipport",
  "ip_set_hash_ipportip",
  "ip_set_hash_ipportnet",
  "ip_set_hash_net",
  "ip_set_bitmap_port",
  "dummy",
  "veth",
];

function executable(p: string): boolean {
  try {
    accessSync(p, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

function kernelAt(binary: string, modulesRoot: string): UmlKernel | null {
  if (!executable(binary)) return null;
  let versions: string[];
  try {
    versions = readdirSync(modulesRoot).sort();
  } catch {
    return null;
  }
  if (versions.length === 0) return null;
  const version = versions[versions.length - 1];
  return { binary, modulesDir: join(modulesRoot, version), version };
}

/** The kernel options tests/support/uml_kernel.sh builds with. */
export const UML_KERNEL_CONFIG: string = fileURLToPath(new URL("./uml_kernel.config", import.meta.url));

/**
 * Where tests/support/uml_kernel.sh puts the kernel it builds from `configText`:
 * /opt/edgeproxy-uml-<first 12 hex digits of its sha256> (the script computes the same name).
 */
export function builtUmlKernelRoot(configText: string = readFileSync(UML_KERNEL_CONFIG, "utf8")): string {
  const hex = Array.from(sha256(configText), (b) => b.toString(16).padStart(2, "0")).join("");
  return `/opt/edgeproxy-uml-${hex.slice(0, 12)}`;
}

/**
 * The UML kernel to use: $EDGEPROXY_UML_ROOT, the kernel tests/support/uml_kernel.sh builds (with IPv4
 * iptables), /opt/edgeproxy-uml (the script's fallback: Debian's prebuilt, which boots on AMX hosts), else
 * Debian's user-mode-linux package. Null when none is installed.
 */
export function findUmlKernel(): UmlKernel | null {
  const roots = [process.env.EDGEPROXY_UML_ROOT, builtUmlKernelRoot(), "/opt/edgeproxy-uml"].filter(
    (r): r is string => !!r,
  );
  for (const r of roots) {
    const k = kernelAt(join(r, "linux.uml"), join(r, "usr/lib/uml/modules"));
    if (k) return k;
  }
  return kernelAt("/usr/bin/linux.uml", "/usr/lib/uml/modules");
}

const LEGACY_NAMES = [
  "iptables",
  "iptables-restore",
  "iptables-save",
  "ip6tables",
  "ip6tables-restore",
  "ip6tables-save",
];

function initScript(dir: string, kernel: UmlKernel, modules: readonly string[]): string {
  const scratch = join(dir, "scratch");
  const modRoot = join(scratch, "modroot");
  return [
    "#!/bin/sh",
    "export PATH=/usr/sbin:/usr/bin:/sbin:/bin",
    `export UML_SCRATCH=${scratch} HOME=${scratch} TMPDIR=${scratch}`,
    "mount -t proc proc /proc",
    "mount -t sysfs sysfs /sys",
    "mount -t tmpfs tmpfs /run",
    `mount -t tmpfs tmpfs ${scratch}`,
    // Everything below writes into the tmpfs only.
    `mkdir -p ${modRoot}/lib/modules`,
    `ln -s ${kernel.modulesDir} ${modRoot}/lib/modules/${kernel.version}`,
    `for m in ${
      modules.join(" ")
    }; do modprobe -d ${modRoot} "$m" 2>/dev/console || echo "uml: no module $m" >/dev/console; done`,
    "legacy=$(command -v xtables-legacy-multi)",
    "export UML_IPTABLES=none",
    // The host's iptables as it is when the guest kernel runs it (its variant: nf_tables or legacy). A
    // write proves it: listing succeeds even where the kernel lacks the IPv4 family (Debian's 7.x UML).
    "if iptables -w 5 -t nat -N UML-PROBE >/dev/null 2>&1 && iptables -w 5 -t nat -X UML-PROBE; then",
    "  UML_IPTABLES=$(iptables -V | grep -o 'nf_tables\\|legacy')",
    `elif [ -n "$legacy" ] && [ -e /proc/net/ip_tables_names ]; then UML_IPTABLES=legacy; for n in ${
      LEGACY_NAMES.join(" ")
    }; do p=$(command -v $n) && mount --bind "$legacy" "$p"; done; fi`,
    "ip link set lo up",
    `echo started >${dir}/out/started`,
    `/bin/sh ${dir}/cmd.sh >${dir}/out/output 2>&1`,
    `echo $? >${dir}/out/rc`,
    "poweroff -f",
    "",
  ].join("\n");
}

const live = new Set<number>();
let exitHook = false;
function killGroup(pid: number): void {
  try {
    process.kill(-pid, "SIGKILL");
  } catch {
    // already gone
  }
}

/**
 * Boots a guest, runs `script` with /bin/sh in it, powers it off and returns what it printed. Never
 * rejects for a failing script or a failed boot (code -1, see `console`); the guest and this run's
 * temporary directory are always removed.
 */
export async function runInUml(
  script: string,
  opts: { timeoutMs?: number; memMB?: number; modules?: readonly string[]; kernel?: UmlKernel } = {},
): Promise<UmlResult> {
  const kernel = opts.kernel ?? findUmlKernel();
  if (!kernel) throw new Error("uml: no user-mode-linux kernel installed (apt-get install user-mode-linux)");
  const dir = mkdtempSync(join(tmpdir(), "edgeproxy-uml-"));
  try {
    for (const sub of ["out", "scratch"]) mkdirSync(join(dir, sub), { recursive: true });
    writeFileSync(join(dir, "init.sh"), initScript(dir, kernel, opts.modules ?? UML_MODULES), {
      mode: 0o755,
    });
    writeFileSync(join(dir, "cmd.sh"), script);
    const t0 = performance.now();
    const child = spawn(kernel.binary, [
      `mem=${opts.memMB ?? 1024}M`,
      "root=/dev/root",
      "rootfstype=hostfs",
      "rootflags=/",
      "rw",
      `init=${join(dir, "init.sh")}`,
      "con=null",
      "con0=fd:0,fd:1",
    ], {
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
      env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin", TMPDIR: dir, HOME: dir },
    });
    const pid = child.pid!;
    live.add(pid);
    if (!exitHook) {
      exitHook = true;
      process.on("exit", () => {
        for (const p of live) killGroup(p);
      });
    }
    const chunks: Buffer[] = [];
    let size = 0;
    const keep = (b: Buffer) => {
      if (size < 1 << 20) chunks.push(b);
      size += b.length;
    };
    child.stdout!.on("data", keep);
    child.stderr!.on("data", keep);
    let timedOut = false;
    let startedAt = -1;
    const poll = setInterval(() => {
      if (startedAt < 0) {
        try {
          accessSync(join(dir, "out/started"));
          startedAt = performance.now();
        } catch {
          // not yet
        }
      }
    }, 20);
    const timer = setTimeout(() => {
      timedOut = true;
      killGroup(pid);
    }, opts.timeoutMs ?? 120_000);
    await new Promise<void>((resolve) => child.on("close", () => resolve()));
    clearTimeout(timer);
    clearInterval(poll);
    killGroup(pid); // UML's helper processes, if any survived
    live.delete(pid);
    const totalMs = performance.now() - t0;
    const read = (f: string) => {
      try {
        return readFileSync(join(dir, "out", f), "utf8");
      } catch {
        return null;
      }
    };
    const rc = read("rc");
    if (startedAt < 0 && read("started") !== null) startedAt = totalMs + t0; // finished before the first poll
    return {
      code: rc === null ? -1 : Number(rc.trim()),
      output: read("output") ?? "",
      console: Buffer.concat(chunks).toString("utf8"),
      bootMs: startedAt < 0 ? -1 : Math.round(startedAt - t0),
      totalMs: Math.round(totalMs),
      timedOut,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

let probed: Promise<string | null> | null = null;

/**
 * Why UML tests cannot run here, or null when they can: not root, no kernel, or a kernel that does not
 * boot on this CPU (checked once per process by booting it).
 */
export function umlSkipReason(): Promise<string | null> {
  probed ??= (async () => {
    if (process.getuid?.() !== 0) return "needs root";
    const kernel = findUmlKernel();
    if (!kernel) {
      return "no user-mode-linux kernel (apt-get install user-mode-linux, or tests/support/uml_kernel.sh)";
    }
    for (const tool of ["/usr/sbin/modprobe", "/sbin/modprobe"]) {
      if (executable(tool)) return await bootProbe(kernel);
    }
    return "no modprobe (apt-get install kmod)";
  })();
  return probed;
}

async function bootProbe(kernel: UmlKernel): Promise<string | null> {
  const r = await runInUml("echo ok", { kernel, modules: [], timeoutMs: 60_000 });
  if (r.code === 0 && r.output.trim() === "ok") return null;
  const why = r.console.split("\n").find((l) => /fp regs failed|panic/i.test(l)) ?? `exit ${r.code}`;
  return `user-mode-linux ${kernel.version} does not boot here (${why.trim()}); tests/support/uml_kernel.sh installs one that does`;
}
