/**
 * IPVS mode figures beside the iptables and nftables modes, all three in the same user-mode-linux guest
 * kernel (one CPU; tests/support/uml.ts; one node address on a dummy interface, so NodePorts get a
 * virtual server / rule on it too) on the same synthetic cluster (bench/synthetic_cluster.ts): the first
 * sync at each size, the one-endpoint change latency (partial sync) and an unchanged resync; in ipvs
 * mode also what a change writes (ipvsadm / ipset lines, kube-ipvs0 addresses). One fresh guest per mode
 * and size (bench/ipvs_uml_sync.ts runs in it). Prints one JSON line per run, then a table. Figures only.
 *   ./node_modules/.bin/deno run -A bench/ipvs_uml_bench.ts [--sizes=1000,5000]
 *     [--modes=ipvs,iptables,nftables] [--changes=5]
 */
import process from "node:process";
import { runInUml, umlSkipReason } from "../tests/support/uml.ts";

const flag = (name: string, fallback: string) =>
  process.argv.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3) ?? fallback;
const sizes = flag("sizes", "1000").split(",").map(Number);
const modes = flag("modes", "ipvs,iptables,nftables").split(",");
const changes = Number(flag("changes", "5"));
const skip = await umlSkipReason();
if (skip) {
  console.log(`ipvs_uml_bench: skipped: ${skip}`);
  process.exit(0);
}
const run = /bun/.test(process.execPath) ? "run" : "run -A";
const rows: Record<string, number | string>[] = [];
for (const n of sizes) {
  for (const mode of modes) {
    const r = await runInUml(
      [
        "ip link add eth9 type dummy && ip addr add 192.0.2.10/24 dev eth9 && ip link set eth9 up",
        'echo "UML: iptables $UML_IPTABLES"',
        `cd ${process.cwd()} && ${process.execPath} ${run} bench/ipvs_uml_sync.ts ${mode} ${n} ${changes}`,
      ].join("\n"),
      { timeoutMs: 1_800_000, memMB: 2048 },
    );
    const figures = Object.fromEntries(
      [...r.output.matchAll(/^FIGURE (\S+) (\S+)$/gm)].map((m) => [m[1], Number(m[2])]),
    );
    const iptables = /^UML: iptables (\S*)$/m.exec(r.output)?.[1] ?? "?";
    const row = { mode, services: n, iptables, umlBootMs: r.bootMs, exit: r.code, ...figures };
    rows.push(row);
    console.log(JSON.stringify(row));
    if (r.code !== 0) console.log(r.output.slice(-2000));
  }
}

const cell = (x: number | string | undefined) => (x === undefined ? "–" : String(x));
console.log(
  "\n| mode | Services | service ports | first sync ms | first sync bytes | change median ms | change max ms | bytes per change | unchanged resync ms | ipvsadm / ipset lines per change (lines on other services) |",
);
console.log("|---|---|---|---|---|---|---|---|---|---|");
for (const r of rows) {
  const writes = r.mode === "ipvs"
    ? `${cell(r.change_ipvsadm_lines_max)} / ${cell(r.change_ipset_lines_max)} (other services: ${
      cell(r.change_ipvsadm_lines_other_services)
    })`
    : "–";
  console.log(
    `| ${r.mode} | ${r.services} | ${cell(r.service_ports)} | ${cell(r.first_sync_ms)} | ${
      cell(r.first_sync_bytes)
    } | ${cell(r.one_endpoint_change_median_ms)} | ${cell(r.one_endpoint_change_max_ms)} | ${
      cell(r.change_bytes_max)
    } | ${cell(r.unchanged_resync_ms)} | ${writes} |`,
  );
}

// IPVS mode: where each sync's time goes, step by step (ms; a step is one or more child processes; "in
// process" is the rest: model, diff and plan in the agent).
const ipvsRows = rows.filter((r) => r.mode === "ipvs");
const phases = ["first_sync", "change_median", "unchanged_resync", "unchanged_full_sync", "drift_check"];
const steps = [
  ...new Set(
    ipvsRows.flatMap((r) => Object.keys(r)).flatMap((k) => /_step_(.+)_ms$/.exec(k)?.[1] ?? []),
  ),
].sort();
if (ipvsRows.length > 0) {
  console.log(`\n| Services | sync | total ms | ${steps.join(" | ")} | ipvsadm share % |`);
  console.log(`|---|---|---|${steps.map(() => "---|").join("")}---|`);
  for (const r of ipvsRows) {
    for (const p of phases) {
      const total = p === "change_median" ? r.one_endpoint_change_median_ms : r[`${p}_ms`];
      console.log(
        `| ${r.services} | ${p} | ${cell(total)} | ${
          steps.map((s) => cell(r[`${p}_step_${s}_ms`])).join(" | ")
        } | ${cell(r[`${p}_ipvsadm_share_pct`])} |`,
      );
    }
  }
}
