/**
 * Tables of a run, as aligned text (printed) and as Markdown (bench/results.md). Pure: results in,
 * text out.
 */
import type { BenchResults } from "./results.ts";
import type { RestoreFigure } from "./restore_bench.ts";
import type { Observed, RssFigure } from "./agent_bench.ts";

/** A titled table. */
export interface Table {
  readonly title: string;
  readonly headers: readonly string[];
  readonly rows: ReadonlyArray<readonly string[]>;
}

const kb = (bytes: number) => `${(bytes / 1024).toFixed(0)} KiB`;
const ms = (x: number | null | undefined) => (x == null ? "–" : `${x}`);
const rssCell = (r: RssFigure) =>
  r.rssAnonMiB === undefined
    ? `${r.vmRssMiB} (${r.vmHwmMiB})`
    : `${r.vmRssMiB} = ${r.rssAnonMiB} + ${r.rssFileMiB} (${r.vmHwmMiB})`;
const obs = (o: Observed | null | undefined) => (o == null ? "–" : `${o.ms} (±${o.pollMs})`);

function restoreCell(r: RestoreFigure | undefined): string {
  if (r === undefined) return "–";
  if (r.skipped) return "skipped";
  if (r.timedOut) return `> ${r.ms} (timeout)`;
  if (!r.ok) return "failed";
  return `${r.ms}`;
}

/** Every table of a run. */
export function resultTables(res: BenchResults): Table[] {
  const tables: Table[] = [];
  const sizes = Object.keys(res.render).map(Number).sort((a, b) => a - b);
  tables.push({
    title: "Compute (in-process, median ms; sizes in KiB / lines)",
    headers: [
      "Services",
      "ports",
      "endpoints",
      "objects→model",
      "full render",
      "full payload",
      "split plan",
      "partial render",
      "partial payload",
      "partial/full",
      "partial mode",
      "upstream partial render / payload / of full",
    ],
    rows: sizes.map((n) => {
      const r = res.render[String(n)];
      return [
        `${n}`,
        `${r.counts.servicePorts}`,
        `${r.counts.endpoints}`,
        `${r.modelMs.median}`,
        `${r.fullRenderMs.median}`,
        `${kb(r.full.bytes)} / ${r.full.lines}`,
        r.plan.available ? `${r.plan.splitMs?.median} (${r.plan.transactions} tx)` : "n/a",
        `${r.partialRenderMs.median}`,
        `${kb(r.partial.bytes)} / ${r.partial.lines}`,
        `${r.partialBytesPercent} %`,
        `${r.partialMode}${r.partialRewritesKubeServices ? " (rewrites KUBE-SERVICES)" : ""}`,
        r.upstreamPartial
          ? `${r.upstreamPartial.renderMs.median} / ${
            kb(r.upstreamPartial.bytes)
          } / ${r.upstreamPartial.bytesPercent} %`
          : "–",
      ];
    }),
  });

  const restoreSizes = [...new Set(res.restore.map((r) => r.services))].sort((a, b) => a - b);
  if (restoreSizes.length > 0) {
    const find = (n: number, b: string, m: string) =>
      res.restore.find((r) => r.services === n && r.backend === b && r.mode === m);
    tables.push({
      title:
        "iptables-restore in a scratch netns (ms; fresh namespace each; partial = on top of the full ruleset)",
      headers: [
        "Services",
        "nft plain",
        "nft --noflush (1 tx)",
        "nft split",
        "nft partial",
        "nft upstream partial",
        "legacy plain",
        "legacy --noflush",
        "legacy partial",
        "legacy upstream partial",
      ],
      rows: restoreSizes.map((n) => [
        `${n}`,
        restoreCell(find(n, "nft", "plain")),
        restoreCell(find(n, "nft", "noflush")),
        restoreCell(find(n, "nft", "split")),
        restoreCell(find(n, "nft", "partial")),
        restoreCell(find(n, "nft", "upstream-partial")),
        restoreCell(find(n, "legacy", "plain")),
        restoreCell(find(n, "legacy", "noflush")),
        restoreCell(find(n, "legacy", "partial")),
        restoreCell(find(n, "legacy", "upstream-partial")),
      ]),
    });
    const scaling = Object.entries(res.restoreScaling);
    if (scaling.length > 0) {
      tables.push({
        title: "Restore scaling: fitted exponent k of time ≈ c·Services^k (1 = linear, 2 = quadratic)",
        headers: ["backend/mode", "k"],
        rows: scaling.map(([k, v]) => [k, v === null ? "–" : `${v}`]),
      });
    }
  }

  const agentSizes = Object.keys(res.agent).map(Number).sort((a, b) => a - b);
  if (agentSizes.length > 0) {
    tables.push({
      title: "Agent (dist/edgeproxy in a netns; ms from spawn or event, ± poll cost; RSS in MiB)",
      headers: [
        "Services",
        "first rule",
        "all rules",
        "agent-logged first sync",
        "endpoint change → kernel (median/min/max)",
        "kernel floor: any rule-adding commit",
        "agent-logged partial sync",
        "RSS settled: VmRSS = anon + file (peak)",
        "cache: first rule",
        "cache: all rules",
        "note",
      ],
      rows: agentSizes.map((n) => {
        const a = res.agent[String(n)];
        const s = a.fromApiserver;
        const c = a.endpointChange;
        return [
          `${n}`,
          obs(s?.firstRule),
          obs(s?.allRules),
          s?.agentReportedSyncMs == null ? "–" : `${s.agentReportedSyncMs} (at ${s.agentLoggedSyncAtMs})`,
          c
            ? `${c.median} / ${c.min} / ${c.max} (${
              c.observedBy === "xtables-monitor" ? "monitor" : `±${c.pollMs}`
            })`
            : "–",
          c?.commitFloorMs == null ? "–" : `${c.commitFloorMs}`,
          c?.agentReportedSyncMs
            ? `${c.agentReportedSyncMs.median} (${c.agentModes.join("/")}, ${c.agentPayloadBytes ?? "?"} B)`
            : "–",
          a.settledRss ? rssCell(a.settledRss) : "–",
          obs(a.fromCache?.firstRule),
          obs(a.fromCache?.allRules),
          [a.note, a.cacheNote ?? ""].filter((x) => x !== "").join("; ").slice(0, 160) || "",
        ];
      }),
    });
  }
  if (res.idleRss) {
    tables.push({
      title: "Idle agent (empty cluster)",
      headers: ["VmRSS MiB", "of which anon / file", "VmHWM MiB", "note"],
      rows: [[
        ms(res.idleRss.rss?.vmRssMiB),
        res.idleRss.rss?.rssAnonMiB === undefined
          ? "–"
          : `${res.idleRss.rss.rssAnonMiB} / ${res.idleRss.rss.rssFileMiB}`,
        ms(res.idleRss.rss?.vmHwmMiB),
        res.idleRss.note,
      ]],
    });
  }
  tables.push({
    title: "Targets",
    headers: ["target", "measured", "limit", "status", "detail"],
    rows: res.targets.map((t) => [
      t.id,
      t.measured === null ? "–" : `${t.measured} ${t.unit}`,
      `≤ ${t.limit} ${t.unit}`,
      t.status,
      t.detail,
    ]),
  });
  return tables;
}

