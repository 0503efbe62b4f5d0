import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { readProcStats, registerProcessMetrics } from "../../../lib/metrics/process.ts";
import { Registry } from "../../../lib/metrics/registry.ts";

describe("process_* metrics", () => {
  let dir = "";
  before(() => {
    dir = mkdtempSync(join(tmpdir(), "edgeproxy-proc-"));
    const self = join(dir, "self");
    mkdirSync(join(self, "fd"), { recursive: true });
    mkdirSync(join(self, "net"), { recursive: true });
    for (const fd of ["0", "1", "2", "7"]) writeFileSync(join(self, "fd", fd), "");
    // comm with spaces and parentheses: fields are counted after the last ')'.
    // Fields 14/15 (utime/stime) = 250/150 ticks, 22 (starttime) = 12345 ticks, 23 (vsize) = 1048576000.
    const fields = [
      "S",
      "1",
      "1",
      "1",
      "0",
      "-1",
      "4194560",
      "100",
      "0",
      "0",
      "0",
      "250",
      "150",
      "0",
      "0",
      "20",
    ];
    fields.push("0", "1", "0", "12345", "1048576000", "2000");
    writeFileSync(join(self, "stat"), `4242 (edge (proxy) x) ${fields.join(" ")} 18446744073709551615 0 0\n`);
    writeFileSync(
      join(self, "status"),
      "Name:\tedgeproxy\nVmSize:\t1024000 kB\nVmRSS:\t   51200 kB\nThreads:\t9\n",
    );
    writeFileSync(
      join(self, "limits"),
      "Limit                     Soft Limit           Hard Limit           Units     \n" +
        "Max open files            1048576              1048576              files     \n" +
        "Max address space         unlimited            unlimited            bytes     \n",
    );
    writeFileSync(
      join(self, "net", "netstat"),
      "TcpExt: SyncookiesSent SyncookiesRecv\nTcpExt: 0 0\n" +
        "IpExt: InNoRoutes InTruncatedPkts InMcastPkts OutMcastPkts InBcastPkts OutBcastPkts InOctets OutOctets\n" +
        "IpExt: 0 0 0 0 0 0 9876543 12345\n",
    );
    writeFileSync(join(dir, "stat"), "cpu  1 2 3\nbtime 1735689600\nprocesses 100\n");
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it("reads /proc-style files like procfs", () => {
    const s = readProcStats(join(dir, "self"), dir);
    assert.deepEqual(s, {
      cpuSeconds: 4,
      virtualBytes: 1048576000,
      startTimeSeconds: 1735689600 + 123.45,
      residentBytes: 51200 * 1024,
      openFds: 4,
      maxFds: 1048576,
      virtualMaxBytes: 18446744073709551615,
      networkReceiveBytes: 9876543,
      networkTransmitBytes: 12345,
    });
  });

  it("exposes client_golang's names and help texts", () => {
    const r = new Registry();
    registerProcessMetrics(r, { procSelf: join(dir, "self"), procRoot: dir });
    assert.equal(
      r.metrics(),
      [
        "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.",
        "# TYPE process_cpu_seconds_total counter",
        "process_cpu_seconds_total 4",
        "# HELP process_max_fds Maximum number of open file descriptors.",
        "# TYPE process_max_fds gauge",
        "process_max_fds 1.048576e+06",
        "# HELP process_network_receive_bytes_total Number of bytes received by the process over the network.",
        "# TYPE process_network_receive_bytes_total counter",
        "process_network_receive_bytes_total 9.876543e+06",
        "# HELP process_network_transmit_bytes_total Number of bytes sent by the process over the network.",
        "# TYPE process_network_transmit_bytes_total counter",
        "process_network_transmit_bytes_total 12345",
        "# HELP process_open_fds Number of open file descriptors.",
        "# TYPE process_open_fds gauge",
        "process_open_fds 4",
        "# HELP process_resident_memory_bytes Resident memory size in bytes.",
        "# TYPE process_resident_memory_bytes gauge",
        "process_resident_memory_bytes 5.24288e+07",
        "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.",
        "# TYPE process_start_time_seconds gauge",
        "process_start_time_seconds 1.73568972345e+09",
        "# HELP process_virtual_memory_bytes Virtual memory size in bytes.",
        "# TYPE process_virtual_memory_bytes gauge",
        "process_virtual_memory_bytes 1.048576e+09",
        "# HELP process_virtual_memory_max_bytes Maximum amount of virtual memory available in bytes.",
        "# TYPE process_virtual_memory_max_bytes gauge",
        "process_virtual_memory_max_bytes 1.8446744073709552e+19",
        "",
      ].join("\n"),
    );
  });

  it("falls back to node:process when /proc is missing", () => {
    const r = new Registry();
    registerProcessMetrics(r, { procSelf: join(dir, "does-not-exist"), procRoot: dir });
    const text = r.metrics();
    const names = [...text.matchAll(/^# TYPE (\S+)/gm)].map((m) => m[1]);
    assert.deepEqual(names, [
      "process_cpu_seconds_total",
      "process_resident_memory_bytes",
      "process_start_time_seconds",
    ]);
    const rss = Number(/^process_resident_memory_bytes (\S+)$/m.exec(text)![1]);
    assert.ok(rss > 1024 * 1024, `rss ${rss}`);
    const start = Number(/^process_start_time_seconds (\S+)$/m.exec(text)![1]);
    assert.ok(start <= Date.now() / 1000 && start > Date.now() / 1000 - 3600, `start ${start}`);
  });

  it("reads the real /proc/self of this process", (t) => {
    const s = readProcStats();
    if (s === null) {
      t.skip("/proc is not readable here");
      return;
    }
    assert.ok(s.residentBytes! > 1024 * 1024);
    assert.ok(s.openFds! >= 3);
    assert.ok(Math.abs(s.startTimeSeconds! - Date.now() / 1000) < 24 * 3600);
    assert.ok(s.cpuSeconds! >= 0);
  });
});
