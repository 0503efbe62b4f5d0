/**
 * Start-up kernel settings against a temporary /proc/sys-like tree (and a fake Sysctl for errors a temp
 * dir cannot produce for root, such as EROFS and EACCES).
 */
import { afterEach, beforeEach, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import {
  applyConntrackSettings,
  applyOOMScoreAdj,
  checkBridgeNfCallIptables,
  conntrackMax,
  type ConntrackSettings,
  ensureRouteLocalnet,
  SYSCTL,
} from "../../../lib/host/conntrack_setup.ts";
import {
  ensureSysctl,
  isUnavailableError,
  ProcSysctl,
  type Sysctl,
  SysctlError,
} from "../../../lib/host/sysctl.ts";

/** Upstream defaults: maxPerCore 32768, min 131072, 24h, 1h, false, 0s, 0s. */
const DEFAULTS: ConntrackSettings = {
  maxPerCore: 32768,
  min: 131072,
  tcpEstablishedTimeout: 24 * 3600_000,
  tcpCloseWaitTimeout: 3600_000,
  tcpBeLiberal: false,
  udpTimeout: 0,
  udpStreamTimeout: 0,
};

let root = "";
let procSys = "";
let hashsize = "";

async function put(name: string, value: string): Promise<void> {
  const p = join(procSys, name);
  await mkdir(dirname(p), { recursive: true });
  await writeFile(p, value + "\n");
}

async function value(name: string): Promise<string> {
  return (await readFile(join(procSys, name), "utf8")).trim();
}

/** A kernel as Debian 12 boots it (values read on the build VM). */
async function stockKernel(): Promise<void> {
  await put(SYSCTL.conntrackMax, "65536");
  await put(SYSCTL.tcpTimeoutEstablished, "432000");
  await put(SYSCTL.tcpTimeoutCloseWait, "60");
  await put(SYSCTL.tcpBeLiberal, "0");
  await put(SYSCTL.udpTimeout, "30");
  await put(SYSCTL.udpTimeoutStream, "120");
  await writeFile(hashsize, "16384\n");
}

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), "edgeproxy-sysctl-"));
  procSys = join(root, "proc/sys");
  hashsize = join(root, "hashsize");
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

describe("conntrackMax (upstream getConntrackMax)", () => {
  it("scales by CPUs with min as a floor; maxPerCore 0 leaves the kernel alone", () => {
    assert.equal(conntrackMax(32768, 131072, 2), 131072, "2 cores: the floor wins");
    assert.equal(conntrackMax(32768, 131072, 8), 262144);
    assert.equal(conntrackMax(32768, 0, 1), 32768);
    assert.equal(conntrackMax(0, 131072, 64), 0);
    assert.equal(conntrackMax(-1, 131072, 64), 0);
  });
});

describe("ProcSysctl", () => {
  it("reads trimmed values and writes without a trailing newline, replacing the old content", async () => {
    await put(SYSCTL.conntrackMax, "262144");
    const s = new ProcSysctl(procSys);
    assert.equal(await s.get(SYSCTL.conntrackMax), "262144");
    await s.set(SYSCTL.conntrackMax, 5);
    assert.equal(await readFile(join(procSys, SYSCTL.conntrackMax), "utf8"), "5");
  });

  it("never creates a missing entry and names the entry and errno in errors", async () => {
    const s = new ProcSysctl(procSys);
    await assert.rejects(s.set("net/netfilter/nf_conntrack_max", 1), (err: SysctlError) => {
      assert.equal(err.code, "ENOENT");
      assert.match(err.message, /^sysctl set net\/netfilter\/nf_conntrack_max \(.*\) failed: ENOENT/);
      return isUnavailableError(err);
    });
    await assert.rejects(s.get("net/nope"), /sysctl get net\/nope .* failed: ENOENT/);
  });

  it("rejects names that escape the root and values that span lines", async () => {
    const s = new ProcSysctl(procSys);
    await assert.rejects(s.get("../etc/passwd"), /EINVAL: not a slash-separated sysctl name/);
    await assert.rejects(s.get("/etc/passwd"), /EINVAL/);
    await put(SYSCTL.tcpBeLiberal, "0");
    await assert.rejects(s.set(SYSCTL.tcpBeLiberal, "1\n2"), /is not one line/);
  });

  it("ensureSysctl writes only when the value differs", async () => {
    await put(SYSCTL.routeLocalnet, "1");
    const s = new ProcSysctl(procSys);
    assert.equal(await ensureSysctl(s, SYSCTL.routeLocalnet, 1), "unchanged");
    assert.equal(await ensureSysctl(s, SYSCTL.routeLocalnet, 0), "changed");
    assert.equal(await value(SYSCTL.routeLocalnet), "0");
  });
});

