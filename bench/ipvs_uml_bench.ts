/**
 * IPVS mode figures in a user-mode-linux guest (one CPU; tests/support/uml.ts; one node address on a
 * dummy interface, so every Service also gets a NodePort virtual server): UML boot time, the
 * IPVS Provider's first sync at each size, a one-endpoint change and an unchanged resync. Figures only.
 *   ./node_modules/.bin/deno run -A bench/ipvs_uml_bench.ts [--sizes=1000,5000]
 */
import { runInUml, umlSkipReason } from "../tests/support/uml.ts";

const sizesArg = process.argv.find((a) => a.startsWith("--sizes="));
const sizes = (sizesArg ? sizesArg.slice(8) : "1000").split(",").map(Number);
const skip = await umlSkipReason();
if (skip) {
  console.log(`ipvs_uml_bench: skipped: ${skip}`);
  process.exit(0);
}
const run = /bun/.test(process.execPath) ? "run" : "run -A";
for (const n of sizes) {
  const r = await runInUml(
    `ip link add eth9 type dummy && ip addr add 192.0.2.10/24 dev eth9 && ip link set eth9 up && cd ${process.cwd()} && ${process.execPath} ${run} bench/ipvs_uml_sync.ts ${n}`,
    {
      timeoutMs: 900_000,
      memMB: 2048,
    },
  );
  const figures = Object.fromEntries(
    [...r.output.matchAll(/^FIGURE (\S+) (\S+)$/gm)].map((m) => [m[1], Number(m[2])]),
  );
  console.log(JSON.stringify({ services: n, umlBootMs: r.bootMs, exit: r.code, ...figures }));
  if (r.code !== 0) console.log(r.output.slice(-2000));
}
