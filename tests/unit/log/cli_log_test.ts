import { afterEach, describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import process from "node:process";
import { fileURLToPath } from "node:url";
import {
  configureLogging,
  formatEntry,
  infoV,
  infoVf,
  levelForVerbosity,
  log,
  logV,
  toEntry,
  verbosity,
} from "../../../lib/log.ts";
import { processLogger } from "../../../lib/server/logger.ts";
import { callerFromStack, UNKNOWN_CALLER } from "../../../lib/log/caller.ts";
import type { LogEntry } from "../../../lib/log/entry.ts";
import { formatJsonEntry } from "../../../lib/log/json_entry.ts";
import { formatKV, goJSON, goQuote, klogBody, klogHeader } from "../../../lib/log/klog_text.ts";
import type { LogObject } from "consola";
import { KLOG_HEADER, klogTestRegex } from "../../support/klog_lines.ts";

const SELF = fileURLToPath(import.meta.url);
const SOURCE = readFileSync(SELF, "utf8").split("\n");

/** The 1-based line of this file that carries `marker` in a comment. */
function lineOf(marker: string): number {
  const i = SOURCE.findIndex((l) => l.includes(`// ${marker}`));
  assert.ok(i >= 0, `marker ${marker} not found`);
  return i + 1;
}

function capture(v: number, format: "text" | "json", tty = false): string[] {
  const lines: string[] = [];
  configureLogging({ verbosity: v, format, tty, sink: { write: (s) => lines.push(s) } });
  return lines;
}

function entry(over: Partial<LogEntry>): LogEntry {
  return {
    severity: "I",
    v: 0,
    micros: Date.UTC(2026, 0, 2, 3, 4, 5, 678) * 1000 + 901,
    file: "lib/proxier/proxier.ts",
    line: 812,
    logger: "",
    msg: "Syncing iptables rules",
    unstructured: false,
    kvs: [],
    ...over,
  };
}

describe("klog text format", () => {
  afterEach(() => configureLogging({ verbosity: 0, format: "text", tty: false }));

  it("the header is klog's: severity, MMDD, local time with microseconds, pid in 7 columns, file:line", () => {
    // klog's TestHeader: time.Date(2006, 1, 2, 15, 4, 5, .067890e9, time.Local), pid 1234.
    const micros = new Date(2006, 0, 2, 15, 4, 5).getTime() * 1000 + 67890;
    assert.equal(
      klogHeader({ severity: "I", micros, file: "lib/x/klog_test.ts", line: 12 }, 1234),
      "I0102 15:04:05.067890    1234 klog_test.ts:12] ",
    );
    assert.equal(
      klogHeader({ severity: "E", micros, file: "main.ts", line: 7 }, 4194304),
      "E0102 15:04:05.067890 4194304 main.ts:7] ",
    );
  });

  it("real log calls: klog's header regex matches and the source tag is this file and the call's line", () => {
    const mmdd = (d: Date) =>
      `${String(d.getMonth() + 1).padStart(2, "0")}${String(d.getDate()).padStart(2, "0")}`;
    const day0 = mmdd(new Date());
    const out = capture(0, "text");
    log.info("Syncing iptables rules", { ipFamily: "IPv4" }); // <LOG-INFO>
    log.warn("careful"); // <LOG-WARN>
    log.error("Failed to sync", new Error("boom")); // <LOG-ERROR>
    processLogger.info("through the server logger"); // <LOG-SERVER>
    infoV(0, "through infoV"); // <LOG-INFOV>
    assert.equal(out.length, 5);
    const expected: Array<[string, string, string]> = [
      ["I", "LOG-INFO", '"Syncing iptables rules" ipFamily="IPv4"'],
      ["W", "LOG-WARN", '"careful"'],
      ["E", "LOG-ERROR", '"Failed to sync" err="boom"'],
      ["I", "LOG-SERVER", '"through the server logger"'],
      ["I", "LOG-INFOV", '"through infoV"'],
    ];
    const day1 = mmdd(new Date());
    out.forEach((line, i) => {
      assert.ok(line.endsWith("\n") && !line.slice(0, -1).includes("\n"), line);
      const l = line.slice(0, -1);
      assert.match(l, klogTestRegex("cli_log_test.ts"));
      const m = KLOG_HEADER.exec(l);
      assert.ok(m, l);
      const [sev, marker, body] = expected[i];
      assert.equal(m[1], sev);
      assert.equal(Number(m[8]), process.pid);
      assert.equal(`${m[9]}:${m[10]}`, `cli_log_test.ts:${lineOf(`<${marker}>`)}`);
      assert.equal(m[11], body);
      assert.ok([day0, day1].includes(`${m[2]}${m[3]}`), l);
    });
  });

  it("structured values use klog's quoting rules", () => {
    assert.equal(goQuote('"quoted"'), '"\\"quoted\\""');
    assert.equal(
      goQuote("tab\there\x00\x7f\u00e9\u200b\u{1f600}\u{e000}"),
      '"tab\\there\\x00\\x7fé\\u200b😀\\ue000"',
    );
    assert.equal(goQuote("a\\b\r\n\x07\x08\x0b\x0c"), '"a\\\\b\\r\\n\\a\\b\\v\\f"');
    assert.equal(formatKV("akey", "<&>"), ' akey="<&>"');
    assert.equal(formatKV("n", 2), " n=2");
    assert.equal(formatKV("f", 0.5), " f=0.5");
    assert.equal(formatKV("ok", true), " ok=true");
    assert.equal(formatKV("x", null), " x=<nil>");
    assert.equal(formatKV("err", new Error("whoops")), ' err="whoops"');
    assert.equal(formatKV("s", { hello: "world" }), ' s={"hello":"world"}');
    assert.equal(formatKV("i", [1, 2, 3]), " i=[1,2,3]");
    assert.equal(formatKV("h", ["<b>"]), ' h=["\\u003cb\\u003e"]');
    assert.equal(goJSON(10n), '"10"');
    // Multi-line strings: klog's `key=<` block, lines tab-indented, ` >` last.
    assert.equal(formatKV("m", "line 1\nline 2"), " m=<\n\tline 1\n\tline 2\n >");
    assert.equal(formatKV("m", "line 1\n"), " m=<\n\tline 1\n >");
  });

  it("body: quoted message, logger, err first, then pairs in order (duplicates kept)", () => {
    assert.equal(
      klogBody(entry({
        msg: 'say "hi"\n',
        logger: "sync",
        err: "boom",
        kvs: [["akey", "avalue"], ["akey", "avalue2"], ["n", 3]],
      })),
      '"say \\"hi\\"\\n" logger="sync" err="boom" akey="avalue" akey="avalue2" n=3',
    );
    assert.equal(klogBody(entry({ msg: 'FLAG: --v="1"', unstructured: true })), 'FLAG: --v="1"');
  });

  it("consola arguments: message, fields, an Error as err, anything else under args", () => {
    const obj = (type: string, args: unknown[], tag = "") => ({ type, level: 3, args, tag }) as LogObject;
    const e = toEntry(obj("info", ["n", 5, true]), 0, "main.ts", 1);
    assert.deepEqual([e.msg, e.kvs], ["n", [["args", [5, true]]]]);
    const f = toEntry(obj("error", [new Error("boom\nsecond line")]), 0, "main.ts", 1);
    assert.deepEqual([f.severity, f.msg, f.err], ["E", "", "boom\nsecond line"]);
    assert.equal(klogBody(f), '"" err=<\n\tboom\n\tsecond line\n >');
    assert.equal(toEntry(obj("fatal", ["x"]), 0, "main.ts", 1).severity, "F");
    assert.deepEqual(
      [toEntry(obj("debug", ["x"]), 0, "a.ts", 1).v, toEntry(obj("trace", ["x"]), 0, "a.ts", 1).v],
      [4, 6],
    );
    assert.equal(toEntry(obj("info", ["x"], "sync"), 0, "a.ts", 1).logger, "sync");
  });

  it("a TTY gets a coloured header; never a JSON line", () => {
    const ESC = String.fromCharCode(27);
    const header = klogHeader(entry({}), 1);
    assert.equal(formatEntry(entry({}), "text", false, 1), header + '"Syncing iptables rules"');
    assert.equal(
      formatEntry(entry({}), "text", true, 1),
      `${ESC}[32mI${ESC}[90m${header.slice(1)}${ESC}[0m"Syncing iptables rules"`,
    );
    const out = capture(0, "text", true);
    log.info("x");
    assert.ok(out[0].includes("\x1b["));
  });
});

describe("verbosity", () => {
  afterEach(() => configureLogging({ verbosity: 0, format: "text", tty: false }));

  it("maps klog verbosity to levels: 0-3 info, 4-5 debug, 6+ trace", () => {
    assert.deepEqual([0, 1, 2, 3, 4, 5, 6, 9].map(levelForVerbosity), [3, 3, 3, 3, 4, 4, 5, 5]);
  });
  it("filters by verbosity, also for loggers derived before configuration", () => {
    const tagged = log.withTag("sync");
    let out = capture(0, "text");
    log.debug("hidden");
    tagged.debug("hidden too");
    log.trace("hidden");
    tagged.info("shown");
    assert.deepEqual(out.map((l) => l.replace(/^.*\] /, "")), ['"shown" logger="sync"\n']);
    out = capture(4, "text");
    tagged.debug("now shown");
    log.trace("still hidden");
    assert.deepEqual(out.map((l) => l.replace(/^.*\] /, "")), ['"now shown" logger="sync"\n']);
    out = capture(6, "text");
    log.trace("trace shown");
    assert.deepEqual(out.map((l) => l.replace(/^.*\] /, "")), ['"trace shown"\n']);
  });
  it("klog V(n): infoV and infoVf print at -v=n or more", () => {
    const out = capture(2, "text");
    assert.equal(verbosity(), 2);
    assert.equal(logV(2), true);
    assert.equal(logV(3), false);
    infoV(2, "v2 message", { k: 1 });
    infoV(3, "v3 message");
    infoVf(2, 'FLAG: --v="2"');
    infoVf(3, "hidden");
    assert.deepEqual(out.map((l) => l.replace(/^.*\] /, "")), ['"v2 message" k=1\n', 'FLAG: --v="2"\n']);
  });
});