describe("applyConntrackSettings", () => {
  it("applies upstream defaults on a 2-core host: max, hashsize = max/4, tcp timeouts; udp left alone", async () => {
    await stockKernel();
    const report = await applyConntrackSettings(DEFAULTS, {
      sysctl: new ProcSysctl(procSys),
      cpuCount: 2,
      hashsizePath: hashsize,
    });
    assert.deepEqual(report.warnings, []);
    assert.deepEqual(report.changed, [
      `${SYSCTL.conntrackMax}=131072`,
      `${hashsize}=32768`,
      `${SYSCTL.tcpTimeoutEstablished}=86400`,
      `${SYSCTL.tcpTimeoutCloseWait}=3600`,
    ]);
    assert.equal(await value(SYSCTL.conntrackMax), "131072");
    assert.equal((await readFile(hashsize, "utf8")).trim(), "32768");
    assert.equal(await value(SYSCTL.tcpBeLiberal), "0");
    assert.equal(await value(SYSCTL.udpTimeout), "30");
    assert.equal(await value(SYSCTL.udpTimeoutStream), "120");
  });

  it("sets be_liberal and udp timeouts when configured, truncating to whole seconds; idempotent", async () => {
    await stockKernel();
    const settings = { ...DEFAULTS, tcpBeLiberal: true, udpTimeout: 60_000, udpStreamTimeout: 180_900 };
    const env = { sysctl: new ProcSysctl(procSys), cpuCount: 8, hashsizePath: hashsize };
    const first = await applyConntrackSettings(settings, env);
    assert.deepEqual(first.warnings, []);
    assert.equal(await value(SYSCTL.conntrackMax), "262144");
    assert.equal((await readFile(hashsize, "utf8")).trim(), "65536");
    assert.equal(await value(SYSCTL.tcpBeLiberal), "1");
    assert.equal(await value(SYSCTL.udpTimeout), "60");
    assert.equal(await value(SYSCTL.udpTimeoutStream), "180");
    const second = await applyConntrackSettings(settings, env);
    assert.deepEqual(second, { changed: [], warnings: [] });
  });

  it("leaves a big enough hashsize, and everything when all settings are zero", async () => {
    await stockKernel();
    await writeFile(hashsize, "65536\n");
    const env = { sysctl: new ProcSysctl(procSys), cpuCount: 2, hashsizePath: hashsize };
    const r = await applyConntrackSettings(DEFAULTS, env);
    assert.ok(!r.changed.some((c) => c.startsWith(hashsize)));
    await stockKernel();
    const zero = await applyConntrackSettings(
      { ...DEFAULTS, maxPerCore: 0, tcpEstablishedTimeout: 0, tcpCloseWaitTimeout: 0 },
      env,
    );
    assert.deepEqual(zero, { changed: [], warnings: [] });
    assert.equal(await value(SYSCTL.conntrackMax), "65536");
  });

  it("an empty /proc/sys gives one warning per setting and no exception", async () => {
    const r = await applyConntrackSettings(
      { ...DEFAULTS, tcpBeLiberal: true, udpTimeout: 1000, udpStreamTimeout: 1000 },
      { sysctl: new ProcSysctl(procSys), cpuCount: 2, hashsizePath: hashsize },
    );
    assert.deepEqual(r.changed, []);
    assert.equal(r.warnings.length, 6);
    assert.match(
      r.warnings[0],
      /^conntrack\.maxPerCore\/min: cannot set sysctl net\/netfilter\/nf_conntrack_max to 131072, kernel value kept: ENOENT: no such file or directory \(.*nf_conntrack_max\)$/,
    );
    assert.ok(!r.warnings.some((w) => w.includes("hashsize")), "no hashsize attempt after max failed");
  });

  it("read-only /proc/sys (EROFS) and no permission (EACCES) are warnings; the rest still applies", async () => {
    const written = new Map<string, string>();
    const sysctl: Sysctl = {
      get: (name) => Promise.resolve(written.get(name) ?? "0"),
      set: (name, v) => {
        if (name === SYSCTL.conntrackMax) {
          return Promise.reject(
            new SysctlError("set", name, `/proc/sys/${name}`, "EROFS", "read-only file system"),
          );
        }
        if (name === SYSCTL.tcpTimeoutCloseWait) {
          return Promise.reject(
            new SysctlError("set", name, `/proc/sys/${name}`, "EACCES", "permission denied"),
          );
        }
        written.set(name, String(v));
        return Promise.resolve();
      },
    };
    const r = await applyConntrackSettings(DEFAULTS, { sysctl, cpuCount: 2, hashsizePath: hashsize });
    assert.equal(r.warnings.length, 2);
    assert.match(r.warnings[0], /nf_conntrack_max .*EROFS/);
    assert.match(
      r.warnings[1],
      /^conntrack\.tcpCloseWaitTimeout: cannot set sysctl .*close_wait to 3600, kernel value kept: EACCES/,
    );
    assert.equal(written.get(SYSCTL.tcpTimeoutEstablished), "86400");
  });

  it("a hashsize that cannot be read or written is a warning", async () => {
    await stockKernel();
    await rm(hashsize);
    const r = await applyConntrackSettings(DEFAULTS, {
      sysctl: new ProcSysctl(procSys),
      cpuCount: 2,
      hashsizePath: hashsize,
    });
    assert.equal(await value(SYSCTL.conntrackMax), "131072");
    assert.equal(r.warnings.length, 1);
    assert.match(r.warnings[0], /cannot read conntrack hashsize .* \(needed for nf_conntrack_max=131072\)/);
  });
});

