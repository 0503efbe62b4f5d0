/**
 * CliConntrackRunner against a stand-in `conntrack` (a shell script in a temp dir) that records its
 * arguments and answers like conntrack-tools 1.4.7 does: exit codes, stderr summaries, -R batches.
 */
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { chmod, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CliConntrackRunner, findConntrackBinary } from "../../../../lib/proxy/conntrack/runner.ts";
import type { ConntrackDeleteFilter } from "../../../../lib/proxy/conntrack/flow.ts";

let dir = "";
let bin = "";
let logFile = "";
let modeFile = "";

const LISTING = [
  "ipv4     2 udp      17 99 src=10.0.0.1 dst=10.96.0.10 sport=40000 dport=53 [UNREPLIED] src=10.244.1.5 dst=10.0.0.1 sport=5353 dport=40000 mark=0 use=1",
  "ipv4     2 udp      17 98 src=10.0.0.2 dst=10.96.0.11 sport=40001 dport=53 src=10.244.2.7 dst=10.0.0.2 sport=5353 dport=40001 [ASSURED] mark=0 use=1",
].join("\n");

// Modes: "ok" (batch supported, -D deletes one entry), "nobatch" (-R unknown, -D deletes nothing),
// "broken" (-D fails with a parameter error).
const SCRIPT = (log: string, mode: string, listing: string) =>
  `#!/bin/sh
echo "ARGS $*" >> ${log}
MODE=$(cat ${mode})
case "$1" in
  -L)
    cat ${listing}
    echo "conntrack v1.4.7 (conntrack-tools): 2 flow entries have been shown." >&2
    exit 0 ;;
  -R)
    if [ "$MODE" != ok ]; then echo "conntrack v1.4.7 (conntrack-tools): unknown option -R" >&2; exit 2; fi
    # As conntrack does for "-R -": the input is opened by name (a socket as stdin fails there with ENXIO).
    while read -r line; do
      echo "LINE $line" >> ${log}
      echo "udp      17 10 src=10.0.0.1 dst=10.96.0.10 sport=1 dport=53 src=10.244.1.5 dst=10.0.0.1 sport=5353 dport=1 mark=0 use=1"
    done < /dev/stdin
    exit 0 ;;
  -D)
    if [ "$MODE" = broken ]; then echo "conntrack v1.4.7 (conntrack-tools): Invalid IP address" >&2; exit 2; fi
    if [ "$MODE" = ok ]; then
      echo "udp      17 10 src=10.0.0.1 dst=10.96.0.10 sport=1 dport=53 src=10.244.1.5 dst=10.0.0.1 sport=5353 dport=1 mark=0 use=1"
      echo "conntrack v1.4.7 (conntrack-tools): 1 flow entries have been deleted." >&2
      exit 0
    fi
    echo "conntrack v1.4.7 (conntrack-tools): 0 flow entries have been deleted." >&2
    exit 1 ;;
esac
exit 3
`;

async function setMode(mode: "ok" | "nobatch" | "broken"): Promise<void> {
  await writeFile(modeFile, mode);
  await writeFile(logFile, "");
}

async function calls(): Promise<string[]> {
  return (await readFile(logFile, "utf8")).split("\n").filter((l) => l !== "");
}

const f1: ConntrackDeleteFilter = {
  family: "IPv4",
  protocol: "UDP",
  origDst: "10.96.0.10",
  origDstPort: 53,
  replySrc: "10.244.1.5",
  replySrcPort: 5353,
};
const f2: ConntrackDeleteFilter = {
  family: "IPv4",
  protocol: "UDP",
  origDstPort: 30053,
  replySrc: "10.244.1.5",
  replySrcPort: 5353,
};