/** Aligned plain-text rendering (long cells are not wrapped). */
export function tableText(t: Table): string {
  const widths = t.headers.map((h, i) => Math.max(h.length, ...t.rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) =>
    cells.map((c, i) => (c ?? "").padEnd(widths[i])).join("  ").trimEnd();
  return [t.title, line(t.headers), widths.map((w) => "-".repeat(w)).join("  "), ...t.rows.map(line)].join(
    "\n",
  );
}

/** GitHub Markdown rendering. */
export function tableMarkdown(t: Table): string {
  const esc = (s: string) => s.replaceAll("|", "\\|");
  return [
    `**${t.title}**`,
    "",
    `| ${t.headers.map(esc).join(" | ")} |`,
    `|${t.headers.map(() => "---").join("|")}|`,
    ...t.rows.map((r) => `| ${r.map(esc).join(" | ")} |`),
  ].join("\n");
}

/** The machine as one line. */
export function machineLine(res: BenchResults): string {
  const m = res.machine;
  return `${m.nproc} × ${m.cpuModel}, ${m.memoryGiB} GiB, ${m.os}, kernel ${m.kernel}, ${m.iptables}, ${m.iptablesLegacy}, harness on ${m.runtime}`;
}

/** bench/results.md: the machine, the run and every table. */
export function resultsMarkdown(res: BenchResults): string {
  const parts = [
    "# Latest benchmark figures",
    "",
    `Generated by ${
      res.mode === "full"
        ? "`npm run bench`"
        : res.mode === "ci"
        ? "`npm run bench -- --ci`"
        : "bench/main.ts with custom flags"
    } on ${res.finishedAt} ` +
    `(${res.durationS} s). Do not edit: re-run the bench. See README.md for what each figure means.`,
    "",
    `Machine: ${machineLine(res)}.`,
    "",
    res.binary
      ? `Agent binary: ${res.binary.path} (${res.binary.bytes ?? "?"} bytes, ${res.binary.version}).`
      : "Agent binary: not used.",
    "",
  ];
  if (res.skipped.length > 0) {
    parts.push("Not run:", "", ...res.skipped.map((s) => `- ${s}`), "");
  }
  for (const t of resultTables(res)) parts.push(tableMarkdown(t), "");
  return parts.join("\n");
}