describe("JSON format (component-base logs/json)", () => {
  afterEach(() => configureLogging({ verbosity: 0, format: "text", tty: false }));

  it("real log calls: one object per line with ts (ms), caller, msg, v, key/values, err last", () => {
    const out = capture(2, "json");
    const before = Date.now();
    log.info("Wrote configuration", { file: "/tmp/x", n: 3 }); // <JSON-INFO>
    log.warn("careful"); // <JSON-WARN>
    log.error("Failed", new Error("boom"), { k: "v" }); // <JSON-ERROR>
    infoV(2, "detail"); // <JSON-INFOV>
    log.withTag("sync").debug("hidden at v=2");
    const after = Date.now();
    assert.equal(out.length, 4);
    assert.ok(out.every((l) => l.endsWith("\n") && !l.slice(0, -1).includes("\n")));
    const [a, w, e, d] = out.map((l) => JSON.parse(l));
    assert.deepEqual(Object.keys(a), ["ts", "caller", "msg", "v", "file", "n"]);
    assert.ok(typeof a.ts === "number" && a.ts >= before - 1 && a.ts <= after + 1, `ts ${a.ts} is in ms`);
    assert.equal(a.caller, `log/cli_log_test.ts:${lineOf("<JSON-INFO>")}`);
    assert.deepEqual([a.msg, a.v, a.file, a.n], ["Wrote configuration", 0, "/tmp/x", 3]);
    assert.deepEqual(w, {
      ts: w.ts,
      caller: `log/cli_log_test.ts:${lineOf("<JSON-WARN>")}`,
      msg: "careful",
      v: 0,
    });
    assert.deepEqual(Object.keys(e), ["ts", "caller", "msg", "k", "err"]);
    assert.deepEqual([e.msg, e.k, e.err], ["Failed", "v", "boom"]);
    assert.deepEqual([d.msg, d.v, d.caller], ["detail", 2, `log/cli_log_test.ts:${lineOf("<JSON-INFOV>")}`]);
  });
  it("formatter: logger name before caller, duplicate keys kept", () => {
    const l = formatJsonEntry(entry({ logger: "sync", kvs: [["a", 1], ["a", 2]], micros: 1_000_123 }));
    assert.equal(
      l,
      '{"ts":1000.123,"logger":"sync","caller":"proxier/proxier.ts:812","msg":"Syncing iptables rules","v":0,"a":1,"a":2}',
    );
  });
});