describe("CliConntrackRunner", () => {
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "edgeproxy-conntrack-cli-"));
    bin = join(dir, "conntrack");
    logFile = join(dir, "log");
    modeFile = join(dir, "mode");
    const listing = join(dir, "listing");
    await writeFile(listing, LISTING + "\n");
    await writeFile(bin, SCRIPT(logFile, modeFile, listing));
    await chmod(bin, 0o755);
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("lists with -L -f ipv4 -p udp -o extended and applies keep while streaming", async () => {
    await setMode("ok");
    const runner = new CliConntrackRunner({ binary: bin });
    const all = await runner.listFlows("IPv4", "UDP");
    assert.deepEqual(all.map((f) => f.replySrc), ["10.244.1.5", "10.244.2.7"]);
    const kept = await runner.listFlows("IPv4", "UDP", (f) => f.origDst === "10.96.0.11");
    assert.deepEqual(kept.map((f) => f.origDst), ["10.96.0.11"]);
    assert.deepEqual(await calls(), [
      "ARGS -L -f ipv4 -p udp -o extended",
      "ARGS -L -f ipv4 -p udp -o extended",
    ]);
    assert.deepEqual(await runner.listFlows("IPv6", "UDP"), [], "IPv4 lines are not IPv6 flows");
  });

  it("deletes several filters in one -R batch and counts the printed entries", async () => {
    await setMode("ok");
    const runner = new CliConntrackRunner({ binary: bin });
    assert.equal(await runner.deleteFlows([f1, f2]), 2);
    assert.deepEqual(await calls(), [
      "ARGS -R -",
      "LINE -D -p udp --orig-dst 10.96.0.10 --orig-port-dst 53 --reply-src 10.244.1.5 --reply-port-src 5353",
      "LINE -D -p udp --orig-port-dst 30053 --reply-src 10.244.1.5 --reply-port-src 5353",
    ]);
  });

  it("falls back to one -D per filter when -R fails; exit 1 with '0 flow entries' is not an error", async () => {
    await setMode("nobatch");
    const runner = new CliConntrackRunner({ binary: bin });
    assert.equal(await runner.deleteFlows([f1, f2]), 0);
    assert.deepEqual(await calls(), [
      "ARGS -R -",
      "ARGS -D -p udp --orig-dst 10.96.0.10 --orig-port-dst 53 --reply-src 10.244.1.5 --reply-port-src 5353",
      "ARGS -D -p udp --orig-port-dst 30053 --reply-src 10.244.1.5 --reply-port-src 5353",
    ]);
    await setMode("nobatch");
    await runner.deleteFlows([f1, f2]);
    assert.equal((await calls())[0].startsWith("ARGS -D"), true, "-R is not retried once it failed");
  });

  it("a single -D reads the count from the summary", async () => {
    await setMode("ok");
    const runner = new CliConntrackRunner({ binary: bin });
    assert.equal(await runner.deleteFlows([f1]), 1);
    assert.equal(await runner.deleteFlows([]), 0);
    assert.deepEqual((await calls()).length, 1, "no command for an empty filter list");
  });

  it("tries every filter, then reports the failures with command and stderr", async () => {
    await setMode("broken");
    const runner = new CliConntrackRunner({ binary: bin });
    await assert.rejects(
      runner.deleteFlows([f1, f2]),
      (err: Error) => {
        assert.match(err.message, /2 of 2 conntrack deletes failed/);
        assert.match(
          err.message,
          /--orig-port-dst 30053 .*exit status 2: conntrack v1\.4\.7 \(conntrack-tools\): Invalid IP address/,
        );
        return true;
      },
    );
    assert.equal((await calls()).filter((c) => c.startsWith("ARGS -D")).length, 2);
  });

  it("runs under a command prefix and rejects relative binaries and malformed filters", async () => {
    await setMode("ok");
    const runner = new CliConntrackRunner({ binary: bin, commandPrefix: ["/usr/bin/env", "--"] });
    assert.equal((await runner.listFlows("IPv4", "UDP")).length, 2);
    assert.throws(
      () => new CliConntrackRunner({ binary: "conntrack" }),
      /must be an absolute path, got "conntrack"/,
    );
    await assert.rejects(runner.deleteFlows([{ family: "IPv4", protocol: "UDP" }]), /no match field set/);
  });

  it("reports a listing failure and a missing binary with the command line", async () => {
    const missing = new CliConntrackRunner({ binary: join(dir, "nope") });
    await assert.rejects(missing.listFlows("IPv4", "UDP"), /nope -L -f ipv4 -p udp -o extended: cannot run/);
    assert.equal(findConntrackBinary([join(dir, "nope"), bin]), bin);
    assert.equal(findConntrackBinary([join(dir, "nope")]), null);
  });
});