describe("other start-up settings", () => {
  it("oomScoreAdj is written to the given file; out of range or unwritable is a warning", async () => {
    const oom = join(root, "oom_score_adj");
    await writeFile(oom, "0\n");
    assert.deepEqual(await applyOOMScoreAdj(-999, oom), { changed: [`${oom}=-999`], warnings: [] });
    assert.equal(await readFile(oom, "utf8"), "-999");
    const bad = await applyOOMScoreAdj(-1001, oom);
    assert.match(bad.warnings[0], /oomScoreAdj: -1001 is not an integer in \[-1000, 1000\]/);
    const missing = await applyOOMScoreAdj(-999, join(root, "nope"));
    assert.match(missing.warnings[0], /oomScoreAdj: cannot write -999 to .*nope/);
  });

  it("route_localnet is set to 1 once; a missing entry is a warning that names the consequence", async () => {
    await put(SYSCTL.routeLocalnet, "0");
    const s = new ProcSysctl(procSys);
    assert.deepEqual(await ensureRouteLocalnet(s), { changed: [`${SYSCTL.routeLocalnet}=1`], warnings: [] });
    assert.equal(await value(SYSCTL.routeLocalnet), "1");
    assert.deepEqual(await ensureRouteLocalnet(s), { changed: [], warnings: [] });
    const empty = await ensureRouteLocalnet(new ProcSysctl(join(root, "empty")));
    assert.match(empty.warnings[0], /route_localnet to 1: NodePorts on localhost will not work/);
  });

  it("bridge-nf-call-iptables: warns when readable and not 1, silent when 1 or absent", async () => {
    const s = new ProcSysctl(procSys);
    assert.deepEqual(await checkBridgeNfCallIptables(s), { changed: [], warnings: [] }, "module not loaded");
    await put(SYSCTL.bridgeNfCallIptables, "1");
    assert.deepEqual((await checkBridgeNfCallIptables(s)).warnings, []);
    await put(SYSCTL.bridgeNfCallIptables, "0");
    assert.match(
      (await checkBridgeNfCallIptables(s)).warnings[0],
      /Missing br-netfilter module or unset sysctl br-nf-call-iptables, proxy may not work as intended/,
    );
  });
});