describe("caller from a stack", () => {
  it("skips consola and the logger's own files, under Deno, Bun and the compiled binary", () => {
    const deno = [
      "Error",
      "    at captureCaller (file:///src/edgeproxy/lib/log/caller.ts:58:17)",
      "    at Object.log (file:///src/edgeproxy/lib/log.ts:140:20)",
      "    at Consola._log (file:///src/edgeproxy/node_modules/consola/dist/core.mjs:483:16)",
      "    at Consola.info (file:///src/edgeproxy/node_modules/consola/dist/core.mjs:408:19)",
      "    at info (file:///src/edgeproxy/lib/server/logger.ts:19:17)",
      "    at Proxier.sync (file:///src/edgeproxy/lib/proxier/proxier.ts:294:14)",
    ].join("\n");
    assert.deepEqual(callerFromStack(deno, "file:///src/edgeproxy/"), {
      path: "lib/proxier/proxier.ts",
      line: 294,
    });
    const bun = [
      "Error",
      "    at captureCaller (/src/edgeproxy/lib/log/caller.ts:58:17)",
      "    at log (/src/edgeproxy/lib/log.ts:140:20)",
      "    at _logFn (/src/edgeproxy/node_modules/consola/dist/core.mjs:479:5)",
      "    at /src/edgeproxy/main.ts:80:9",
    ].join("\n");
    assert.deepEqual(callerFromStack(bun, "/src/edgeproxy/"), { path: "main.ts", line: 80 });
    const compiled = [
      "Error",
      "    at ze (lib/log/caller.ts:58:17)",
      "    at log (lib/log.ts:140:20)",
      "    at _log (../../work/node_modules/consola/dist/core.mjs:483:16)",
      "    at HD (lib/agent.ts:201:7)",
    ].join("\n");
    assert.deepEqual(callerFromStack(compiled, ""), { path: "lib/agent.ts", line: 201 });
    // Built without the source map: minified frames name no source file; klog's placeholder.
    const unmapped = [
      "Error",
      "    at ze (/$bunfs/root/edgeproxy:71:742)",
      "    at HD (/$bunfs/root/edgeproxy:73:30)",
    ]
      .join("\n");
    assert.deepEqual(callerFromStack(unmapped, ""), UNKNOWN_CALLER);
  });
});
