import { afterEach, describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  configureLogging,
  formatJsonLine,
  formatTextLine,
  infoV,
  levelForVerbosity,
  log,
  logV,
  verbosity,
} from "../../lib/log.ts";
import type { LogObject } from "consola";

const ESC = String.fromCharCode(27);

function capture(v: number, format: "text" | "json", tty = false): string[] {
  const lines: string[] = [];
  configureLogging({ verbosity: v, format, tty, sink: { write: (s) => lines.push(s) } });
  return lines;
}

function obj(type: string, level: number, args: unknown[], tag = ""): LogObject {
  return { type, level, args, tag, date: new Date(Date.UTC(2026, 0, 2, 3, 4, 5, 678)) } as LogObject;
}

describe("logging", () => {
  afterEach(() => configureLogging({ verbosity: 0, format: "text", tty: false }));

  it("maps klog verbosity to levels: 0-3 info, 4-5 debug, 6+ trace", () => {
    assert.deepEqual([0, 1, 2, 3, 4, 5, 6, 9].map(levelForVerbosity), [3, 3, 3, 3, 4, 4, 5, 5]);
  });
  it("plain text lines without colour when not a TTY", () => {
    const out = capture(0, "text");
    log.info("Using iptables proxy", { mode: "iptables", ipFamily: "IPv4" });
    log.warn("odd value", { got: "a b" });
    log.error(new Error("boom\nsecond line"));
    assert.deepEqual(out, [
      "info Using iptables proxy mode=iptables ipFamily=IPv4\n",
      'warn odd value got="a b"\n',
      'error err="boom\\nsecond line"\n',
    ]);
    for (const l of out) assert.ok(!l.includes(ESC), "no ANSI escapes");
  });
  it("filters by verbosity, also for loggers derived before configuration", () => {
    const tagged = log.withTag("sync");
    let out = capture(0, "text");
    log.debug("hidden");
    tagged.debug("hidden too");
    log.trace("hidden");
    tagged.info("shown");
    assert.deepEqual(out, ["info [sync] shown\n"]);
    out = capture(4, "text");
    tagged.debug("now shown");
    log.trace("still hidden");
    assert.deepEqual(out, ["debug [sync] now shown\n"]);
    out = capture(6, "text");
    log.trace("trace shown");
    assert.deepEqual(out, ["trace trace shown\n"]);
  });
  it("klog V(n): infoV prints at -v=n or more", () => {
    const out = capture(2, "text");
    assert.equal(verbosity(), 2);
    assert.equal(logV(2), true);
    assert.equal(logV(3), false);
    infoV(2, "v2 message");
    infoV(3, "v3 message");
    assert.deepEqual(out, ["info v2 message\n"]);
  });
  it("json: one object per line with ts, level, msg and the fields", () => {
    const out = capture(0, "json");
    const before = Date.now() / 1000;
    log.info("Wrote configuration", { file: "/tmp/x", n: 3 });
    log.warn("careful");
    assert.equal(out.length, 2);
    const a = JSON.parse(out[0]);
    assert.equal(a.level, "info");
    assert.equal(a.msg, "Wrote configuration");
    assert.equal(a.file, "/tmp/x");
    assert.equal(a.n, 3);
    assert.ok(typeof a.ts === "number" && a.ts >= before - 1);
    assert.deepEqual(Object.keys(JSON.parse(out[1])), ["ts", "level", "msg"]);
    assert.ok(out.every((l) => l.endsWith("\n") && !l.slice(0, -1).includes("\n")));
  });
  it("formatters", () => {
    const o = obj("info", 3, ["hello", { k: "v" }], "t");
    assert.equal(formatTextLine(o), "info [t] hello k=v");
    assert.match(
      formatTextLine(o, true),
      new RegExp(
        `^${ESC}\\[90m\\d\\d:\\d\\d:\\d\\d\\.\\d{3}${ESC}\\[0m ${ESC}\\[32minfo ${ESC}\\[0m \\[t\\] hello k=v$`,
      ),
    );
    assert.deepEqual(JSON.parse(formatJsonLine(o)), {
      ts: 1767323045.678,
      level: "info",
      msg: "hello",
      logger: "t",
      k: "v",
    });
    assert.equal(formatTextLine(obj("log", 2, ["n", 5, true])), "info n args=[5,true]");
    assert.equal(JSON.parse(formatJsonLine(obj("info", 3, ["m", { msg: "x" }]))).field_msg, undefined);
    assert.equal(JSON.parse(formatJsonLine(obj("info", 3, ["m", { msg: "x" }])))["field.msg"], "x");
  });
});
